"""Driver at scale: open + plan a many-fragment dataset, and commit a compaction of part of it,
ours against pylance 14.

    python bench/driver_bench.py [--fragments 100000] [--compact 2000] [--rounds 5]

The manifest is built cheaply: pylance writes one small fragment (``--rows`` rows, v2.2), then
our commit API appends copies of that fragment's metadata (all pointing at the same data file)
in ``--chunk``-sized Append commits. Every fragment is then a real, readable fragment.

Timed, in alternating rounds (ours, pylance, ours, ...) so machine noise hits both alike:

* **open + plan**: ours = ``Dataset.open`` + planning inputs + ``plan_compaction`` (what the
  compaction job's ``plan`` phase does); pylance = ``lance.dataset`` +
  ``lance.optimize.Compaction.plan``. Each round opens afresh (no caches kept).
* **commit a compaction of ``--compact`` fragments**: on a fresh copy of the dataset's
  ``_versions/`` each round; ours = the ``commit`` phase of our compaction job
  (``max_source_fragments``; ReserveFragments + Rewrite commits, as pylance does), pylance =
  ``Compaction.commit`` of the executed tasks that cover the same fragments.

Reports median and min/max of each; ``--profile`` writes cProfile stats of one round of ours.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa


def build_dataset(uri: str, fragments: int, rows: int, chunk: int) -> float:
    """pylance writes one fragment; our Append commits add ``fragments - 1`` copies of it."""
    import lance

    from lance_spark_ops.table.dataset import Dataset
    from lance_spark_ops.table.format.transaction import Append

    t = pa.table({"id": pa.array(np.arange(rows, dtype=np.int64)),
                  "x": pa.array(np.linspace(0, 1, rows)),
                  "s": pa.array([f"row {i}" for i in range(rows)])})
    lance.write_dataset(t, uri, data_storage_version="2.2")
    t0 = time.perf_counter()
    ds = Dataset.open(uri)
    proto = ds.fragments[0]
    left = fragments - 1
    while left > 0:
        n = min(chunk, left)
        ds = ds.commit(Append([replace(proto, id=0, files=[replace(f) for f in proto.files])
                               for _ in range(n)]))
        left -= n
    return time.perf_counter() - t0


def ours_open_plan(uri: str, target: int) -> tuple[float, int]:
    from lance_spark_ops.spark.files.compaction import _open_for_rewrite
    from lance_spark_ops.spark.files.compaction_options import CompactionOptions
    from lance_spark_ops.spark.files.compaction_plan import plan_compaction

    opts = CompactionOptions(target_rows_per_fragment=target)
    t0 = time.perf_counter()
    ds, _, stats, _ = _open_for_rewrite(uri, None, opts)
    tasks = plan_compaction(stats, opts)
    return time.perf_counter() - t0, len(tasks)


def pylance_open_plan(uri: str, target: int) -> tuple[float, int]:
    import lance
    from lance.optimize import Compaction

    t0 = time.perf_counter()
    ds = lance.dataset(uri)
    plan = Compaction.plan(ds, {"target_rows_per_fragment": target})
    return time.perf_counter() - t0, plan.num_tasks()


def fresh_copy(src: str, dst: str) -> None:
    """A copy of the dataset (its one data file and its manifests; no transaction files)."""
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    for d in ("_versions", "data"):
        shutil.copytree(f"{src}/{d}", f"{dst}/{d}")


def ours_commit(uri: str, compact: int, target: int) -> tuple[float, float, int]:
    """(commit seconds, job seconds, fragments removed) of our compaction of ``compact`` fragments."""
    from lance_spark_ops.spark.files.compaction import compact as run

    m = run(None, uri, target_rows_per_fragment=target, max_source_fragments=compact)
    return m.seconds["commit"], m.seconds["total"], m.fragments_removed


def pylance_commit(uri: str, compact: int, target: int) -> tuple[float, float, int]:
    import lance
    from lance.optimize import Compaction

    t0 = time.perf_counter()
    ds = lance.dataset(uri)
    plan = Compaction.plan(ds, {"target_rows_per_fragment": target})
    tasks, n = [], 0
    for task in plan.tasks:
        if n + len(task.fragments) > compact:
            break
        tasks.append(task)
        n += len(task.fragments)
    rewrites = [task.execute(ds) for task in tasks]
    t1 = time.perf_counter()
    Compaction.commit(ds, rewrites)
    t2 = time.perf_counter()
    return t2 - t1, t2 - t0, n


def _summary(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fragments", type=int, default=100_000)
    ap.add_argument("--rows", type=int, default=10, help="rows per fragment")
    ap.add_argument("--chunk", type=int, default=50_000, help="fragments per building Append commit")
    ap.add_argument("--compact", type=int, default=2000, help="fragments the timed compaction rewrites")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--profile", help="write cProfile stats of ours (open+plan, commit) to this prefix")
    ap.add_argument("--out", default=str(Path(__file__).parent / "out" / "driver_bench.json"))
    ap.add_argument("--skip-commit", action="store_true")
    args = ap.parse_args()
    # a task group of 200 fragments: the timed compaction makes compact / 200 tasks
    target = args.rows * 200

    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        src = f"{tmp}/src.lance"
        built = build_dataset(src, args.fragments, args.rows, args.chunk)
        size = sum(f.stat().st_size for f in Path(src, "_versions").iterdir())
        latest = max(f.stat().st_size for f in Path(src, "_versions").iterdir())
        print(f"dataset: {args.fragments} fragments of {args.rows} rows; built in {built:.1f} s; "
              f"latest manifest file {latest / 1e6:.1f} MB ({size / 1e6:.1f} MB of manifests)", flush=True)
        result: dict[str, object] = {"fragments": args.fragments, "rows_per_fragment": args.rows,
                                     "build_s": built}
        ours, theirs = [], []
        for r in range(args.rounds):
            a, na = ours_open_plan(src, target)
            b, nb = pylance_open_plan(src, target)
            ours.append(a)
            theirs.append(b)
            print(f"round {r}: open+plan ours {a:.3f} s ({na} tasks), pylance {b:.3f} s ({nb} tasks)",
                  flush=True)
        result["open_plan_ours_s"] = _summary(ours)
        result["open_plan_pylance_s"] = _summary(theirs)
        result["open_plan_ratio_of_medians"] = statistics.median(ours) / statistics.median(theirs)
        if args.profile:
            prof = cProfile.Profile()
            prof.runcall(ours_open_plan, src, target)
            prof.dump_stats(f"{args.profile}.open_plan.prof")
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)

        if not args.skip_commit:
            oc, pc = [], []
            for r in range(args.rounds):
                fresh_copy(src, f"{tmp}/ours.lance")
                if args.profile and r == 0:
                    prof = cProfile.Profile()
                    c, total, n = prof.runcall(ours_commit, f"{tmp}/ours.lance", args.compact, target)
                    prof.dump_stats(f"{args.profile}.commit.prof")
                    pstats.Stats(prof).sort_stats("tottime").print_stats(30)
                else:
                    c, total, n = ours_commit(f"{tmp}/ours.lance", args.compact, target)
                fresh_copy(src, f"{tmp}/theirs.lance")
                pc_, ptotal, pn = pylance_commit(f"{tmp}/theirs.lance", args.compact, target)
                oc.append(c)
                pc.append(pc_)
                print(f"round {r}: commit of {n} fragments ours {c:.3f} s (job {total:.1f} s); pylance "
                      f"{pc_:.3f} s for {pn} fragments (plan+execute+commit {ptotal:.1f} s)", flush=True)
            result["commit_ours_s"] = _summary(oc)
            result["commit_pylance_s"] = _summary(pc)
            result["compacted_fragments"] = args.compact
        print(json.dumps(result, indent=1))
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    sys.exit(main())
