"""Spark drivers of the maintenance operations: plan on the driver, run pure task functions
on executors through ``mapInArrow``, gather small results, commit on the driver."""
