"""A fresh Spark session's first vector job against pylance, with Spark's own first-job cost apart.

    python bench/first_job_bench.py [--rows 300000] [--dim 128] [--rounds 3] [--out FILE]
        [--input DIR] [--trees A,B]

``--input DIR`` keeps the prepared input there (made on the first run, reused after).
``--trees`` runs our side from each of these source trees (``PYTHONPATH``), interleaved in every
round: a before / after comparison on the same input in one run; a tree named ``PATH+kernels``
runs with ``LSO_PRELOAD_KERNELS=1`` (the daemon preloads the numba kernels).

Input: ``--rows`` x ``--dim`` float32 (the clustered data of ``vector_index_bench``) under a
pylance IVF_PQ (256 partitions, 16 sub-vectors), then 10 appends of 1 %. Each round runs, each
configuration in its own Python process (so its own JVM and worker daemon):

* ``spark_noop``: a no-op two-task job in a fresh session with PySpark's own daemon
  (``pyspark.daemon``), then the same job again: the first minus the second is Spark's own
  first-job cost (JVM-side Python runner, daemon and worker start, ``pyspark.worker`` import);
* ``ours_noop``: the same with this library's daemon (``spark.runtime.daemon``, modules preloaded);
* ``optimize``: the default ``optimize_indices`` as a fresh session's first Python job (cold),
  then again on a copy of the same state (warm, workers up);
* pylance's ``optimize_indices()`` on a third copy (in this process).

Each tree's kernels are compiled first (``python -m lance_spark_ops.compile_kernels``, a
cluster's bootstrap step: numba's cache warm, the modules built ahead of time there), untimed.
Every session first runs a JVM-only job (``spark.range(4).count()``, untimed), as
``vector_index_bench`` does. Reported: medians over rounds, each round's load average, and
``ratio_fresh_ex_spark`` = (cold - Spark's own first-job cost) / pylance: what the library adds
to a fresh session's first vector job, against pylance.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

OURS = "lance_spark_ops.spark.runtime.daemon"


def noop_task(task: int, ctx: object) -> int:
    return task


def _session(daemon: str) -> Any:
    from lance_spark_ops.spark.runtime.session import get_spark

    spark = get_spark("first-job-bench", conf={"spark.python.daemon.module": daemon})
    spark.range(4).count()  # JVM-side first job, untimed
    return spark


def one_noop(daemon: str) -> dict[str, float]:
    from lance_spark_ops.spark.runtime.runner import run_tasks

    spark = _session(daemon)
    try:
        walls = []
        for _ in range(2):
            t0 = time.perf_counter()
            run_tasks(spark, "noop", [0, 1], noop_task)
            walls.append(time.perf_counter() - t0)
        return {"first_s": walls[0], "second_s": walls[1]}
    finally:
        spark.stop()


def one_optimize(cold: str, warm: str) -> dict[str, Any]:
    from lance_spark_ops.spark.indices.indexing import optimize_indices

    spark = _session(OURS)
    try:
        t0 = time.perf_counter()
        m = optimize_indices(spark, cold)
        cold_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        m2 = optimize_indices(spark, warm)
        warm_s = time.perf_counter() - t0
        return {"cold_s": cold_s, "warm_s": warm_s, "cold_phases_s": m.seconds, "warm_phases_s": m2.seconds}
    finally:
        spark.stop()


def _copy(src: str, dst: str) -> str:
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    os.sync()
    return dst


def _child(tree: str | None, *args: str) -> dict[str, Any]:
    env = dict(os.environ)
    env.pop("LSO_PRELOAD_KERNELS", None)
    if tree and tree.endswith("+kernels"):
        tree, env["LSO_PRELOAD_KERNELS"] = tree.removesuffix("+kernels"), "1"
    if tree:
        env["PYTHONPATH"] = os.pathsep.join((tree, str(Path(__file__).parent)))
    done = subprocess.run([sys.executable, __file__, "--one", *args], capture_output=True, text=True, env=env)
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def _compile_kernels(tree: str | None) -> None:
    env, where = dict(os.environ), None
    if tree:
        env["PYTHONPATH"] = where = tree.removesuffix("+kernels")  # -m: the tree's own, not the cwd's
    done = subprocess.run([sys.executable, "-m", "lance_spark_ops.compile_kernels"], capture_output=True,
                          text=True, env=env, cwd=where)
    print("kernels", tree or "default", done.stdout.strip().replace("\n", "; "), flush=True)


def _shape(lance: Any, uri: str) -> list[Any]:
    st = lance.dataset(uri).stats.index_stats("v_idx")
    assert st["num_unindexed_rows"] == 0
    return [st["num_indices"], [i["num_partitions"] for i in st["indices"]]]


def prepare(src: str, rows: int, dim: int) -> str:
    import lance
    from vector_index_bench import table, vectors

    lance.write_dataset(table(vectors(rows, dim, 1)), src, max_rows_per_file=1 << 18,
                        data_storage_version="2.1")
    lance.dataset(src).create_index("v", "IVF_PQ", num_partitions=256, num_sub_vectors=16)
    for k in range(10):
        lance.write_dataset(table(vectors(rows // 100, dim, 50 + k), rows + k * rows), src, mode="append")
    return src


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=None)
    ap.add_argument("--input", default=None, help="where the prepared input is kept (made if missing)")
    ap.add_argument("--trees", default="", 
                    help="comma-separated source trees to compare (default: PYTHONPATH's)")
    ap.add_argument("--one", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    here = str(Path(__file__).parent)
    sys.path.insert(0, here)
    if args.one:
        # Spark starts the worker daemon (``python -m``) in this process's directory, and ``-m``
        # puts that directory first on sys.path: run from the tree under test, or its workers
        # would import whatever lance_spark_ops the bench was started beside
        import lance_spark_ops

        os.chdir(Path(lance_spark_ops.__file__).resolve().parent.parent)
        kind, *rest = args.one
        print(json.dumps(one_noop(*rest) if kind == "noop" else one_optimize(*rest)))
        return
    import lance

    # tasks pickle noop_task by reference to this module: workers must find it
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
    trees = [t for t in args.trees.split(",") if t] or [""]
    rounds: list[dict[str, Any]] = []
    for tree in trees:
        _compile_kernels(tree)
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        src = args.input or f"{tmp}/src"
        if not os.path.isdir(src):
            t0 = time.perf_counter()
            prepare(src, args.rows, args.dim)
            print(f"prepared in {time.perf_counter() - t0:.1f} s", flush=True)
        for r in range(args.rounds):
            out: dict[str, Any] = {"loadavg_1m": os.getloadavg()[0]}
            out["spark_noop"] = _child(None, "noop", "pyspark.daemon")
            c = _copy(src, f"{tmp}/theirs")
            t0 = time.perf_counter()
            lance.dataset(c).optimize.optimize_indices()
            out["pylance_s"] = time.perf_counter() - t0
            want = _shape(lance, c)
            for tree in trees[::1 if r % 2 == 0 else -1]:
                side = out.setdefault("trees", {}).setdefault(tree or "default", {})
                side["ours_noop"] = _child(tree, "noop", OURS)
                a, b = _copy(src, f"{tmp}/cold"), _copy(src, f"{tmp}/warm")
                side["optimize"] = _child(tree, "optimize", a, b)
                assert _shape(lance, a) == _shape(lance, b) == want  # the same result as pylance's
            out["loadavg_1m_after"] = os.getloadavg()[0]
            rounds.append(out)
            print(r, json.dumps({k: v for k, v in out.items() if k != "trees"}), flush=True)
            for tree, side in out["trees"].items():
                times = {k: round(v, 3) for k, v in side["optimize"].items() if k in ("cold_s", "warm_s")}
                print("  ", tree, json.dumps(side["ours_noop"]), times, flush=True)

    def med(get: Any) -> float:
        return round(statistics.median(get(o) for o in rounds), 3)

    def own(o: dict[str, Any]) -> float:  # Spark's own first-job cost in that round
        return o["spark_noop"]["first_s"] - o["spark_noop"]["second_s"]

    summary: dict[str, Any] = {
        "spark_noop_first_s": med(lambda o: o["spark_noop"]["first_s"]),
        "spark_noop_second_s": med(lambda o: o["spark_noop"]["second_s"]),
        "spark_own_first_job_s": med(own),
        "pylance_s": med(lambda o: o["pylance_s"]),
        "loadavg_1m": [round(o["loadavg_1m"], 2) for o in rounds],
    }
    for tree in rounds[0]["trees"]:
        def side(o: dict[str, Any], tree: str = tree) -> dict[str, Any]:
            return o["trees"][tree]

        summary[tree] = {
            "ours_noop_first_s": med(lambda o: side(o)["ours_noop"]["first_s"]),
            "ours_noop_second_s": med(lambda o: side(o)["ours_noop"]["second_s"]),
            "optimize_cold_s": med(lambda o: side(o)["optimize"]["cold_s"]),
            "optimize_warm_s": med(lambda o: side(o)["optimize"]["warm_s"]),
            "ratio_fresh": med(lambda o: side(o)["optimize"]["cold_s"] / o["pylance_s"]),
            "ratio_fresh_ex_spark": med(lambda o: (side(o)["optimize"]["cold_s"] - own(o)) / o["pylance_s"]),
            "ratio_warm": med(lambda o: side(o)["optimize"]["warm_s"] / o["pylance_s"]),
            "library_first_job_add_s": med(lambda o: side(o)["optimize"]["cold_s"]
                                           - side(o)["optimize"]["warm_s"] - own(o)),
        }
    result = {"rows": args.rows, "dim": args.dim, "summary": summary, "rounds": rounds}
    print(json.dumps(summary, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
