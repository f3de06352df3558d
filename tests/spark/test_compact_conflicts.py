"""Conflicts at commit, with a real concurrent writer (pylance) committing between plan and
commit, and task attempts killed mid-write."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lance_spark_ops.errors import IncompatibleTransaction
from lance_spark_ops.spark.files import compaction as compact_mod
from lance_spark_ops.spark.files.compaction import compact
from lance_spark_ops.spark.runtime.tuning import Tuning
from tests.spark.datasets import small_fragments


def _between_plan_and_commit(action) -> Tuning:
    """Run ``action`` after the rewrite tasks, before the commit (the jobs' tuning hook)."""
    return Tuning(before_commit=lambda kind, attempt: action())


def _data_files(uri: str) -> set[str]:
    return set(os.listdir(Path(uri) / "data"))


@pytest.mark.parametrize("version", ["2.0", "2.2"])
@pytest.mark.parametrize("stable", [False, True])
def test_concurrent_append_commits(tmp_path: Path, monkeypatch, stable: bool, version: str) -> None:
    import lance

    uri = str(tmp_path / "ds")
    small_fragments(uri, version, stable=stable, fragments=4)
    before = lance.dataset(uri).to_table()
    extra = before.slice(0, 5)
    hook = _between_plan_and_commit(lambda: lance.write_dataset(extra, uri, mode="append"))
    m = compact(None, uri, target_rows_per_fragment=1000, tuning=hook)
    after = lance.dataset(uri).to_table()
    assert after.num_rows == before.num_rows + 5
    assert m.commits == 1


@pytest.mark.parametrize("version", ["2.0", "2.2"])
@pytest.mark.parametrize("stable", [False, True])
def test_concurrent_delete_is_carried(tmp_path: Path, monkeypatch, stable: bool, version: str) -> None:
    """No lost delete and no redone rewrite: the concurrent delete lands on the new fragments."""
    import lance

    uri = str(tmp_path / "ds")
    small_fragments(uri, version, stable=stable, fragments=4)
    before = lance.dataset(uri).to_table(with_row_id=True)
    hook = _between_plan_and_commit(lambda: lance.dataset(uri).delete("id % 10 = 7 OR id = 300001"))
    m = compact(None, uri, target_rows_per_fragment=1000, tuning=hook)
    ds = lance.dataset(uri)
    after = ds.to_table(with_row_id=True)
    ids = [i for i in before["id"].to_pylist() if i % 10 != 7 and i != 300001]
    assert sorted(after["id"].to_pylist()) == sorted(ids)
    if stable:
        want = {r: i for r, i in zip(before["_rowid"].to_pylist(), before["id"].to_pylist(), strict=True)}
        pairs = zip(after["_rowid"].to_pylist(), after["id"].to_pylist(), strict=True)
        assert all(want[r] == i for r, i in pairs)
    assert m.rows_written == before.num_rows  # the rewrite was not redone
    assert any(f.metadata.deletion_file is not None for f in ds.get_fragments())


def test_concurrent_overwrite_aborts_cleanly(tmp_path: Path, monkeypatch) -> None:
    import lance

    uri = str(tmp_path / "ds")
    small_fragments(uri, "2.0", fragments=4)
    files_before = _data_files(uri)
    replacement = lance.dataset(uri).to_table().slice(0, 10)
    hook = _between_plan_and_commit(lambda: lance.write_dataset(replacement, uri, mode="overwrite"))
    with pytest.raises(IncompatibleTransaction):
        compact(None, uri, target_rows_per_fragment=1000, tuning=hook)
    assert lance.dataset(uri).to_table().equals(replacement)
    leftover = {n for n in _data_files(uri) - files_before if n.startswith("lso-")}
    assert not leftover, f"files of the failed compaction were left behind: {leftover}"


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_concurrent_restore_aborts_cleanly(tmp_path: Path, monkeypatch, version: str) -> None:
    import lance

    uri = str(tmp_path / "ds")
    small_fragments(uri, version, fragments=4)
    first = lance.dataset(uri, version=1).to_table()
    files_before = _data_files(uri)
    hook = _between_plan_and_commit(lambda: lance.dataset(uri, version=1).restore())
    with pytest.raises(IncompatibleTransaction):
        compact(None, uri, target_rows_per_fragment=1000, tuning=hook)
    assert lance.dataset(uri).to_table().equals(first)
    leftover = {n for n in _data_files(uri) - files_before if n.startswith("lso-")}
    assert not leftover, f"files of the failed compaction were left behind: {leftover}"


def _flaky_rewrite(spec, ctx):
    """First attempt of every task writes a partial file and dies like a lost executor."""
    from pyspark import TaskContext as SparkTaskContext

    from lance_spark_ops.spark.files.rewrite_tasks import run_rewrite
    from lance_spark_ops.spark.runtime.task_common import DATA_DIR

    tc = SparkTaskContext.get()
    if tc is not None and tc.attemptNumber() == 0:
        path = Path(spec.uri) / DATA_DIR / f"{ctx.file_prefix}-partial.lance"
        path.write_bytes(b"half a file")
        os._exit(1)
    return run_rewrite(spec, ctx)


@pytest.mark.spark
def test_killed_task_attempt_never_duplicates_rows(spark, tmp_path: Path, monkeypatch) -> None:
    import lance
    import pyspark.cloudpickle as cp

    cp.register_pickle_by_value(__import__(__name__, fromlist=["_"]))
    uri = str(tmp_path / "ds")
    small_fragments(uri, "2.0", stable=True, fragments=4)
    before = lance.dataset(uri).to_table(with_row_id=True)
    monkeypatch.setattr(compact_mod, "run_rewrite", _flaky_rewrite)
    m = compact(spark, uri, target_rows_per_fragment=700)
    after = lance.dataset(uri).to_table(with_row_id=True)
    assert after.sort_by("_rowid").equals(before.sort_by("_rowid"))
    assert m.orphan_files_deleted >= m.tasks  # every killed attempt left a file; all removed
    assert not [n for n in _data_files(uri) if n.endswith("-partial.lance")]


@pytest.mark.parametrize("version", ["2.0", "2.2"])
@pytest.mark.parametrize("stable", [False, True])
def test_concurrent_update_is_carried(tmp_path: Path, monkeypatch, stable: bool, version: str) -> None:
    """pylance's update moves rows to a new fragment and deletes them from the old ones; the
    deletions land on our new fragments, so every row appears once with its new value."""
    import lance

    uri = str(tmp_path / "ds")
    small_fragments(uri, version, stable=stable, fragments=4)
    before = lance.dataset(uri).to_table()
    hook = _between_plan_and_commit(
        lambda: lance.dataset(uri).update({"f": "-1.0"}, where="id % 10 = 5"))
    compact(None, uri, target_rows_per_fragment=1000, tuning=hook)
    after = lance.dataset(uri).to_table()
    assert sorted(after["id"].to_pylist()) == sorted(before["id"].to_pylist())
    moved = {i for i, f in zip(after["id"].to_pylist(), after["f"].to_pylist(), strict=True) if f == -1.0}
    assert moved == {i for i in before["id"].to_pylist() if i % 10 == 5}
