"""Compaction of many tiny fragments (a streaming writer's output): ours on Spark local[2]
against pylance ``compact_files(num_threads=2)``, in one run.

    python bench/small_files_bench.py [--cases 100000x20 20000x100] [--target-rows 200000]
        [--rounds 1] [--out bench/results/small_files.json]

A case ``FxR`` is F fragments of R rows each, two columns (int64 id, float64 x), written by
pylance in one commit (``max_rows_per_file=R``, file version 2.2), nothing deleted. Each round
compacts a fresh copy for each side (pylance first, in a child process, then ours); ours is
timed after its workers are warm (one task per slot first) and reports its phases (plan,
rewrite, commit: the metrics' ``seconds``; ``commit`` covers the fragment-id reservation and the
Rewrite commit), the versions it went through and the workers' peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

CHILD = r"""
import json, sys, time
uri, target = sys.argv[1], int(sys.argv[2])
import lance
ds = lance.dataset(uri)
t0 = time.perf_counter()
ds.optimize.compact_files(target_rows_per_fragment=target, num_threads=2)
seconds = time.perf_counter() - t0
hwm = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM"))
print(json.dumps({"seconds": seconds, "peak_rss_bytes": hwm}))
"""


def make_dataset(uri: str, fragments: int, rows: int) -> None:
    import lance

    n = fragments * rows
    table = pa.table({"id": pa.array(np.arange(n, dtype=np.int64)),
                      "x": pa.array(np.random.default_rng(0).random(n))})
    lance.write_dataset(table, uri, data_storage_version="2.2", max_rows_per_file=rows,
                        max_rows_per_group=rows)
    assert len(lance.dataset(uri).get_fragments()) == fragments


def run_pylance(uri: str, target: int) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, uri, str(target)], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_ours(spark: object, uri: str, target: int) -> dict:
    from lance_spark_ops.spark.files.compaction import compact

    t0 = time.perf_counter()
    m = compact(spark, uri, target_rows_per_fragment=target)
    return {"seconds": time.perf_counter() - t0, "phases": m.seconds,
            "peak_rss_bytes": m.worker_peak_rss_bytes, "fragments_removed": m.fragments_removed,
            "fragments_added": m.fragments_added, "tasks": m.tasks,
            "versions": {"read": m.read_version, "reserved": m.reservation_versions, "new": m.new_version,
                         "commits": m.commits}}


def _warm(task: int, ctx: object) -> int:
    import lance_spark_ops.spark.files.rewrite_tasks  # noqa: F401 - the import is the point

    return task


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", nargs="+", default=["100000x20", "20000x100"])
    ap.add_argument("--target-rows", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--note", default="")
    ap.add_argument("--fast-input", action="store_true",
                    help="build inputs with small_files_input (hard-linked pylance files, one Overwrite)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "small_files.json"))
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from small_files_input import build as fast_build
    from small_files_input import link_copy

    from lance_spark_ops.spark.runtime.runner import run_tasks
    from lance_spark_ops.spark.runtime.session import get_spark

    spark = get_spark("small-files-bench")
    run_tasks(spark, "warm", list(range(2)), _warm)
    results = []
    try:
        for case in args.cases:
            fragments, rows = map(int, case.split("x"))
            with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
                src = f"{tmp}/src.lance"
                t0 = time.perf_counter()
                (fast_build if args.fast_input else make_dataset)(src, fragments, rows)
                print(f"{case}: built in {time.perf_counter() - t0:.0f} s", flush=True)
                for r in range(args.rounds):
                    theirs, ours = f"{tmp}/theirs{r}.lance", f"{tmp}/ours{r}.lance"
                    copy = link_copy if args.fast_input else shutil.copytree
                    if args.fast_input and args.rounds == 1:
                        theirs = src  # one copy fewer of a million files: pylance compacts the input
                    else:
                        copy(src, theirs)
                    copy(src, ours)
                    os.sync()
                    point = {"case": case, "fragments": fragments, "rows": rows, "round": r,
                             "pylance": run_pylance(theirs, args.target_rows)}
                    point["ours"] = run_ours(spark, ours, args.target_rows)
                    point["ratio"] = point["ours"]["seconds"] / point["pylance"]["seconds"]
                    print(json.dumps(point), flush=True)
                    print(f"{case} round {r}: ratio {point['ratio']:.2f}, commit "
                          f"{point['ours']['phases']['commit']:.3f} s", flush=True)
                    results.append(point)
                    shutil.rmtree(theirs)
                    shutil.rmtree(ours)
    finally:
        spark.stop()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"note": args.note, "target_rows": args.target_rows,
                                          "points": results}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
