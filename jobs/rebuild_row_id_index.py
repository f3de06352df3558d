"""Rebuild the row-id index of a Lance dataset on Spark.

    spark-submit jobs/rebuild_row_id_index.py URI [--rows-per-partition N] [--fragments-per-task N]
        [--no-index] [--storage-option KEY=VALUE ...]

Compacts every fragment's row-id sequence (committed as a new version when anything shrank)
and writes the row id -> row address lookup under ``_lance_spark_ops/row_id_index/v{version}/``
(see ``lance_spark_ops.row_id_index``). On a dataset without stable row ids it says that the
row id is the row address and changes nothing. The last line printed is the metrics as one
JSON object.
"""

from __future__ import annotations

import argparse
import sys

from lance_spark_ops.spark.cli import parse_storage_options, print_metrics
from lance_spark_ops.spark.row_id_index import rebuild_row_id_index
from lance_spark_ops.spark.session import get_spark


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Rebuild the row-id index of a Lance dataset on Spark")
    ap.add_argument("uri")
    ap.add_argument("--rows-per-partition", type=int, default=1 << 20,
                    help="rows per index partition (one Lance file each)")
    ap.add_argument("--fragments-per-task", type=int, default=None)
    ap.add_argument("--no-index", action="store_true", help="only compact the row-id sequences")
    ap.add_argument("--index-file-version", default="2.1", choices=("2.0", "2.1", "2.2"))
    ap.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    spark = get_spark("lance-spark-ops rebuild row-id index")
    metrics = rebuild_row_id_index(spark, args.uri,
                                   storage_options=parse_storage_options(args.storage_option),
                                   rows_per_partition=args.rows_per_partition,
                                   fragments_per_task=args.fragments_per_task, write_index=not args.no_index,
                                   index_file_version=args.index_file_version)
    print(metrics.message)
    print_metrics(metrics)
    return 0


if __name__ == "__main__":
    sys.exit(main())
