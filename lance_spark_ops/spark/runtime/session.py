"""``get_spark``: a SparkSession built from what spark-submit and the user configured (local
masters run this interpreter's workers), and the facts about a session that jobs need without
touching ``sparkContext`` (Spark Connect sessions have none): whether it is classic, its
parallelism, and the Spark job description (classic only)."""

from __future__ import annotations

import os
import re
import socket
import sys
from typing import Any


def is_classic(spark: Any) -> bool:
    """True for a classic (py4j) session; False for None and for Spark Connect sessions.

    A Connect session is an instance of ``pyspark.sql.connect.session.SparkSession``; that
    module is looked up, not imported (nothing made a Connect session if it is not loaded)."""
    if spark is None:
        return False
    connect = sys.modules.get("pyspark.sql.connect.session")
    return not (connect is not None and isinstance(spark, connect.SparkSession))


DEFAULT_PARALLELISM = 8  # a cluster that states neither its parallelism nor its executors
_LOCAL = re.compile(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?$")
_LOCAL_CLUSTER = re.compile(r"local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,")


def _conf(spark: Any, key: str) -> str | None:
    try:
        value = spark.conf.get(key, None)
    except Exception:  # noqa: BLE001 - a conf the server refuses to show counts as unset
        return None
    return None if value is None else str(value)


def default_parallelism(spark: Any) -> int:
    """How many tasks keep the session's executors busy, read from its conf (which classic and
    Connect sessions both have): ``spark.default.parallelism`` when set; else the master's
    thread count (``local`` 1, ``local[N]`` / ``local[N,F]`` N, ``local[*]`` the cores,
    ``local-cluster[N,C,M]`` N * C); else ``spark.executor.instances`` * ``spark.executor.cores``;
    else ``DEFAULT_PARALLELISM`` (8). 1 without a session."""
    if spark is None:
        return 1
    explicit = _conf(spark, "spark.default.parallelism")
    if explicit is not None and explicit.strip().isdigit() and int(explicit) > 0:
        return int(explicit)
    master = (_conf(spark, "spark.master") or "").strip()
    local = _LOCAL.match(master)
    if local:
        n = local.group(1)
        return (os.cpu_count() or 1) if n == "*" else max(1, int(n or 1))
    cluster = _LOCAL_CLUSTER.match(master)
    if cluster:
        return max(1, int(cluster.group(1)) * int(cluster.group(2)))
    instances, cores = _conf(spark, "spark.executor.instances"), _conf(spark, "spark.executor.cores")
    if instances and cores and instances.isdigit() and cores.isdigit() and int(instances) * int(cores) > 0:
        return int(instances) * int(cores)
    return DEFAULT_PARALLELISM


def set_description(spark: Any, text: str | None) -> None:
    """The Spark job description of jobs started from now on (classic sessions only)."""
    if is_classic(spark):
        spark.sparkContext.setJobDescription(text)


def _configured() -> dict[str, str]:
    """What the user configured for a new classic session. Under spark-submit its JVM (which
    the Python driver joins) holds what spark-submit resolved (``--master``, ``--name``,
    ``--conf``, ``spark-defaults.conf``). A plain ``python`` driver reads the same sources
    itself: a JVM launched for it would report launcher defaults (``local[*]``,
    ``pyspark-shell``) as if configured."""
    if os.environ.get("PYSPARK_GATEWAY_PORT"):
        from pyspark import SparkConf, SparkContext

        SparkContext._ensure_initialized()  # noqa: SLF001 - joins spark-submit's JVM
        return dict(SparkConf().getAll())
    return {**_defaults_file(), **_submit_args(os.environ.get("PYSPARK_SUBMIT_ARGS", ""))}


def _defaults_file() -> dict[str, str]:
    """``spark-defaults.conf`` of ``SPARK_CONF_DIR``, else ``SPARK_HOME/conf``, else PySpark's."""
    conf_dir = os.environ.get("SPARK_CONF_DIR")
    if not conf_dir:
        home = os.environ.get("SPARK_HOME")
        if not home:
            import pyspark

            home = os.path.dirname(pyspark.__file__)
        conf_dir = os.path.join(home, "conf")
    out: dict[str, str] = {}
    try:
        with open(os.path.join(conf_dir, "spark-defaults.conf"), encoding="utf-8") as f:
            for line in f:
                parts = line.split(None, 1)
                if len(parts) == 2 and not parts[0].startswith("#"):
                    out[parts[0]] = parts[1].strip()
    except OSError:
        pass
    return out


def _submit_args(text: str) -> dict[str, str]:
    """``--master``, ``--name`` and ``--conf k=v`` of ``PYSPARK_SUBMIT_ARGS``."""
    import shlex

    words, out = shlex.split(text), {}
    flags = {"--master": "spark.master", "--name": "spark.app.name"}
    for flag, value in zip(words, words[1:], strict=False):
        if flag in flags:
            out[flags[flag]] = value
        elif flag == "--conf" and "=" in value:
            key, _, v = value.partition("=")
            out[key] = v
    return out


# How executors run our Python workers (get_spark sets them where nobody did; a cluster's own
# configuration should carry them too, see conf/spark-defaults.conf):
# - forked with our modules already imported (spark.runtime.daemon);
# - talking to the executor over a Unix domain socket where the platform has them (Spark 4.1+).
#   Over loopback TCP the executor's small writes of a task's input wait for Python's delayed
#   ACK (Nagle's algorithm on the JVM's side): ~40 ms a task whose input is under Spark's 64 KiB
#   buffer, i.e. every task this library runs (bench/task_overhead_bench.py: 200 no-op tasks on
#   local[2] 5.2 s, 1.3 s with it).
#   The socket file goes in the executor's java.io.tmpdir, and a socket path holds at most 107
#   bytes: a YARN container's tmp directory is too long a path, so get_spark sets this only for
#   local and standalone masters (executors in the machine's own /tmp).
_DAEMON = {"spark.python.daemon.module": "lance_spark_ops.spark.runtime.daemon"}
# (no AF_UNIX on Windows)
_UNIX_SOCKET = {"spark.python.unix.domain.socket.enabled": "true"} if hasattr(socket, "AF_UNIX") else {}
UNIX_SOCKET_MASTERS = ("local", "spark://")


def worker_settings(master: str) -> dict[str, str]:
    """The settings above for a session on ``master``: the Unix socket only where
    ``UNIX_SOCKET_MASTERS``."""
    return {**_DAEMON, **(_UNIX_SOCKET if master.startswith(UNIX_SOCKET_MASTERS) else {})}


WORKER_SETTINGS = worker_settings("local")  # a local or standalone session's (tests, benches)


def session_settings(app_name: str, master: str | None, given: dict[str, str], configured: dict[str, str],
                     env: dict[str, str]) -> tuple[str, dict[str, str]]:
    """(master, conf) of a new classic session: ``master`` / ``given`` (the caller's) win over
    ``configured`` (spark-submit, ``spark-defaults.conf``) and the ``MASTER`` / ``SPARK_MASTER``
    environment variables; ``local[2]`` when nothing names one. Our own settings fill only keys
    nobody set; ``spark.pyspark.python`` (the driver's interpreter) only for local masters."""
    known = {**configured, **given}
    chosen = (master or known.get("spark.master") or env.get("MASTER") or env.get("SPARK_MASTER")
              or "local[2]")
    ours = {"spark.app.name": app_name, "spark.ui.showConsoleProgress": "false", **worker_settings(chosen)}
    if chosen.startswith("local"):
        ours["spark.pyspark.python"] = env.get("PYSPARK_PYTHON") or sys.executable
    conf = {**{k: v for k, v in ours.items() if k not in known}, **given}
    conf.pop("spark.master", None)
    return chosen, conf


def get_spark(app_name: str = "lance-spark-ops", master: str | None = None,
              conf: dict[str, str] | None = None) -> Any:
    """The active SparkSession, or a new one from what was configured (``session_settings``).

    Master, app name and conf come from (first wins) the arguments, spark-submit /
    ``spark-defaults.conf``, the ``MASTER`` / ``SPARK_MASTER`` environment variables; ``local[2]``
    only when nothing names a master. Our own settings apply only where nothing set them: Python
    workers fork from ``lance_spark_ops.spark.runtime.daemon`` (``spark.python.daemon.module``) and
    talk to their executor over a Unix domain socket (``worker_settings``: local and standalone
    masters), console progress bars off, and - for local masters only - executors run this interpreter
    (``spark.pyspark.python``; a cluster's executors have their own). With ``SPARK_REMOTE`` or
    ``spark.remote`` set the session is a Spark Connect one and only ``conf`` is passed on."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    given = dict(conf or {})
    builder = SparkSession.builder
    if os.environ.get("SPARK_REMOTE") or "spark.remote" in given:
        for k, v in given.items():
            builder = builder.config(k, v)
        return builder.appName(app_name).getOrCreate()
    chosen, settings = session_settings(app_name, master, given, _configured(), dict(os.environ))
    if chosen.startswith("local"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = builder.master(chosen)
    for k, v in settings.items():
        builder = builder.config(k, v)
    return builder.getOrCreate()
