"""First-task cost of a fresh Python worker, with our worker daemon (``spark.daemon``, modules
preloaded before forking) and with PySpark's own, against a warm worker.

    python bench/worker_start_bench.py [--jobs 4]

For each daemon and each ``spark.python.worker.reuse`` setting a new local[2] session (a new
JVM, not timed) runs ``--jobs`` identical Spark jobs of two tasks; each task opens a small
pylance-written dataset and scans one fragment (what a rewrite task does first). Job 1 pays
the daemon start and the workers' first task; later jobs with reuse=true run on warm workers;
with reuse=false every task runs in a worker freshly forked from the (now warm) daemon.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa


def scan_task(task: tuple[str, int], ctx: object) -> int:
    from lance_spark_ops.table.dataset import Dataset

    uri, i = task
    ds = Dataset.open(uri)
    return sum(b.num_rows for b in ds.scan_fragment(ds.fragments[i]))


def run(uri: str, daemon: str, reuse: bool, jobs: int) -> list[float]:
    from lance_spark_ops.spark.runner import run_tasks
    from lance_spark_ops.spark.session import get_spark

    spark = get_spark("worker-start-bench", conf={"spark.python.daemon.module": daemon,
                                                   "spark.python.worker.reuse": str(reuse).lower()})
    try:
        spark.range(1).count()  # JVM-side first job (no Python worker) outside the timing
        out = []
        for _ in range(jobs):
            t0 = time.perf_counter()
            run_tasks(spark, "bench", [(uri, 0), (uri, 1)], scan_task)
            out.append(time.perf_counter() - t0)
        return out
    finally:
        spark.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--out", default=str(Path(__file__).parent / "out" / "worker_start_bench.json"))
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import lance

    with tempfile.TemporaryDirectory() as tmp:
        uri = f"{tmp}/ds.lance"
        t = pa.table({"a": list(range(20_000)), "s": [f"s{i}" for i in range(20_000)]})
        lance.write_dataset(t, uri, max_rows_per_file=10_000)
        result = {}
        for daemon in ("lance_spark_ops.spark.daemon", "pyspark.daemon"):
            for reuse in (True, False):
                times = run(uri, daemon, reuse, args.jobs)
                key = f"{daemon} reuse={reuse}"
                result[key] = {"first_job_s": times[0], "later_jobs_median_s": statistics.median(times[1:]),
                               "all_s": times}
                print(key, json.dumps(result[key]), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
