"""Vacuum a Lance dataset on Spark: remove old versions and the files only they referenced.

    spark-submit jobs/vacuum.py URI [--older-than 14d] [--retain-versions N] [--delete-unverified]
        [--unverified-older-than 7d] [--no-error-if-tagged-old-versions] [--dry-run]
        [--max-deletes-per-second X] [--config FILE] ...

Durations are a number and a unit: ``90s``, ``30m``, ``12h``, ``14d``, ``2w``. Semantics are
pylance's ``cleanup_old_versions``. A dry run prints each path that would go. Deletes that
failed (listed, at most 100, in the metrics) make the exit code 1.
"""

# no `from __future__ import annotations`: the options dataclass must also build when this file
# is loaded by path without being registered in sys.modules (dataclasses look string annotations up there)

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from lance_spark_ops.errors import InvalidInputError
from lance_spark_ops.io.denied import all_refused
from lance_spark_ops.spark.files.vacuuming import parse_duration
from lance_spark_ops.spark.runtime.cli import EXIT_ACCESS, EXIT_FAILED, EXIT_OK, Job, run_job

MAX_FAILURES_SHOWN = 100


@dataclass(frozen=True)
class VacuumOptions:
    """Options of ``jobs/vacuum.py``.

    Attributes:
        older_than: versions older than this go - a number and a unit s, m, h, d or w (e.g. 90s,
            12h, 14d); none: 14d, or only retain_versions decides when that is given.
        retain_versions: always keep this many of the newest versions (none: no count).
        delete_unverified: also delete unreferenced files younger than unverified_older_than
            (they may belong to a write still in progress).
        unverified_older_than: unreferenced files younger than this are kept unless
            delete_unverified (a duration, as older_than).
        error_if_tagged_old_versions: refuse when a tagged version is old enough to go (off:
            keep tagged versions and remove the rest).
        dry_run: list what would be removed (one `would remove PATH` line each), remove nothing.
        max_deletes_per_second: throttle the deletes (none: as fast as the tasks go).
    """

    older_than: str | None = None
    retain_versions: int | None = None
    delete_unverified: bool = False
    unverified_older_than: str = "7d"
    error_if_tagged_old_versions: bool = True
    dry_run: bool = False
    max_deletes_per_second: float | None = None

    def __post_init__(self) -> None:
        for text in (self.older_than, self.unverified_older_than):
            if text is not None:
                parse_duration(text)  # InvalidInputError naming the text: a usage error (exit 2)
        if self.retain_versions is not None and self.retain_versions < 1:
            raise InvalidInputError(f"retain_versions must be at least 1, got {self.retain_versions}")
        if self.max_deletes_per_second is not None and self.max_deletes_per_second <= 0:
            raise InvalidInputError(
                f"max_deletes_per_second must be positive, got {self.max_deletes_per_second}")


class _Printed(dict):
    """The metrics as printed (failures cut to MAX_FAILURES_SHOWN, paths left out), keeping the
    removed paths for the dry run's report."""

    def __init__(self, metrics: Any) -> None:
        out = {k: v for k, v in vars(metrics).items() if k not in ("removed_paths", "failures")}
        super().__init__(out, failures=metrics.failures[:MAX_FAILURES_SHOWN])
        self.removed_paths = metrics.removed_paths
        # every failed delete refused by the store (credentials, policy): exit 8, not a retry
        self.all_refused = all_refused(metrics.failures)


def _run(spark: Any, uri: str, storage_options: dict[str, Any], opts: VacuumOptions) -> _Printed:
    from lance_spark_ops.spark import vacuum

    metrics = vacuum(
        spark, uri, older_than=None if opts.older_than is None else parse_duration(opts.older_than),
        retain_versions=opts.retain_versions, delete_unverified=opts.delete_unverified,
        unverified_older_than=parse_duration(opts.unverified_older_than),
        error_if_tagged_old_versions=opts.error_if_tagged_old_versions, dry_run=opts.dry_run,
        storage_options=storage_options, max_deletes_per_second=opts.max_deletes_per_second)
    return _Printed(metrics)


def _report(metrics: _Printed) -> Iterator[str]:
    if metrics["dry_run"]:
        for path in metrics.removed_paths:
            yield f"would remove {path}"


JOB = Job("vacuum", _run, VacuumOptions, __doc__.split("\n\n")[0], report=_report,
          status=lambda m: EXIT_ACCESS if m.all_refused else EXIT_FAILED if m["failed_deletes"] else EXIT_OK)


def main(argv: list[str] | None = None) -> int:
    return run_job(JOB, argv)


if __name__ == "__main__":
    sys.exit(main())
