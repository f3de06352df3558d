"""Summarise a Lance data file: version, schema, page encodings and the first rows.

    python jobs/inspect_file.py PATH_OR_URI [--rows N]

Reads one file (no Spark). The summary goes to stdout; the last line is a JSON object with the
version, row count, columns and in-memory size.
"""

# no `from __future__ import annotations`: the options dataclass must also build when this file
# is loaded by path without being registered in sys.modules (dataclasses look string annotations up there)

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from lance_spark_ops.errors import InvalidInputError
from lance_spark_ops.spark.runtime.cli import Job, run_job


@dataclass(frozen=True)
class InspectOptions:
    """Options of ``jobs/inspect_file.py``.

    Attributes:
        rows: how many of the first rows to print.
    """

    rows: int = 5

    def __post_init__(self) -> None:
        if self.rows < 0:
            raise InvalidInputError(f"rows must not be negative, got {self.rows}")


def _run(spark: Any, uri: str, storage_options: dict[str, Any], opts: InspectOptions) -> dict[str, Any]:
    from lance_spark_ops import LanceFileReader
    from lance_spark_ops.file.inspect import summarize

    reader = LanceFileReader(uri, storage_options=storage_options)
    table = reader.read()
    head = table.slice(0, opts.rows)
    try:
        shown = head.to_pandas().to_string()
    except ImportError:
        shown = str(head)
    lines = [summarize(reader.metadata), str(reader.schema), shown]
    return {"version": reader.version, "rows": reader.num_rows, "columns": reader.schema.names,
            "arrow_bytes": table.nbytes, "_lines": lines}


def _report(metrics: dict[str, Any]) -> Iterator[str]:
    yield from metrics.pop("_lines")


JOB = Job("inspect_file", _run, InspectOptions, __doc__.split("\n\n")[0],
          uri_help="a Lance data file: a local path or a URI", spark=False, report=_report,
          needs_dataset=False)


def main(argv: list[str] | None = None) -> int:
    return run_job(JOB, argv)


if __name__ == "__main__":
    sys.exit(main())
