"""A standalone cluster on an S3 store at a real request latency: two 1-core workers against
one, and the Python workers' peak RSS against the fragments a compaction task reads.

    python bench/cluster_s3_bench.py [--latency 20] [--rounds 2] [--rss-fragments 50 500] [--warm-job]
        [--pin] [--cpu-limit CPUS] [--store moto|lean] [--fragments 48] [--conf k=v ...]

The store is ``moto_server`` behind ``tests/support/latency_store``'s proxy (a child process)
holding each request ``--latency`` ms, or with ``--store lean`` ``tests/support/lean_s3`` (one
process holding each request itself, ~0.7 ms of CPU a request against moto's and the proxy's
~3-5: real S3 spends none of the cluster's CPU, and on these 2 CPUs moto's share of a two-worker
job was what the scaling measured). One master and two workers of 1 core each on 127.0.0.1
(``cluster_bench.start_cluster``).

- scaling: object_store_bench's dataset (48 fragments x 20 000 rows, a sixth deleted, written
  by pylance; ``--fragments`` more of them), compacted with ``target_rows_per_fragment=100 000``
  (8 groups: 8 tasks; a task per 6 fragments) in a
  session given one core (``spark.cores.max=1``: one executor on one worker) and in one given
  two (two 1-core executors, one per worker); alternating, each on a fresh server-side copy,
  each session warmed first. Reported: the two times and two / one (target <= 0.6). pylance reads
  every result: the same rows. ``--pin``: worker k and the processes it starts on CPU k only
  (``taskset``), as on 1-CPU hosts (Spark's ``--cores 1`` only counts task slots: unpinned, a lone
  worker's Python threads and JVM spread over both cores). ``--cpu-limit C``: worker k and what
  it starts in a cgroup of at most C CPUs (CFS quota, as a Kubernetes CPU limit; cgroup v1's
  ``cpu`` controller, root): with C = 0.5 on 2 CPUs the two workers together use at most one,
  and the store, the proxy and the driver keep the other, as on hosts of their own - the run
  is bounded by the workers' CPU, which is what the scaling asks about. ``--conf k=v``: a user's session
  settings, e.g. JVM flags in ``spark.{driver,executor}.extraJavaOptions``. The warm-up imports
  the task path in each executor's Python worker; with ``--warm-job`` it is a whole compaction of
  another copy instead (a session that has run a job before: the executors' JVMs past their first
  JIT compilations, each worker's S3 client made and connected), untimed.
- RSS (``--rounds 0``: this part only): datasets of N fragments x 10 000 rows (int64,
  float64, a 16-d float32 vector; ~0.8 MB a fragment), compacted as one group: one task on the
  worker (never in the driver, whatever its size) reads every fragment, prefetching ahead
  within ``LSO_IO_MAX_BYTES``, in a fresh 1-core session each (fresh Python workers:
  ``ru_maxrss`` is a process's peak); reported: ``CompactionMetrics.worker_peak_rss_bytes``.

Results: ``bench/results/cluster_s3_bench.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from cluster_bench import start_cluster, stop  # noqa: E402
from object_store_bench import FRAGMENTS, build, copy_prefix, ids_of, upload  # noqa: E402

from tests.support.latency_store import MotoServer, ProxyProcess, create_bucket, s3_options  # noqa: E402
from tests.support.lean_s3 import LeanS3Process  # noqa: E402

SCALE_TARGET_ROWS = 100_000
RSS_ROWS = 10_000


@dataclass
class BenchStore:
    """moto behind the latency proxy holding object_store_bench's dataset at ``SOURCE``."""

    endpoint: str  # moto's own: set-up and checks, not counted or delayed
    client: Any  # boto3, straight to moto
    direct: dict[str, str]  # storage options of moto's endpoint
    via: dict[str, str]  # storage options of the proxy's: what the timed jobs use

    def fresh_copy(self, name: str) -> str:
        """A server-side copy of the dataset in a new bucket; its URI."""
        bucket = f"{name}-{uuid.uuid4().hex[:12]}"
        create_bucket(self.endpoint, bucket)
        copy_prefix(self.client, "bench-src", "ds.lance", bucket, "ds.lance")
        return f"s3://{bucket}/ds.lance"

    def drop(self, uri: str) -> None:
        """Delete a copy's bucket and every object in it: a store holding every round's copies
        and outputs grows by ~0.3 GB a job here, and its CPU a request grew with it (the lean
        store's from 0.4 to 1.0 CPU s a job over three rounds of 192 fragments)."""
        bucket = uri.split("/")[2]
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                self.client.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
        self.client.delete_bucket(Bucket=bucket)

    def warm_job(self, spark: Any) -> None:
        """A whole untimed compaction of another copy (``--warm-job``), dropped after."""
        from lance_spark_ops.spark import compact

        uri = self.fresh_copy("warm")
        compact(spark, uri, target_rows_per_fragment=SCALE_TARGET_ROWS, storage_options=self.via)
        self.drop(uri)


SOURCE = "s3://bench-src/ds.lance"


@contextmanager
def bench_store(latency_ms: float, kind: str = "moto", fragments: int = FRAGMENTS) -> Iterator[BenchStore]:
    """Start the store (``latency_ms`` a request) and write the dataset; stop it after. ``kind``:
    ``moto`` behind the latency proxy, or ``lean`` (``tests.support.lean_s3``: one process that
    holds each request itself and costs the machine little CPU, as S3 costs a cluster none)."""
    import boto3

    with contextlib.ExitStack() as stack:
        if kind == "lean":
            lean = stack.enter_context(LeanS3Process(delay_ms=latency_ms))
            direct, delayed = lean.direct, lean.endpoint
        else:
            moto = stack.enter_context(MotoServer())
            proxy = stack.enter_context(ProxyProcess(moto.endpoint, delay_ms=latency_ms))
            direct, delayed = moto.endpoint, proxy.endpoint
        client = boto3.client("s3", endpoint_url=direct, aws_access_key_id="testing",
                              aws_secret_access_key="testing-secret", region_name="us-east-1")
        store = BenchStore(direct, client, s3_options(direct), s3_options(delayed))
        create_bucket(direct, "bench-src")
        build(SOURCE, store.direct, fragments=fragments)
        yield store


def _import_package(task: int, ctx: object) -> int:
    import lance_spark_ops.spark.files.rewrite_tasks  # noqa: F401 - the import is the point

    return task


def session(master: str, cores: int, name: str, extra: dict[str, str] | None = None):
    from pyspark.sql import SparkSession

    from lance_spark_ops.spark.runtime.runner import run_tasks
    from lance_spark_ops.spark.runtime.session import WORKER_SETTINGS

    b = SparkSession.builder
    for k, v in (extra or {}).items():  # the user's settings (--conf)
        b = b.config(k, v)
    spark = (b.master(master).appName(name)
             .config("spark.pyspark.python", sys.executable).config("spark.ui.enabled", "false")
             .config("spark.driver.host", "127.0.0.1").config("spark.executor.memory", "1g")
             .config("spark.cores.max", str(cores)).config("spark.executor.cores", "1")
             .config(map=WORKER_SETTINGS).getOrCreate())
    status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus  # the driver counts as one
    deadline = time.monotonic() + 60  # every executor registered (one per core), then warmed
    while status().size() < cores + 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    run_tasks(spark, "warm", list(range(2 * cores)), _import_package)
    return spark


def machine_cpu() -> float:
    """CPU seconds all CPUs of this machine have been busy since boot (``/proc/stat``)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _processes() -> Iterator[tuple[int, str]]:
    """This machine's processes: pid and command line (those gone meanwhile left out)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                yield int(pid), f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue


def _jvm_kind(cmd: str) -> str | None:
    """Which of Spark's JVMs a command line starts, or None for another process."""
    if "java" not in cmd.split(" ", 1)[0]:
        return None
    return ("executor" if "CoarseGrainedExecutorBackend" in cmd
            else "master" if "deploy.master.Master" in cmd
            else "worker daemon" if "deploy.worker.Worker" in cmd
            else "driver")


def _cpu(stat_path: str, children: bool = True) -> float:
    """User + system CPU seconds in a ``/proc`` stat file, with the waited-for children's
    (a thread's file repeats its process's children: ``children=False`` for threads)."""
    with open(stat_path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15 if children else 13]) / os.sysconf("SC_CLK_TCK")


def cpu_by_kind() -> dict[str, float]:
    """CPU seconds so far of this machine's processes by kind (the store, the proxy, Spark's
    JVMs, its Python workers, this bench), with their waited-for children's."""
    out: dict[str, float] = {}
    for pid, cmd in _processes():
        if pid == os.getpid():
            kind = "bench (driver)"
        elif "moto_store" in cmd or "moto_server" in cmd:
            kind = "moto"
        elif "latency_store" in cmd:
            kind = "proxy"
        elif "lean_s3" in cmd:
            kind = "lean store"
        elif (jvm := _jvm_kind(cmd)) is not None:
            kind = f"jvm {jvm}"
        elif "pyspark" in cmd:
            kind = "python workers"
        else:
            kind = "other"
        try:
            out[kind] = out.get(kind, 0.0) + _cpu(f"/proc/{pid}/stat")
        except OSError:
            continue  # gone meanwhile
    return out


def jvm_threads() -> dict[str, float]:
    """CPU seconds so far of the Spark JVMs' threads, by JVM kind and thread name (Linux keeps
    15 characters of a name): where a job's JVM CPU goes."""
    out: dict[str, float] = {}
    for pid, cmd in _processes():
        jvm = _jvm_kind(cmd)
        if jvm is None:
            continue
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    name = f.read().strip().rstrip("0123456789#-")  # one name for a pool's threads
                key = f"{jvm}: {name}"
                out[key] = out.get(key, 0.0) + _cpu(f"/proc/{pid}/task/{tid}/stat", children=False)
        except OSError:
            continue  # gone meanwhile
    return out


def rss_dataset(path: Path, fragments: int) -> None:
    import lance

    if (path / "_versions").is_dir() and len(lance.dataset(str(path)).get_fragments()) == fragments:
        return
    n = fragments * RSS_ROWS
    rng = np.random.default_rng(fragments)
    vec = rng.standard_normal((n, 16), dtype=np.float32)
    t = pa.table({"id": np.arange(n, dtype=np.int64), "x": rng.standard_normal(n),
                  "v": pa.FixedSizeListArray.from_arrays(pa.array(vec.ravel()), 16)})
    lance.write_dataset(t, str(path), mode="overwrite", max_rows_per_file=RSS_ROWS,
                        data_storage_version="2.1")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--latency", type=float, default=20)
    ap.add_argument("--fragments", type=int, default=FRAGMENTS,
                    help="fragments of the scaling dataset (48: the issue's; tasks = fragments / 6)")
    ap.add_argument("--store", choices=("moto", "lean"), default="moto",
                    help="moto behind the latency proxy, or tests.support.lean_s3 (little CPU a request)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--rss-fragments", type=int, nargs="*", default=[50, 500])
    ap.add_argument("--cache", default="/tmp/lso-bench-rss")
    ap.add_argument("--conf", nargs="*", default=[], help="session settings k=v (a user's), both sessions")
    ap.add_argument("--pin", action="store_true", help="each worker on its own CPU (a 1-core host)")
    ap.add_argument("--cpu-limit", type=float, default=None,
                    help="each worker and what it starts in a cgroup of at most this many CPUs")
    ap.add_argument("--warm-job", action="store_true", help="warm each session with a whole compaction")
    ap.add_argument("--warm-jobs", type=int, default=0,
                    help="warm each session with N whole compactions (JIT closer to settled)")
    ap.add_argument("--warm-per-executor", action="store_true",
                    help="the warm jobs times the session's executors: each executor's JVM has run as many "
                         "tasks before the timed job in both sessions (a JIT state alike)")
    ap.add_argument("--threads", action="store_true", help="print the JVM threads' CPU of each job")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "cluster_s3_bench.json"))
    args = ap.parse_args()
    extra = dict(c.split("=", 1) for c in args.conf)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import lance

    from lance_spark_ops.spark import compact
    from lance_spark_ops.spark.runtime.tuning import Tuning

    result: dict = {"latency_ms": args.latency, "store": args.store, "fragments": args.fragments,
                    "scale_target_rows": SCALE_TARGET_ROWS,
                    "warm_job": args.warm_job, "warm_jobs": args.warm_jobs or int(args.warm_job),
                    "warm_per_executor": args.warm_per_executor,
                    "pin": args.pin, "cpu_limit": args.cpu_limit, "conf": extra}
    with tempfile.TemporaryDirectory() as tmp, bench_store(args.latency, args.store, args.fragments) as store:
        client, direct, via = store.client, store.direct, store.via
        expected = ids_of(SOURCE, direct)
        url, procs = start_cluster(tmp, cores=1, workers=2, pin=args.pin, cpu_limit=args.cpu_limit)
        try:
            seconds: dict[str, list[float]] = {"one": [], "two": []}
            phases: dict[str, list[dict[str, float]]] = {"one": [], "two": []}  # the job's phases
            # CPU seconds the whole machine spent during each job (workers, store, proxy, driver):
            # with both CPUs busy, two workers cannot take less than half of it
            busy: dict[str, list[float]] = {"one": [], "two": []}
            by_kind: dict[str, list[dict[str, float]]] = {"one": [], "two": []}  # the same by process kind
            threads: dict[str, list[dict[str, float]]] = {"one": [], "two": []}  # --threads: JVM threads' CPU
            tasks = {}
            for r in range(args.rounds):  # --rounds 0: the RSS part only
                for name in (("one", "two") if r % 2 == 0 else ("two", "one")):
                    cores = 1 if name == "one" else 2
                    spark = session(url, cores, f"cluster-s3 {name}", extra)
                    try:
                        warm = (args.warm_jobs or int(args.warm_job)) * (cores if args.warm_per_executor
                                                                        else 1)
                        for _ in range(warm):
                            store.warm_job(spark)
                        uri = store.fresh_copy("bench")
                        threads0 = jvm_threads() if args.threads else {}
                        busy0, kinds0, t0 = machine_cpu(), cpu_by_kind(), time.perf_counter()
                        m = compact(spark, uri, target_rows_per_fragment=SCALE_TARGET_ROWS,
                                    storage_options=via)
                        took = time.perf_counter() - t0
                        busy[name].append(round(machine_cpu() - busy0, 2))
                        kinds1 = cpu_by_kind()
                        by_kind[name].append({k: round(v - kinds0.get(k, 0.0), 2) for k, v in kinds1.items()
                                              if v - kinds0.get(k, 0.0) >= 0.01})
                        if args.threads:
                            d = {k: v - threads0.get(k, 0.0) for k, v in jvm_threads().items()}
                            top = sorted(((v, k) for k, v in d.items() if v >= 0.02), reverse=True)[:12]
                            threads[name].append({k: round(v, 2) for v, k in top})
                            print(f"  {name}: JVM threads {threads[name][-1]}", flush=True)
                    finally:
                        spark.stop()
                    if not np.array_equal(ids_of(uri, direct), expected):
                        raise AssertionError("compacted rows differ")
                    store.drop(uri)
                    seconds[name].append(took)
                    phases[name].append({k: round(v, 3) for k, v in m.seconds.items()})
                    tasks[name] = m.tasks
                    print(f"round {r + 1} {name} worker(s): {took:.2f} s, {m.tasks} tasks, machine CPU "
                          f"{busy[name][-1]:.2f} s {by_kind[name][-1]}, phases {phases[name][-1]}",
                          flush=True)
            if args.rounds:
                med = {k: statistics.median(v) for k, v in seconds.items()}
                result["scaling"] = {"seconds": seconds, "median": med, "tasks": tasks, "phases": phases,
                                     "machine_cpu_seconds": busy, "cpu_seconds_by_kind": by_kind,
                                     "jvm_thread_cpu_seconds": threads,
                                     "two_over_one": med["two"] / med["one"]}
                print(f"two / one = {med['two'] / med['one']:.2f}", flush=True)
            rss = {}
            for n in args.rss_fragments:
                local = Path(f"{args.cache}-{n}")
                rss_dataset(local, n)
                bucket = f"rss-{n}-{uuid.uuid4().hex[:8]}"
                create_bucket(store.endpoint, bucket)
                upload(client, local, bucket, "ds.lance")
                uri = f"s3://{bucket}/ds.lance"
                spark = session(url, 1, f"cluster-s3 rss {n}")
                try:
                    t0 = time.perf_counter()
                    # on the worker whatever its size (a small one would run in this driver process)
                    m = compact(spark, uri, target_rows_per_fragment=10 * n * RSS_ROWS, storage_options=via,
                                tuning=Tuning(driver_rewrite_bytes=0))
                    took = time.perf_counter() - t0
                finally:
                    spark.stop()
                got = lance.dataset(uri, storage_options=direct)
                if got.count_rows() != n * RSS_ROWS or len(got.get_fragments()) != 1:
                    raise AssertionError(f"rss {n}: {got.count_rows()} rows in {len(got.get_fragments())} "
                                         "fragments")
                rss[str(n)] = {"peak_rss_mib": m.worker_peak_rss_bytes / 2**20, "seconds": took,
                               "input_mib": m.bytes_read / 2**20, "tasks": m.tasks}
                print(f"rss {n} fragments: peak {m.worker_peak_rss_bytes / 2**20:.0f} MiB, read "
                      f"{m.bytes_read / 2**20:.0f} MiB, {took:.1f} s", flush=True)
            result["rss"] = rss
        finally:
            stop(procs)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
