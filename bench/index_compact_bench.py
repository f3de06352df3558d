"""Compaction of an indexed dataset: our Spark job (local[2]) against pylance
``compact_files(num_threads=2)``, both remapping an IVF_PQ index (``--index-type``: or IVF_SQ,
IVF_FLAT, IVF_HNSW_{SQ,PQ,FLAT}, whose graphs both sides rebuild) on the vector column and a
BTREE on ``id``.

    python bench/index_compact_bench.py [--gb 0.3] [--fragments 60] [--rounds 3] [--index-type IVF_PQ]

The dataset is ``compact_bench.make_dataset``'s (10% of rows deleted); pylance builds the two
indices on it before it is copied (``--delete-after-index``: then 10% more rows are deleted, so
the remap drops rows from the indices and HNSW graphs are rebuilt). Each round copies it twice;
pylance compacts one copy (remapping indices, its default), our job the other (remapping on executors in its
``remap_indices`` phase). Rounds alternate which side goes first. Spark's start-up is not timed
and each timed run starts after ``os.sync()``. After each round pylance checks both copies: same
row count, 0 unindexed rows in both indices, and equal answers to an equality query on ``id``
and an exhaustive (all partitions, refined) nearest-neighbour query. Reported: medians of each
side's seconds, of our per-phase seconds, and of the ratio.
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

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from compact_bench import dir_bytes, make_dataset  # noqa: E402


def _warm_workers(spark) -> None:
    """One task per slot that imports the package, so worker start-up is not timed (defined here:
    workers cannot import ``compact_bench``, and functions of ``__main__`` are pickled by value)."""
    from lance_spark_ops.spark.runtime.runner import run_tasks

    run_tasks(spark, "warm", list(range(spark.sparkContext.defaultParallelism)), _import_package)


def _import_package(task: int, ctx: object) -> int:
    import lance_spark_ops.spark.files.rewrite_tasks  # noqa: F401
    import lance_spark_ops.spark.indices.index_remap_tasks  # noqa: F401 - the import is the point

    return task


def build_indices(uri: str, partitions: int, sub_vectors: int, index_type: str = "IVF_PQ") -> None:
    import lance

    ds = lance.dataset(uri)
    kw = {"num_sub_vectors": sub_vectors} if index_type.endswith("PQ") else {}
    ds.create_index("v", index_type=index_type, num_partitions=partitions, **kw)
    ds.create_scalar_index("id", index_type="BTREE")


def unindexed(uri: str) -> dict[str, int]:
    import lance

    ds = lance.dataset(uri)
    return {ix["name"]: ds.stats.index_stats(ix["name"])["num_unindexed_rows"] for ix in ds.list_indices()}


def answers(uri: str, probe_id: int, query: np.ndarray, partitions: int) -> tuple:
    """(row count, ids equal to ``probe_id``, ids of the 10 nearest to ``query``)."""
    import lance

    ds = lance.dataset(uri)
    eq = ds.to_table(columns=["id"], filter=f"id = {probe_id}").column("id").to_pylist()
    # ef: an HNSW search wide enough to be exact (ignored by the other types)
    nn = ds.to_table(columns=["id"], nearest={"column": "v", "q": query, "k": 10, "nprobes": partitions,
                                              "refine_factor": 10, "ef": 300}).column("id").to_pylist()
    return ds.count_rows(), sorted(eq), nn


def check(ours: str, theirs: str, partitions: int) -> None:
    query = np.random.default_rng(1).random(32, dtype=np.float32)
    a, b = answers(ours, 12345, query, partitions), answers(theirs, 12345, query, partitions)
    assert a == b, f"answers differ: ours {a} pylance {b}"
    assert a[1] == [12345], f"equality query found {a[1]}"
    for uri in (ours, theirs):
        u = unindexed(uri)
        assert len(u) == 2 and all(n == 0 for n in u.values()), f"{uri}: unindexed rows {u}"


def run_pylance(uri: str, target_rows: int) -> float:
    import lance

    os.sync()
    t0 = time.perf_counter()
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=target_rows, num_threads=2)
    return time.perf_counter() - t0


def run_ours(spark, uri: str, target_rows: int) -> tuple[float, dict[str, float], dict]:
    from lance_spark_ops.spark.files.compaction import compact

    os.sync()
    t0 = time.perf_counter()
    m = compact(spark, uri, target_rows_per_fragment=target_rows)
    return time.perf_counter() - t0, dict(m.seconds), dict(m.indices_remapped)


def one_round(spark, src: str, tmp: str, r: int, args) -> dict:
    ours_uri, theirs_uri = f"{tmp}/ours-{r}.lance", f"{tmp}/pylance-{r}.lance"
    shutil.copytree(src, ours_uri)
    shutil.copytree(src, theirs_uri)
    if r % 2 == 0:
        theirs_s = run_pylance(theirs_uri, args.target_rows)
        ours_s, phases, remapped = run_ours(spark, ours_uri, args.target_rows)
    else:
        ours_s, phases, remapped = run_ours(spark, ours_uri, args.target_rows)
        theirs_s = run_pylance(theirs_uri, args.target_rows)
    check(ours_uri, theirs_uri, args.partitions)
    # the remap_indices phase runs inside the commit phase: report commit without it too
    phases["commit_excl_remap"] = phases.get("commit", 0.0) - phases.get("remap_indices", 0.0)
    print(f"round {r}: pylance {theirs_s:.2f} s, ours {ours_s:.2f} s, ratio {ours_s / theirs_s:.2f}; "
          f"phases {', '.join(f'{k} {v:.2f}' for k, v in phases.items())}; remapped {remapped}", flush=True)
    shutil.rmtree(ours_uri)
    shutil.rmtree(theirs_uri)
    return {"pylance_s": theirs_s, "ours_s": ours_s, "ratio": ours_s / theirs_s, "phases": phases,
            "indices_remapped": remapped}


def summarise(rounds: list[dict]) -> dict:
    med = statistics.median
    names = sorted({k for r in rounds for k in r["phases"]})
    return {"pylance_s": med(r["pylance_s"] for r in rounds), "ours_s": med(r["ours_s"] for r in rounds),
            "ratio_ours_over_pylance": med(r["ratio"] for r in rounds),
            "ours_phase_s": {n: med(r["phases"].get(n, 0.0) for r in rounds) for n in names}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=0.3)
    ap.add_argument("--fragments", type=int, default=60)
    ap.add_argument("--version", default="2.2")
    ap.add_argument("--target-rows", type=int, default=1024 * 1024)
    ap.add_argument("--partitions", type=int, default=16, help="IVF partitions")
    ap.add_argument("--sub-vectors", type=int, default=8, help="PQ sub-vectors")
    ap.add_argument("--index-type", default="IVF_PQ", help="vector index type")
    ap.add_argument("--delete-after-index", action="store_true",
                    help="delete another 10%% of rows once indexed, so the remap drops rows (HNSW: rebuilt)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(Path(__file__).parent / "out" / "index_compact_bench.json"))
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from lance_spark_ops.spark.runtime.session import get_spark

    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        src = f"{tmp}/src.lance"
        t0 = time.perf_counter()
        rows = make_dataset(src, args.gb, args.fragments, args.version)
        build_indices(src, args.partitions, args.sub_vectors, args.index_type)
        if args.delete_after_index:
            import lance

            lance.dataset(src).delete("id % 10 = 7")  # the probe id 12345 stays
        size = dir_bytes(src)
        print(f"dataset: {rows} rows, {size / 1e9:.2f} GB on disk with indices, {args.fragments} fragments "
              f"(built and indexed in {time.perf_counter() - t0:.0f} s)", flush=True)
        spark = get_spark("index-compact-bench")
        _warm_workers(spark)  # JVM and Python workers start outside the timed region
        rounds = [one_round(spark, src, tmp, r, args) for r in range(args.rounds)]
        result = {"rows": rows, "bytes_on_disk": size, "fragments": args.fragments, "version": args.version,
                  "ivf_partitions": args.partitions, "pq_sub_vectors": args.sub_vectors,
                  "index_type": args.index_type, "delete_after_index": args.delete_after_index,
                  **summarise(rounds), "rounds": rounds}
        print(json.dumps({k: v for k, v in result.items() if k != "rounds"}))
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
