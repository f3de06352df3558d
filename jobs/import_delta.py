"""Import a Delta Lake table's current snapshot into a Lance dataset (one commit).

    spark-submit jobs/import_delta.py DELTA_URI LANCE_URI [--mode create|append|overwrite]
        [--data-storage-version V] [--delta-version N] [--max-rows-per-file N]
        [--storage-option KEY=VALUE ...] [--delta-storage-option KEY=VALUE ...]

Storage options use pylance's names (aws_endpoint, aws_region, ...); the Delta side's
default to the Lance side's.
"""

from __future__ import annotations

import argparse
import sys

from lance_spark_ops.spark.cli import parse_storage_options, print_metrics
from lance_spark_ops.spark.delta_import import DEFAULT_MAX_ROWS_PER_FILE, MODES, import_delta
from lance_spark_ops.spark.session import get_spark


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Import a Delta Lake table into a Lance dataset on Spark")
    ap.add_argument("delta_uri")
    ap.add_argument("lance_uri")
    ap.add_argument("--mode", choices=MODES, default="create")
    ap.add_argument("--data-storage-version", default=None)
    ap.add_argument("--delta-version", type=int, default=None)
    ap.add_argument("--max-rows-per-file", type=int, default=DEFAULT_MAX_ROWS_PER_FILE)
    ap.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--delta-storage-option", action="append", default=None, metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    spark = get_spark("lance-spark-ops import_delta")
    delta_so = None if args.delta_storage_option is None else parse_storage_options(args.delta_storage_option)
    metrics = import_delta(spark, args.delta_uri, args.lance_uri, args.mode,
                           storage_options=parse_storage_options(args.storage_option),
                           delta_storage_options=delta_so, data_storage_version=args.data_storage_version,
                           delta_version=args.delta_version, max_rows_per_file=args.max_rows_per_file)
    print_metrics(metrics)
    return 0


if __name__ == "__main__":
    sys.exit(main())
