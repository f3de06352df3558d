"""Compact a Lance dataset on Spark: merge small neighbouring fragments and drop deleted rows.

    spark-submit jobs/compact.py URI [--target-rows-per-fragment N] [--compaction-mode MODE]
        [--dry-run] [--commit-every N] [--config FILE] ...

Every field of ``lance_spark_ops.spark.files.compaction_options.CompactionOptions`` is a flag (see --help).
With --dry-run the planned task groups are printed and nothing is written.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

from lance_spark_ops.spark.files.compaction_options import COMPACTION_MODES, CompactionOptions
from lance_spark_ops.spark.runtime.cli import Job, quietly, run_job


def _run(spark: Any, uri: str, storage_options: dict[str, Any], opts: CompactionOptions) -> Any:
    from lance_spark_ops.spark import compact

    return compact(spark, uri, storage_options=storage_options, **vars(opts))


def _check(uri: str, storage_options: dict[str, Any], opts: CompactionOptions) -> bool:
    """Plan first (quietly, no Spark): nothing to rewrite - the run needs no Spark session."""
    from lance_spark_ops.spark import compact

    with quietly():
        plan = compact(None, uri, storage_options=storage_options, **{**vars(opts), "dry_run": True}).plan
    return bool(plan)


def _report(metrics: Any) -> Iterator[str]:
    if metrics.dry_run:
        for i, group in enumerate(metrics.plan):
            yield f"task {i}: fragments {group}"


JOB = Job("compact", _run, CompactionOptions, __doc__.split("\n\n")[0],
          choices={"compaction_mode": COMPACTION_MODES}, report=_report, precheck=_check,
          spark=lambda opts: not opts.dry_run)  # a dry run only plans: no Spark session


def main(argv: list[str] | None = None) -> int:
    return run_job(JOB, argv)


if __name__ == "__main__":
    sys.exit(main())
