"""Compaction on a real standalone cluster (one master, one worker with 2 cores, all on
127.0.0.1) against ``local[2]``, in one run, on copies of the same dataset.

    python bench/cluster_bench.py [--gb 0.3] [--fragments 60] [--mode reencode]

The dataset is ``compact_bench.make_dataset``'s (ints, floats, timestamps, strings, 32-dim
vectors; 10% deleted). Each session is warmed (JVM, executor and Python workers up, one task
per slot) before its timed run; each timed run starts after ``os.sync()``. Reported: both wall
times and standalone / local (the target is <= 1.15: the cluster's cost is task launch and
the executor hop, the work is the same). The master and worker are stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from compact_bench import dir_bytes, make_dataset  # noqa: E402


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _state(web: str) -> dict:
    with urllib.request.urlopen(f"{web}/json", timeout=5) as r:
        return json.loads(r.read())


def _wait(what: str, ok, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if ok():
                return
        except OSError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"{what} not ready after {seconds} s")


CGROUP_CPU = Path("/sys/fs/cgroup/cpu")  # cgroup v1's cpu controller (this machine's)


def cpu_limit_group(name: str, cpus: float) -> Path:
    """A cgroup of at most ``cpus`` CPUs (CFS quota over a 100 ms period), as a Kubernetes CPU
    limit gives an executor's pod; processes started through ``in_group`` land in it."""
    group = CGROUP_CPU / name
    group.mkdir(exist_ok=True)
    period = int((group / "cpu.cfs_period_us").read_text())
    (group / "cpu.cfs_quota_us").write_text(str(int(cpus * period)))
    return group


def in_group(group: Path) -> list[str]:
    """A command prefix that moves the command's process into ``group`` before it starts (its
    children - executor JVMs, Python workers - inherit the group)."""
    return ["sh", "-c", f'echo $$ > {group}/cgroup.procs && exec "$@"', "sh"]


def remove_groups(groups: list[Path]) -> None:
    """Remove the groups once their processes (executors exit after their worker) are gone."""
    for group in groups:
        _wait(f"{group} empty", lambda g=group: not (g / "cgroup.procs").read_text().strip(), 30)
        group.rmdir()


def start_cluster(tmp: str, cores: int = 2, workers: int = 1, pin: bool = False,
                  cpu_limit: float | None = None) -> tuple[str, list[subprocess.Popen]]:
    """Master + ``workers`` workers of ``cores`` cores on loopback; returns the master URL and
    the processes. ``pin``: worker k and everything it starts (executor JVMs, Python workers)
    on CPUs [k * cores, (k + 1) * cores) only, as on a host of ``cores`` CPUs (Spark's
    ``--cores`` only counts task slots). ``cpu_limit``: worker k and everything it starts in a
    cgroup of at most that many CPUs (``cpu_limit_group``; ``stop`` removes the groups)."""
    import pyspark

    home = Path(pyspark.__file__).parent
    env = dict(os.environ, SPARK_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    cls = str(home / "bin" / "spark-class")
    port, web, wweb = _port(), _port(), _port()
    log = open(f"{tmp}/cluster.log", "wb")  # noqa: SIM115 - closed with the processes
    master = subprocess.Popen([cls, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                               str(port), "--webui-port", str(web)], env=env, stdout=log, stderr=log)
    url, web_url = f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{web}"
    procs = [master]
    _wait("master", lambda: _state(web_url)["status"] == "ALIVE")
    for k in range(workers):
        cpus = ["taskset", "-c", ",".join(str(k * cores + c) for c in range(cores))] if pin else []
        if cpu_limit:
            group = cpu_limit_group(f"lso-bench-{os.getpid()}-worker{k}", cpu_limit)
            _groups.append(group)
            cpus = [*in_group(group), *cpus]
        procs.append(subprocess.Popen([*cpus, cls, "org.apache.spark.deploy.worker.Worker", url,
                                       "--host", "127.0.0.1", "--cores", str(cores), "--memory", "2g",
                                       "--webui-port", str(wweb if k == 0 else _port()),
                                       "--work-dir", f"{tmp}/work{k}"], env=env, stdout=log, stderr=log))
    _wait("workers", lambda: sum(w["state"] == "ALIVE" for w in _state(web_url)["workers"]) >= workers)
    return url, procs


def stop(procs: list[subprocess.Popen]) -> None:
    for p in reversed(procs):
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(30)
    remove_groups(_groups)
    _groups.clear()


_groups: list[Path] = []  # the CPU-limit cgroups start_cluster made


def _import_package(task: int, ctx: object) -> int:
    import lance_spark_ops.spark.files.rewrite_tasks  # noqa: F401 - the import is the point

    return task


def _warm_workers(spark) -> None:
    """One task per slot importing the package (this script is pickled by value, unlike
    compact_bench, which executors cannot import)."""
    from lance_spark_ops.spark.runtime.runner import run_tasks

    run_tasks(spark, "warm", list(range(spark.sparkContext.defaultParallelism)), _import_package)


def timed_compact(master: str, uri: str, target_rows: int, mode: str) -> float:
    """Compact ``uri`` in a fresh session on ``master`` (warmed first); wall seconds."""
    from pyspark.sql import SparkSession

    from lance_spark_ops.spark.files.compaction import compact
    from lance_spark_ops.spark.runtime.session import WORKER_SETTINGS

    spark = (SparkSession.builder.master(master).appName(f"cluster-bench {master}")
             .config("spark.pyspark.python", sys.executable).config("spark.ui.enabled", "false")
             .config("spark.driver.host", "127.0.0.1").config("spark.executor.memory", "1500m")
             .config(map=WORKER_SETTINGS).getOrCreate())
    try:
        _warm_workers(spark)
        os.sync()
        t0 = time.perf_counter()
        compact(spark, uri, target_rows_per_fragment=target_rows, compaction_mode=mode)
        return time.perf_counter() - t0
    finally:
        spark.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=0.3)
    ap.add_argument("--fragments", type=int, default=60)
    ap.add_argument("--version", default="2.2")
    ap.add_argument("--target-rows", type=int, default=1024 * 1024)
    ap.add_argument("--mode", default="reencode")
    ap.add_argument("--out", default=str(Path(__file__).parent / "out" / "cluster_bench.json"))
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import lance
    import numpy as np

    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        src = f"{tmp}/src.lance"
        rows = make_dataset(src, args.gb, args.fragments, args.version)
        print(f"dataset: {rows} rows, {dir_bytes(src) / 1e9:.2f} GB, {args.fragments} fragments", flush=True)
        url, procs = start_cluster(tmp)
        try:
            seconds = {}
            for name, master in (("local[2]", "local[2]"), ("standalone", url)):
                uri = f"{tmp}/{name.replace('[', '').replace(']', '')}.lance"
                shutil.copytree(src, uri)
                seconds[name] = timed_compact(master, uri, args.target_rows, args.mode)
                print(f"{name}: {seconds[name]:.1f} s", flush=True)
            a, b = (np.sort(lance.dataset(f"{tmp}/{n}.lance").to_table(columns=["id"])
                            .column("id").to_numpy()) for n in ("local2", "standalone"))
            assert np.array_equal(a, b), "compacted datasets differ"
        finally:
            stop(procs)
    ratio = seconds["standalone"] / seconds["local[2]"]
    result = {"rows": rows, "gb": args.gb, "fragments": args.fragments, "mode": args.mode,
              "local_s": seconds["local[2]"], "standalone_s": seconds["standalone"], "ratio": ratio}
    print(json.dumps(result))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
