"""Rewrite every index still behind a Lance dataset's fragment reuse index, on Spark, and trim
the reuse versions all indices have caught up with.

    spark-submit jobs/remap_indices.py URI [--storage-option KEY=VALUE ...]

The last line printed is the metrics as one JSON object.
"""

from __future__ import annotations

import argparse
import sys

from lance_spark_ops.spark.cli import parse_storage_options, print_metrics
from lance_spark_ops.spark.index_remap import remap_indices
from lance_spark_ops.spark.session import get_spark


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Remap indices deferred by compaction (defer_index_remap)")
    ap.add_argument("uri")
    ap.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    spark = get_spark("lance-spark-ops remap indices")
    metrics = remap_indices(spark, args.uri, storage_options=parse_storage_options(args.storage_option))
    print_metrics(metrics)
    return 0


if __name__ == "__main__":
    sys.exit(main())
