"""Make a small dataset to try the index jobs on, with this library alone (no pylance):
``id`` (int64), ``category`` (a few strings: BITMAP), ``text`` (short sentences: INVERTED),
``vec`` (float32 vectors around a few centres: IVF_PQ / IVF_HNSW_SQ), in several fragments.

    python jobs/example_data/make_vector_example.py /tmp/lso-vectors [--rows 20000] [--dim 32]
        [--fragments 4] [--with-indices]

``--with-indices`` also builds a BTREE on ``id``, a BITMAP on ``category`` and an IVF_PQ on
``vec`` with ``create_index`` on a local Spark session (about half a minute), then appends a
fragment of new rows, so ``optimize_indices`` has something to do. Without it, the commands to
build them are printed. Deterministic (seeded).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np
import pyarrow as pa

CATEGORIES = ("books", "games", "music", "tools", "toys")
WORDS = ("lance", "spark", "vector", "index", "fragment", "column", "query", "table", "page", "file")
CENTRES = 8


def rows(n: int, dim: int, start: int = 0, seed: int = 7) -> pa.Table:
    """``n`` rows with ids from ``start``: vectors drawn around ``CENTRES`` fixed centres."""
    rng = np.random.default_rng(seed + start)
    centres = np.random.default_rng(seed).normal(0, 4, (CENTRES, dim)).astype(np.float32)
    vec = centres[rng.integers(0, CENTRES, n)] + rng.normal(0, 1, (n, dim)).astype(np.float32)
    words = np.asarray(WORDS)[rng.integers(0, len(WORDS), (n, 5))]
    return pa.table({
        "id": pa.array(np.arange(start, start + n, dtype=np.int64)),
        "category": pa.array(np.asarray(CATEGORIES)[rng.integers(0, len(CATEGORIES), n)]),
        "text": pa.array([" ".join(w) for w in words.tolist()]),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(vec.reshape(-1), pa.float32()), dim),
    })


def make(uri: str, n: int = 20_000, dim: int = 32, fragments: int = 4,
         storage_options: dict[str, Any] | None = None) -> Any:
    """Write the dataset at ``uri`` (which must not exist); returns it (a ``Dataset``)."""
    from lance_spark_ops import write_dataset

    return write_dataset(rows(n, dim), uri, max_rows_per_file=max(1, -(-n // fragments)),
                         storage_options=storage_options)


INDICES = (("id", "BTREE", {}), ("category", "BITMAP", {}),
           ("vec", "IVF_PQ", {"num_partitions": 16, "num_sub_vectors": 8}))


def index(uri: str, n: int, dim: int) -> None:
    """Build ``INDICES`` on a local Spark session, then append 5% new rows (unindexed)."""
    from lance_spark_ops import write_dataset
    from lance_spark_ops.spark import create_index, get_spark

    spark = get_spark("lance-spark-ops example")
    for column, kind, params in INDICES:
        create_index(spark, uri, column, kind, **params)
        print(f"built {kind} on {column}")
    write_dataset(rows(max(1, n // 20), dim, start=n), uri, mode="append")
    print(f"appended {max(1, n // 20)} rows: optimize_indices indexes them")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("uri", help="where to write the dataset (must not exist)")
    parser.add_argument("--rows", type=int, default=20_000, help="rows (default: 20000)")
    parser.add_argument("--dim", type=int, default=32, help="vector dimension, a multiple of 8 (default: 32)")
    parser.add_argument("--fragments", type=int, default=4, help="fragments (default: 4)")
    parser.add_argument("--with-indices", action="store_true",
                        help="build BTREE (id), BITMAP (category), IVF_PQ (vec) on Spark, then append rows")
    args = parser.parse_args(argv)
    if args.rows < 1 or args.fragments < 1 or args.dim < 8 or args.dim % 8:
        parser.error("--rows and --fragments must be positive, --dim a positive multiple of 8")
    ds = make(args.uri, args.rows, args.dim, args.fragments)
    print(f"wrote {args.uri}: {args.rows} rows in {len(ds.fragments)} fragments "
          f"(id, category, text, vec[{args.dim}])")
    if args.with_indices:
        index(args.uri, args.rows, args.dim)
    else:
        print("next, for example:")
        for column, kind, params in INDICES + (("text", "INVERTED", {}),):
            extra = "".join(f" --param {k}={v}" for k, v in params.items())
            print(f"  spark-submit jobs/create_index.py {args.uri} --column {column} --type {kind}{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
