"""Real Spark servers on 127.0.0.1 for the cluster tests, each started and stopped by its fixture:

* ``standalone``: a standalone master + one worker (2 cores, 2 GiB), via ``spark-class``;
  ready when the master's ``/json`` page lists the worker ALIVE.
* ``connect``: a Spark Connect server (``sbin/start-connect-server.sh``, local[2] inside),
  stopped with ``stop-connect-server.sh``; ready when a client session answers a query.

SPARK_HOME is the pyspark package directory; every wait is bounded; logs, pid files and work
directories live in the test's tmp dir and are printed when a server does not come up.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lance_spark_ops.spark.runtime.session import WORKER_SETTINGS
from tests.support.processes import free_port

READY_SECONDS = 90
CONNECT_MARK = "SPARK_CONNECT_MODE_ENABLED"
STOP_SECONDS = 30


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def server_env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_LOCAL_HOSTNAME": "127.0.0.1",
                "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
                "SPARK_PID_DIR": str(tmp / "pid"), "SPARK_LOG_DIR": str(tmp / "log"),
                "SPARK_WORKER_DIR": str(tmp / "work"), "SPARK_CONF_DIR": str(tmp / "conf")})
    for d in ("pid", "log", "work", "conf"):
        (tmp / d).mkdir(parents=True, exist_ok=True)
    env.pop("PYSPARK_GATEWAY_PORT", None)
    env.pop("PYSPARK_GATEWAY_SECRET", None)
    return env


def wait_for(what: str, check: Callable[[], Any], seconds: float, logs: list[Path]) -> Any:
    """Poll ``check`` until it returns a truthy value; fail with the logs after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            out = check()
            if out:
                return out
        except Exception:
            pass
        if time.monotonic() > deadline:
            text = "\n".join(f"--- {p}\n{p.read_text(errors='replace')[-4000:]}" for p in logs if p.exists())
            pytest.fail(f"{what} not ready after {seconds}s\n{text}")
        time.sleep(0.25)


def stop_process(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after a bounded wait (the process is one this module started)."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(STOP_SECONDS)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(STOP_SECONDS)


@dataclass
class Standalone:
    master_url: str
    web_url: str
    env: dict[str, str]
    tmp: Path

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.web_url}/json", timeout=5) as r:
            return json.loads(r.read())

    def submit(self, script: str, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
        cmd = [str(spark_home() / "bin" / "spark-submit"), "--master", self.master_url,
               "--conf", f"spark.pyspark.python={sys.executable}",
               "--conf", "spark.ui.enabled=false", "--conf", "spark.executor.memory=1g",
               "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
               script, *args]
        return subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=timeout)


def _spark_class(cls: str, args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    cmd = [str(spark_home() / "bin" / "spark-class"), cls, *args]
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    """A standalone master and one worker (2 cores) on loopback, for one test module."""
    tmp = tmp_path_factory.mktemp("standalone")
    env = server_env(tmp)
    port, web, wweb = free_port(), free_port(), free_port()
    mlog, wlog = tmp / "log" / "master.out", tmp / "log" / "worker.out"
    master = _spark_class("org.apache.spark.deploy.master.Master",
                          ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(web)], env, mlog)
    worker = None
    try:
        cluster = Standalone(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{web}", env, tmp)
        wait_for("standalone master", lambda: cluster.state().get("status") == "ALIVE", READY_SECONDS, [mlog])
        worker = _spark_class("org.apache.spark.deploy.worker.Worker",
                              [cluster.master_url, "--host", "127.0.0.1", "--cores", "2", "--memory", "2g",
                               "--webui-port", str(wweb), "--work-dir", str(tmp / "work")], env, wlog)
        wait_for("standalone worker",
                 lambda: any(w.get("state") == "ALIVE" for w in cluster.state().get("workers", [])),
                 READY_SECONDS, [mlog, wlog])
        yield cluster
    finally:
        if worker is not None:
            stop_process(worker)
        stop_process(master)


@dataclass
class ConnectServer:
    url: str
    env: dict[str, str]
    tmp: Path


def _connect_pid(tmp: Path) -> int | None:
    files = list((tmp / "pid").glob("*SparkConnectServer*.pid"))
    return int(files[0].read_text().strip()) if files else None


def _connect_session(url: str) -> Any:
    """A Connect client session; built by the Connect builder itself, because the classic
    builder refuses a remote session while this process's classic test session runs."""
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    return RemoteSparkSession.builder.remote(url).getOrCreate()


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    """A Spark Connect server (local[2] inside) bound to 127.0.0.1, for one test module."""
    tmp = tmp_path_factory.mktemp("connect")
    env = server_env(tmp)
    port = free_port()
    sbin = spark_home() / "sbin"
    confs = {"spark.connect.grpc.binding.port": str(port), "spark.connect.grpc.binding.address": "127.0.0.1",
             "spark.master": "local[2]", "spark.ui.enabled": "false", "spark.driver.host": "127.0.0.1",
             "spark.driver.bindAddress": "127.0.0.1", "spark.pyspark.python": sys.executable,
             "spark.sql.shuffle.partitions": "2", "spark.driver.memory": "2g", **WORKER_SETTINGS}
    args = [a for k, v in confs.items() for a in ("--conf", f"{k}={v}")]
    started = subprocess.run([str(sbin / "start-connect-server.sh"), *args], env=env, capture_output=True,
                             text=True, timeout=READY_SECONDS)
    server = ConnectServer(f"sc://127.0.0.1:{port}", env, tmp)
    pid = None
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        pid = wait_for("connect server pid", lambda: _connect_pid(tmp), 30, [])
        logs = list((tmp / "log").glob("*"))

        def answers() -> bool:
            with socket.create_connection(("127.0.0.1", port), timeout=2):
                return True

        wait_for("spark connect server", answers, READY_SECONDS, logs)
        yield server
    finally:
        subprocess.run([str(sbin / "stop-connect-server.sh")], env=env, capture_output=True,
                       timeout=STOP_SECONDS + 30)
        if pid is not None:
            _wait_gone(pid)


def _wait_gone(pid: int) -> None:
    """Bounded wait for the server process (ours, by pid) to exit; SIGKILL it after that."""
    deadline = time.monotonic() + STOP_SECONDS
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@contextlib.contextmanager
def connect_mode() -> Iterator[None]:
    """pyspark marks a process that made a Connect session (``SPARK_CONNECT_MODE_ENABLED``) and
    then builds Connect columns in ``pyspark.sql.functions``; the classic session of the other
    tests shares this process, so the mark is set only while a Connect test runs."""
    had = os.environ.get(CONNECT_MARK)
    os.environ[CONNECT_MARK] = "1"
    try:
        yield
    finally:
        if had is None:
            os.environ.pop(CONNECT_MARK, None)


@pytest.fixture(scope="module")
def _remote_session(connect_server: ConnectServer) -> Iterator[Any]:
    from lance_spark_ops.spark import register_data_source

    with connect_mode():
        session = _connect_session(connect_server.url)
        register_data_source(session)
    yield session
    with connect_mode():
        session.stop()


@pytest.fixture
def remote(_remote_session: Any) -> Iterator[Any]:
    """A Spark Connect client session to ``connect_server`` (lance source registered)."""
    with connect_mode():
        yield _remote_session
