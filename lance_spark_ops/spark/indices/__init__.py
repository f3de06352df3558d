"""Index jobs: ``create_index`` / ``optimize_indices`` (the driver and one segment builder per family:
scalar, full-text, vector) and the index remap of a compaction - each with its executor tasks
(``*_tasks``) beside it."""
