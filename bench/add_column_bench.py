"""Add one SQL-expression column with our Spark job and with pylance ``add_columns``, in rounds.

    python bench/add_column_bench.py [--rows 7336800] [--fragments 200] [--uri PATH]
        [--expr "a * 2 + 1"] [--master local[2]] [--version 2.2] [--engine auto] [--rounds 3]
        [--out bench/out/add_column_bench.json]

The dataset is the compaction benchmark's (ints, floats, timestamps, strings and 32-dim
float vectors; by default its 1.1 GB: 7.3 M rows in 200 fragments, file version 2.2; 10% of
rows deleted), built once with pylance under ``--uri`` (default
``/tmp/lso_bench/add_column_<rows>_<version>.lance``) or taken as is when it exists - pass
the compaction benchmark's dataset to reuse it.

Each round works on a fresh copy (``<uri>-run``; columns added leave data files behind that
would slow later rounds): a warm-up read of the referenced column fills the page cache for
both, pylance adds ``c_pylance``, ``sync`` flushes its files, our job adds ``c_ours``, and
the two columns are compared. Spark's start-up (JVM, the Python workers of both stages
warmed on two fragments) and one warm-up ``add_columns`` per library on a tiny dataset of the same
schema (4 K rows: first-call costs such as Catalyst's first analysis) are timed apart and not counted.
Reported: every round, the ratio ours / pylance of the first round and the median ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa


def make_dataset(uri: str, rows: int, fragments: int, version: str) -> None:
    """The compaction benchmark's shape, written by pylance; 10% of rows deleted."""
    import lance

    rng = np.random.default_rng(0)
    per_file = max(1, rows // fragments)
    words = np.array(["lance", "spark", "column", "page", "block", "zip", "row", "data"])
    start = 0
    while start < rows:
        n = min(per_file * 10, rows - start)
        idx = rng.integers(0, len(words), (n, 3))
        tbl = pa.table({
            "a": pa.array(np.arange(start, start + n), pa.int64()),
            "i": pa.array(rng.integers(0, 1 << 20, n).astype(np.int32)),
            "f": pa.array(rng.random(n)),
            "ts": pa.array(np.sort(rng.integers(0, 10**15, n)), pa.timestamp("us")),
            "s": pa.array([" ".join(r) for r in words[idx]]),
            "v": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 32, dtype=np.float32)), 32),
        })
        lance.write_dataset(tbl, uri, mode="append" if start else "create", data_storage_version=version,
                            max_rows_per_file=per_file)
        start += n
    lance.dataset(uri).delete("a % 10 = 3")


def _drain(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for _ in batches:
        pass
    return iter(())


def _import_package(task: int, ctx: object) -> int:
    import lance_spark_ops.spark.files.columns_tasks  # noqa: F401 - the import is the point

    return task


def fresh_copy(base: str, uri: str) -> None:
    shutil.rmtree(uri, ignore_errors=True)
    shutil.copytree(base, uri)
    os.sync()


def dir_bytes(path: str) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=7_336_800)
    ap.add_argument("--fragments", type=int, default=200)
    ap.add_argument("--version", default="2.2")
    ap.add_argument("--uri")
    ap.add_argument("--expr", default="a * 2 + 1")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--engine", default="auto", choices=["auto", "arrow", "spark"],
                    help="add_columns sql_engine: Arrow in our tasks, or Spark's own evaluation")
    ap.add_argument("--rounds", type=int, default=3, help="fresh copies timed, both libraries each")
    ap.add_argument("--out", default=str(Path(__file__).parent / "out" / "add_column_bench.json"))
    args = ap.parse_args()
    import lance

    base = args.uri or f"/tmp/lso_bench/add_column_{args.rows}_{args.version}.lance"
    if not Path(base).exists():
        t0 = time.perf_counter()
        make_dataset(base, args.rows, args.fragments, args.version)
        print(f"built {base} in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    # every round works on a fresh copy: columns added (even when dropped later) leave data
    # files in the fragments, which would slow both sides down round after round
    uri = f"{base.rstrip('/')}-run"
    fresh_copy(base, uri)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from lance_spark_ops.spark.files.columns import add_columns
    from lance_spark_ops.spark.runtime.session import get_spark

    t0 = time.perf_counter()
    spark = get_spark("add_column_bench", master=args.master,
                      conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"})
    spark.sparkContext.setLogLevel("ERROR")
    from lance_spark_ops.spark.datasource.read import read_lance

    # Start the Python workers of both Python stages (scan, writer) in every slot, on two
    # fragments, and of the in-task path (one task per slot importing the package).
    two = [f.fragment_id for f in lance.dataset(uri).get_fragments()[:2]]
    read_lance(spark, uri, columns=["a"], fragment_ids=two).selectExpr("a * 2 AS b").mapInArrow(
        _drain, "b long").count()
    from lance_spark_ops.spark.runtime.runner import run_tasks

    run_tasks(spark, "warm", list(range(spark.sparkContext.defaultParallelism)), _import_package)
    # One warm-up add_columns per library on a tiny dataset of the same kind (first-call costs:
    # Catalyst's analysis, pickling and worker code paths; pylance's runtime and planner).
    tiny = f"{base.rstrip('/')}-warmup"
    shutil.rmtree(tiny, ignore_errors=True)
    make_dataset(tiny, 4000, 4, args.version)
    lance.dataset(tiny).add_columns({"w_pylance": args.expr})
    add_columns(spark, tiny, {"w_ours": args.expr}, sql_engine=args.engine)
    shutil.rmtree(tiny, ignore_errors=True)
    t_startup = time.perf_counter() - t0

    rounds = []
    for r in range(args.rounds):
        if r:
            fresh_copy(base, uri)
        ds = lance.dataset(uri)
        ds.to_table(columns=["a"])  # warm the page cache for both
        t0 = time.perf_counter()
        ds.add_columns({"c_pylance": args.expr})
        t_pylance = time.perf_counter() - t0
        os.sync()  # pylance's new files are not flushed during our run
        t0 = time.perf_counter()
        metrics = add_columns(spark, uri, {"c_ours": args.expr}, sql_engine=args.engine)
        t_ours = time.perf_counter() - t0
        tbl = lance.dataset(uri).to_table(columns=["c_pylance", "c_ours"])
        same = tbl.column("c_pylance").cast(pa.int64()).equals(tbl.column("c_ours").cast(pa.int64()))
        rounds.append({"pylance_seconds": round(t_pylance, 3), "ours_seconds": round(t_ours, 3),
                       "ratio": round(t_ours / t_pylance, 2), "values_equal": bool(same),
                       "ours_phases": {k: round(v, 3) for k, v in metrics.seconds.items()}})
        print(json.dumps(rounds[-1]), file=sys.stderr)
    ratios = sorted(r["ratio"] for r in rounds)
    result = {
        "uri": uri, "rows": lance.dataset(uri).count_rows(),
        "fragments": len(lance.dataset(uri).get_fragments()),
        "dataset_bytes": dir_bytes(uri), "expr": args.expr, "master": args.master,
        "engine": metrics.engine, "spark_startup_seconds": round(t_startup, 3),
        "ratio_first_round": rounds[0]["ratio"], "ratio_median": ratios[len(ratios) // 2],
        "values_equal": all(r["values_equal"] for r in rounds), "rounds": rounds,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
