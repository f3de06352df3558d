"""Rebuild the row-id index of a Lance dataset on Spark.

    spark-submit jobs/rebuild_row_id_index.py URI [--rows-per-partition N] [--fragments-per-task N]
        [--no-index] [--config FILE] ...

Compacts every fragment's row-id sequence (committed as a new version when anything shrank)
and writes the row id -> row address lookup under ``_lance_spark_ops/row_id_index/v{version}/``
(see ``lance_spark_ops.row_id_index``). On a dataset without stable row ids it says that the
row id is the row address and changes nothing (exit code 0).
"""

# no `from __future__ import annotations`: the options dataclass must also build when this file
# is loaded by path without being registered in sys.modules (dataclasses look string annotations up there)

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from lance_spark_ops.errors import InvalidInputError
from lance_spark_ops.spark.runtime.cli import Job, run_job


@dataclass(frozen=True)
class RowIdIndexOptions:
    """Options of ``jobs/rebuild_row_id_index.py``.

    Attributes:
        rows_per_partition: rows per index partition (one Lance file each).
        fragments_per_task: fragments whose sequences one Spark task rebuilds (none: about two
            tasks per executor slot).
        index: write the row id -> row address index; --no-index only compacts the sequences.
        index_file_version: Lance file version of the index files.
    """

    rows_per_partition: int = 1 << 20
    fragments_per_task: int | None = None
    index: bool = True
    index_file_version: str = "2.1"

    def __post_init__(self) -> None:
        for name in ("rows_per_partition", "fragments_per_task"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise InvalidInputError(f"{name} must be positive, got {value}")


def _run(spark: Any, uri: str, storage_options: dict[str, Any], opts: RowIdIndexOptions) -> Any:
    from lance_spark_ops.spark import rebuild_row_id_index

    return rebuild_row_id_index(spark, uri, storage_options=storage_options,
                                rows_per_partition=opts.rows_per_partition,
                                fragments_per_task=opts.fragments_per_task, write_index=opts.index,
                                index_file_version=opts.index_file_version)


def _check(uri: str, storage_options: dict[str, Any], opts: RowIdIndexOptions) -> bool:
    """Without stable row ids there is nothing to rebuild: no Spark session (False)."""
    from lance_spark_ops.table.dataset import Dataset

    return Dataset.open(uri, storage_options=storage_options).uses_stable_row_ids


def _report(metrics: Any) -> Iterator[str]:
    yield metrics.message


JOB = Job("rebuild_row_id_index", _run, RowIdIndexOptions, __doc__.split("\n\n")[0],
          choices={"index_file_version": ("2.0", "2.1", "2.2")}, report=_report, precheck=_check)


def main(argv: list[str] | None = None) -> int:
    return run_job(JOB, argv)


if __name__ == "__main__":
    sys.exit(main())
