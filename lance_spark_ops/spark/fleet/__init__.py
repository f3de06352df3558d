"""Fleet maintenance on Spark: ``maintain`` / ``report`` over dataset URIs or a namespace's tables, and
their command line."""
