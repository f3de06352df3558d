"""The job scaffold (spark.runtime.job): phases timed into metrics, Spark tags that cancel the job,
descriptions only on classic sessions, progress lines, and the one cleanup contract."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from lance_spark_ops.errors import CommitConflict, CommitStateUnknown
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.spark.runtime import job as job_mod
from lance_spark_ops.spark.runtime.job import Job, interrupt_tag
from lance_spark_ops.spark.runtime.runner import TaskContext


@dataclass
class _Metrics:
    seconds: dict[str, float] = field(default_factory=dict)
    job_tag: str = ""


def _double(task: int, ctx: TaskContext) -> int:
    return 2 * task


def test_phases_are_timed_counted_and_reported(caplog: pytest.LogCaptureFixture) -> None:
    m = _Metrics()
    caplog.set_level(logging.INFO, logger="lance_spark_ops")
    with Job(None, "demo", "mem://x", m) as job:
        with job.phase("work", tasks=3) as ph:
            assert job.run_tasks([1, 2, 3], _double) == [2, 4, 6]
            ph.add(rows=30, bytes=300)
        with job.phase("work", tasks=1):
            job.run_tasks([5], _double)
    assert set(m.seconds) == {"work", "total"} and m.seconds["total"] >= m.seconds["work"] > 0
    assert m.job_tag == job.tag == job.job_id and job.job_id.startswith("lso-")
    lines = [r.getMessage() for r in caplog.records if r.name == "lance_spark_ops"]
    assert any(x.endswith("work started, 3 tasks") for x in lines)
    assert any("work ended in" in x and x.endswith(" s, tasks 3/3, rows 30, bytes 300") for x in lines)
    assert lines[-1].startswith(f"demo mem://x {job.job_id}: done in")


def test_progress_says_what_is_known(caplog: pytest.LogCaptureFixture) -> None:
    """No made-up zeros: tasks run without a planned total are counted as such (not ``2/0``), a
    phase whose tasks ran in an inner phase says nothing of tasks (not ``0/1``), rows and bytes
    appear once counted (a counted 0 too), a phase with nothing known ends at its time."""
    caplog.set_level(logging.INFO, logger="lance_spark_ops")
    with Job(None, "demo", "mem://x") as job:
        with job.phase("sample"):
            job.run_tasks([1, 2], _double)
        with job.phase("build", tasks=1) as ph:
            with job.phase("train", tasks=2):
                job.run_tasks([1, 2], _double)
            ph.add(rows=0, bytes=77)
        with job.phase("plan"):
            pass
    lines = [r.getMessage() for r in caplog.records if r.name == "lance_spark_ops"]
    ended = {x.split(": ", 1)[1].split(" ended")[0]: x for x in lines if " ended in " in x}
    assert ended["sample"].endswith(" s, 2 tasks")
    assert ended["train"].endswith(" s, tasks 2/2")
    assert ended["build"].endswith(" s, rows 0, bytes 77") and "tasks" not in ended["build"]
    assert ended["plan"].endswith(" s")
    started = [x for x in lines if " started" in x and "Spark tag" not in x]
    assert [x.split(": ", 1)[1] for x in started] == ["sample started", "build started, 1 task",
                                                      "train started, 2 tasks", "plan started"]
    assert not any("0/" in x or "rows 0, bytes 0" in x for x in lines)


def test_session_start_lines(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """One line before the session starts (it takes seconds) and one when it is up."""
    from lance_spark_ops.spark.runtime import cli, session

    class FakeSession:
        version = "9.9.9"

        class conf:  # noqa: N801 - as SparkSession.conf
            @staticmethod
            def get(key: str) -> str:
                return {"spark.master": "local[2]"}[key]

    monkeypatch.setattr(session, "get_spark", lambda name: FakeSession())
    caplog.set_level(logging.INFO, logger="lance_spark_ops")
    assert isinstance(cli.start_session("demo"), FakeSession)
    lines = [r.getMessage() for r in caplog.records if r.name == "lance_spark_ops"]
    assert lines[0] == "demo: starting the Spark session"
    assert lines[1].startswith("demo: Spark session up in ")
    assert lines[1].endswith("(master local[2], Spark 9.9.9)")


def _where(task: int, ctx: TaskContext) -> tuple[int, int]:
    return task, ctx.task_id


def test_costliest_tasks_go_first_results_stay_in_task_order(spark) -> None:
    """With costs, Spark receives the tasks costliest first (ties in task order), so a slot
    is not left running one long task at the end; results still come in task order."""
    tasks = [10, 11, 12, 13, 14]
    costs = [5, 50, 0, 50, 7]
    for session in (None, spark):
        with Job(session, "demo", "mem://x", _Metrics()) as job:
            got = job.run_tasks(tasks, _where, costs=costs)
        assert [t for t, _ in got] == tasks
        # submission position of each task: 11 and 13 (cost 50) first, then 14, 10, 12
        assert [pos for _, pos in got] == [3, 0, 4, 1, 2]


def _files(store: ObjectStore) -> set[str]:
    return set(store.list("data"))


@pytest.mark.parametrize("error", [CommitConflict, CommitStateUnknown])
def test_cleanup_deletes_unreferenced_own_files_unless_state_unknown(tmp_path: Path, error: type) -> None:
    store = ObjectStore(str(tmp_path))
    store.write("data/someone-else.lance", b"x")
    job = Job(None, "demo", str(tmp_path))
    mine = [f"{job.job_id}-t{i}-a0-u.lance" for i in range(3)]
    with pytest.raises(error):
        with job.cleanup_on_failure(store, referenced=lambda: {mine[0]}):
            for name in mine:
                store.write(f"data/{name}", b"y")
            raise error("commit failed")
    kept = {"someone-else.lance", mine[0]} if error is CommitConflict else {"someone-else.lance", *mine}
    assert _files(store) == kept
    assert job.delete_unreferenced(store, set()) == (1 if error is CommitConflict else 3)
    assert _files(store) == {"someone-else.lance"}


def test_unreferenced_sidecar_directories_go_with_their_files(tmp_path: Path) -> None:
    """A job's unreferenced blob sidecar directory (``<file>/``) goes whole; a referenced
    file's sidecar, other jobs' files and an absent directory are left."""
    store = ObjectStore(str(tmp_path))
    job = Job(None, "demo", str(tmp_path))
    kept, gone = f"{job.job_id}-t0-a0-u.lance", f"{job.job_id}-t1-a0-u.lance"
    for name in (kept, gone, "someone-else.lance"):
        store.write(f"data/{name}", b"x")
        store.write(f"data/{name[:-len('.lance')]}/0.blob", b"b")
    assert job.delete_unreferenced(store, {kept}) == 2
    assert store.find_rel("data") == sorted(f"data/{n}" for n in (
        kept, kept[:-6] + "/0.blob", "someone-else.lance", "someone-else/0.blob"))
    assert job.delete_unreferenced(store, {kept}, directory="absent") == 0


@pytest.mark.parametrize(("attempt", "first"), [
    ("local", True), ("driver.0", True), ("driver.1", False), ("7.0.41", True), ("7.1.42", False),
    ("7.12.90", False), ("7", False), ("", False)])
def test_first_attempt(attempt: str, first: bool) -> None:
    assert job_mod.first_attempt(attempt) is first


class _Conf:
    def __init__(self, value: object) -> None:
        self.value = value

    def get(self, key: str, default: str | None = None) -> object:
        assert key == "spark.speculation"
        if isinstance(self.value, Exception):
            raise self.value
        return default if self.value is None else self.value


@pytest.mark.parametrize(("value", "on"), [(None, False), ("false", False), ("true", True), (" TRUE ", True),
                                           (RuntimeError("no conf"), True)])
def test_speculation_on(value: object, on: bool) -> None:
    """Unset or false: off. Unreadable: counted as on (copies may have written files)."""
    session = type("S", (), {"conf": _Conf(value)})()
    assert job_mod.speculation_on(session) is on


def _listed_dirs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    listed: list[str] = []
    real = ObjectStore.list
    monkeypatch.setattr(ObjectStore, "list", lambda self, rel: listed.append(rel) or real(self, rel))
    return listed


@pytest.mark.spark
@pytest.mark.parametrize("speculation", [False, True])
def test_a_job_of_first_attempts_lists_no_data_directory(
        spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, speculation: bool) -> None:
    """Every result from its task's first attempt and no speculation: every file the job wrote
    is committed, so a successful compaction does not list ``data/`` for strays (a listing of
    every data file of a large table: one request per 1 000 on S3). With speculation on, a
    losing copy may have left a file: it lists, and deletes such a file."""
    import lance

    from lance_spark_ops.spark import compact
    from lance_spark_ops.spark.runtime.tuning import Tuning
    from tests.spark.datasets import small_fragments

    uri = str(tmp_path / "ds")
    small_fragments(uri, "2.0", fragments=4)
    before = lance.dataset(uri).to_table().sort_by("id")
    stray = f"{tmp_path}/ds/data/lso-000000000000-t0-a9.0.1-stray.lance"
    if speculation:
        monkeypatch.setattr(job_mod, "speculation_on", lambda session: True)
        # a losing copy's file, under the job's id (known once the job starts)
        real_run = job_mod.run_tasks

        def run(session, job_id, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
            Path(stray.replace("lso-000000000000", job_id)).write_bytes(b"half a file")
            return real_run(session, job_id, *a, **k)

        monkeypatch.setattr(job_mod, "run_tasks", run)
    listed = _listed_dirs(monkeypatch)
    m = compact(spark, uri, target_rows_per_fragment=700, tuning=Tuning(driver_rewrite_bytes=0))
    assert m.tasks >= 1 and m.tasks_in_driver == 0
    assert lance.dataset(uri).to_table().sort_by("id").equals(before)
    assert listed.count("data") == (1 if speculation else 0), listed
    assert m.orphan_files_deleted == (1 if speculation else 0)
    assert not [n for n in ObjectStore(uri).list("data") if n.endswith("-stray.lance")]


@pytest.mark.spark
def test_tags_and_descriptions_on_a_classic_session(spark) -> None:
    seen: dict[str, object] = {}
    sc = spark.sparkContext
    with Job(spark, "demo", "mem://x") as job:
        with job.phase("scan", detail="part 1"):
            seen["tags"] = set(spark.getTags())
            seen["sc_tags"] = set(sc.getJobTags())
            seen["desc"] = sc.getLocalProperty("spark.job.description")
        seen["after"] = sc.getLocalProperty("spark.job.description")
        seen["job_tags"] = set(spark.getTags())
    assert {job.tag, f"{job.tag}-scan"} <= seen["tags"]  # type: ignore[operator]
    assert {job.tag, f"{job.tag}-scan"} <= seen["sc_tags"]  # type: ignore[operator]
    assert seen["desc"] == "demo mem://x: scan part 1" and seen["after"] is None
    assert seen["job_tags"] == {job.tag} and job.tag not in spark.getTags()
    assert not sc.getJobTags()


def _wait_for_release(task: str, ctx: TaskContext) -> str:
    """Marks itself started, then waits (bounded) until released or killed."""
    root = Path(task)
    (root / f"started-{ctx.task_id}").write_text("")
    deadline = time.monotonic() + 60
    while not (root / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return "released"


@pytest.mark.spark
def test_interrupt_tag_cancels_the_job(spark, tmp_path: Path) -> None:
    import pyspark.cloudpickle as cp

    cp.register_pickle_by_value(__import__(__name__, fromlist=["_"]))
    job = Job(spark, "demo", str(tmp_path))
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            with job, job.phase("wait", tasks=1):
                outcome["result"] = job.run_tasks([str(tmp_path)], _wait_for_release)
        except Exception as e:  # noqa: BLE001 - the cancellation, whatever PySpark wraps it in
            outcome["error"] = e

    thread = threading.Thread(target=run)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "started-0").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (tmp_path / "started-0").exists()
        interrupt_tag(spark, job.tag)
        thread.join(60)
        assert not thread.is_alive()
    finally:
        (tmp_path / "release").write_text("")
        thread.join(60)
    assert "result" not in outcome and "cancel" in str(outcome["error"]).lower()
