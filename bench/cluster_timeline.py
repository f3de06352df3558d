"""Where two 1-core workers lose against the ideal half of one (issue #39): ``cluster_s3_bench``'s
scaling runs with each rewrite task's start / end / CPU seconds stamped in its worker, Spark's
own per-task times from the event log (launch, deserialize, run, result), and the CPU seconds
every process on the machine spent during the job (by role: driver, executors' JVMs, Python
workers, moto, the proxy, master / worker JVMs) against the job's wall time.

    python bench/cluster_timeline.py [--latency 20] [--rounds 2] [--conf k=v ...] [--warm-job]

``--conf`` adds session settings (as a user would set them) to both sessions.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from cluster_bench import start_cluster, stop  # noqa: E402
from cluster_s3_bench import SCALE_TARGET_ROWS, bench_store  # noqa: E402

STAMPS = Path(tempfile.gettempdir()) / "lso-cluster-stamps"
TICK = os.sysconf("SC_CLK_TCK")


def traced(spec, ctx):
    """``run_rewrite`` with its wall and CPU start / end written to ``STAMPS``."""
    start, cpu0 = time.time(), time.process_time()
    from lance_spark_ops.spark.files.rewrite_tasks import run_rewrite

    out = run_rewrite(spec, ctx)
    STAMPS.mkdir(exist_ok=True)
    (STAMPS / f"{os.getpid()}-{start:.6f}.json").write_text(json.dumps(
        {"pid": os.getpid(), "ppid": os.getppid(), "start": start, "end": time.time(),
         "cpu": time.process_time() - cpu0}))
    return out


def warm(task, ctx):
    """The bench's warm-up (imports the task path), with the worker's pid written to ``STAMPS``."""
    import lance_spark_ops.spark.files.rewrite_tasks  # noqa: F401

    STAMPS.mkdir(exist_ok=True)
    (STAMPS / f"warm-{os.getpid()}-{task}").write_text(str(os.getpid()))
    return os.getpid()


def _role(cmd: str) -> str | None:
    if "moto" in cmd or "lean_s3" in cmd:
        return "moto"
    if "latency_store" in cmd:
        return "proxy"
    if "deploy.master.Master" in cmd:
        return "master"
    if "deploy.worker.Worker" in cmd:
        return "worker-jvm"
    if "CoarseGrainedExecutorBackend" in cmd:
        return "executor-jvm"
    if "SparkSubmit" in cmd:
        return "driver-jvm"
    if "runtime.daemon" in cmd or "pyspark.daemon" in cmd:
        return "python-worker"
    return None


def cpu_by_pid() -> dict[int, tuple[str, float]]:
    """{pid: (role, CPU seconds)} of this process and its descendants (another session's
    servers and Spark processes on the machine are not ours); children's time excluded."""
    procs = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        procs[int(d)] = (int(stat[1]), cmd, (int(stat[11]) + int(stat[12])) / TICK)
    me, out = os.getpid(), {}
    for pid, (_, cmd, cpu) in procs.items():
        p, mine = pid, False
        while p > 1 and p in procs:
            if p == me:
                mine = True
                break
            p = procs[p][0]
        role = "driver" if pid == me else _role(cmd) or "other"
        if mine:
            out[pid] = (role, cpu)
    return out


def thread_cpu(pids: list[int]) -> dict[str, float]:
    """CPU seconds by thread name (digits dropped: "C2 CompilerThre", "GC Thread#") over ``pids``."""
    out: dict[str, float] = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                raw = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            except OSError:
                continue
            name = "".join(c for c in raw[raw.index("(") + 1:raw.rindex(")")] if not c.isdigit()).strip()
            f = raw.rsplit(")", 1)[1].split()
            out[name] = out.get(name, 0.0) + (int(f[11]) + int(f[12])) / TICK
    return out


def machine_busy() -> float:
    """Busy CPU seconds of the whole machine so far (/proc/stat)."""
    v = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(v) - v[3] - v[4]) / TICK


def spark_tasks(log_dir: Path, t0: float) -> list[dict]:
    """Every task of the event logs in ``log_dir`` that launched after ``t0``."""
    out = []
    for f in (f for f in log_dir.rglob("*") if f.is_file()):
        for line in f.read_text().splitlines():
            e = json.loads(line)
            if e.get("Event") != "SparkListenerTaskEnd":
                continue
            info, m = e["Task Info"], e.get("Task Metrics") or {}
            if info["Launch Time"] / 1000 < t0:
                continue
            out.append({"stage": e["Stage ID"], "exec": info["Executor ID"],
                        "launch": info["Launch Time"] / 1000 - t0, "finish": info["Finish Time"] / 1000 - t0,
                        "deser": m.get("Executor Deserialize Time", 0) / 1000,
                        "run": m.get("Executor Run Time", 0) / 1000,
                        "cpu": m.get("Executor CPU Time", 0) / 1e9,
                        "result_ser": m.get("Result Serialization Time", 0) / 1000})
    return sorted(out, key=lambda t: t["launch"])


def session(master: str, cores: int, name: str, log_dir: Path, extra: dict[str, str]):
    from pyspark.sql import SparkSession

    from lance_spark_ops.spark.runtime.runner import run_tasks
    from lance_spark_ops.spark.runtime.session import WORKER_SETTINGS

    b = (SparkSession.builder.master(master).appName(name)
         .config("spark.pyspark.python", sys.executable).config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.driver.host", "127.0.0.1").config("spark.executor.memory", "1g")
         .config("spark.cores.max", str(cores)).config("spark.executor.cores", "1")
         .config("spark.eventLog.enabled", "true").config("spark.eventLog.dir", str(log_dir))
         .config("spark.eventLog.compress", "false").config("spark.eventLog.rolling.enabled", "false")
         .config(map=WORKER_SETTINGS))
    for k, v in extra.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus
    deadline = time.monotonic() + 60
    while status().size() < cores + 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    pids = run_tasks(spark, "warm", list(range(2 * cores)), warm)
    print(f"   warm-up pids: {sorted(r for _, r in pids.values())}")
    return spark


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--latency", type=float, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--conf", nargs="*", default=[])
    ap.add_argument("--pin", action="store_true", help="each worker on its own CPU (a 1-core host)")
    ap.add_argument("--warm-job", action="store_true")
    ap.add_argument("--warm-jobs", type=int, default=0, help="N whole compactions first (per executor)")
    ap.add_argument("--store", choices=("moto", "lean"), default="moto")
    ap.add_argument("--out", default="/tmp/cluster_timeline.json")
    args = ap.parse_args()
    extra = dict(c.split("=", 1) for c in args.conf)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from lance_spark_ops.spark import compact
    from lance_spark_ops.spark.files import compaction

    compaction.run_rewrite = traced
    report = []
    with tempfile.TemporaryDirectory() as tmp, bench_store(args.latency, args.store) as store:
        url, procs = start_cluster(tmp, cores=1, workers=2, pin=args.pin)
        try:
            for r in range(args.rounds):
                for name in (("one", "two") if r % 2 == 0 else ("two", "one")):
                    cores = 1 if name == "one" else 2
                    log_dir = Path(tmp) / f"events-{r}-{name}"
                    log_dir.mkdir()
                    spark = session(url, cores, f"timeline {name}", log_dir, extra)
                    try:
                        # as cluster_s3_bench --warm-job / --warm-jobs N --warm-per-executor
                        for _ in range(max(int(args.warm_job), args.warm_jobs * cores)):
                            store.warm_job(spark)
                        uri = store.fresh_copy("bench")
                        for f in STAMPS.glob("*.json"):
                            f.unlink()
                        before, busy0 = cpu_by_pid(), machine_busy()
                        jvms = [p for p, (r, _) in before.items() if r in ("executor-jvm", "driver-jvm")]
                        threads0 = thread_cpu(jvms)
                        t0 = time.time()
                        m = compact(spark, uri, target_rows_per_fragment=SCALE_TARGET_ROWS,
                                    storage_options=store.via)
                        took = time.time() - t0
                        after, busy1 = cpu_by_pid(), machine_busy()
                        threads1 = thread_cpu(jvms)
                    finally:
                        spark.stop()
                    roles: dict[str, float] = {}
                    for pid, (role, c) in after.items():
                        roles[role] = roles.get(role, 0.0) + c - before.get(pid, (role, 0.0))[1]
                    stamps = sorted((json.loads(f.read_text()) for f in STAMPS.glob("*.json")),
                                    key=lambda s: s["start"])
                    st = spark_tasks(log_dir, t0)
                    print(f"\n== round {r + 1} {name}: {took:.2f} s wall, machine busy {busy1 - busy0:.2f} "
                          f"CPU s ({(busy1 - busy0) / took:.2f} cores); phases "
                          f"{ {k: round(v, 3) for k, v in m.seconds.items()} }")
                    store_cpu = roles.get("moto", 0.0) + roles.get("proxy", 0.0)
                    print(f"   CPU s: store (moto + proxy) {store_cpu:.2f}, the rest of this run's processes "
                          f"{sum(roles.values()) - store_cpu:.2f}")
                    print("   CPU s by role: " + ", ".join(f"{k} {v:.2f}" for k, v in
                                                          sorted(roles.items(), key=lambda kv: -kv[1])))
                    jt = {k: v - threads0.get(k, 0.0) for k, v in threads1.items()}
                    print("   JVM (driver + executors) CPU s by thread: " + ", ".join(
                        f"{k} {v:.2f}" for k, v in sorted(jt.items(), key=lambda kv: -kv[1])[:8]))
                    for s in stamps:
                        print(f"   task pid {s['pid']}: {s['start'] - t0:6.3f} -> {s['end'] - t0:6.3f} "
                              f"({s['end'] - s['start']:.3f} s wall, {s['cpu']:.3f} s CPU)")
                    for t in st:
                        print(f"   spark stage {t['stage']} exec {t['exec']}: launch {t['launch']:6.3f} "
                              f"finish {t['finish']:6.3f} deser {t['deser']:.3f} run {t['run']:.3f}")
                    report.append({"round": r + 1, "name": name, "seconds": took, "busy": busy1 - busy0,
                                   "roles": roles, "phases": m.seconds, "stamps": stamps, "spark": st})
        finally:
            stop(procs)
    Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
