"""Full-scan decode throughput of our reader against pylance on the same files, one run.

    python bench/read_bench.py [--rows 2000000] [--versions 2.1 2.2] [--repeat 3]

Per column kind it writes one file with pylance, then times ``LanceFileReader.read()``
(ours) and ``lance.file.LanceFileReader.read_all().to_table()`` (pylance), best of
``--repeat``, and reports MB/s of Arrow output and the ratio ours / pylance.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa


def kinds(n: int) -> dict[str, Callable[[], pa.Table]]:
    rng = np.random.default_rng(0)
    words = np.array(["lance", "spark", "column", "page", "block", "zip", "row", "data"])

    def text() -> pa.Array:
        idx = rng.integers(0, len(words), (n, 4))
        return pa.array([" ".join(r) for r in words[idx]])

    return {
        "int64_random": lambda: pa.table({"v": rng.integers(-2**62, 2**62, n)}),
        "int32_small_range": lambda: pa.table({"v": rng.integers(0, 5000, n).astype(np.int32)}),
        "int64_nullable": lambda: pa.table(
            {"v": pa.array(rng.integers(0, 10**6, n), mask=rng.random(n) < 0.2)}
        ),
        "float64": lambda: pa.table({"v": rng.random(n)}),
        "timestamp_us": lambda: pa.table(
            {"v": pa.array(np.sort(rng.integers(0, 10**15, n)), pa.timestamp("us"))}
        ),
        "string_text": lambda: pa.table({"v": text()}),
        "string_low_card": lambda: pa.table({"v": pa.array(words[rng.integers(0, len(words), n)])}),
        "vector_f32x32": lambda: pa.table({"v": pa.FixedSizeListArray.from_arrays(
            pa.array(rng.random(n * 32, dtype=np.float32)), 32)}) if n else None,
        "list_int32": lambda: pa.table({"v": pa.ListArray.from_arrays(
            pa.array(np.arange(0, n * 3 + 1, 3, dtype=np.int32)),
            pa.array(rng.integers(0, 1000, n * 3).astype(np.int32)))}),
    }


def best_time(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--versions", nargs="+", default=["2.1", "2.2"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--kinds", nargs="*")
    ap.add_argument("--out", default=str(Path(__file__).parent / "out" / "read_bench.json"))
    args = ap.parse_args()

    from lance.file import LanceFileReader as PyLanceReader
    from lance.file import LanceFileWriter as PyLanceWriter

    from lance_spark_ops import LanceFileReader

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, build in kinds(args.rows).items():
            if args.kinds and name not in args.kinds:
                continue
            table = build()
            mb = table.nbytes / 1e6
            for version in args.versions:
                path = f"{tmp}/{name}-{version}.lance"
                with PyLanceWriter(path, table.schema, version=version) as w:
                    w.write_batch(table)
                ours_t = best_time(lambda path=path: LanceFileReader(path).read(), args.repeat)
                theirs_t = best_time(
                    lambda path=path: PyLanceReader(path).read_all().to_table(), args.repeat
                )
                row = {"kind": name, "version": version, "arrow_mb": round(mb, 1),
                       "ours_mb_s": round(mb / ours_t, 1), "pylance_mb_s": round(mb / theirs_t, 1),
                       "ratio": round(theirs_t / ours_t, 3)}
                results.append(row)
                print(f"{name:18s} {version}  {mb:8.1f} MB  ours {row['ours_mb_s']:8.1f} MB/s  "
                      f"pylance {row['pylance_mb_s']:8.1f} MB/s  ratio {row['ratio']:.3f}", flush=True)
    total_ours = sum(r["arrow_mb"] / r["ours_mb_s"] for r in results)
    total_theirs = sum(r["arrow_mb"] / r["pylance_mb_s"] for r in results)
    overall = total_theirs / total_ours if total_ours else 0.0
    print(f"overall ratio (total pylance time / total our time): {overall:.3f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    summary = {"rows": args.rows, "results": results, "overall": overall}
    Path(args.out).write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
