"""What Spark itself costs the jobs of issue #39, apart from this library: a job's fixed cost on
a standalone cluster of pinned 1-core workers, a Python data source's read of rows already in
memory, and a session's first read through a Python data source.

    python bench/spark_floors.py [--workers 1 2] [--rounds 12] [--out bench/results/spark_floors.json]

- ``job``: per worker count, 8 tasks that each sleep 50 ms, run four ways - a JVM-only job
  (``reflect('java.lang.Thread', 'sleep', 50)``), a bare ``mapInArrow``, this library's
  ``run_tasks``, and an 8-partition JVM job that does nothing; medians over ``--rounds`` warm
  jobs, with the driver JVM's CPU seconds per job. ``run_tasks`` also reports from its call to
  its first task and from its last task to its return (stamps the tasks write).
- ``read``: on ``local[2]``, a Python data source yielding 800 000 rows of (int64, float64) from
  memory in 20 000-row batches over three partitions, ``toArrow`` and ``count``, and the same
  batches through ``mapInArrow``: the floor under ``read_lance`` (``object_store_bench.py --ops
  read``), whose pylance side reads them from the store in ~0.2 s.
- ``first_read``: a fresh ``local[2]`` session's first read through that source and its second.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
STAMPS = Path(tempfile.gettempdir()) / "lso-spark-floor-stamps"
TASKS, SLEEP = 8, 0.05
N_ROWS = (320_000, 320_000, 160_000)
TICK = os.sysconf("SC_CLK_TCK")


def _sleep_task(task: int, ctx: object) -> int:
    """``run_tasks``' task: sleep, stamping its start and end."""
    start = time.time()
    time.sleep(SLEEP)
    (STAMPS / f"{os.getpid()}-{start:.6f}").write_text(f"{start} {time.time()}")
    return task


def _sleep_batches(it):  # noqa: ANN001, ANN202 - mapInArrow's function
    for b in it:
        time.sleep(SLEEP)
        yield b


def _batches(part: int):  # noqa: ANN202
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(part)
    for s in range(0, N_ROWS[part], 20_000):
        k = min(20_000, N_ROWS[part] - s)
        yield pa.RecordBatch.from_arrays([pa.array(np.arange(s, s + k)), pa.array(rng.random(k))],
                                         names=["id", "x"])


def _from_memory(it):  # noqa: ANN001, ANN202 - mapInArrow over partition numbers
    for b in it:
        for p in b.column(0).to_pylist():
            yield from _batches(p)


def _source():  # noqa: ANN202
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class Reader(DataSourceReader):
        def partitions(self) -> list:
            return [InputPartition(i) for i in range(len(N_ROWS))]

        def read(self, partition):  # noqa: ANN001, ANN202
            yield from _batches(partition.value)

    class Memory(DataSource):
        @classmethod
        def name(cls) -> str:
            return "lso_memory"

        def schema(self) -> str:
            return "id long, x double"

        def reader(self, schema):  # noqa: ANN001, ANN202
            return Reader()

    return Memory


def _cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def job_floor(workers: int, rounds: int) -> dict:
    from cluster_bench import start_cluster, stop
    from pyspark.sql import SparkSession

    from lance_spark_ops.spark.runtime.runner import run_tasks

    STAMPS.mkdir(exist_ok=True)
    tmp = tempfile.mkdtemp()
    url, procs = start_cluster(tmp, cores=1, workers=workers, pin=True)
    try:
        spark = (SparkSession.builder.master(url).config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false").getOrCreate())
        driver = spark._jvm.ProcessHandle.current().pid()  # noqa: SLF001
        ways = {
            "jvm_sleep": lambda: spark.range(0, TASKS, 1, TASKS).selectExpr(
                f"reflect('java.lang.Thread', 'sleep', cast({int(SLEEP * 1000)} as bigint)) as x").collect(),
            "bare_mapInArrow": lambda: spark.range(0, TASKS, 1, TASKS).mapInArrow(
                _sleep_batches, "id long").collect(),
            "run_tasks": lambda: run_tasks(spark, "floor", list(range(TASKS)), _sleep_task),
            "jvm_nothing": lambda: spark.range(0, TASKS, 1, TASKS).selectExpr("id + 1").collect(),
        }
        for way in ways.values():
            for _ in range(8):
                way()
        seen: dict[str, list] = {k: [] for k in ways}
        for _ in range(rounds):
            for name, way in ways.items():
                for p in STAMPS.iterdir():
                    p.unlink()
                c0, t0 = _cpu(driver), time.time()
                way()
                t1 = time.time()
                row = {"seconds": t1 - t0, "driver_jvm_cpu": _cpu(driver) - c0}
                if name == "run_tasks":
                    st = [tuple(map(float, p.read_text().split())) for p in STAMPS.iterdir()]
                    row["to_first_task"] = min(s for s, _ in st) - t0
                    row["after_last_task"] = t1 - max(e for _, e in st)
                seen[name].append(row)
        spark.stop()
    finally:
        stop(procs)
    return {name: {k: statistics.median(r[k] for r in rows) for k in rows[0]} for name, rows in seen.items()}


def read_floor(rounds: int) -> dict:
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.dataSource.register(_source())
    ways = {
        "source_toArrow": lambda: spark.read.format("lso_memory").load().toArrow(),
        "source_count": lambda: spark.read.format("lso_memory").load().count(),
        "mapInArrow_toArrow": lambda: spark.range(0, len(N_ROWS), 1, len(N_ROWS)).mapInArrow(
            _from_memory, "id long, x double").toArrow(),
    }
    for way in ways.values():
        way()
    seen: dict[str, list] = {k: [] for k in ways}
    for _ in range(rounds):
        for name, way in ways.items():
            t0 = time.perf_counter()
            way()
            seen[name].append(time.perf_counter() - t0)
    spark.stop()
    return {name: statistics.median(v) for name, v in seen.items()}


FIRST_READ = r'''
import json, sys, time
sys.path.insert(0, sys.argv[1])
from spark_floors import _source
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false").getOrCreate())
spark.range(0, 2, 1, 2).mapInArrow(lambda it: it, "id long").collect()  # workers up
spark.dataSource.register(_source())
out = []
for _ in range(2):
    t0 = time.perf_counter()
    spark.read.format("lso_memory").load().toArrow()
    out.append(time.perf_counter() - t0)
print(json.dumps({"first": out[0], "second": out[1]}))
'''


def first_read() -> dict:
    p = subprocess.run([sys.executable, "-c", FIRST_READ, str(ROOT / "bench")], capture_output=True,
                       text=True, check=True, env={**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'bench'}"})
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "spark_floors.json"))
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = f"{ROOT}:{ROOT / 'bench'}"  # the workers import this module's functions
    result = {"tasks": TASKS, "task_sleep_s": SLEEP, "rows": sum(N_ROWS)}
    result["first_read"] = first_read()
    print("first read", result["first_read"], flush=True)
    result["read"] = read_floor(args.rounds)
    print("read", result["read"], flush=True)
    result["job"] = {}
    for w in args.workers:
        result["job"][str(w)] = job_floor(w, args.rounds)
        print(w, "worker(s)", json.dumps(result["job"][str(w)]), flush=True)
    Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
