"""Run a job with ``spark-submit`` in its own process group and kill it - the whole group (driver
kill) or only the Python workers (worker kill) - once a progress line of a chosen phase appeared
(on stdout: spark-submit merges the Python driver's stderr into it), plus a seeded extra delay.
Every wait is bounded."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"
TIMEOUT = 300.0  # a whole run, seconds


@dataclass
class DriverRun:
    returncode: int | None = None
    metrics: dict | None = None
    killed: bool = False  # the group (driver kill) or some workers (worker kill) were killed
    workers_killed: int = 0
    stderr: list[str] = field(default_factory=list)

    stdout: list[str] = field(default_factory=list)

    def tail(self, n: int = 15) -> str:
        return "".join(self.stderr[-n:] + self.stdout[-n:])


def _group_pids(pgid: int) -> list[tuple[int, str]]:
    """(pid, cmdline) of the live processes in process group ``pgid`` (from /proc)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[2]) != pgid or fields[0] == "Z":
                continue
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError):
            continue
        out.append((int(d), cmd))
    return out


def _python_workers(pgid: int) -> list[int]:
    """The Spark Python worker daemon and its forked workers (not the driver)."""
    return [pid for pid, cmd in _group_pids(pgid)
            if "python" in cmd and ("daemon" in cmd or "pyspark.worker" in cmd) and ".py " not in cmd]


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_job(script: str, args: list[str], *, fault: str | None, phase: str, kind: str, delay: float,
            master: str = "local[2]", on_marker: threading.Event | None = None) -> DriverRun:
    """spark-submit ``jobs/<script>``; ``fault`` None / "driver_kill" / "worker_kill" applied after
    the ``<kind> ...: <phase> started`` progress line and ``delay`` seconds. ``on_marker`` is set
    when that line appears (concurrent writers start there)."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               PYTHONPATH=str(ROOT), SPARK_LOCAL_IP="127.0.0.1")
    cmd = [str(SPARK_SUBMIT), "--master", master, "--driver-memory", "1g",
           "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2",
           str(ROOT / "jobs" / script), *args]
    run = DriverRun()
    marker = re.compile(rf"\b{re.escape(kind)} lso-[0-9a-f]+: {re.escape(phase)} started")
    seen = threading.Event()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    pgid = proc.pid
    out = run.stdout

    def read_err() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            run.stderr.append(line)
            if marker.search(line):
                seen.set()

    def read_out() -> None:  # spark-submit merges the Python driver's stderr into stdout
        assert proc.stdout is not None
        for line in proc.stdout:
            out.append(line)
            if marker.search(line):
                seen.set()

    readers = [threading.Thread(target=read_err, daemon=True), threading.Thread(target=read_out, daemon=True)]
    for t in readers:
        t.start()
    deadline = time.monotonic() + TIMEOUT
    try:
        while not seen.wait(0.05):
            if proc.poll() is not None or time.monotonic() > deadline:
                break
        if seen.is_set() and on_marker is not None:
            on_marker.set()
        if seen.is_set() and fault and proc.poll() is None:
            time.sleep(delay)  # the seeded kill moment after the marker
            if fault == "driver_kill" and proc.poll() is None:
                _kill_group(pgid)
                run.killed = True
            elif fault == "worker_kill":
                run.workers_killed = _kill_workers(proc, pgid, deadline)
                run.killed = run.workers_killed > 0
        proc.wait(max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        run.stderr.append("TIMEOUT: the job did not finish\n")
    finally:
        _kill_group(pgid)  # leftovers (a killed driver's JVM children, daemons) go too
        proc.wait(30)
        for t in readers:
            t.join(10)
    run.returncode = proc.returncode
    for line in reversed(out):
        if line.startswith("{"):
            try:
                run.metrics = json.loads(line)
            except ValueError:
                pass
            break
    return run


def _kill_workers(proc: subprocess.Popen, pgid: int, deadline: float) -> int:
    """SIGKILL the Python workers once some exist (bounded wait); how many were killed."""
    limit = min(deadline, time.monotonic() + 20)
    while proc.poll() is None and time.monotonic() < limit:
        pids = _python_workers(pgid)
        if pids:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            return len(pids)
        time.sleep(0.02)
    return 0
