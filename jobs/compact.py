"""Compact a Lance dataset on Spark.

    spark-submit jobs/compact.py URI [--target-rows-per-fragment N] [--compaction-mode MODE]
        [--materialize-deletions BOOL] [--dry-run true] [--commit-every N] ...
        [--storage-option KEY=VALUE ...]

Every field of ``lance_spark_ops.spark.options.CompactionOptions`` is a flag. The last line
printed is the metrics as one JSON object.
"""

from __future__ import annotations

import argparse
import sys

from lance_spark_ops.spark import CompactionOptions, compact, get_spark
from lance_spark_ops.spark.cli import (
    add_dataclass_options,
    options_from_args,
    parse_storage_options,
    print_metrics,
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Compact a Lance dataset on Spark")
    ap.add_argument("uri")
    ap.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE")
    add_dataclass_options(ap, CompactionOptions)
    args = ap.parse_args(argv)
    opts = options_from_args(args, CompactionOptions)
    spark = get_spark("lance-spark-ops compact")
    metrics = compact(spark, args.uri, opts, storage_options=parse_storage_options(args.storage_option))
    if opts.dry_run:
        for i, group in enumerate(metrics.plan):
            print(f"task {i}: fragments {group}")
    print_metrics(metrics)
    return 0


if __name__ == "__main__":
    sys.exit(main())
