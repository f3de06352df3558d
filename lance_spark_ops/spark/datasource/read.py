"""``read_lance``: a Lance dataset version as a Spark DataFrame, through the ``lance`` Python
data source (``spark.datasource``), so it works alike on classic and Spark Connect sessions.

The driver opens the version once to raise typed errors early (missing dataset, unknown
column or fragment, a type Spark cannot hold) and pins it with its commit time: every task
reads the same manifest even if writers commit meanwhile. Each partition yields the live rows
of its fragments (or a fragment's row range) in physical order, so a narrow transformation of
the result keeps that order; ``add_columns`` relies on it and reads through ``scan_dataframe``,
which never splits a fragment.

Types follow ``spark.runtime.spark_types``: ``_rowid`` / ``_rowaddr`` are Spark ``long`` (same bits as the
``uint64``), unsigned integers are widened, large / fixed-size / dictionary types become their
plain Spark equivalents, and a column Spark cannot hold fails on the driver, naming it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lance_spark_ops.errors import InvalidInputError, NotFoundError
from lance_spark_ops.namespace.target import with_table_target
from lance_spark_ops.spark.runtime.scan_tasks import ScanSpec
from lance_spark_ops.spark.runtime.spark_types import spark_schema, spark_target_schema
from lance_spark_ops.table.dataset import DEFAULT_BATCH_ROWS, Dataset

__all__ = ["read_lance", "scan_dataframe"]


@with_table_target(read_only=True)
def read_lance(spark: Any, uri: str, columns: Sequence[str] | None = None, with_row_id: bool = False,
               with_row_address: bool = False, version: int | None = None, *,
               storage_options: dict[str, Any] | None = None,
               fragment_ids: Sequence[int] | None = None, max_rows_per_partition: int | None = None,
               batch_rows: int = DEFAULT_BATCH_ROWS, max_bytes_per_partition: int | None = None) -> Any:
    """Live rows of ``uri`` (latest version, or ``version``) as a DataFrame.

    ``columns``: top-level columns to read (default all); ``with_row_id`` / ``with_row_address``
    append ``_rowid`` / ``_rowaddr`` (Spark ``long``). ``fragment_ids`` restricts the scan.
    Partitions (``datasource.reader``): a fragment over 1 Mi rows is split into row ranges, and
    neighbouring whole fragments share a partition up to ``max_bytes_per_partition`` of data
    files (default 128 MiB; 0: a partition per fragment); ``max_rows_per_partition`` instead
    splits at that many rows and packs neighbours by rows.
    """
    if isinstance(columns, str):
        raise InvalidInputError(f"columns must be a list of names, got the string {columns!r}")
    if max_rows_per_partition is not None and max_rows_per_partition <= 0:
        raise InvalidInputError(f"max_rows_per_partition must be positive, got {max_rows_per_partition}")
    if max_bytes_per_partition is not None and max_bytes_per_partition < 0:
        raise InvalidInputError(f"max_bytes_per_partition must be 0 or more, got {max_bytes_per_partition}")
    ds = Dataset.open(uri, version, storage_options=storage_options)
    spec = ScanSpec(ds.uri, ds.version, tuple(columns) if columns is not None else None, with_row_id,
                    with_row_address, batch_rows, dict(storage_options or {}), ds.timestamp)
    return _load(spark, ds, spec, fragment_ids, max_rows_per_partition, split=True,
                 max_bytes_per_partition=max_bytes_per_partition)


def scan_dataframe(spark: Any, ds: Dataset, spec: ScanSpec, fragment_ids: Sequence[int] | None = None,
                   max_rows_per_partition: int | None = None) -> Any:
    """The DataFrame of ``spec`` over an already opened version, every fragment whole in one
    partition (shared with ``add_columns``)."""
    return _load(spark, ds, spec, fragment_ids, max_rows_per_partition, split=False)


def _load(spark: Any, ds: Dataset, spec: ScanSpec, fragment_ids: Sequence[int] | None,
          max_rows_per_partition: int | None, split: bool, max_bytes_per_partition: int | None = None) -> Any:
    from lance_spark_ops.spark.datasource import register_data_source
    from lance_spark_ops.spark.datasource.options import read_option_strings

    arrow_schema = ds.output_schema(list(spec.columns) if spec.columns is not None else None,
                                    spec.with_row_id, spec.with_row_address)
    spark_target_schema(arrow_schema)  # raises on a type Spark cannot hold, naming the column
    # given the schema, Spark does not ask the source for it (an open of the version, in a
    # Python worker of its own, before the reader's)
    schema = spark_schema(arrow_schema)
    if fragment_ids is not None:
        missing = sorted({int(i) for i in fragment_ids} - {f.id for f in ds.fragments})
        if missing:
            raise NotFoundError(f"no fragment(s) {missing} in version {ds.version}", path=ds.uri)
    opts = read_option_strings(spec.columns, spec.with_row_id, spec.with_row_address, ds.version,
                               spec.storage_options, version_timestamp=spec.timestamp or ds.timestamp,
                               batch_rows=spec.batch_rows, max_rows_per_partition=max_rows_per_partition,
                               max_bytes_per_partition=max_bytes_per_partition, split_fragments=split,
                               fragment_ids=sorted({int(i) for i in fragment_ids})
                               if fragment_ids is not None else None)
    register_data_source(spark)
    return spark.read.format("lance").schema(schema).options(**opts).load(spec.uri)
