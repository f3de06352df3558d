"""Index builds and index maintenance: our Spark jobs (local[2]) against pylance, in one run.

    python bench/index_build_bench.py [--rows 20000000] [--docs 1000000] [--rounds 3]
        [--cases btree,bitmap,inverted,optimize,tiered,rtree,minhash] [--geo-rows 5000000]
        [--deltas 1000] [--out FILE]

* ``btree`` / ``bitmap``: ``create_scalar_index`` on ``--rows`` rows (BTREE on a shuffled
  int64 column, BITMAP on a 1 000-value string column) vs our ``create_index``.
* ``inverted``: INVERTED (default tokenizer) on ``--docs`` short documents (8-16 words of a
  5 000-word vocabulary).
* ``rtree``: RTREE on ``--geo-rows`` random GeoArrow points (1 % null) vs pylance's.
* ``minhash``: MINHASHLSH (defaults: 128 hashes, 16 bands, 3-shingles) on ``--docs`` short
  documents; a MinHashQuery must answer alike.
* ``optimize``: BTREE + BITMAP built by pylance, then 10 appends of 1 % each; pylance's
  ``optimize_indices()`` vs ours, on twin copies.
* ``tiered``: ``--deltas`` delta segments of a BTREE (pylance appends and
  ``optimize_indices(num_indices_to_merge=0)`` each time), merged by our tiered policy;
  pylance's ``optimize_indices(num_indices_to_merge=--deltas)`` on a twin for reference.

Each timed run starts from a fresh copy after ``os.sync()``; Spark's start-up and worker
imports are not timed. After each case pylance checks that both copies answer a query through
the index alike and report 0 unindexed rows. Reported: per case, medians of each side's
seconds and of the ratio (ours / pylance), and our per-phase seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

WORDS = np.array([f"w{i}" for i in range(5000)])


def make_rows(n: int, seed: int, start: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = rng.permutation(n).astype(np.int64) + start
    cats = pa.array(np.char.add("c", (ids % 1000).astype(str)))
    return pa.table({"id": ids, "cat": cats})


def make_docs(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(8, 17, n)
    words = WORDS[rng.zipf(1.3, lengths.sum()) % len(WORDS)]
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    docs = [" ".join(words[offsets[i]:offsets[i + 1]]) for i in range(n)]
    return pa.table({"id": np.arange(n, dtype=np.int64), "doc": docs})


def make_points(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    xy = rng.uniform(-180, 180, (n, 2))
    point = pa.struct([pa.field(c, pa.float64(), nullable=False) for c in "xy"])
    geom = pa.StructArray.from_arrays([pa.array(xy[:, 0]), pa.array(xy[:, 1])], fields=list(point),
                                      mask=pa.array(rng.random(n) < 0.01))
    schema = pa.schema([pa.field("id", pa.int64()),
                        pa.field("geom", point, metadata={"ARROW:extension:name": "geoarrow.point"})])
    return pa.table([pa.array(np.arange(n, dtype=np.int64)), geom], schema=schema)


def write(uri: str, table: pa.Table, rows_per_file: int) -> None:
    import lance

    lance.write_dataset(table, uri, max_rows_per_file=rows_per_file,
                        max_rows_per_group=min(rows_per_file, 1 << 20), data_storage_version="2.1")


def _copy(src: str, dst: str) -> str:
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    os.sync()
    return dst


def _timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _check(a: str, b: str, name: str, flt: str | None = None, fts: str | None = None,
           minhash: str | None = None) -> None:
    import lance

    da, db = lance.dataset(a), lance.dataset(b)
    for d in (da, db):
        n = d.stats.index_stats(name)["num_unindexed_rows"]
        assert n == 0, f"{d.uri}: {n} unindexed rows in {name}"
    if flt is not None:
        ta, tb = (d.to_table(columns=["id"], filter=flt).sort_by("id") for d in (da, db))
        assert ta.equals(tb), f"{flt}: answers differ"
    if fts is not None:
        ta, tb = (d.to_table(columns=["id"], full_text_query=fts).sort_by("id") for d in (da, db))
        assert ta.equals(tb), f"full text {fts!r}: answers differ"
    if minhash is not None:
        from lance.query import MinHashQuery

        query = MinHashQuery(minhash, "doc")
        ta, tb = (d.to_table(columns=["id"], nearest=query, limit=20) for d in (da, db))
        assert ta.equals(tb), f"MinHash {minhash!r}: answers differ"


def _build_case(spark: Any, base: str, tmp: str, rounds: int, column: str, kind: str,
                flt: str | None, fts: str | None, minhash: str | None = None) -> dict[str, Any]:
    import lance

    from lance_spark_ops.spark.indices.indexing import create_index

    ours_t, theirs_t, ratios, phases = [], [], [], []
    for r in range(rounds):
        a, b = _copy(base, f"{tmp}/ours"), _copy(base, f"{tmp}/theirs")
        order = [("ours", a), ("theirs", b)] if r % 2 == 0 else [("theirs", b), ("ours", a)]
        got: dict[str, float] = {}
        for side, uri in order:
            os.sync()
            if side == "ours":
                holder: dict[str, Any] = {}
                got[side] = _timed(lambda uri=uri, holder=holder: holder.setdefault(
                    "m", create_index(spark, uri, column, kind, name="bench_idx")))
                phases.append(holder["m"].seconds)
            else:
                got[side] = _timed(lambda uri=uri: lance.dataset(uri).create_scalar_index(
                    column, kind, name="bench_idx"))
        _check(a, b, "bench_idx", flt, fts, minhash)
        ours_t.append(got["ours"])
        theirs_t.append(got["theirs"])
        ratios.append(got["ours"] / got["theirs"])
    return _summary(ours_t, theirs_t, ratios, phases)


def _summary(ours: list[float], theirs: list[float], ratios: list[float], phases: list[dict]) -> dict:
    keys = sorted({k for p in phases for k in p})
    return {"ours_s": statistics.median(ours), "pylance_s": statistics.median(theirs),
            "ratio": statistics.median(ratios), "ours_all": ours, "pylance_all": theirs,
            "ours_phases_s": {k: statistics.median(p.get(k, 0.0) for p in phases) for k in keys}}


def _optimize_case(spark: Any, tmp: str, rows: int, rounds: int) -> dict[str, Any]:
    import lance

    from lance_spark_ops.spark.indices.indexing import optimize_indices

    base = f"{tmp}/opt_base"
    write(base, make_rows(rows, 7), 1 << 20)
    ds = lance.dataset(base)
    ds.create_scalar_index("id", "BTREE")
    ds.create_scalar_index("cat", "BITMAP")
    for k in range(10):
        lance.write_dataset(make_rows(rows // 100, 100 + k, start=rows + k * rows), base, mode="append")
    ours_t, theirs_t, ratios, phases = [], [], [], []
    for r in range(rounds):
        a, b = _copy(base, f"{tmp}/ours"), _copy(base, f"{tmp}/theirs")
        order = [("ours", a), ("theirs", b)] if r % 2 == 0 else [("theirs", b), ("ours", a)]
        got: dict[str, float] = {}
        for side, uri in order:
            os.sync()
            if side == "ours":
                holder: dict[str, Any] = {}
                got[side] = _timed(lambda uri=uri, holder=holder: holder.setdefault(
                    "m", optimize_indices(spark, uri)))
                phases.append(holder["m"].seconds)
            else:
                got[side] = _timed(lambda uri=uri: lance.dataset(uri).optimize.optimize_indices())
        _check(a, b, "id_idx", f"id = {rows + 5}")
        _check(a, b, "cat_idx", "cat = 'c17'")
        ours_t.append(got["ours"])
        theirs_t.append(got["theirs"])
        ratios.append(got["ours"] / got["theirs"])
    return _summary(ours_t, theirs_t, ratios, phases)


def _tiered_case(spark: Any, tmp: str, deltas: int) -> dict[str, Any]:
    import lance

    from lance_spark_ops.spark.indices.indexing import optimize_indices

    base = f"{tmp}/tier_base"
    write(base, make_rows(1000, 3), 1000)
    lance.dataset(base).create_scalar_index("id", "BTREE")
    t0 = time.perf_counter()
    for k in range(deltas):
        lance.write_dataset(make_rows(100, 1000 + k, start=10_000 + 100 * k), base, mode="append")
        lance.dataset(base).optimize.optimize_indices(num_indices_to_merge=0)
    made = time.perf_counter() - t0
    a, b = _copy(base, f"{tmp}/ours"), _copy(base, f"{tmp}/theirs")
    holder: dict[str, Any] = {}
    ours = _timed(lambda: holder.setdefault("m", optimize_indices(spark, a, merge_policy="tiered")))
    theirs = _timed(lambda: lance.dataset(b).optimize.optimize_indices(num_indices_to_merge=deltas + 1))
    _check(a, b, "id_idx", "id = 10005")
    segs = [i for i in lance.dataset(a).list_indices() if i["name"] == "id_idx"]
    return {"deltas": deltas + 1, "making_deltas_s": made, "ours_tiered_s": ours,
            "rounds": holder["m"].rounds, "segments_after": len(segs), "pylance_merge_all_s": theirs,
            "ours_phases_s": holder["m"].seconds}


def _warm(task: int, ctx: Any) -> int:
    """Imports what index tasks import, in a Spark Python worker (kept for the next tasks)."""
    import lance_spark_ops.spark.indices.fts_index_tasks  # noqa: F401
    import lance_spark_ops.spark.indices.scalar_index_tasks  # noqa: F401

    return task


def warm_workers(spark: Any) -> None:
    """Start the Python workers and import the task modules before anything is timed."""
    from lance_spark_ops.spark.runtime.job import Job

    Job(spark, "warmup", "bench").run_tasks(list(range(8)), _warm)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=20_000_000)
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--deltas", type=int, default=1000)
    ap.add_argument("--geo-rows", type=int, default=5_000_000)
    ap.add_argument("--cases", default="btree,bitmap,inverted,optimize,tiered,rtree,minhash")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    from lance_spark_ops.spark.runtime.session import get_spark

    spark = get_spark("index_build_bench")
    spark.range(4).count()
    warm_workers(spark)
    cases = args.cases.split(",")
    out: dict[str, Any] = {"rows": args.rows, "docs": args.docs, "geo_rows": args.geo_rows,
                           "rounds": args.rounds}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        if {"btree", "bitmap"} & set(cases):
            base = f"{tmp}/rows"
            write(base, make_rows(args.rows, 1), 1 << 20)
            if "btree" in cases:
                out["btree"] = _build_case(spark, base, tmp, args.rounds, "id", "BTREE", "id = 12345", None)
                print("btree", json.dumps(out["btree"]), flush=True)
            if "bitmap" in cases:
                out["bitmap"] = _build_case(spark, base, tmp, args.rounds, "cat", "BITMAP", "cat = 'c17'",
                                            None)
                print("bitmap", json.dumps(out["bitmap"]), flush=True)
            shutil.rmtree(base)
        if {"inverted", "minhash"} & set(cases):
            base = f"{tmp}/docs"
            write(base, make_docs(args.docs, 2), 1 << 18)
            if "inverted" in cases:
                out["inverted"] = _build_case(spark, base, tmp, args.rounds, "doc", "INVERTED", None, "w17")
                print("inverted", json.dumps(out["inverted"]), flush=True)
            if "minhash" in cases:
                out["minhash"] = _build_case(spark, base, tmp, args.rounds, "doc", "MINHASHLSH", None, None,
                                             minhash="w1 w2 w3 w17 w5 w8 w13")
                print("minhash", json.dumps(out["minhash"]), flush=True)
            shutil.rmtree(base)
        if "rtree" in cases:
            base = f"{tmp}/points"
            write(base, make_points(args.geo_rows, 3), 1 << 20)
            box = "st_geomfromtext('POLYGON((0 0, 9 0, 9 9, 0 9, 0 0))')"
            out["rtree"] = _build_case(spark, base, tmp, args.rounds, "geom", "RTREE",
                                       f"st_intersects(geom, {box})", None)
            print("rtree", json.dumps(out["rtree"]), flush=True)
            shutil.rmtree(base)
        if "optimize" in cases:
            out["optimize"] = _optimize_case(spark, tmp, args.rows, args.rounds)
            print("optimize", json.dumps(out["optimize"]), flush=True)
        if "tiered" in cases:
            out["tiered"] = _tiered_case(spark, tmp, args.deltas)
            print("tiered", json.dumps(out["tiered"]), flush=True)
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
