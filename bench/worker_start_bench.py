"""First-task cost of a fresh Python worker, with our worker daemon (``spark.runtime.daemon``, modules
preloaded before forking) and with PySpark's own, against a warm worker.

    python bench/worker_start_bench.py [--jobs 4] [--rounds 3] [--daemons a,b] [--jvm shared]

Each (daemon, ``spark.python.worker.reuse``) configuration runs in its own Python process, so
in its own JVM (PySpark keeps one JVM per driver process across sessions: a second session
would find the Python-UDF machinery already warm), in interleaved rounds. With ``--jvm shared``
they all run in this process's JVM after an untimed warm-up session instead: job 1 then pays
only the Python side (daemon start, first task of fresh workers). A run starts a
local[2] session and a JVM-only first job (not timed), then ``--jobs`` identical Spark jobs of
two tasks; each task opens a small pylance-written dataset and scans one fragment (what a
rewrite task does first). Job 1 pays the daemon start, the workers' first task and the JVM's
first Python job; later jobs with reuse=true run on warm workers; with reuse=false every task
runs in a worker freshly forked from the (now warm) daemon.

Per job: wall seconds, CPU seconds of the JVM and of its Python processes (daemon and live
workers: with reuse=false the workers' CPU is lost when they exit). Medians over rounds.
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

DAEMONS = ("lance_spark_ops.spark.runtime.daemon", "pyspark.daemon")
_TICK = os.sysconf("SC_CLK_TCK")


def scan_task(task: tuple[str, int], ctx: object) -> int:
    from lance_spark_ops.table.dataset import Dataset

    uri, i = task
    ds = Dataset.open(uri)
    return sum(b.num_rows for b in ds.scan_fragment(ds.fragments[i]))


def _cpu(pid: int) -> tuple[float, float]:
    """(CPU seconds of ``pid``, of all its live descendants) from /proc."""
    own, children = 0.0, {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            cpu = (int(fields[11]) + int(fields[12])) / _TICK
            if int(entry) == pid:
                own = cpu
            children.setdefault(int(fields[1]), []).append((int(entry), cpu))
    below, stack = 0.0, [pid]
    while stack:
        for child, cpu in children.get(stack.pop(), []):
            below += cpu
            stack.append(child)
    return own, below


def run(uri: str, daemon: str, reuse: bool, jobs: int) -> list[dict[str, float]]:
    """``jobs`` timed jobs in a new session of this process: wall, jvm_cpu and python_cpu each."""
    from lance_spark_ops.spark.runtime.runner import run_tasks
    from lance_spark_ops.spark.runtime.session import get_spark

    spark = get_spark("worker-start-bench", conf={"spark.python.daemon.module": daemon,
                                                   "spark.python.worker.reuse": str(reuse).lower()})
    try:
        spark.range(1).count()  # JVM-side first job (no Python worker) outside the timing
        jvm = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())  # noqa: SLF001
        out = []
        for _ in range(jobs):
            jvm0, py0 = _cpu(jvm)
            t0 = time.perf_counter()
            run_tasks(spark, "bench", [(uri, 0), (uri, 1)], scan_task)
            wall = time.perf_counter() - t0
            jvm1, py1 = _cpu(jvm)
            out.append({"wall": wall, "jvm_cpu": jvm1 - jvm0, "python_cpu": py1 - py0})
        return out
    finally:
        spark.stop()


def _one(args: argparse.Namespace) -> None:
    daemon, reuse, uri = args.one
    print(json.dumps(run(uri, daemon, reuse == "true", args.jobs)))


def _summary(runs: list[list[dict[str, float]]]) -> dict[str, object]:
    def med(values: list[float]) -> float:
        return round(statistics.median(values), 3)

    later = [{k: statistics.median(j[k] for j in r[1:]) for k in r[0]} for r in runs]
    return {"first_job": {k: med([r[0][k] for r in runs]) for k in runs[0][0]},
            "later_jobs": {k: med([x[k] for x in later]) for k in later[0]},
            "first_job_walls": [round(r[0]["wall"], 3) for r in runs], "runs": runs}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--daemons", default=",".join(DAEMONS))
    ap.add_argument("--jvm", choices=("fresh", "shared"), default="fresh",
                    help="a JVM per configuration (default), or one warmed-up JVM for all")
    ap.add_argument("--one", nargs=3, metavar=("DAEMON", "REUSE", "URI"), help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(Path(__file__).parent / "out" / "worker_start_bench.json"))
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if args.one:
        _one(args)
        return
    import lance
    import pyarrow as pa

    # tasks pickle scan_task by reference to this module: workers must find it
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(Path(__file__).parent), os.environ.get("PYTHONPATH")) if p)
    runs: dict[str, list[list[dict[str, float]]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        uri = f"{tmp}/ds.lance"
        t = pa.table({"a": list(range(20_000)), "s": [f"s{i}" for i in range(20_000)]})
        lance.write_dataset(t, uri, max_rows_per_file=10_000)
        if args.jvm == "shared":
            run(uri, "pyspark.daemon", True, 2)  # warms this process's JVM up, untimed
        for r in range(args.rounds):
            for daemon in args.daemons.split(","):
                for reuse in ("true", "false"):
                    if args.jvm == "shared":
                        jobs = run(uri, daemon, reuse == "true", args.jobs)
                    else:
                        cmd = [sys.executable, __file__, "--jobs", str(args.jobs), "--one", daemon, reuse,
                               uri]
                        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
                        jobs = json.loads(done.stdout.strip().splitlines()[-1])
                    key = f"{daemon} reuse={reuse}"
                    runs.setdefault(key, []).append(jobs)
                    print(r, key, " ".join(f"{j['wall']:.3f}" for j in jobs), flush=True)
    result = {key: _summary(v) for key, v in runs.items()}
    for key, s in result.items():
        print(key, json.dumps({k: s[k] for k in ("first_job", "later_jobs", "first_job_walls")}), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
