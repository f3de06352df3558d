"""Add columns computed by Spark SQL expressions to a Lance dataset.

    spark-submit jobs/add_columns.py URI --column NAME=SQL_EXPRESSION [--column ...]
        [--rows-per-task N] [--sql-engine auto|arrow|spark] [--storage-option KEY=VALUE ...]

Example: ``--column "total=price * quantity" --column "tag=upper(category)"``. Expressions see
the dataset's columns as ``read_lance`` types them. Each fragment gets one new data file with
only the new columns; existing files are not touched; deleted rows read as null. The last
line printed is the metrics as one JSON object.
"""

from __future__ import annotations

import argparse
import sys

from lance_spark_ops.spark.cli import parse_storage_options, print_metrics
from lance_spark_ops.spark.columns import DEFAULT_ROWS_PER_TASK, add_columns
from lance_spark_ops.spark.session import get_spark


def parse_columns(pairs: list[str]) -> dict[str, str]:
    """``["name=expr", ...]`` -> ``{name: expr}`` (the expression may contain ``=``)."""
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, expr = pair.partition("=")
        name, expr = name.strip(), expr.strip()
        if not sep or not name or not expr:
            raise SystemExit(f"--column expects NAME=SQL_EXPRESSION, got {pair!r}")
        if name in out:
            raise SystemExit(f"--column {name!r} given twice")
        out[name] = expr
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Add SQL-expression columns to a Lance dataset on Spark")
    ap.add_argument("uri")
    ap.add_argument("--column", action="append", required=True, metavar="NAME=SQL_EXPRESSION")
    ap.add_argument("--rows-per-task", type=int, default=None,
                    help="pack neighbouring small fragments into tasks of about this many rows "
                         f"(default: at most {DEFAULT_ROWS_PER_TASK}, whole waves of tasks)")
    ap.add_argument("--sql-engine", choices=["auto", "arrow", "spark"], default="auto",
                    help="evaluate expressions with Arrow inside our tasks when they translate "
                         "(auto), always with Spark, or refuse what Arrow cannot evaluate")
    ap.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    columns = parse_columns(args.column)
    spark = get_spark("lance-spark-ops add columns")
    metrics = add_columns(spark, args.uri, columns, rows_per_task=args.rows_per_task,
                          sql_engine=args.sql_engine,
                          storage_options=parse_storage_options(args.storage_option))
    print_metrics(metrics)
    return 0


if __name__ == "__main__":
    sys.exit(main())
