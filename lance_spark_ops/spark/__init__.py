"""Spark drivers of the maintenance operations: plan on the driver, run pure task functions
on executors through ``mapInArrow``, gather small results, commit on the driver.

Every name in ``__all__`` is importable from here (lazily, so importing the package does not
import Spark) and is the same object as in its module: ``compact`` / ``materialize_deletions``
(``spark.files.compaction``), ``add_columns`` (``spark.files.columns``), ``create_index`` /
``optimize_indices`` (``spark.indices.indexing``), ``rebuild_row_id_index``
(``spark.files.row_id_index``), ``vacuum`` (``spark.files.vacuuming``), ``validate``
(``spark.files.validation``), ``import_delta``
(``spark.files.delta_import``), ``read_lance`` (``spark.datasource.read``),
``get_spark`` (``spark.runtime.session``),
``register_data_source`` (the ``lance`` format, ``spark.datasource``), ``maintain`` /
``FleetTarget`` / ``report`` (``spark.fleet.maintenance``: fleet maintenance by policy, and its
health report alone).
No module here shares its name with a function, so ``from lance_spark_ops.spark import
add_columns`` (or ``vacuum``, ``import_delta``) is always the function. New jobs start from
``spark.runtime.job.Job``.
"""

from __future__ import annotations

from lance_spark_ops._lazy import lazy_exports

_EXPORTS = {
    "AddColumnsMetrics": "lance_spark_ops.spark.files.columns",
    "ColumnFunction": "lance_spark_ops.spark.files.columns",
    "CompactionMetrics": "lance_spark_ops.spark.files.compaction",
    "CompactionOptions": "lance_spark_ops.spark.files.compaction_options",
    "IndexMetrics": "lance_spark_ops.spark.indices.indexing",
    "ImportMetrics": "lance_spark_ops.spark.files.delta_import",
    "RowIdIndexMetrics": "lance_spark_ops.spark.files.row_id_index",
    "VacuumMetrics": "lance_spark_ops.spark.files.vacuuming",
    "ValidateMetrics": "lance_spark_ops.spark.files.validation",
    "add_columns": "lance_spark_ops.spark.files.columns",
    "compact": "lance_spark_ops.spark.files.compaction",
    "create_index": "lance_spark_ops.spark.indices.indexing",
    "get_spark": "lance_spark_ops.spark.runtime.session",
    "import_delta": "lance_spark_ops.spark.files.delta_import",
    "FleetTarget": "lance_spark_ops.spark.fleet.maintenance",
    "maintain": "lance_spark_ops.spark.fleet.maintenance",
    "materialize_deletions": "lance_spark_ops.spark.files.compaction",
    "optimize_indices": "lance_spark_ops.spark.indices.indexing",
    "read_lance": "lance_spark_ops.spark.datasource.read",
    "rebuild_row_id_index": "lance_spark_ops.spark.files.row_id_index",
    "register_data_source": "lance_spark_ops.spark.datasource",
    "report": "lance_spark_ops.spark.fleet.maintenance",
    "vacuum": "lance_spark_ops.spark.files.vacuuming",
    "validate": "lance_spark_ops.spark.files.validation",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
