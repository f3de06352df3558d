"""Cost growth of compaction: wall time and peak worker RSS against dataset size, for our Spark
job (local[2]), pylance ``compact_files(num_threads=2)`` and delta-rs ``optimize.compact``
on the same rows; writes a PNG (matplotlib, the ``bench`` extra) and a JSON.

    python bench/cost_curve.py [--gb 0.5 1 2 4] [--fragments 200 1000 5000 20000]
        [--small-files bench/results/small_files_*.json]
    python bench/cost_curve.py --replot [--small-files ...]   # the PNG from saved JSON, no run

Point i has ``--gb[i]`` GB of rows (ints, floats, strings, 32-dim float vectors) in
``--fragments[i]`` fragments (pylance ``max_rows_per_file``; the Delta table gets the same
rows in as many Parquet files, added in one Delta commit). Nothing is deleted:
the work is merging small fragments into ``--target-rows`` ones.

The fragments axis (third panel, ``--small-files``): wall time against the number of fragments
at a fixed row count, from ``small_files_bench.py`` results (its cases all hold 2 000 000 rows of
two columns: 100 000 x 20, 20 000 x 100, 1 000 000 x 2 ...); ours and pylance, the mean of the
rounds of each case across the files given.

Peak RSS: ours = the largest peak RSS of the Python workers that ran rewrite tasks (a fresh
Spark session per point, so workers start anew); pylance and delta-rs run in a child process
each and report its peak RSS (VmHWM; the whole process, all its threads).
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

ROW_BYTES = 8 + 8 + 24 + 128 + 8  # id, float, ~24 B string, 32 x f32, offsets


def rows_table(start: int, n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    words = np.array(["lance", "spark", "column", "page", "block", "zip", "row", "data"])
    idx = rng.integers(0, len(words), (n, 3))
    return pa.table({
        "id": pa.array(np.arange(start, start + n, dtype=np.int64)),
        "x": pa.array(rng.random(n)),
        "s": pa.array([" ".join(r) for r in words[idx]]),
        "v": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 32, dtype=np.float32)), 32),
    })


def make_datasets(lance_uri: str, delta_uri: str, gb: float, fragments: int) -> int:
    """The same rows as a Lance dataset of ``fragments`` fragments and a Delta table of as many
    Parquet files; returns the row count. The Parquet files are written by pyarrow and added in
    one Delta commit (``create_table_with_add_actions``): 20 000 ``write_deltalake`` appends would
    take longer than the benchmark itself."""
    import lance
    import pyarrow.parquet as pq
    from deltalake import Schema as DeltaSchema
    from deltalake.transaction import AddAction, create_table_with_add_actions

    rows_per = max(1, int(gb * 1e9 / ROW_BYTES / fragments))
    batch_frags = max(1, 200_000 // rows_per)  # write ~200k rows per call
    written, adds, schema = 0, [], None
    os.makedirs(delta_uri, exist_ok=True)
    for first in range(0, fragments, batch_frags):
        n_frags = min(batch_frags, fragments - first)
        t = rows_table(written, rows_per * n_frags, first)
        schema = t.schema
        lance.write_dataset(t, lance_uri, mode="append" if written else "create", max_rows_per_file=rows_per,
                            data_storage_version="2.2")
        for i in range(n_frags):  # one Parquet file per Lance fragment
            name = f"part-{first + i:06d}.parquet"
            pq.write_table(t.slice(i * rows_per, rows_per), f"{delta_uri}/{name}")
            adds.append(AddAction(name, os.path.getsize(f"{delta_uri}/{name}"), {}, int(time.time() * 1000),
                                  True, json.dumps({"numRecords": rows_per})))
        written += rows_per * n_frags
    create_table_with_add_actions(delta_uri, DeltaSchema.from_arrow(schema), adds, mode="error")
    return written


CHILD = r"""
import json, sys, time
kind, uri, target = sys.argv[1], sys.argv[2], int(sys.argv[3])
t0 = time.perf_counter()
if kind == "pylance":
    import lance
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=target, num_threads=2)
else:
    from deltalake import DeltaTable
    DeltaTable(uri).optimize.compact(target_size=target * 176, max_concurrent_tasks=2)
seconds = time.perf_counter() - t0
hwm = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM"))
print(json.dumps({"seconds": seconds, "peak_rss_bytes": hwm}))
"""


def run_child(kind: str, uri: str, target: int) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, kind, uri, str(target)], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_ours(uri: str, target: int) -> dict:
    from lance_spark_ops.spark.files.compaction import compact
    from lance_spark_ops.spark.runtime.runner import run_tasks
    from lance_spark_ops.spark.runtime.session import get_spark

    spark = get_spark("cost-curve")
    try:  # one task per slot first, so JVM and worker start-up are not timed
        run_tasks(spark, "warm", list(range(spark.sparkContext.defaultParallelism)), _import_package)
        t0 = time.perf_counter()
        m = compact(spark, uri, target_rows_per_fragment=target)
        return {"seconds": time.perf_counter() - t0, "peak_rss_bytes": m.worker_peak_rss_bytes,
                "fragments_removed": m.fragments_removed}
    finally:
        spark.stop()


def _import_package(task: int, ctx: object) -> int:
    import lance_spark_ops.spark.files.rewrite_tasks  # noqa: F401 - the import is the point

    return task


def fragment_series(paths: list[str]) -> dict[str, list[tuple[int, int, float, float]]]:
    """Per side (ours, pylance): (fragments, rows, mean seconds, mean ratio to pylance) per
    case of the ``small_files_bench.py`` results in ``paths``, by fragment count."""
    by_case: dict[tuple[int, int], list[dict]] = {}
    for path in paths:
        for p in json.loads(Path(path).read_text())["points"]:
            by_case.setdefault((p["fragments"], p["fragments"] * p["rows"]), []).append(p)
    out: dict[str, list[tuple[int, int, float, float]]] = {"ours": [], "pylance": []}
    for (frags, rows), ps in sorted(by_case.items()):
        for side in out:
            secs = [p[side]["seconds"] for p in ps]
            ratio = sum(p["ours"]["seconds"] / p["pylance"]["seconds"] for p in ps) / len(ps)
            out[side].append((frags, rows, sum(secs) / len(secs), ratio))
    return out


def plot(points: list[dict], path: str, note: str,
         fragments: dict[str, list[tuple[int, int, float, float]]] | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if fragments and fragments["ours"]:
        fig, (a, b, c) = plt.subplots(1, 3, figsize=(15, 4))
        for key, label in (("ours", "lance-spark-ops (local[2])"), ("pylance", "pylance compact_files(2)")):
            series = fragments[key]
            c.plot([f for f, *_ in series], [s for _, _, s, _ in series], "o-", label=label)
        for f, _, s, ratio in fragments["ours"]:
            c.annotate(f"{ratio:.2f}x", (f, s), fontsize=7)
        rows = sorted({r for _, r, _, _ in fragments["ours"]})
        c.set_xscale("log")
        ticks = [f for f, *_ in fragments["ours"]]
        c.set_xticks(ticks, [f"{f:,}" for f in ticks], fontsize=7)
        c.minorticks_off()
        c.set(xlabel="fragments (log)", ylabel="wall time (s)",
              title=f"many small fragments ({'/'.join(f'{r:,}' for r in rows)} rows, 2 columns)")
        c.legend(fontsize=8)
    else:
        fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    gb = [p["gb_on_disk"] for p in points]
    for key, label in (("ours", "lance-spark-ops (local[2])"), ("pylance", "pylance compact_files(2)"),
                       ("delta", "delta-rs optimize.compact")):
        a.plot(gb, [p[key]["seconds"] for p in points], "o-", label=label)
        b.plot(gb, [p[key]["peak_rss_bytes"] / 2**20 for p in points], "o-", label=label)
    for p in points:
        a.annotate(f"{p['fragments']} frags", (p["gb_on_disk"], p["ours"]["seconds"]), fontsize=7)
    a.set(xlabel="dataset size on disk (GB)", ylabel="wall time (s)", title="compaction time")
    b.set(xlabel="dataset size on disk (GB)", ylabel="peak RSS (MiB)",
          title="peak worker / process RSS")
    a.legend(fontsize=8)
    b.legend(fontsize=8)
    fig.suptitle(note, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, nargs="+", default=[0.5, 1, 2, 4])
    ap.add_argument("--fragments", type=int, nargs="+", default=[200, 1000, 5000, 20000])
    ap.add_argument("--target-rows", type=int, default=1024 * 1024)
    ap.add_argument("--note", default="")
    ap.add_argument("--png", default=str(Path(__file__).parent / "results" / "cost_curve.png"))
    ap.add_argument("--out", default=str(Path(__file__).parent / "out" / "cost_curve.json"))
    ap.add_argument("--small-files", nargs="*", default=[],
                    help="small_files_bench.py results: the fragments axis (third panel)")
    ap.add_argument("--replot", action="store_true",
                    help="only draw --png from --saved (a previous run's JSON) and --small-files")
    ap.add_argument("--saved", default=str(Path(__file__).parent / "results" / "cost_curve.json"))
    ap.add_argument("--saved-note", default="")
    args = ap.parse_args()
    series = fragment_series(args.small_files) if args.small_files else None
    if args.replot:
        plot(json.loads(Path(args.saved).read_text()), args.png, args.saved_note or args.note, series)
        print(f"wrote {args.png}")
        return
    if len(args.gb) != len(args.fragments):
        ap.error("--gb and --fragments need as many values")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    points = []
    for gb, frags in zip(args.gb, args.fragments, strict=True):
        with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
            src, delta = f"{tmp}/src.lance", f"{tmp}/delta"
            t0 = time.perf_counter()
            rows = make_datasets(src, delta, gb, frags)
            size = sum(f.stat().st_size for f in Path(src).rglob("*") if f.is_file())
            print(f"{gb} GB, {frags} fragments: {rows} rows, {size / 1e9:.2f} GB on disk "
                  f"(built in {time.perf_counter() - t0:.0f} s)", flush=True)
            point = {"gb": gb, "gb_on_disk": size / 1e9, "fragments": frags, "rows": rows}
            shutil.copytree(src, f"{tmp}/theirs.lance")
            os.sync()
            point["pylance"] = run_child("pylance", f"{tmp}/theirs.lance", args.target_rows)
            os.sync()
            point["delta"] = run_child("delta", delta, args.target_rows)
            os.sync()
            point["ours"] = run_ours(src, args.target_rows)
            print(json.dumps(point), flush=True)
            points.append(point)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(points, indent=1))
    Path(args.png).parent.mkdir(parents=True, exist_ok=True)
    plot(points, args.png, args.note, series)
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
