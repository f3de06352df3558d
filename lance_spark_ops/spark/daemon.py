"""PySpark worker daemon that imports the executor-side modules once, before it forks workers.

Spark forks a Python worker from its daemon for each new concurrent task slot it needs (and
again when a worker dies). A worker forked from ``pyspark.daemon`` starts with nothing imported
and pays pyarrow, pandas (pyarrow imports it on first use), numpy and this package's codecs -
~0.5 s - inside its first task. Forked from this daemon, it inherits them. ``get_spark`` sets
``spark.python.daemon.module`` to this module; a module that fails to import is skipped (the
worker imports it itself, and reports the error, when a task needs it).
"""

from __future__ import annotations

import importlib

PRELOAD = (
    "numpy", "pyarrow", "pyarrow.compute", "pyarrow.ipc",
    "lance_spark_ops.file.reader", "lance_spark_ops.file.writer", "lance_spark_ops.encoding.encode",
    "lance_spark_ops.table.dataset", "lance_spark_ops.spark.tasks.scan",
    "lance_spark_ops.spark.tasks.rewrite", "lance_spark_ops.spark.tasks.add_columns",
    "lance_spark_ops.spark.tasks.row_id_index",
)


def preload() -> list[str]:
    """Import ``PRELOAD``; returns the modules that failed."""
    failed = []
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a daemon that cannot preload must still serve workers
            failed.append(name)
    try:
        import pyarrow

        pyarrow.array([0])  # pulls pandas in, as every first pyarrow conversion does
    except Exception:  # noqa: BLE001
        failed.append("pyarrow.array")
    return failed


if __name__ == "__main__":
    preload()
    from pyspark import daemon

    daemon.manager()
