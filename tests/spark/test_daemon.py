"""The worker daemon: which ``sys.path`` entries it takes off (pyspark's own zips, never a
separate Spark install's), and that workers forked from it import pyspark compiled."""

from __future__ import annotations

from pathlib import Path

import pytest

from lance_spark_ops.spark.runtime.daemon import shipped_pyspark_entries
from lance_spark_ops.spark.runtime.runner import TaskContext, run_tasks


def _pip_layout(site: Path, py4j: str = "0.10.9.9") -> dict[str, str]:
    """A pip-installed pyspark (and py4j) under ``site``; returns the entries Spark puts first."""
    pkg = site / "pyspark"
    (pkg / "python" / "lib").mkdir(parents=True)
    (pkg / "jars").mkdir()
    (pkg / "__init__.py").write_text("")
    (site / f"py4j-{py4j}.dist-info").mkdir()
    lib = pkg / "python" / "lib"
    entries = {"zip": lib / "pyspark.zip", "py4j": lib / "py4j-0.10.9.9-src.zip",
               "jar": pkg / "jars" / "spark-core_2.13-4.1.0.jar"}
    for p in entries.values():
        p.write_bytes(b"")
    return {k: str(v) for k, v in entries.items()}


def test_pip_pysparks_own_zips_and_jar_are_taken_off(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    e = _pip_layout(site)
    path = [str(tmp_path / "cwd"), e["zip"], e["py4j"], e["jar"], "/usr/lib/python3.11", str(site)]
    assert shipped_pyspark_entries(path) == [e["zip"], e["py4j"], e["jar"]]


def test_py4j_zip_stays_without_that_py4j_version_installed(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    e = _pip_layout(site, py4j="0.10.9.7")
    assert shipped_pyspark_entries([e["zip"], e["py4j"], str(site)]) == [e["zip"]]


def test_a_separate_spark_installs_zip_stays(tmp_path: Path) -> None:
    """SPARK_HOME/python/lib/pyspark.zip belongs to the JVM that runs the worker: it wins over
    a pip-installed pyspark (maybe another version)."""
    site = tmp_path / "site-packages"
    _pip_layout(site)
    home = tmp_path / "spark-4.1.0" / "python" / "lib"
    home.mkdir(parents=True)
    path = [str(home / "pyspark.zip"), str(home / "py4j-0.10.9.9-src.zip"), str(site)]
    assert shipped_pyspark_entries(path) == []


def test_nothing_taken_off_when_another_pyspark_comes_first(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    e = _pip_layout(site)
    other = tmp_path / "src"
    (other / "pyspark").mkdir(parents=True)
    (other / "pyspark" / "__init__.py").write_text("")
    assert shipped_pyspark_entries([e["zip"], str(other), str(site)]) == []
    assert shipped_pyspark_entries([e["zip"], "/usr/lib/python3.11"]) == []  # no pyspark directory at all


def _where_pyspark_is(task: int, ctx: TaskContext) -> tuple[str, list[str]]:
    import sys

    import pyspark

    return pyspark.__file__, [p for p in sys.path if p.endswith((".zip", ".jar"))]


@pytest.mark.spark
def test_workers_import_the_installed_pyspark(spark) -> None:
    """Workers forked from the daemon run pyspark from the installed package (its compiled
    modules), not from the zip Spark puts first on PYTHONPATH."""
    import pyspark

    out = run_tasks(spark, "jobD", [0, 1], _where_pyspark_is)
    for _, (file, archives) in out.values():
        assert file == pyspark.__file__
        assert not any(a.endswith(("pyspark.zip", ".jar")) for a in archives), archives


def test_job_driver_imports_the_installed_pyspark(tmp_path: Path) -> None:
    """A job's driver under spark-submit (pyspark.zip first on PYTHONPATH) imports pyspark
    from the installed package when it starts its session, not from the zip."""
    import os
    import subprocess
    import sys

    import pyspark

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    shipped = [str(lib / "pyspark.zip"), *map(str, sorted(lib.glob("py4j-*-src.zip")))]
    script = (
        "import sys\n"
        "import lance_spark_ops.spark.runtime.session as session\n"
        "session.get_spark = lambda name: None  # no JVM: only the import path is checked\n"
        "from lance_spark_ops.spark.runtime import cli\n"
        "assert 'pyspark' not in sys.modules\n"
        "cli._session(cli.Job('probe', None, None, ''))\n"
        "import pyspark\n"
        "print(pyspark.__file__)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*shipped, str(Path.cwd())]))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == pyspark.__file__


def test_preload_covers_every_vector_task_module() -> None:
    """A vector job's tasks import nothing of this package that the daemon did not preload."""
    from lance_spark_ops.spark.indices import vector_index_tasks
    from lance_spark_ops.spark.runtime.daemon import PRELOAD

    here = Path(vector_index_tasks.__file__).parent
    tasks = {f"lance_spark_ops.spark.indices.{p.stem}" for p in here.glob("vector_*_tasks.py")}
    assert "lance_spark_ops.spark.indices.vector_join_tasks" in tasks
    assert tasks <= set(PRELOAD)


_PRELOAD_PROBE = """
import sys
from lance_spark_ops.spark.runtime.daemon import preload
failed = preload()
from lance_spark_ops.index.vector import kmeans
print("numba" in sys.modules, bool(kmeans._loaded), failed)
"""


@pytest.mark.parametrize("flag", ["", "1"])
def test_daemon_loads_the_kernels_only_when_asked(flag: str) -> None:
    """Without LSO_PRELOAD_KERNELS the daemon's preload (every task module included) leaves numba
    unimported: a session's first job does not wait for it; with it, the k-means kernels are
    loaded before any worker is forked."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("LSO_PRELOAD_KERNELS", "LSO_NO_COMPILED")}
    if flag:
        env["LSO_PRELOAD_KERNELS"] = flag
    out = subprocess.run([sys.executable, "-c", _PRELOAD_PROBE], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[:2] == (["True", "True"] if flag else ["False", "False"])
    assert "".join(out[2:]) == "[]"


def test_kernel_preload_names_every_kernel_family() -> None:
    """The daemon's opt-in kernel list (module names, as PRELOAD) matches compile_kernels'."""
    from lance_spark_ops.compile_kernels import LOADERS
    from lance_spark_ops.spark.runtime.daemon import KERNELS

    assert {(f.__module__, f.__name__) for _, f in LOADERS} == set(KERNELS)


_S3_PROBE = """
import sys
from lance_spark_ops.spark.runtime.daemon import preload
failed = preload()
from lance_spark_ops.io import s3_session
loader = s3_session._LOADER
http = sys.modules.get("lance_spark_ops.io.s3_http")
print("s3fs" in sys.modules, loader is not None and len(loader._cache) > 0,
      http is not None and len(http._CONTEXTS) > 0, failed)
"""


@pytest.mark.parametrize("flag", ["", "0"])
def test_daemon_warms_the_s3_client_data_unless_off(flag: str) -> None:
    """With s3fs installed the daemon imports it, parses botocore's S3 data into the shared
    loader and builds the clients' shared TLS context before forking (a worker's first S3 task
    no longer pays them); LSO_PRELOAD_S3=0: not."""
    import os
    import subprocess
    import sys

    pytest.importorskip("s3fs")
    env = {k: v for k, v in os.environ.items() if k not in ("LSO_PRELOAD_S3", "LSO_PRELOAD_KERNELS")}
    if flag:
        env["LSO_PRELOAD_S3"] = flag
    out = subprocess.run([sys.executable, "-c", _S3_PROBE], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[:3] == (["False"] * 3 if flag else ["True"] * 3)
    assert "".join(out[3:]) == "[]"


_REWRITE_PROBE = """
import pickle, sys
from lance_spark_ops.spark.runtime.daemon import preload
failed = preload()
before = set(sys.modules)
from lance_spark_ops.spark.files.rewrite_tasks import run_rewrite
from lance_spark_ops.spark.runtime.runner import TaskContext
with open(sys.argv[1], "rb") as f:
    specs = pickle.load(f)
for i, spec in enumerate(specs):
    run_rewrite(spec, TaskContext("probe", i, "0"))
print(sorted(m for m in set(sys.modules) - before if m.startswith("lance_spark_ops")), failed)
"""


def test_preload_covers_a_rewrite_tasks_imports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compaction task in a process that ran the daemon's preload (as a forked worker does)
    imports nothing of this package on first use: each such import was paid in every worker's
    first task, in the job's critical path (bench/cluster_timeline.py)."""
    import pickle
    import subprocess
    import sys

    import numpy as np
    import pyarrow as pa

    lance = pytest.importorskip("lance")
    from lance_spark_ops.spark import compact
    from lance_spark_ops.spark.runtime.job import Job

    n = 400
    vec = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(n * 4, dtype=np.float32)), 4)
    uri = str(tmp_path / "ds.lance")
    lance.write_dataset(pa.table({"id": np.arange(n, dtype=np.int64), "x": np.arange(n) * 0.5,
                                  "s": [f"s{i % 7}" for i in range(n)], "v": vec}),
                        uri, max_rows_per_file=100, data_storage_version="2.1")
    lance.dataset(uri).delete("id % 5 = 0")
    specs: list = []

    class Planned(Exception):
        pass

    def keep(self, tasks, fn, costs=None, in_driver=False):  # noqa: ANN001, ANN202 - Job.run_tasks' signature
        specs.extend(tasks)
        raise Planned

    monkeypatch.setattr(Job, "run_tasks", keep)
    with pytest.raises(Planned):
        compact(None, uri, target_rows_per_fragment=200)
    assert specs
    path = tmp_path / "specs.pkl"
    path.write_bytes(pickle.dumps(specs))
    out = subprocess.run([sys.executable, "-c", _REWRITE_PROBE, str(path)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]", "[]"]


_CLOSED_PEER = """
import os, socket, sys
os.environ["PYTHON_DAEMON_KILL_WORKER_ON_FLUSH_FAILURE"] = "true"  # as Spark's executors set it
from pyspark import daemon
from lance_spark_ops.spark.runtime.daemon import quiet_when_executor_gone
ours, executor = socket.socketpair()  # a Unix domain socket, as with WORKER_SETTINGS
executor.close()  # the session stopped
worker = daemon.worker if sys.argv[1] == "theirs" else quiet_when_executor_gone(daemon.worker)
print("code", worker(ours, True))
"""


@pytest.mark.parametrize("which", ["theirs", "ours"])  # an argv[1] "pyspark..." names a worker module
def test_worker_whose_executor_closed_first_ends_quietly(which: str) -> None:
    """pyspark's own worker raises BrokenPipeError (the daemon prints its traceback under a job
    that succeeded); ours returns code 1 (the worker is not reused) and prints nothing."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", _CLOSED_PEER, which], capture_output=True, text=True,
                         timeout=120)
    if which == "theirs":
        assert run.returncode != 0 and "BrokenPipeError" in run.stderr
    else:
        assert run.returncode == 0 and run.stdout.strip() == "code 1", run.stderr
        assert "Traceback" not in run.stderr, run.stderr


def test_other_worker_errors_still_raise() -> None:
    from lance_spark_ops.spark.runtime.daemon import quiet_when_executor_gone

    def broken(sock: object, authenticated: bool) -> int:
        raise ValueError("not a closed connection")

    with pytest.raises(ValueError, match="not a closed connection"):
        quiet_when_executor_gone(broken)(None, True)
    assert quiet_when_executor_gone(lambda sock, authenticated: 0)(None, True) == 0
