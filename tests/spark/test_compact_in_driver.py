"""A compaction planned as one small task runs it in the driver's process (no Spark job;
``Tuning.driver_rewrite_bytes``): pylance reads the same rows; no Spark call is made (a Spark
Connect session that answers nothing but tags works); more tasks, a larger task or the knob at
0 run on executors; a failed attempt in the driver is retried under a new attempt id."""

from __future__ import annotations

from pathlib import Path

import pytest

from lance_spark_ops.errors import InvalidInputError, NotFoundError
from lance_spark_ops.spark.files.compaction import compact, materialize_deletions
from lance_spark_ops.spark.runtime.runner import TaskContext, run_tasks_in_driver
from lance_spark_ops.spark.runtime.tuning import DRIVER_REWRITE_BYTES, Tuning
from tests.spark.datasets import small_fragments

ON = Tuning(driver_rewrite_bytes=1 << 30)


def _rows(uri: str):
    import lance

    return lance.dataset(uri).to_table().sort_by("id")


def _connect_stub():
    """A Spark Connect session that only takes tags: any other use fails the test."""
    pytest.importorskip("grpc")
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    class Stub(ConnectSession):
        def __init__(self) -> None:  # no server: nothing else may be asked
            self.__dict__["tags"] = []

        def addTag(self, tag: str) -> None:  # noqa: N802 - Spark's name
            self.tags.append(("add", tag))

        def removeTag(self, tag: str) -> None:  # noqa: N802
            self.tags.append(("remove", tag))

        def __getattribute__(self, name: str):  # noqa: ANN204
            if name in ("addTag", "removeTag", "tags", "__dict__", "__class__"):
                return object.__getattribute__(self, name)
            raise AssertionError(f"Spark asked for {name!r}")

    return Stub()


@pytest.mark.parametrize("mode", ["reencode", "try_binary_copy"])
def test_one_small_task_in_the_driver_with_a_connect_session(tmp_path: Path, mode: str) -> None:
    uri = str(tmp_path / "ds")
    small_fragments(uri, "2.1", stable=False)
    before = _rows(uri)
    spark = _connect_stub()
    m = compact(spark, uri, target_rows_per_fragment=1_000_000, compaction_mode=mode, tuning=ON)
    assert m.tasks == 1 and m.tasks_in_driver == 1 and m.fragments_added == 1
    assert _rows(uri).equals(before)
    assert spark.tags and all(kind in ("add", "remove") for kind, _ in spark.tags)


def test_default_limit_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LSO_DRIVER_REWRITE_BYTES", raising=False)
    assert Tuning().driver_rewrite_limit() == DRIVER_REWRITE_BYTES == 128 << 20
    monkeypatch.setenv("LSO_DRIVER_REWRITE_BYTES", "0")
    assert Tuning().driver_rewrite_limit() == 0
    assert Tuning(driver_rewrite_bytes=5).driver_rewrite_limit() == 5  # the job's own value wins
    monkeypatch.setenv("LSO_DRIVER_REWRITE_BYTES", "lots")
    with pytest.raises(InvalidInputError, match="LSO_DRIVER_REWRITE_BYTES"):
        Tuning().driver_rewrite_limit()


def test_larger_plans_and_the_knob_off_run_on_executors(spark, tmp_path: Path) -> None:
    one = {"target_rows_per_fragment": 1_000_000}
    for name, kw, tuning in (("two", {"target_rows_per_fragment": 700}, ON),  # two tasks
                             ("off", one, Tuning(driver_rewrite_bytes=0)),
                             ("big", one, Tuning(driver_rewrite_bytes=1))):
        uri = str(tmp_path / name)
        small_fragments(uri, "2.1", stable=False)
        before = _rows(uri)
        m = compact(spark, uri, tuning=tuning, **kw)
        assert m.tasks_in_driver == 0 and m.tasks >= (2 if name == "two" else 1), name
        assert _rows(uri).equals(before)
    uri = str(tmp_path / "mat")
    small_fragments(uri, "2.1", stable=True, big_delete=True, fragments=1)
    before = _rows(uri)
    m = materialize_deletions(spark, uri, tuning=ON)
    assert m.tasks == 1 and m.tasks_in_driver == 1
    assert _rows(uri).equals(before)


def test_driver_attempts_retry_other_errors_and_raise_lance_errors() -> None:
    seen: list[str] = []

    def flaky(task: int, ctx: TaskContext) -> str:
        seen.append(ctx.file_prefix)
        if len(seen) < 3:
            raise OSError("connection reset")
        return ctx.attempt

    assert run_tasks_in_driver("lso-x", [7], flaky) == {0: ("driver.2", "driver.2")}
    assert seen == ["lso-x-t0-adriver.0", "lso-x-t0-adriver.1", "lso-x-t0-adriver.2"]

    def always(task: int, ctx: TaskContext) -> None:
        seen.append(ctx.attempt)
        raise OSError("down")

    seen.clear()
    with pytest.raises(OSError):
        run_tasks_in_driver("lso-x", [1], always, attempts=2)
    assert seen == ["driver.0", "driver.1"]

    def typed(task: int, ctx: TaskContext) -> None:
        seen.append(ctx.attempt)
        raise NotFoundError("gone")

    seen.clear()
    with pytest.raises(NotFoundError):
        run_tasks_in_driver("lso-x", [1], typed)
    assert seen == ["driver.0"]  # a LanceError is the task's answer: not retried
