"""Spark drivers of the maintenance operations: plan on the driver, run pure task functions
on executors through ``mapInArrow``, gather small results, commit on the driver.

``compact``, ``materialize_deletions``, ``read_lance``, ``add_columns``,
``rebuild_row_id_index`` and ``register_data_source`` (the ``lance`` format) are importable from here (lazily, so importing the package does not
start or import Spark).
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "compact": "lance_spark_ops.spark.compact",
    "materialize_deletions": "lance_spark_ops.spark.compact",
    "CompactionMetrics": "lance_spark_ops.spark.compact",
    "CompactionOptions": "lance_spark_ops.spark.options",
    "read_lance": "lance_spark_ops.spark.read",
    "add_columns": "lance_spark_ops.spark.add_columns",
    "rebuild_row_id_index": "lance_spark_ops.spark.rowid_index",
    "get_spark": "lance_spark_ops.spark.session",
    "register_data_source": "lance_spark_ops.spark.datasource",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(name)
    import importlib

    return getattr(importlib.import_module(module), name)
