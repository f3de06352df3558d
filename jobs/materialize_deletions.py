"""Rewrite the fragments of a Lance dataset whose deleted fraction is above a threshold, so no
deletion file remains on them (one fragment in, one out; row ids kept under stable row ids).

    spark-submit jobs/materialize_deletions.py URI [--threshold 0.0] [--dry-run] [--config FILE] ...
"""

# no `from __future__ import annotations`: the options dataclass must also build when this file
# is loaded by path without being registered in sys.modules (dataclasses look string annotations up there)

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from lance_spark_ops.errors import InvalidInputError
from lance_spark_ops.spark.runtime.cli import Job, quietly, run_job


@dataclass(frozen=True)
class MaterializeDeletionsOptions:
    """Options of ``jobs/materialize_deletions.py``.

    Attributes:
        threshold: rewrite fragments whose deleted fraction (0 to 1) is above this; 0 rewrites
            every fragment that has a deletion file.
        data_storage_version: file version to write; must be the dataset's own (none: the
            dataset's).
        defer_index_remap: leave index files as they are and cover the rewritten fragments with
            the fragment reuse index (pylance's defer_index_remap); default: remap indices now.
        dry_run: only print the fragments that would be rewritten; nothing is written and no
            Spark session starts.
    """

    threshold: float = 0.0
    data_storage_version: str | None = None
    defer_index_remap: bool = False
    dry_run: bool = False

    def __post_init__(self) -> None:
        if not 0.0 <= self.threshold <= 1.0:
            raise InvalidInputError(f"threshold must be within [0, 1], got {self.threshold}")


def _run(spark: Any, uri: str, storage_options: dict[str, Any], opts: MaterializeDeletionsOptions) -> Any:
    from lance_spark_ops.spark import materialize_deletions

    return materialize_deletions(spark, uri, opts.threshold, storage_options=storage_options,
                                 data_storage_version=opts.data_storage_version,
                                 defer_index_remap=opts.defer_index_remap, dry_run=opts.dry_run)


def _check(uri: str, storage_options: dict[str, Any], opts: MaterializeDeletionsOptions) -> bool:
    """Plan first (quietly, no Spark): no fragment over the threshold - no Spark session."""
    from lance_spark_ops.spark import materialize_deletions

    with quietly():
        return bool(materialize_deletions(None, uri, opts.threshold, storage_options=storage_options,
                                          data_storage_version=opts.data_storage_version,
                                          defer_index_remap=opts.defer_index_remap, dry_run=True).plan)


def _report(metrics: Any) -> Iterator[str]:
    if metrics.dry_run:
        for group in metrics.plan:
            yield f"would rewrite fragment {group[0]}"


JOB = Job("materialize_deletions", _run, MaterializeDeletionsOptions, __doc__.split("\n\n")[0],
          report=_report, precheck=_check,
          spark=lambda opts: not opts.dry_run)  # a dry run only plans: no Spark session


def main(argv: list[str] | None = None) -> int:
    return run_job(JOB, argv)


if __name__ == "__main__":
    sys.exit(main())
