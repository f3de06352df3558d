"""The Spark runtime every job shares: the command line and its options, the session, the job scaffold,
the task runner, the worker daemon, the scan of fragments into Spark's Arrow form."""
