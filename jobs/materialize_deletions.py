"""Rewrite fragments whose deleted fraction is above a threshold so no deletion file remains.

    spark-submit jobs/materialize_deletions.py URI [--threshold 0.0] [--defer-index-remap]
        [--storage-option KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import sys

from lance_spark_ops.spark.cli import parse_storage_options, print_metrics
from lance_spark_ops.spark.compaction import materialize_deletions
from lance_spark_ops.spark.session import get_spark


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Materialize deletions of a Lance dataset on Spark")
    ap.add_argument("uri")
    ap.add_argument("--threshold", type=float, default=0.0)
    ap.add_argument("--data-storage-version", default=None)
    ap.add_argument("--defer-index-remap", action="store_true",
                    help="leave index files alone; record the moves in the fragment reuse index")
    ap.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    spark = get_spark("lance-spark-ops materialize_deletions")
    metrics = materialize_deletions(spark, args.uri, args.threshold,
                                    storage_options=parse_storage_options(args.storage_option),
                                    data_storage_version=args.data_storage_version,
                                    defer_index_remap=args.defer_index_remap)
    print_metrics(metrics)
    return 0


if __name__ == "__main__":
    sys.exit(main())
