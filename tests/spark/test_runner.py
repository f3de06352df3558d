from __future__ import annotations

import pickle

import pytest

from lance_spark_ops.errors import CorruptFileError, SchemaError
from lance_spark_ops.spark.runtime.runner import TaskContext, run_tasks, run_tasks_locally


def _square(task: dict, ctx: TaskContext) -> dict:
    return {"value": task["x"] ** 2, "prefix": ctx.file_prefix}


def test_local_runner() -> None:
    out = run_tasks_locally("job1", [{"x": 2}, {"x": 3}], _square)
    assert {k: v[1]["value"] for k, v in out.items()} == {0: 4, 1: 9}
    assert out[1][1]["prefix"] == "job1-t1-alocal"


@pytest.mark.spark
def test_spark_runner_one_result_per_task(spark) -> None:
    tasks = [{"x": i} for i in range(5)]
    out = run_tasks(spark, "jobX", tasks, _square, description="test: squares")
    assert sorted(out) == list(range(5))
    assert [out[i][1]["value"] for i in range(5)] == [i * i for i in range(5)]
    assert all(out[i][1]["prefix"].startswith(f"jobX-t{i}-a") for i in range(5))


def _fail_on_odd(task: dict, ctx: TaskContext) -> dict:
    if task["x"] % 2:
        raise CorruptFileError(f"task {task['x']} found bad bytes", path=f"mem://ds/data/{task['x']}.lance")
    return {"value": task["x"]}


def test_lance_errors_pickle_with_class_and_path() -> None:
    e = pickle.loads(pickle.dumps(SchemaError("no such column", path="s3://b/ds")))
    assert type(e) is SchemaError and e.path == "s3://b/ds" and str(e) == "s3://b/ds: no such column"


@pytest.mark.spark
def test_spark_runner_raises_a_task_lance_error_typed(spark) -> None:
    """A task's LanceError reaches the driver as itself (the first failing task's), not as
    Spark's PythonException, and is not retried."""
    with pytest.raises(CorruptFileError, match="task 1 found bad bytes") as info:
        run_tasks(spark, "jobE", [{"x": i} for i in range(4)], _fail_on_odd)
    assert info.value.path == "mem://ds/data/1.lance"


def test_worker_daemon_preloads_every_module() -> None:
    """get_spark's daemon imports the executor modules before forking (a renamed module
    would silently stop being preloaded otherwise)."""
    import subprocess
    import sys

    code = ("import sys, threading; from lance_spark_ops.spark.runtime import daemon; "
            "assert daemon.preload() == []; "
            "assert {'pandas', 'pyspark.worker', 'lance_spark_ops.encoding.encode'} <= set(sys.modules); "
            "assert threading.active_count() == 1")  # the daemon forks: no Python thread may run
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def _socket_kind(task: int, ctx: TaskContext) -> str:
    import os

    return os.environ.get("PYTHON_UNIX_DOMAIN_ENABLED", "unset")


@pytest.mark.spark
def test_test_session_workers_fork_from_our_daemon(spark) -> None:
    from lance_spark_ops.spark.runtime.session import get_spark

    assert spark.conf.get("spark.python.daemon.module") == "lance_spark_ops.spark.runtime.daemon"
    # and reach their executor over a Unix domain socket (no Nagle / delayed-ACK wait per task)
    out = run_tasks(spark, "jobU", [0, 1], _socket_kind)
    assert {r.lower() for _, r in out.values()} == {"true"}
    assert get_spark() is spark  # the active session is reused, its configuration kept


def _own_payload(task: dict, ctx: TaskContext) -> dict:
    from pyspark import TaskContext as SparkTaskContext

    return {"x": task["x"], "size": len(task["blob"]), "head": task["blob"][:8],
            "partition": SparkTaskContext.get().partitionId()}


def test_waves_hold_at_most_the_limit() -> None:
    from lance_spark_ops.spark.runtime.runner import waves

    assert waves([5, 5, 5], 10) == [range(0, 2), range(2, 3)]
    assert waves([3, 20, 3, 3], 10) == [range(0, 1), range(1, 2), range(2, 4)]  # too big: alone
    assert waves([1] * 4, 100) == [range(0, 4)]
    assert waves([1, 1], 0) == [range(0, 1), range(1, 2)]
    assert waves([], 10) == []


@pytest.mark.spark
def test_large_descriptors_run_in_waves(spark) -> None:
    """Past ``Tuning.task_inline_bytes`` in all (8 MiB: 12 tasks of 1 MiB) a job runs as Spark
    jobs whose closures hold at most that (7 tasks, then 5: partition ids start again); each
    task gets its own descriptor and keeps the job's task id."""
    import os

    from lance_spark_ops.spark.runtime.job import first_attempt

    blobs = [bytes([i]) * 8 + os.urandom((1 << 20) - 8) for i in range(12)]
    out = run_tasks(spark, "jobB", [{"x": i, "blob": b} for i, b in enumerate(blobs)], _own_payload)
    assert sorted(out) == list(range(12))
    for i in range(12):
        attempt, r = out[i]
        assert r == {"x": i, "size": 1 << 20, "head": bytes([i]) * 8, "partition": i if i < 7 else i - 7}
        assert first_attempt(attempt)  # nothing retried


def _fail_second_mark_ran(task: dict, ctx: TaskContext) -> int:
    from pathlib import Path

    Path(task["dir"], f"ran-{task['x']}").touch()
    if task["x"] == 1:
        raise CorruptFileError("task 1 found bad bytes", path="mem://ds/data/1.lance")
    return task["x"]


@pytest.mark.spark
def test_a_failed_wave_stops_the_job(spark, tmp_path) -> None:
    """Each task its own wave (``inline_bytes=0``): task 1's LanceError is raised after its wave,
    and the waves after it never run."""
    tasks = [{"x": i, "dir": str(tmp_path)} for i in range(4)]
    with pytest.raises(CorruptFileError, match="task 1 found bad bytes"):
        run_tasks(spark, "jobW", tasks, _fail_second_mark_ran, inline_bytes=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ran-0", "ran-1"]
