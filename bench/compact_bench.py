"""Compaction: our Spark job (local[2]) against pylance ``compact_files(num_threads=2)`` on
the same dataset, in one run.

    python bench/compact_bench.py [--gb 1.0] [--fragments 200] [--version 2.2] [--shape mixed]

The dataset (written by pylance, ``make_dataset``): by default ints, floats, timestamps,
strings and 32-dim float vectors (``--shape strings`` / ``lists`` for string- or list-heavy
columns) in ``--fragments`` appends, then 10% of rows deleted. It is copied twice; pylance compacts one
copy, our job the other, once per ``--modes`` entry. Spark's start-up (JVM and Python workers,
warmed by one task per slot) is not timed, and each timed run starts after ``os.sync()`` so
neither side pays for the other's pending writeback. Reported: wall time of each, the ratio,
bytes/s, and the peak RSS of our Python workers.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

SHAPES = ("mixed", "strings", "lists")


def make_dataset(uri: str, gb: float, fragments: int, version: str, deleted: float = 0.1,
                 shape: str = "mixed") -> int:
    """``fragments`` pylance appends of about ``gb`` GB in all, then ``deleted`` of the rows
    deleted. ``shape``: "mixed" (ints, floats, timestamps, short low-cardinality strings,
    32 x f32 vectors), "strings" (a low- and a high-cardinality text column and a uuid-like
    hex column), "lists" (list<int32>, list<float64> and list<string> of 0..15 items)."""
    import lance

    row_bytes = {"mixed": 8 + 8 + 8 + 24 + 128 + 8, "strings": 8 + 24 + 52 + 32 + 3 * 4,
                 "lists": 8 + 7.5 * (4 + 8 + 6) + 3 * 4 + 7.5 * 4}[shape]
    rows = int(gb * 1e9 / row_bytes / fragments)
    rng = np.random.default_rng(0)
    words = np.array(["lance", "spark", "column", "page", "block", "zip", "row", "data"])
    for i in range(fragments):
        base = i * rows
        cols = {"id": pa.array(np.arange(base, base + rows, dtype=np.int64))}
        if shape == "mixed":
            idx = rng.integers(0, len(words), (rows, 3))
            cols.update({
                "x": pa.array(rng.random(rows)),
                "ts": pa.array(1_700_000_000_000_000 + np.arange(base, base + rows) * 1000,
                               pa.timestamp("us")),
                "s": pa.array([" ".join(r) for r in words[idx]]),
                "v": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(rows * 32, dtype=np.float32)), 32),
            })
        elif shape == "strings":
            cols.update({"s": _text(rng, words, rows, 3), "text": _text(rng, _vocab(), rows, 8),
                         "uuid": _hex(rng, rows)})
        else:
            lens = rng.integers(0, 16, rows)
            offsets = pa.array(np.concatenate([[0], np.cumsum(lens)]).astype(np.int32))
            total = int(lens.sum())
            cols.update({
                "ints": pa.ListArray.from_arrays(offsets,
                                                 pa.array(rng.integers(0, 10**6, total, dtype=np.int32))),
                "floats": pa.ListArray.from_arrays(offsets, pa.array(rng.random(total))),
                "tags": pa.ListArray.from_arrays(offsets, pa.array(words).take(pa.array(
                    rng.integers(0, len(words), total)))),
            })
        lance.write_dataset(pa.table(cols), uri, mode="append" if i else "create",
                            data_storage_version=version)
    if deleted > 0:
        every = max(1, round(1 / deleted))
        lance.dataset(uri).delete(f"id % {every} = 0")
    return rows * fragments


def _vocab(size: int = 50_000) -> np.ndarray:
    """Pseudo-words of 2..10 letters (a high-cardinality vocabulary), fixed seed."""
    rng = np.random.default_rng(1)
    lens = rng.integers(2, 11, size)
    letters = rng.integers(97, 123, int(lens.sum())).astype(np.uint8)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    arr = pa.StringArray.from_buffers(size, pa.py_buffer(offsets), pa.py_buffer(letters.tobytes()))
    return np.array(arr.to_pylist())


def _text(rng: np.random.Generator, vocab: np.ndarray, rows: int, k: int) -> pa.Array:
    """``k`` words of ``vocab`` per row joined by spaces (vectorised with Arrow)."""
    import pyarrow.compute as pc

    v = pa.array(vocab)
    parts = [v.take(pa.array(rng.integers(0, len(vocab), rows))) for _ in range(k)]
    return pc.binary_join_element_wise(*parts, " ")


def _hex(rng: np.random.Generator, rows: int) -> pa.Array:
    """32 random hex digits per row."""
    digits = np.frombuffer(b"0123456789abcdef", np.uint8)[rng.integers(0, 16, rows * 32)]
    offsets = np.arange(0, rows * 32 + 1, 32, dtype=np.int32)
    return pa.StringArray.from_buffers(rows, pa.py_buffer(offsets), pa.py_buffer(digits.tobytes()))


def _warm_workers(spark) -> None:
    """One task per slot that imports the package, so worker start-up is not timed."""
    from lance_spark_ops.spark.runtime.runner import run_tasks

    slots = spark.sparkContext.defaultParallelism
    run_tasks(spark, "warm", list(range(slots)), _import_package)


def _import_package(task: int, ctx: object) -> int:
    import lance_spark_ops.spark.files.rewrite_tasks  # noqa: F401 - the import is the point

    return task


def dir_bytes(path: str) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--fragments", type=int, default=200)
    ap.add_argument("--version", default="2.2")
    ap.add_argument("--shape", choices=SHAPES, default="mixed")
    ap.add_argument("--target-rows", type=int, default=1024 * 1024)
    ap.add_argument("--deleted", type=float, default=0.1, help="fraction of rows deleted before compacting")
    ap.add_argument("--modes", nargs="+", default=["reencode", "try_binary_copy"])
    ap.add_argument("--out", default=str(Path(__file__).parent / "out" / "compact_bench.json"))
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    import lance

    from lance_spark_ops.spark.files.compaction import compact
    from lance_spark_ops.spark.runtime.session import get_spark

    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        src = f"{tmp}/src.lance"
        t0 = time.perf_counter()
        rows = make_dataset(src, args.gb, args.fragments, args.version, args.deleted, args.shape)
        size = dir_bytes(src)
        print(f"dataset: {rows} rows, {size / 1e9:.2f} GB on disk, {args.fragments} fragments "
              f"(built in {time.perf_counter() - t0:.0f} s)", flush=True)
        theirs_uri = f"{tmp}/pylance.lance"
        shutil.copytree(src, theirs_uri)

        os.sync()  # each timed run starts with no dirty pages of the copies pending
        t0 = time.perf_counter()
        lance.dataset(theirs_uri).optimize.compact_files(
            target_rows_per_fragment=args.target_rows, num_threads=2
        )
        theirs_s = time.perf_counter() - t0
        print(f"pylance compact_files: {theirs_s:.1f} s", flush=True)

        spark = get_spark("compact-bench")
        _warm_workers(spark)  # start the JVM and the Python workers outside the timed region
        b = lance.dataset(theirs_uri).to_table(columns=["id"]).column("id").to_numpy()
        result = {"rows": rows, "bytes_on_disk": size, "fragments": args.fragments, "version": args.version,
                  "shape": args.shape,
                  "deleted": args.deleted, "pylance_s": theirs_s, "pylance_mb_s": size / 1e6 / theirs_s,
                  "pylance_fragments_after": len(lance.dataset(theirs_uri).get_fragments())}
        for mode in args.modes:
            ours_uri = f"{tmp}/ours-{mode}.lance"
            shutil.copytree(src, ours_uri)
            os.sync()
            t0 = time.perf_counter()
            m = compact(spark, ours_uri, target_rows_per_fragment=args.target_rows, compaction_mode=mode)
            ours_s = time.perf_counter() - t0
            print(f"ours ({mode}, local[2]): {ours_s:.1f} s; {m.fragments_binary_copied} fragments copied; "
                  f"worker peak RSS {m.worker_peak_rss_bytes / 2**20:.0f} MiB", flush=True)
            a = lance.dataset(ours_uri).to_table(columns=["id"]).column("id").to_numpy()
            assert np.array_equal(np.sort(a), np.sort(b)), "compacted datasets differ"
            result[mode] = {"seconds": ours_s, "ratio_ours_over_pylance": ours_s / theirs_s,
                            "mb_s": m.bytes_read / 1e6 / ours_s,
                            "fragments_copied": m.fragments_binary_copied,
                            "pages_copied": m.pages_binary_copied,
                            "pages_reencoded_for_deletions": m.pages_reencoded_for_deletions,
                            "worker_peak_rss_mib": m.worker_peak_rss_bytes / 2**20,
                            "fragments_after": len(lance.dataset(ours_uri).get_fragments())}
            shutil.rmtree(ours_uri)
        print(json.dumps(result))
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
