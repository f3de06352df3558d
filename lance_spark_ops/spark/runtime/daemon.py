"""PySpark worker daemon that imports the executor-side modules once, before it forks workers.

Spark forks a Python worker from its daemon for each new concurrent task slot it needs (and
again when a worker dies). A worker forked from ``pyspark.daemon`` starts with nothing imported
and pays pyarrow, pandas (pyarrow imports it on first use), numpy and this package's codecs -
~0.5 s - inside its first task. Forked from this daemon, it inherits them. ``get_spark`` sets
``spark.python.daemon.module`` to this module; a module that fails to import is skipped (the
worker imports it itself, and reports the error, when a task needs it).

Before importing anything it also takes the installed pyspark's own ``pyspark.zip`` (and py4j
zip, and jars) off ``sys.path`` (``unship_pyspark``): imported from the zip, pyspark is compiled
from source in every new daemon (~0.4 s CPU), and each worker's first task re-reads that zip's
directory once per pyspark package imported from it (``importlib.invalidate_caches`` in
``setup_spark_files``, ~0.15 s CPU, more under load).

Preloading happens before the daemon tells Spark its port, not in a background thread: Spark
asks for the first fork 10-50 ms after it reads the port, so a background import could only
overlap with that fork by forking mid-import (a child inheriting another thread's import
locks), and would still have to finish before the next fork.

The numba kernels (k-means, HNSW, FSST, MinHash: ~0.5-1 s to import numba and load them from its cache)
are preloaded only with ``LSO_PRELOAD_KERNELS=1`` in the executors' environment
(``spark.executorEnv.LSO_PRELOAD_KERNELS``): the daemon announces its port after preloading, so
they would delay every session's first Python job, and with a core per worker the workers of a
vector job load them side by side in about the time of one load: a fresh session's first vector
optimize measured no faster with them preloaded (``bench/first_job_bench.py``). Preloaded, an
executor loads them once, not once per worker (CPU where cores are oversubscribed; memory
shared by the forked workers). The k-means kernel that a vector job's tasks use (PQ encode) is
built ahead of time by ``python -m lance_spark_ops.compile_kernels`` (``kernels_aot``): a worker
then loads it in about a millisecond without importing numba.

With s3fs installed (``LSO_PRELOAD_S3``: ``auto``, the default; ``1`` / ``0`` to force it on /
off) it also imports s3fs and aiobotocore and parses botocore's S3 data into the process's
shared loader, and builds the S3 clients' shared TLS verify context (``io.s3_session.warm``,
~0.6 s CPU once per executor, no connection made): a
worker's first task on S3 otherwise paid it before its first request (1.4-1.9 s wall measured
at load ~10, 0.4-0.6 s with the warm-up; ``bench/compact_timeline.py``).

After preloading it freezes what it imported (``worker_gc``): a reused worker runs a full
``gc.collect()`` after every task, which would otherwise walk all of it each time.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

from lance_spark_ops.spark.runtime.worker_gc import freeze_imported

PRELOAD = (
    "numpy", "pyarrow", "pyarrow.compute", "pyarrow.ipc",
    "lance_spark_ops.file.reader", "lance_spark_ops.file.writer", "lance_spark_ops.encoding.encode",
    "lance_spark_ops.table.dataset", "lance_spark_ops.spark.runtime.scan_tasks",
    "lance_spark_ops.spark.files.rewrite_tasks", "lance_spark_ops.spark.files.columns_tasks",
    "lance_spark_ops.spark.files.row_id_index_tasks", "lance_spark_ops.spark.indices.vector_index_tasks",
    # what a rewrite task imports on first use (the writer's field checks, the read-ahead, reading
    # small fragments together): ~0.17 s CPU of each worker's first compaction task otherwise
    "lance_spark_ops.encoding.support", "lance_spark_ops.io.prefetch", "lance_spark_ops.file.read_together",
    # the rest of a vector optimize's task path (a few ms: they import what is above)
    "lance_spark_ops.spark.indices.vector_join_tasks", "lance_spark_ops.spark.indices.vector_merge_tasks",
    "lance_spark_ops.spark.indices.vector_split_tasks", "lance_spark_ops.spark.indices.vector_drift_tasks",
    # what pyspark.daemon imports in each worker after forking (it starts no thread: numpy's and
    # pyarrow's allocator threads, which fork handles, are already running by now)
    "pyspark.worker",
)

# with LSO_PRELOAD_KERNELS=1: each kernel family's loader (as ``compile_kernels.LOADERS``)
KERNELS = (
    ("lance_spark_ops.index.vector.kmeans", "compiled_kernels"),
    ("lance_spark_ops.encoding.compression.compiled", "load_kernels"),
    ("lance_spark_ops.index.vector.hnsw", "compiled_kernels"),
    ("lance_spark_ops.index.scalar.minhash", "compiled_kernels"),
    ("lance_spark_ops.index.vector.rabitq", "compiled_kernels"),
)


def shipped_pyspark_entries(path: list[str]) -> list[str]:
    """The entries of ``path`` (a ``sys.path``) that Spark added from inside the installed
    pyspark package itself and that a plain import would find again, compiled, in that package:
    ``<site>/pyspark/python/lib/pyspark.zip``, ``<site>/pyspark/jars/*.jar`` (no Python inside)
    and ``<site>/pyspark/python/lib/py4j-<v>-src.zip`` when ``<site>`` also holds py4j ``<v>``.
    Empty when the first pyspark among the directories of ``path`` is not that one (a separate
    Spark install's zip must win: it matches its JVM)."""
    site = next((e for e in path if os.path.isfile(os.path.join(e or ".", "pyspark", "__init__.py"))), None)
    if site is None:
        return []
    package = os.path.join(os.path.abspath(site or "."), "pyspark")
    lib, jars = os.path.join(package, "python", "lib"), os.path.join(package, "jars")
    out = []
    for entry in path:
        folder, name = os.path.split(os.path.abspath(entry or "."))
        if folder == lib and name == "pyspark.zip" or folder == jars and name.endswith(".jar"):
            out.append(entry)
        elif folder == lib and name.startswith("py4j-") and name.endswith("-src.zip"):
            version = name[len("py4j-"):-len("-src.zip")]
            if os.path.isdir(os.path.join(os.path.dirname(package), f"py4j-{version}.dist-info")):
                out.append(entry)
    return out


def unship_pyspark() -> list[str]:
    """Remove ``shipped_pyspark_entries`` from ``sys.path`` and their zip importers from
    ``sys.path_importer_cache`` (``invalidate_caches`` re-reads every one); returns them. Does
    nothing once pyspark is imported (its modules would then come from two places)."""
    if "pyspark" in sys.modules:
        return []
    gone = shipped_pyspark_entries(sys.path)
    sys.path[:] = [e for e in sys.path if e not in gone]
    for key in list(sys.path_importer_cache):
        if any(key == e or key.startswith(e + os.sep) for e in gone):
            del sys.path_importer_cache[key]
    return gone


def preload() -> list[str]:
    """Import ``PRELOAD``; returns the modules that failed."""
    failed = []
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a daemon that cannot preload must still serve workers
            failed.append(name)
    if os.environ.get("LSO_PRELOAD_KERNELS") == "1":  # see the module's docstring
        for name, loader in KERNELS:
            try:
                if getattr(importlib.import_module(name), loader)() is None:
                    failed.append(f"{name}.{loader}")
            except Exception:  # noqa: BLE001
                failed.append(f"{name}.{loader}")
    if _preload_s3(os.environ.get("LSO_PRELOAD_S3", "auto")):
        from lance_spark_ops.io import s3_session

        if not s3_session.warm():
            failed.append("lance_spark_ops.io.s3_session.warm")
    try:
        import pyarrow

        pyarrow.array([0])  # pulls pandas in, as every first pyarrow conversion does
    except Exception:  # noqa: BLE001
        failed.append("pyarrow.array")
    return failed


def _preload_s3(setting: str) -> bool:
    """Whether to warm the S3 client's data: ``auto`` when s3fs is installed (not imported to tell)."""
    if setting.strip().lower() in ("0", "false", "no", "off"):
        return False
    if setting.strip().lower() in ("1", "true", "yes", "on"):
        return True
    import importlib.util

    return importlib.util.find_spec("s3fs") is not None


def main() -> None:
    """Unship pyspark, preload, then serve workers as ``pyspark.daemon`` does."""
    unship_pyspark()
    preload()
    from pyspark import daemon

    freeze_imported()  # forked workers' per-task collections skip what was imported here

    daemon.worker = quiet_when_executor_gone(daemon.worker)
    daemon.manager()


def quiet_when_executor_gone(worker: Callable[[Any, bool], int]) -> Callable[[Any, bool], int]:
    """``pyspark.daemon.worker`` ending the worker quietly (code 1: not reused) when its executor
    closed the connection first. A stopping session closes its workers' sockets; a worker's last
    flush then fails at once over a Unix domain socket (``session.WORKER_SETTINGS``), and pyspark
    would print that ``BrokenPipeError``'s traceback under a job that succeeded."""
    def run(sock: Any, authenticated: bool) -> int:
        try:
            return worker(sock, authenticated)
        except (BrokenPipeError, ConnectionResetError):
            return 1

    return run


if __name__ == "__main__":
    main()
