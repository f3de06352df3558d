"""Compaction in alternating rounds: medians of our Spark job (local[2]) and pylance
``compact_files(num_threads=2)``, re-encode and binary copy, against ``cp -r`` of the data.

    python bench/compact_rounds.py [--gb 2.4] [--fragments 300] [--rounds 3] [--shape mixed]

The dataset is ``compact_bench.make_dataset``'s (``--shape`` picks its columns when that
function knows shapes), then rows are deleted as the performance issue describes: in every
third fragment, 30% of the rows (``--deleted-every 3 --deleted-fraction 0.3``). Each round
runs pylance re-encode, ours re-encode, pylance binary copy, ours binary copy, and ``cp -r`` of
the dataset's ``data/`` directory (the bytes a binary copy reads and writes at most), in an
order that rotates from round to round, with ours and pylance trading places every other
round: a rotation alone keeps each side's predecessor, and on a VM what the run before freed
changes the cost of the next run's writes. Use an even ``--rounds``. Every timed run
works on a fresh copy made untimed, starts after ``os.sync()``, and has no cache of the other's
output. Spark starts once (JVM and workers warmed outside the timed region). After every run
of ours, pylance reads the same ``id`` values as from pylance's copy.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from compact_bench import dir_bytes, make_dataset  # noqa: E402

# the sides compared with each other; odd rounds swap them (see main)
_TWIN = {"pylance_reencode": "ours_reencode", "ours_reencode": "pylance_reencode",
         "pylance_binary": "ours_binary", "ours_binary": "pylance_binary"}


def _import_package(task: int, ctx: object) -> int:
    import lance_spark_ops.spark.files.rewrite_tasks  # noqa: F401 - the import is the point

    return task


def _warm_workers(spark) -> None:
    """One task per slot (defined here, so it pickles by value), so worker start is not timed."""
    from lance_spark_ops.spark.runtime.runner import run_tasks
    from lance_spark_ops.spark.runtime.session import default_parallelism

    run_tasks(spark, "warm", list(range(default_parallelism(spark))), _import_package)


def delete_every_nth(uri: str, every: int, fraction: float) -> int:
    """Delete ``fraction`` of the rows of every ``every``-th fragment; returns rows deleted."""
    import lance

    ds = lance.dataset(uri)
    gone = 0
    for i, frag in enumerate(ds.get_fragments()):
        if i % every:
            continue
        ids = frag.to_table(columns=["id"]).column("id").to_numpy()
        drop = ids[: int(len(ids) * fraction)]
        if drop.size:
            ds.delete(f"id >= {int(drop[0])} AND id <= {int(drop[-1])}")
            ds = lance.dataset(uri)
            gone += int(drop.size)
    return gone


def build(uri: str, args: argparse.Namespace) -> int:
    kw = {"deleted": 0.0}
    if "shape" in inspect.signature(make_dataset).parameters:
        kw["shape"] = args.shape
    elif args.shape != "mixed":
        raise SystemExit("this compact_bench.make_dataset has no shapes")
    rows = make_dataset(uri, args.gb, args.fragments, args.version, **kw)
    return rows - delete_every_nth(uri, args.deleted_every, args.deleted_fraction)


def ids_of(uri: str) -> np.ndarray:
    import lance

    return np.sort(lance.dataset(uri).to_table(columns=["id"]).column("id").to_numpy())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=2.4)
    ap.add_argument("--fragments", type=int, default=300)
    ap.add_argument("--version", default="2.2")
    ap.add_argument("--shape", default="mixed")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--target-rows", type=int, default=1024 * 1024)
    ap.add_argument("--deleted-every", type=int, default=3)
    ap.add_argument("--deleted-fraction", type=float, default=0.3)
    ap.add_argument("--sides", nargs="+",
                    default=["pylance_reencode", "ours_reencode", "pylance_binary", "ours_binary", "cp_r"])
    ap.add_argument("--out", default=str(Path(__file__).parent / "out" / "compact_rounds.json"))
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    import lance

    from lance_spark_ops.spark.files.compaction import compact
    from lance_spark_ops.spark.runtime.session import get_spark

    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        src = f"{tmp}/src.lance"
        t0 = time.perf_counter()
        rows = build(src, args)
        size = dir_bytes(src)
        print(f"dataset ({args.shape}): {rows} live rows, {size / 1e9:.2f} GB on disk, {args.fragments} "
              f"fragments (built in {time.perf_counter() - t0:.0f} s)", flush=True)
        expected = ids_of(src)
        spark = get_spark("compact-rounds")
        _warm_workers(spark)

        def run(side: str, uri: str) -> float:
            mode = "reencode" if side.endswith("reencode") else "try_binary_copy"
            os.sync()
            t0 = time.perf_counter()
            if side == "cp_r":
                subprocess.run(["cp", "-r", f"{uri}/data", f"{uri}/data-copy"], check=True)
            elif side.startswith("pylance"):
                lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=args.target_rows,
                                                          num_threads=2, compaction_mode=mode)
            else:
                compact(spark, uri, target_rows_per_fragment=args.target_rows, compaction_mode=mode)
            seconds = time.perf_counter() - t0
            if side != "cp_r":
                if not np.array_equal(ids_of(uri), expected):
                    raise AssertionError(f"{side}: rows differ after compaction")
                fragments_after[side] = len(lance.dataset(uri).get_fragments())
            return seconds

        times: dict[str, list[float]] = {s: [] for s in args.sides}
        fragments_after: dict[str, int] = {}
        for r in range(args.rounds):
            order = args.sides[r % len(args.sides):] + args.sides[: r % len(args.sides)]
            if r % 2:  # ours and pylance trade places: over an even number of rounds each
                order = [_TWIN.get(s, s) for s in order]  # side follows the same runs
            for side in order:
                uri = f"{tmp}/{side}.lance"
                shutil.copytree(src, uri)
                times[side].append(run(side, uri))
                print(f"round {r + 1} {side}: {times[side][-1]:.2f} s", flush=True)
                shutil.rmtree(uri)
        med = {s: statistics.median(v) for s, v in times.items()}
        result = {"gb_on_disk": size / 1e9, "rows": rows, "fragments": args.fragments, "shape": args.shape,
                  "version": args.version, "rounds": args.rounds, "seconds": times, "median": med,
                  "fragments_after": fragments_after}
        for ours, theirs in (("ours_reencode", "pylance_reencode"), ("ours_binary", "pylance_binary"),
                             ("ours_binary", "cp_r"), ("pylance_binary", "cp_r")):
            if ours in med and theirs in med:
                result[f"{ours}/{theirs}"] = med[ours] / med[theirs]
        spark.stop()
        print(json.dumps(result))
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
