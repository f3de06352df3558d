"""Jobs that rewrite or remove a dataset's files: compaction, deletion materialization, column
addition, the row-id index rebuild, vacuum, Delta import - each driver with its executor tasks
(``*_tasks``) beside it."""
