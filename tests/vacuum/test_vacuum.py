"""Vacuum against pylance's cleanup_old_versions on identical copies (mtimes preserved)."""

from __future__ import annotations

import os
import re
import time
from datetime import timedelta
from pathlib import Path

import pytest

from lance_spark_ops.errors import CorruptFileError, InvalidInputError, LanceError
from lance_spark_ops.spark.files.vacuuming import parse_duration, vacuum
from lance_spark_ops.spark.runtime.tuning import Tuning
from lance_spark_ops.table.cleanup import CleanupError
from tests.vacuum.helpers import add_unverified, files, history_dataset, table, touch, twin

lance = pytest.importorskip("lance")

STATS = ("bytes_removed", "old_versions", "data_files_removed", "transaction_files_removed",
         "index_files_removed", "deletion_files_removed", "failed_deletes")


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("vacuum") / "history.lance"
    history_dataset(root)
    return root


def _rows(uri: str | Path) -> list:
    return sorted(lance.dataset(str(uri)).to_table().to_pylist(), key=lambda r: r["id"])


def compare(src: Path, tmp: Path, spark=None, tuning: Tuning | None = None, **kw) -> tuple[set[str], object]:
    """Run pylance on one copy and us (with ``tuning``) on another: same files removed, same stats."""
    theirs, ours = twin(src, tmp / "theirs"), twin(src, tmp / "ours")
    before = files(src)
    expected_rows = _rows(src)
    stats = lance.dataset(str(theirs)).cleanup_old_versions(**kw)
    m = vacuum(spark, str(ours), tuning=tuning, **kw)
    removed_theirs = set(before) - set(files(theirs))
    removed_ours = set(before) - set(files(ours))
    assert removed_ours == removed_theirs
    assert {s: getattr(m, s) for s in STATS} == {s: getattr(stats, s) for s in STATS}
    assert set(m.removed_paths) == removed_ours
    assert _rows(ours) == expected_rows
    assert [v["version"] for v in lance.dataset(str(ours)).versions()] == \
        [v["version"] for v in lance.dataset(str(theirs)).versions()]
    return removed_ours, m


@pytest.mark.parametrize("kw", [
    dict(older_than=timedelta(0), error_if_tagged_old_versions=False),
    dict(older_than=timedelta(0), error_if_tagged_old_versions=False, delete_unverified=True),
    dict(retain_versions=4, error_if_tagged_old_versions=False),
    dict(retain_versions=1, older_than=timedelta(0), error_if_tagged_old_versions=False),
    dict(older_than=timedelta(days=1), error_if_tagged_old_versions=False),  # no version is a day old
    dict(),  # 14 days: nothing old, only the 30-day-old unverified files go
], ids=["all-old", "delete-unverified", "retain-4", "retain-1", "one-day", "defaults"])
def test_same_removals_as_pylance(template: Path, tmp_path: Path, kw: dict) -> None:
    removed, m = compare(template, tmp_path, **kw)
    assert "_refs/tags/t1.json" not in removed and "data/other-old.txt" not in removed
    assert "data/junk-old.lance" in removed and "_versions/.tmp-old" in removed
    assert ("data/junk-new.lance" in removed) == bool(kw.get("delete_unverified"))


def test_all_old_removes_indices_deletions_and_keeps_tag(template: Path, tmp_path: Path) -> None:
    removed, m = compare(template, tmp_path, older_than=timedelta(0), error_if_tagged_old_versions=False)
    assert m.old_versions >= 6 and m.index_files_removed >= 4 and m.deletion_files_removed >= 2
    ours = tmp_path / "ours"
    assert [v["version"] for v in lance.dataset(str(ours)).versions()] == [3, 11]
    assert lance.dataset(str(ours), version=3).count_rows() == 1190  # the tagged version still reads
    assert any(p.endswith(".bin") for p in removed) and any(p.endswith(".arrow") for p in removed)


@pytest.mark.parametrize("flag", [True, False])
def test_error_if_tagged_old_versions(template: Path, tmp_path: Path, flag: bool) -> None:
    theirs, ours = twin(template, tmp_path / "theirs"), twin(template, tmp_path / "ours")
    before = files(template)
    if flag:
        with pytest.raises(OSError, match="tagged version"):
            lance.dataset(str(theirs)).cleanup_old_versions(older_than=timedelta(0))
        with pytest.raises(CleanupError, match="t1"):
            vacuum(None, str(ours), older_than=timedelta(0))
        assert files(theirs) == before and files(ours) == before
    else:
        compare(template, tmp_path / "x", older_than=timedelta(0), error_if_tagged_old_versions=False)
    # a tag on a young version is no error for either
    compare(template, tmp_path / "young", retain_versions=10)


def test_dry_run_changes_nothing(template: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A dry run deletes nothing and returns the paths it would remove (shown in its repr too);
    its progress lines count tasks done out of tasks planned (``tasks 4/4``, never ``4/0``), or
    say nothing of tasks where none ran."""
    ours = twin(template, tmp_path / "ours")
    before = files(ours)
    with caplog.at_level("INFO", logger="lance_spark_ops"):
        dry = vacuum(None, str(ours), older_than=timedelta(0), error_if_tagged_old_versions=False,
                     dry_run=True)
    assert files(ours) == before and dry.dry_run and dry.old_versions > 0
    assert dry.removed_paths and all(repr(p) in repr(dry) for p in dry.removed_paths[:20])
    ended = [r.getMessage() for r in caplog.records if " ended in " in r.getMessage()]
    listed = [line for line in ended if "list ended" in line]
    assert listed, ended  # a few prefixes are listed on the driver: no tasks to count
    assert all("tasks" not in line or re.search(r"tasks (\d+)/\1\b", line) for line in ended), ended
    real = vacuum(None, str(ours), older_than=timedelta(0), error_if_tagged_old_versions=False)
    assert set(before) - set(files(ours)) == set(dry.removed_paths) == set(real.removed_paths)
    assert dry.bytes_removed == real.bytes_removed and dry.data_files_removed == real.data_files_removed


def test_branch_respected(tmp_path: Path) -> None:
    src = tmp_path / "src.lance"
    lance.write_dataset(table(100), src)
    lance.write_dataset(table(100, 100), src, mode="append")
    branch = lance.dataset(str(src)).create_branch("b1", 2)
    lance.write_dataset(table(50, 500), branch, mode="append")
    lance.write_dataset(table(10, 900), src, mode="overwrite")
    # copies: the branch's base path names the source, so the copy's v2 is not protected
    removed, m = compare(src, tmp_path, older_than=timedelta(0))
    assert m.old_versions == 2 and m.data_files_removed == 2
    # in place (pylance on this layout, observed: only v1 and the transactions of v1, v2 go)
    before = files(src)
    m = vacuum(None, str(src), older_than=timedelta(0))
    removed = set(before) - set(files(src))
    assert m.old_versions == 1 and len(removed) == 3 and not any(p.startswith("data/") for p in removed)
    assert [v["version"] for v in lance.dataset(str(src)).versions()] == [2, 3]
    assert lance.dataset(str(src / "tree" / "b1")).to_table().num_rows == 250
    assert lance.dataset(str(src), version=2).count_rows() == 200


def test_second_run_removes_nothing(template: Path, tmp_path: Path) -> None:
    ours = twin(template, tmp_path / "ours")
    vacuum(None, str(ours), older_than=timedelta(0), error_if_tagged_old_versions=False)
    again = vacuum(None, str(ours), older_than=timedelta(0), error_if_tagged_old_versions=False)
    assert again.old_versions == 0 and again.bytes_removed == 0 and not again.removed_paths


def test_path_leaving_root_is_refused(tmp_path: Path) -> None:
    """A manifest naming a data file outside the root aborts the vacuum before any delete."""
    from lance_spark_ops.table.format.manifest import parse_manifest_file, serialize_manifest_file

    root = tmp_path / "ds.lance"
    lance.write_dataset(table(50), root)
    lance.write_dataset(table(50, 50), root, mode="append")
    add_unverified(root)
    outside = tmp_path / "precious.lance"
    touch(outside, age_days=30)
    vdir = root / "_versions"
    for bad in (str(outside), "../precious.lance", "file:///etc/passwd", "a/../../x.lance"):
        name = min(n for n in os.listdir(vdir) if n.endswith(".manifest"))  # the latest (v2 scheme)
        mf = parse_manifest_file((vdir / name).read_bytes())
        keep = (vdir / name).read_bytes()
        mf.manifest.fragments[0].files[0].path = bad
        (vdir / name).write_bytes(serialize_manifest_file(mf.manifest, mf.transaction_bytes))
        before = files(root)
        with pytest.raises(CorruptFileError, match="dataset root"):
            vacuum(None, str(root), older_than=timedelta(0), delete_unverified=True)
        assert files(root) == before and outside.exists()
        (vdir / name).write_bytes(keep)


def test_symlinks_not_followed(tmp_path: Path) -> None:
    root = tmp_path / "ds.lance"
    lance.write_dataset(table(50), root)
    lance.write_dataset(table(50, 50), root, mode="overwrite")
    elsewhere = tmp_path / "elsewhere"
    touch(elsewhere / "victim.lance", age_days=30)
    touch(elsewhere / "index.idx", age_days=30)
    (root / "_indices").mkdir(exist_ok=True)
    os.symlink(elsewhere, root / "data" / "linked")
    os.symlink(elsewhere, root / "_indices" / "00000000-0000-0000-0000-00000000abcd")
    os.symlink(elsewhere / "victim.lance", root / "data" / "link-file.lance")
    old = time.time() - 30 * 86400  # listed: only files older than the kept manifest are (pylance's rule)
    os.utime(root / "data" / "link-file.lance", (old, old), follow_symlinks=False)
    m = vacuum(None, str(root), older_than=timedelta(0), delete_unverified=True)
    assert (elsewhere / "victim.lance").exists() and (elsewhere / "index.idx").exists()
    assert "data/link-file.lance" in m.removed_paths  # the link itself, not its target
    assert not os.path.lexists(root / "data" / "link-file.lance")
    assert m.old_versions == 1 and lance.dataset(str(root)).count_rows() == 50


def test_rate_limit_and_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    root = tmp_path / "ds.lance"
    lance.write_dataset(table(20), root)
    for i in range(30):
        touch(root / "data" / f"junk{i}.lance", age_days=30)
    t0 = time.monotonic()
    m = vacuum(None, str(root), max_deletes_per_second=200, parallelism=1, tuning=Tuning(deletes_per_task=7))
    assert time.monotonic() - t0 >= 30 / 200  # 30 deletes at 200/s in one lane
    assert m.data_files_removed == 30 and not any("junk" in p for p in files(root))


def test_bad_inputs(tmp_path: Path) -> None:
    assert parse_duration("90s") == timedelta(seconds=90)
    assert parse_duration("12h") == timedelta(hours=12)
    assert parse_duration("14d") == timedelta(days=14)
    for bad in ("14", "d", "-1d", "1 day", "1y", ""):
        with pytest.raises(InvalidInputError, match="duration"):
            parse_duration(bad)
    root = tmp_path / "ds.lance"
    lance.write_dataset(table(20), root)
    with pytest.raises(InvalidInputError, match="retain_versions"):
        vacuum(None, str(root), retain_versions=0)
    with pytest.raises(LanceError, match="no Lance dataset"):
        vacuum(None, str(tmp_path / "missing"))


def test_commit_after_planning_is_spared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A restore of an old version committed between planning and deleting keeps its files."""
    import lance_spark_ops.spark.files.vacuuming as mod

    ours = tmp_path / "ds.lance"
    lance.write_dataset(table(100), ours)
    lance.write_dataset(table(10, 500), ours, mode="overwrite")
    real_plan = mod.plan_cleanup

    def plan_then_restore(*args, **kwargs):
        plan = real_plan(*args, **kwargs)
        assert any(r.kind == "data" for r in plan.files)  # version 1's file was planned to go
        lance.dataset(str(ours), version=1).restore()  # re-references version 1's data file
        return plan

    monkeypatch.setattr(mod, "plan_cleanup", plan_then_restore)
    m = vacuum(None, str(ours), older_than=timedelta(0))
    assert m.old_versions == 1 and m.data_files_removed == 0
    assert _rows(ours) == table(100).to_pylist()


def test_failed_deletes_counted(template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lance_spark_ops.io.storage import ObjectStore

    ours = twin(template, tmp_path / "ours")
    real_delete = ObjectStore.delete

    def flaky(self, rel):
        if rel.endswith(".txn"):
            raise PermissionError(f"denied: {rel}")
        return real_delete(self, rel)

    monkeypatch.setattr(ObjectStore, "delete", flaky)
    m = vacuum(None, str(ours), older_than=timedelta(0), error_if_tagged_old_versions=False)
    assert m.failed_deletes == len(m.failures) > 0 and m.transaction_files_removed == 0
    assert all(p.endswith(".txn") and "denied" in err for p, err in m.failures)
    # every old version names its own transaction file: all their manifests stay, still verified
    assert m.old_versions == 0 and _rows(ours) == _rows(template)
    monkeypatch.setattr(ObjectStore, "delete", real_delete)
    again = vacuum(None, str(ours), older_than=timedelta(0), error_if_tagged_old_versions=False)
    theirs = twin(template, tmp_path / "theirs")
    stats = lance.dataset(str(theirs)).cleanup_old_versions(older_than=timedelta(0),
                                                             error_if_tagged_old_versions=False)
    assert again.old_versions == stats.old_versions  # the rerun finishes the job
    assert files(ours).keys() == files(theirs).keys()


def test_object_store_listing_path(template: Path, tmp_path: Path) -> None:
    """The fsspec (non-local) listing and delete path, on memory://, removes what pylance does."""
    import fsspec

    fs = fsspec.filesystem("memory")
    root = f"/vacuum-{os.getpid()}/ds.lance"
    for rel in files(template):
        fs.pipe_file(f"{root}/{rel}", (template / rel).read_bytes())
    try:
        kw = dict(older_than=timedelta(0), error_if_tagged_old_versions=False, delete_unverified=True)
        theirs = twin(template, tmp_path / "theirs")
        lance.dataset(str(theirs)).cleanup_old_versions(**kw)
        m = vacuum(None, f"memory://{root}", **kw)
        left = {p[len(root) + 1:] for p in fs.find(root)}
        assert left == set(files(theirs)) and set(m.removed_paths) == set(files(template)) - left
    finally:
        fs.rm(root.rsplit("/", 1)[0], recursive=True)


def test_phases_timed(template: Path, tmp_path: Path) -> None:
    """Runs on the job scaffold: each phase timed into ``seconds``, the Spark tag recorded."""
    _removed, m = compare(template, tmp_path, older_than=timedelta(0), error_if_tagged_old_versions=False)
    assert set(m.seconds) == {"read", "list", "plan", "delete", "total"}
    assert m.seconds["total"] >= m.seconds["delete"] > 0 and m.job_tag.startswith("lso-")
    dry = vacuum(None, str(twin(template, tmp_path / "dry")), older_than=timedelta(0),
                 error_if_tagged_old_versions=False, dry_run=True)
    assert set(dry.seconds) == {"read", "list", "plan", "total"} and dry.dry_run
