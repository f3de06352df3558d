"""Encode throughput of our writer against pylance's on the same data, one run.

    python bench/write_bench.py [--rows 1000000] [--versions 2.1 2.2] [--repeat 2] [--cpu]

Per column kind (the same kinds as read_bench.py) it times writing one file with
``lance_spark_ops.file.writer.LanceFileWriter`` and with ``lance.file.LanceFileWriter``,
best of ``--repeat``, and reports MB/s of Arrow input, the ratio ours / pylance, and the
file-size ratio. ``--cpu``: process CPU seconds (``time.process_time``, all threads, so
pylance's count) instead of wall time, median of ``--repeat`` rounds alternating ours and
pylance - steadier than wall time on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

sys.path.insert(0, str(Path(__file__).parent))
from read_bench import best_time, kinds  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--versions", nargs="+", default=["2.1", "2.2"])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--kinds", nargs="*")
    ap.add_argument("--cpu", action="store_true", help="median process CPU time of alternating rounds")
    ap.add_argument("--out", default=str(Path(__file__).parent / "out" / "write_bench.json"))
    args = ap.parse_args()

    from lance.file import LanceFileWriter as PyLanceWriter

    from lance_spark_ops.file.writer import LanceFileWriter

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, build in kinds(args.rows).items():
            if args.kinds and name not in args.kinds:
                continue
            table = build()
            mb = table.nbytes / 1e6
            for version in args.versions:
                ours_path = f"{tmp}/o-{name}-{version}.lance"
                theirs_path = f"{tmp}/p-{name}-{version}.lance"

                def ours(path: str = ours_path, table: pa.Table = table, version: str = version) -> None:
                    with LanceFileWriter(path, table.schema, version=version) as w:
                        w.write(table)

                def theirs(path: str = theirs_path, table: pa.Table = table, version: str = version) -> None:
                    with PyLanceWriter(path, table.schema, version=version) as w:
                        w.write_batch(table)

                if args.cpu:
                    ours_t, theirs_t = median_cpu(ours, theirs, args.repeat)
                else:
                    ours_t = best_time(ours, args.repeat)
                    theirs_t = best_time(theirs, args.repeat)
                row = {"kind": name, "version": version, "arrow_mb": round(mb, 1),
                       "ours_mb_s": round(mb / ours_t, 1), "pylance_mb_s": round(mb / theirs_t, 1),
                       "ratio": round(theirs_t / ours_t, 3),
                       "size_ratio": round(os.path.getsize(ours_path) / os.path.getsize(theirs_path), 4)}
                results.append(row)
                print(f"{name:18s} {version}  {mb:8.1f} MB  ours {row['ours_mb_s']:8.1f} MB/s  pylance "
                      f"{row['pylance_mb_s']:8.1f} MB/s  ratio {row['ratio']:.3f}  "
                      f"size {row['size_ratio']:.4f}",
                      flush=True)
    total_ours = sum(r["arrow_mb"] / r["ours_mb_s"] for r in results)
    total_theirs = sum(r["arrow_mb"] / r["pylance_mb_s"] for r in results)
    overall = total_theirs / total_ours if total_ours else 0.0
    print(f"overall ratio (total pylance time / total our time): {overall:.3f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    summary = {"rows": args.rows, "clock": "cpu" if args.cpu else "wall", "results": results,
               "overall": overall}
    Path(args.out).write_text(json.dumps(summary, indent=1))


def median_cpu(a: Callable[[], None], b: Callable[[], None], rounds: int) -> tuple[float, float]:
    """Median process CPU seconds of ``a`` and ``b`` over ``rounds`` alternating rounds (one
    warm-up call each first)."""
    a(), b()
    ta, tb = [], []
    for _ in range(max(rounds, 1)):
        for fn, acc in ((a, ta), (b, tb)):
            t0 = time.process_time()
            fn()
            acc.append(time.process_time() - t0)
    return statistics.median(ta), statistics.median(tb)


if __name__ == "__main__":
    main()
