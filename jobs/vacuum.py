"""Vacuum a Lance dataset on Spark: remove old versions and the files only they referenced.

    spark-submit jobs/vacuum.py URI [--older-than 14d] [--retain-versions N] [--delete-unverified]
        [--unverified-older-than 7d] [--error-if-tagged-old-versions BOOL] [--dry-run]
        [--max-deletes-per-second N] [--storage-option KEY=VALUE ...]

Durations are a number and a unit: ``90s``, ``30m``, ``12h``, ``14d``, ``2w``. Semantics are
pylance's ``cleanup_old_versions``. A dry run prints each path that would go. The last line
printed is the metrics as one JSON object.
"""

from __future__ import annotations

import argparse
import sys
from datetime import timedelta

from lance_spark_ops.errors import InvalidInputError
from lance_spark_ops.spark.cli import _parse_bool, parse_storage_options, print_metrics
from lance_spark_ops.spark.session import get_spark
from lance_spark_ops.spark.vacuuming import parse_duration, vacuum


def _duration(text: str) -> timedelta:
    try:
        return parse_duration(text)
    except InvalidInputError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Remove old versions of a Lance dataset on Spark")
    ap.add_argument("uri")
    ap.add_argument("--older-than", type=_duration, default=None,
                    help="versions older than this go (default 14d unless --retain-versions is given)")
    ap.add_argument("--retain-versions", type=int, default=None)
    ap.add_argument("--delete-unverified", action="store_true",
                    help="also delete unreferenced files younger than --unverified-older-than")
    ap.add_argument("--unverified-older-than", type=_duration, default=timedelta(days=7))
    ap.add_argument("--error-if-tagged-old-versions", type=_parse_bool, default=True, metavar="BOOL")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--max-deletes-per-second", type=float, default=None)
    ap.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    spark = get_spark("lance-spark-ops vacuum")
    metrics = vacuum(spark, args.uri, older_than=args.older_than, retain_versions=args.retain_versions,
                     delete_unverified=args.delete_unverified,
                     unverified_older_than=args.unverified_older_than,
                     error_if_tagged_old_versions=args.error_if_tagged_old_versions, dry_run=args.dry_run,
                     storage_options=parse_storage_options(args.storage_option),
                     max_deletes_per_second=args.max_deletes_per_second)
    if args.dry_run:
        for path in metrics.removed_paths:
            print(f"would remove {path}")
    out = {k: v for k, v in vars(metrics).items() if k not in ("removed_paths", "failures")}
    out["failures"] = metrics.failures[:100]
    print_metrics(out)
    return 0 if not metrics.failed_deletes else 1


if __name__ == "__main__":
    sys.exit(main())
