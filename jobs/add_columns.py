"""Add columns computed by Spark SQL expressions to a Lance dataset.

    spark-submit jobs/add_columns.py URI --column NAME=SQL_EXPRESSION [--column ...]
        [--rows-per-task N] [--sql-engine auto|arrow|spark] [--config FILE] ...

Example: ``--column "total=price * quantity" --column "tag=upper(category)"`` (in a config
file: a ``[column]`` table, ``total = "price * quantity"``). Expressions see the dataset's
columns as ``read_lance`` types them. Each fragment gets one new data file with only the new
columns; existing files are not touched; deleted rows read as null.
"""

# no `from __future__ import annotations`: the options dataclass must also build when this file
# is loaded by path without being registered in sys.modules (dataclasses look string annotations up there)

import sys
from dataclasses import dataclass
from typing import Any

from lance_spark_ops.errors import InvalidInputError
from lance_spark_ops.spark.runtime.cli import Job, run_job

SQL_ENGINES = ("auto", "arrow", "spark")


@dataclass(frozen=True)
class AddColumnsOptions:
    """Options of ``jobs/add_columns.py``.

    Attributes:
        column: a new column as NAME=SQL_EXPRESSION (the expression may contain '='); give one
            per column.
        rows_per_task: pack neighbouring small fragments into tasks of about this many rows
            (none: at most 4 Mi rows, whole waves of tasks).
        sql_engine: evaluate the expressions with Arrow inside our tasks when they translate
            (auto), always with Spark, or with Arrow only (refusing what it cannot evaluate).
    """

    column: tuple[str, ...]
    rows_per_task: int | None = None
    sql_engine: str = "auto"

    def __post_init__(self) -> None:
        if self.rows_per_task is not None and self.rows_per_task <= 0:
            raise InvalidInputError(f"rows_per_task must be positive, got {self.rows_per_task}")
        parse_columns(self.column)


def parse_columns(pairs: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``["name=expr", ...]`` -> ``{name: expr}`` (the expression may contain ``=``)."""
    if not pairs:
        raise InvalidInputError("give at least one --column NAME=SQL_EXPRESSION")
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, expr = pair.partition("=")
        name, expr = name.strip(), expr.strip()
        if not sep or not name or not expr:
            raise InvalidInputError(f"--column expects NAME=SQL_EXPRESSION, got {pair!r}")
        if name in out:
            raise InvalidInputError(f"--column {name!r} given twice")
        out[name] = expr
    return out


def _run(spark: Any, uri: str, storage_options: dict[str, Any], opts: AddColumnsOptions) -> Any:
    from lance_spark_ops.spark import add_columns

    return add_columns(spark, uri, parse_columns(opts.column), rows_per_task=opts.rows_per_task,
                       sql_engine=opts.sql_engine, storage_options=storage_options)


JOB = Job("add_columns", _run, AddColumnsOptions, __doc__.split("\n\n")[0],
          choices={"sql_engine": SQL_ENGINES})


def main(argv: list[str] | None = None) -> int:
    return run_job(JOB, argv)


if __name__ == "__main__":
    sys.exit(main())
