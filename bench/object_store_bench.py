"""Ours against pylance on an object store at a real request latency, in one run.

    python bench/object_store_bench.py [--latencies 0 20 50] [--rounds 2]
        [--ops compact binary binary_clean btree vacuum open] [--bandwidth-mbps 90] [--store s3|azure]

The store (``bench_stores.py``) is ``moto_server`` on loopback, or with ``--store azure`` Azurite
(``bash .ci/azurite-setup`` installs it; pylance reaches it with its own ``azure_storage_*``
keys), behind ``tests/support/latency_store``'s proxy (in a child process, off this process's
GIL), which holds every request N ms and counts requests by method and S3 operation; with
``--bandwidth-mbps N`` it also carries each connection's bytes (an answer's and an upload's) at
N MB/s (S3 serves a single connection ~85-90 MB/s: AWS's
performance guidance; 0, the default, leaves loopback's rate). The dataset is issue #39's: 48
fragments x 20 000 rows (int64, float64, a short string, a 16-d float32 vector), a sixth of the
rows deleted, written by pylance; every run works on a fresh server-side copy made untimed (and
deleted once checked), and ours and pylance alternate which goes first from round to round. Our
side is Spark ``local[2]``
(workers warmed first, and the driver's imports: a one-task compaction runs in the driver);
pylance's ``compact_files(num_threads=2)``. After every run pylance reads the result and it must
hold the same rows. ``--warm-rounds K``: K untimed rounds of each op (both sides, checked the same way)
before the timed ones, for a steady state (without it each side's first run of an op is timed
with its one-time costs). Operations:

- ``compact``: re-encode compaction, ``target_rows_per_fragment=1 000 000``
- ``binary``: the same with ``compaction_mode="try_binary_copy"``; every page of this dataset
  holds deleted rows, so both sides re-encode (the same work as ``compact``)
- ``binary_clean``: ``try_binary_copy`` of the same 48 x 20 000 rows written without the delete
  (a second source prefix, built once per run): both sides move pages undecoded; ours must
  report every fragment and page moved, and pylance reads the same rows, every column
- ``btree``: ``create_index`` BTREE on the int64 column (pylance ``create_scalar_index``)
- ``ivf_pq``: ``create_index`` IVF_PQ on the 16-d vector column, ``IVF_PQ_PARAMS`` on both
  sides (pylance ``create_index``); pylance then answers a nearest query through it
- ``inverted``: ``create_index`` INVERTED on the string column (pylance ``create_scalar_index``);
  pylance then answers a full-text query through it, the same ids on both sides
- ``add_columns``: a column computed from ``id`` by a batch function (pylance ``add_columns``
  with ``read_columns=["id"]``); pylance reads the new column
- ``read``: the ``lance`` data source read of two columns into Arrow on the driver
  (``toArrow``; default partitions: here two of 24 fragments, packed by bytes) against
  pylance's ``to_table`` of them; the same rows
- ``vacuum``: cleanup of ``--versions`` old versions (pylance ``cleanup_old_versions``)
- ``open``: open the latest version and plan a compaction (pylance: ``lance.dataset`` and
  ``optimize.compact_files`` planning through ``Compaction.plan``)
- ``open_big``: the same on a dataset of ``--big-versions`` versions (default 1 000) of 10
  one-row fragments each (10 000 fragments), built once by pylance on local disk (kept in
  ``--big-cache``) and uploaded untimed; read-only, so every round opens the same copy; the
  two plans must name the same fragments

JSON results go to ``bench/results/object_store_bench.json`` and a plot of time against latency
(both sides, per operation) to ``bench/results/object_store_bench.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from bench_stores import STORES, copy_prefix, keys_under, upload  # noqa: E402, F401 - the S3 helpers for other benches

FRAGMENTS, ROWS = 48, 20_000
TARGET_ROWS = 1_000_000
IVF_PQ_PARAMS = {"num_partitions": 32, "num_sub_vectors": 4}
CLEAN = "clean.lance"  # binary_clean's source prefix: the dataset without deleted rows


def make_table(start: int, n: int) -> pa.Table:
    rng = np.random.default_rng(start)
    ids = np.arange(start, start + n, dtype=np.int64)
    words = np.array([f"w{i % 997:04d}" for i in range(1000)])
    vec = rng.standard_normal((n, 16), dtype=np.float32)
    return pa.table({"id": ids, "x": rng.standard_normal(n), "s": pa.array(words[ids % 1000]),
                     "v": pa.FixedSizeListArray.from_arrays(pa.array(vec.ravel()), 16)})


def build(uri: str, opts: dict[str, str], delete: bool = True, fragments: int = FRAGMENTS) -> int:
    """The issue's dataset (``delete``: a sixth of the rows deleted; ``fragments`` of ``ROWS``
    rows); returns its live rows."""
    import lance

    ds = None
    for f in range(fragments):
        ds = lance.write_dataset(make_table(f * ROWS, ROWS), uri, mode="append" if f else "create",
                                 storage_options=opts, data_storage_version="2.1")
    assert ds is not None
    if delete:
        ds.delete("id % 6 = 0")
    return ds.count_rows()


def build_big(path: Path, versions: int, per_version: int) -> None:
    """``versions`` appends of ``per_version`` one-row fragments, by pylance on local disk."""
    import lance

    if (path / "_versions").is_dir() and len(lance.dataset(str(path)).versions()) == versions:
        return
    import shutil

    shutil.rmtree(path, ignore_errors=True)
    for v in range(versions):
        ids = np.arange(v * per_version, (v + 1) * per_version, dtype=np.int64)
        lance.write_dataset(pa.table({"id": ids, "x": ids.astype(np.float64)}), str(path),
                            mode="append" if v else "create", max_rows_per_file=1, data_storage_version="2.1")


def ids_of(uri: str, opts: dict[str, str]) -> np.ndarray:
    import lance

    return np.sort(lance.dataset(uri, storage_options=opts).to_table(columns=["id"]).column("id").to_numpy())


def _import_package(task: int, ctx: object) -> int:
    import lance_spark_ops.spark.files.rewrite_tasks  # noqa: F401 - the import is the point

    return task


def run_side(side: str, op: str, uri: str, opts: dict[str, str], spark, args) -> object:
    import lance

    if side == "pylance":
        ds = lance.dataset(uri, storage_options=opts)
        if op == "open_big":
            from lance.optimize import Compaction

            plan = Compaction.plan(ds, {"target_rows_per_fragment": TARGET_ROWS})
            return sorted(sorted(f.id for f in t.fragments) for t in plan.tasks)
        if op in ("compact", "binary", "binary_clean"):
            kw = {"compaction_mode": "try_binary_copy"} if op != "compact" else {}
            ds.optimize.compact_files(target_rows_per_fragment=TARGET_ROWS, num_threads=2, **kw)
        elif op == "btree":
            ds.create_scalar_index("id", "BTREE")
        elif op == "ivf_pq":
            ds.create_index("v", "IVF_PQ", **IVF_PQ_PARAMS)
        elif op == "inverted":
            ds.create_scalar_index("s", "INVERTED")
        elif op == "add_columns":
            ds.add_columns(_times_three, read_columns=["id"])
        elif op == "read":
            return ds.to_table(columns=["id", "x"])
        elif op == "vacuum":
            ds.cleanup_old_versions(older_than=_zero(), delete_unverified=True)
        elif op == "open":
            from lance.optimize import Compaction

            Compaction.plan(ds, {"target_rows_per_fragment": TARGET_ROWS})
        return
    from lance_spark_ops.spark import compact, create_index, vacuum

    if op in ("compact", "binary", "binary_clean"):
        mode = "try_binary_copy" if op != "compact" else "reencode"
        m = compact(spark, uri, target_rows_per_fragment=TARGET_ROWS, compaction_mode=mode,
                    storage_options=opts)
        if op == "binary_clean" and (m.fragments_binary_copied != FRAGMENTS or not m.pages_binary_copied
                                     or m.pages_reencoded_for_deletions):
            raise AssertionError(f"binary_clean: pages not moved ({m.fragments_binary_copied} fragments, "
                                 f"{m.pages_binary_copied} pages moved, {m.pages_reencoded_for_deletions} "
                                 "re-encoded)")
    elif op == "btree":
        create_index(spark, uri, "id", "BTREE", storage_options=opts)
    elif op == "ivf_pq":
        create_index(spark, uri, "v", "IVF_PQ", storage_options=opts, **IVF_PQ_PARAMS)
    elif op == "inverted":
        create_index(spark, uri, "s", "INVERTED", storage_options=opts)
    elif op == "add_columns":
        from lance_spark_ops.spark.files.columns import ColumnFunction, add_columns

        fn = ColumnFunction(_times_three, pa.schema([("w", pa.int64())]), ("id",))
        add_columns(spark, uri, fn, storage_options=opts)
    elif op == "read":
        from lance_spark_ops.spark.datasource.read import read_lance

        return read_lance(spark, uri, columns=["id", "x"], storage_options=opts).toArrow()
    elif op == "vacuum":
        vacuum(spark, uri, older_than=_zero(), delete_unverified=True, storage_options=opts)
    elif op == "open":
        compact(spark, uri, target_rows_per_fragment=TARGET_ROWS, dry_run=True, storage_options=opts)
    elif op == "open_big":
        m = compact(spark, uri, target_rows_per_fragment=TARGET_ROWS, dry_run=True, storage_options=opts)
        return sorted(sorted(t) for t in m.plan)
    return None


def _times_three(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``add_columns``' function on both sides: ``w = id * 3``."""
    import pyarrow.compute as pc

    return pa.record_batch([pc.multiply(batch.column("id"), 3)], names=["w"])


def _zero():
    from datetime import timedelta

    return timedelta(0)


def prepare_vacuum(path: Path, args) -> None:
    """The source of ``vacuum``'s copies, by pylance on local disk (kept, untimed): the issue's
    dataset, ``--versions`` appends of 10 rows, then a compaction."""
    import lance

    made = FRAGMENTS + 1 + args.versions + 2  # writes and the delete, appends, the compaction's two
    if (path / "_versions").is_dir() and len(lance.dataset(str(path)).versions()) == made:
        return
    import shutil

    shutil.rmtree(path, ignore_errors=True)
    build(str(path), {})
    for i in range(args.versions):
        lance.write_dataset(make_table(10_000_000 + i, 10), str(path), mode="append")
    lance.dataset(str(path)).optimize.compact_files(target_rows_per_fragment=TARGET_ROWS)


def check(op: str, uri: str, opts: dict[str, str], expected: np.ndarray | pa.Table, args) -> None:
    import lance

    ds = lance.dataset(uri, storage_options=opts)
    if op == "vacuum":
        if len(ds.versions()) != 1:
            raise AssertionError(f"vacuum left {len(ds.versions())} versions")
        return
    if op == "ivf_pq":
        if not any(i["type"].startswith("IVF_PQ") for i in ds.list_indices()):
            raise AssertionError(f"no IVF_PQ index: {ds.list_indices()}")
        q = np.random.default_rng(7).standard_normal(16).astype(np.float32)
        got = ds.to_table(nearest={"column": "v", "q": q, "k": 10, "nprobes": 4}, columns=["id"])
        if got.num_rows != 10:
            raise AssertionError(f"nearest query through the index gave {got.num_rows} rows")
        return
    if op == "btree":
        if not any(i["type"] == "BTree" for i in ds.list_indices()):
            raise AssertionError(f"no BTREE index: {ds.list_indices()}")
        got = ds.to_table(filter=f"id = {int(expected[len(expected) // 2])}", columns=["id"]).num_rows
        if got != 1:
            raise AssertionError("indexed lookup answered wrong")
        return
    if op == "inverted":
        got = ds.to_table(full_text_query="w0042", columns=["id"]).column("id").to_numpy()
        want = expected[expected % 1000 == 42]
        if not np.array_equal(np.sort(got), want):
            raise AssertionError(f"full-text query answered {got.size} rows, {want.size} expected")
        return
    if op == "add_columns":
        t = ds.to_table(columns=["id", "w"])
        if not np.array_equal(t.column("w").to_numpy(), t.column("id").to_numpy() * 3) \
                or not np.array_equal(np.sort(t.column("id").to_numpy()), expected):
            raise AssertionError("add_columns: the new column or the rows differ")
        return
    if op == "binary_clean":
        ds = lance.dataset(uri, storage_options=opts)
        if len(ds.get_fragments()) != 1 or not ds.to_table().equals(expected):
            raise AssertionError("binary_clean: rows or fragments differ")
        return
    if not np.array_equal(ids_of(uri, opts), expected):
        raise AssertionError(f"{op}: rows differ")


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ops = list(result["median"])
    fig, axes = plt.subplots(1, len(ops), figsize=(4 * len(ops), 3.4), squeeze=False)
    for ax, op in zip(axes[0], ops, strict=True):
        lat = sorted(int(k) for k in result["median"][op])
        for side, style in (("ours", "o-"), ("pylance", "s--")):
            ax.plot(lat, [result["median"][op][str(la)][side] for la in lat], style, label=side)
        ax.set_title(op)
        ax.set_xlabel("added latency per request (ms)")
        ax.set_ylabel("seconds")
        ax.set_ylim(bottom=0)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--latencies", type=float, nargs="+", default=[0, 20, 50])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--warm-rounds", type=int, default=0,
                    help="untimed rounds of each op and latency first, both sides (a steady state: "
                         "each side's first run of an op pays its one-time costs there)")
    ap.add_argument("--ops", nargs="+", default=["compact", "binary", "btree", "vacuum", "open"])
    ap.add_argument("--store", choices=sorted(STORES), default="s3",
                    help="s3: moto; azure: Azurite (bash .ci/azurite-setup installs it); behind the proxy")
    ap.add_argument("--bandwidth-mbps", type=float, default=0.0,
                    help="each connection's rate through the proxy, MB/s (0: uncapped)")
    ap.add_argument("--versions", type=int, default=100, help="old versions vacuum removes")
    ap.add_argument("--big-versions", type=int, default=1000, help="versions of open_big's dataset")
    ap.add_argument("--big-cache", default="/tmp/lso-bench-big", help="open_big's dataset on local disk")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "object_store_bench.json"))
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from lance_spark_ops.spark.runtime.runner import run_tasks
    from lance_spark_ops.spark.runtime.session import default_parallelism, get_spark

    with STORES[args.store]() as store:
        proxy, direct, via = store.proxy, store.direct, store.via
        src = store.uri(store.bucket("bench-src"), "ds.lance")
        t0 = time.perf_counter()
        live = build(src, direct)
        expected = ids_of(src, direct)
        print(f"dataset: {FRAGMENTS} fragments x {ROWS} rows, {live} live (built in "
              f"{time.perf_counter() - t0:.1f} s)", flush=True)
        clean = None
        if "binary_clean" in args.ops:
            build(store.uri("bench-src", CLEAN), direct, delete=False)
            import lance

            clean = lance.dataset(store.uri("bench-src", CLEAN), storage_options=direct).to_table()
        if "vacuum" in args.ops:
            t0 = time.perf_counter()
            store.bucket("bench-vacsrc")
            vac = Path(f"{args.big_cache}-vacuum-{args.versions}")
            prepare_vacuum(vac, args)
            store.upload(vac, "bench-vacsrc", "ds.lance")
            print(f"vacuum: {args.versions} old versions made in {time.perf_counter() - t0:.1f} s",
                  flush=True)
        big_uri = None
        if "open_big" in args.ops:
            t0 = time.perf_counter()
            big = Path(f"{args.big_cache}-{args.big_versions}")
            build_big(big, args.big_versions, 10)
            n_up = store.upload(big, store.bucket("bench-big"), "ds.lance")
            big_uri = store.uri("bench-big", "ds.lance")
            print(f"open_big: {args.big_versions} versions x 10 fragments, {n_up} objects uploaded in "
                  f"{time.perf_counter() - t0:.1f} s", flush=True)
        spark = get_spark("object-store-bench")
        run_tasks(spark, "warm", list(range(default_parallelism(spark))), _import_package)
        # the driver imports what the workers' daemon preloads: a small compaction's one task
        # runs in the driver (Tuning.driver_rewrite_bytes)
        from lance_spark_ops.spark.runtime.daemon import preload

        preload()
        # both sides' first use in this process (imports, S3 clients) untimed: a dry-run plan each
        for side in ("ours", "pylance"):
            run_side(side, "open", src, via, spark, args)
        seconds: dict = {}
        requests: dict = {}
        n = 0
        for latency in args.latencies:
            proxy.configure(delay_ms=latency, bandwidth_bps=args.bandwidth_mbps * 1e6 or None)
            for op in args.ops:
                for r in range(-args.warm_rounds, args.rounds):
                    order = ["ours", "pylance"] if (r + n) % 2 == 0 else ["pylance", "ours"]
                    plans = {}
                    for side in order:
                        if op == "open_big":  # read-only: the one copy
                            uri = big_uri
                        else:
                            bucket = store.bucket()
                            store.copy("bench-vacsrc" if op == "vacuum" else "bench-src",
                                       CLEAN if op == "binary_clean" else "ds.lance", bucket, "ds.lance")
                            uri = store.uri(bucket, "ds.lance")
                            before = None
                            if op == "vacuum":
                                # a commit after the copy: the copies' object times (now) are then
                                # older than the version kept, as a real table's files are (pylance
                                # and ours look at files older than it only, on local disks at least)
                                import lance

                                lance.write_dataset(make_table(20_000_000 + r, 10), uri, mode="append",
                                                    storage_options=direct)
                                before = store.keys(bucket, "ds.lance")
                        proxy.reset()
                        t0 = time.perf_counter()
                        plans[side] = run_side(side, op, uri, via, spark, args)
                        took = time.perf_counter() - t0
                        stats = proxy.stats()
                        if op == "read":
                            if not np.array_equal(np.sort(plans[side].column("id").to_numpy()), expected):
                                raise AssertionError(f"read: {side}'s rows differ")
                            plans.pop(side)
                        elif op != "open_big":
                            check(op, uri, direct, clean if op == "binary_clean" else expected, args)
                        if op == "vacuum":  # both sides vacuum the same copy: the same files must go
                            plans[side] = before - store.keys(bucket, "ds.lance")
                        if op in ("vacuum", "open_big") and len(plans) == 2 \
                                and plans["ours"] != plans["pylance"]:
                            raise AssertionError(f"{op}: the sides differ (removed files / plans)")
                        if op != "open_big":
                            store.drop(bucket)  # checked: the server need not hold it any more
                        if r < 0:  # a warm-up round: checked, not recorded
                            print(f"{latency:>3.0f} ms {op:8s} {side:8s} warm-up: {took:6.2f} s", flush=True)
                            continue
                        key = (op, str(int(latency)))
                        seconds.setdefault(key, {}).setdefault(side, []).append(took)
                        requests.setdefault(key, {})[side] = {"total": stats["total"], "ops": stats["ops"],
                                                              "max_in_flight": stats["max_in_flight"]}
                        print(f"{latency:>3.0f} ms {op:8s} {side:8s} round {r + 1}: {took:6.2f} s, "
                              f"{stats['total']} requests {stats['ops']} (in flight <= "
                              f"{stats['max_in_flight']})", flush=True)
                n += 1
        spark.stop()
    median: dict = {}
    for (op, lat), sides in seconds.items():
        m = {s: statistics.median(v) for s, v in sides.items()}
        m["ratio"] = m["ours"] / m["pylance"]
        median.setdefault(op, {})[lat] = m
    result = {"dataset": {"fragments": FRAGMENTS, "rows_per_fragment": ROWS, "live_rows": int(live),
                          "deleted": "1/6", "target_rows_per_fragment": TARGET_ROWS},
              "store": args.store, "spark": "local[2]", "pylance_threads": 2, "rounds": args.rounds,
              "bandwidth_mbps_per_connection": args.bandwidth_mbps or None,
              "warm_rounds": args.warm_rounds,
              "vacuum_versions": args.versions,
              "open_big": {"versions": args.big_versions, "fragments": args.big_versions * 10},
              "median": median,
              "seconds": {f"{op}@{lat}ms": v for (op, lat), v in seconds.items()},
              "requests": {f"{op}@{lat}ms": v for (op, lat), v in requests.items()}}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    plot(result, out.with_suffix(".png"))
    print("op        latency   ours     pylance  ratio   requests ours/pylance")
    for op, lats in median.items():
        for lat, m in lats.items():
            rq = requests[(op, lat)]
            print(f"{op:9s} {lat:>4s} ms {m['ours']:7.2f}  {m['pylance']:7.2f}  {m['ratio']:5.2f}   "
                  f"{rq['ours']['total']}/{rq['pylance']['total']}")


if __name__ == "__main__":
    main()
