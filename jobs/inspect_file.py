"""Summarise a Lance data file: version, schema, page encodings and the first rows.

    python jobs/inspect_file.py PATH_OR_URI [--rows N]
"""

from __future__ import annotations

import argparse
import json
import sys

from lance_spark_ops import LanceFileReader
from lance_spark_ops.file.inspect import summarize


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("uri")
    ap.add_argument("--rows", type=int, default=5)
    args = ap.parse_args(argv)
    reader = LanceFileReader(args.uri)
    print(summarize(reader.metadata))
    print(reader.schema)
    table = reader.read()
    print(table.slice(0, args.rows).to_pandas().to_string() if _has_pandas() else table.slice(0, args.rows))
    print(json.dumps({"version": reader.version, "rows": reader.num_rows, "columns": reader.schema.names,
                      "arrow_bytes": table.nbytes}))
    return 0


def _has_pandas() -> bool:
    try:
        import pandas  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
