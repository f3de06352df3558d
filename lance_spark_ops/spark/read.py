"""``read_lance``: a Lance dataset version as a Spark DataFrame, decoded by our reader on the
executors.

The driver opens the version once (pinning it: every task reads the same manifest even if
writers commit meanwhile), builds a descriptor DataFrame with one row per partition - a
fragment, or a group of neighbouring small fragments when ``max_rows_per_partition`` is set -
and ``mapInArrow``s the scan task (``spark.tasks.scan``) over it. Each partition yields the
live rows of its fragments in physical order (deleted rows dropped), so a narrow
transformation of the result keeps that order; ``add_columns`` relies on it.

Types follow ``spark.types``: ``_rowid`` / ``_rowaddr`` are Spark ``long`` (same bits as the
``uint64``), unsigned integers are widened, large / fixed-size / dictionary types become their
plain Spark equivalents, and a column Spark cannot hold fails on the driver, naming it.

Partitions are whole fragments (or groups): Lance fragments hold at most ``max_rows_per_file``
rows (1 Mi by default), which bounds a task. Splitting one fragment across partitions needs a
row-range scan from ``Dataset.scan_fragment``, which the table layer does not offer yet.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lance_spark_ops.errors import InvalidInputError, NotFoundError
from lance_spark_ops.spark.tasks.scan import DESCRIPTOR_SCHEMA, ScanSpec, group_fragments, make_scan_mapper
from lance_spark_ops.spark.types import spark_schema, spark_target_schema
from lance_spark_ops.table.dataset import DEFAULT_BATCH_ROWS, Dataset

__all__ = ["read_lance"]


def read_lance(spark: Any, uri: str, columns: Sequence[str] | None = None, with_row_id: bool = False,
               with_row_address: bool = False, version: int | None = None,
               storage_options: dict[str, Any] | None = None, *,
               fragment_ids: Sequence[int] | None = None, max_rows_per_partition: int | None = None,
               batch_rows: int = DEFAULT_BATCH_ROWS) -> Any:
    """Live rows of ``uri`` (latest version, or ``version``) as a DataFrame.

    ``columns``: top-level columns to read (default all); ``with_row_id`` / ``with_row_address``
    append ``_rowid`` / ``_rowaddr`` (Spark ``long``). ``fragment_ids`` restricts the scan;
    ``max_rows_per_partition`` packs neighbouring small fragments into one partition.
    """
    if isinstance(columns, str):
        raise InvalidInputError(f"columns must be a list of names, got the string {columns!r}")
    if max_rows_per_partition is not None and max_rows_per_partition <= 0:
        raise InvalidInputError(f"max_rows_per_partition must be positive, got {max_rows_per_partition}")
    ds = Dataset.open(uri, version, storage_options=storage_options)
    spec = ScanSpec(ds.uri, ds.version, tuple(columns) if columns is not None else None, with_row_id,
                    with_row_address, batch_rows, dict(storage_options or {}), ds.timestamp)
    return scan_dataframe(spark, ds, spec, fragment_ids, max_rows_per_partition)


def scan_dataframe(spark: Any, ds: Dataset, spec: ScanSpec, fragment_ids: Sequence[int] | None = None,
                   max_rows_per_partition: int | None = None) -> Any:
    """The DataFrame of ``spec`` over an already opened version (shared with ``add_columns``)."""
    arrow_schema = ds.output_schema(list(spec.columns) if spec.columns is not None else None,
                                    spec.with_row_id, spec.with_row_address)
    target = spark_target_schema(arrow_schema)  # raises on a type Spark cannot hold
    struct = spark_schema(arrow_schema)
    frags = ds.fragments
    if fragment_ids is not None:
        wanted = {int(i) for i in fragment_ids}
        missing = sorted(wanted - {f.id for f in frags})
        if missing:
            raise NotFoundError(f"no fragment(s) {missing} in version {ds.version}", path=ds.uri)
        frags = [f for f in frags if f.id in wanted]
    groups = group_fragments([(f.id, f.physical_rows or 0) for f in frags], max_rows_per_partition)
    if not groups:
        return spark.createDataFrame([], struct)
    rows = [(i, g) for i, g in enumerate(groups)]
    rdd = spark.sparkContext.parallelize(rows, len(rows))
    descriptors = spark.createDataFrame(rdd, DESCRIPTOR_SCHEMA)
    return descriptors.mapInArrow(make_scan_mapper(spec, target), struct)
