"""Vacuum's unverified-file rule against pylance 14's over arrangements of file times.

pylance lists only files modified at or before the earliest retained manifest's timestamp
(unless a removed manifest is newer than that), deletes a listed file referenced only by
removed versions, and an unreferenced one only when it is older than 7 days (or with
``delete_unverified``). Each arrangement is copied twice - same file times on both copies -
and pylance's ``cleanup_old_versions`` and our ``vacuum`` must remove the same files.
"""

from __future__ import annotations

import os
import shutil
import time
from datetime import timedelta
from pathlib import Path

import pytest

from lance_spark_ops.errors import InvalidInputError
from lance_spark_ops.spark.files.vacuuming import vacuum
from tests.vacuum.helpers import DAY, files, history_dataset, table, touch
from tests.vacuum.test_vacuum import STATS, _rows

lance = pytest.importorskip("lance")


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("vacuum_times") / "history.lance"
    history_dataset(root)
    return root


def _set_times(root: Path, when: float) -> None:
    for d, _dirs, names in os.walk(root):
        for name in names:
            os.utime(os.path.join(d, name), (when, when))


def cp_r(src: Path, dst: Path) -> None:
    """``cp -r``: every file gets a fresh mtime (now)."""
    shutil.copytree(src, dst, copy_function=shutil.copyfile)
    _set_times(dst, time.time())


def cp_a(src: Path, dst: Path) -> None:
    """``cp -a``: file times kept."""
    shutil.copytree(src, dst, copy_function=shutil.copy2)


def aged(src: Path, dst: Path) -> None:
    """Every file 30 days old (manifests record their own, recent, timestamps)."""
    cp_a(src, dst)
    _set_times(dst, time.time() - 30 * DAY)


def written_during(src: Path, dst: Path) -> None:
    """A copy whose files are 30 days old, then files of every kind written "now" by a
    concurrent writer: a data file, a deletion file, a transaction, an index and a temporary
    manifest none of the manifests names."""
    aged(src, dst)
    for rel in ("data/inflight.lance", "_deletions/7-7-inflight.arrow", "_transactions/7-inflight.txn",
                "_indices/00000000-0000-0000-0000-0000000000aa/index.idx", "_versions/.tmp-inflight"):
        touch(dst / rel)


def future_times(src: Path, dst: Path) -> None:
    """Files stamped an hour in the future (clock skew between writer and store)."""
    cp_a(src, dst)
    _set_times(dst, time.time() + 3600)


ARRANGEMENTS = {"cp_r": cp_r, "cp_a": cp_a, "aged": aged, "written_during": written_during,
                "future": future_times}
POLICIES = {
    "all_old": dict(older_than=timedelta(0), error_if_tagged_old_versions=False),
    "unverified": dict(older_than=timedelta(0), error_if_tagged_old_versions=False, delete_unverified=True),
    "retain_3": dict(retain_versions=3, error_if_tagged_old_versions=False),
    "defaults": dict(),
}


def compare(src: Path, tmp: Path, arrange, **kw) -> set[str]:
    """Arrange one copy, duplicate it with its file times, run pylance on one, us on the other."""
    base = tmp / "base"
    arrange(src, base)
    theirs, ours = tmp / "theirs", tmp / "ours"
    cp_a(base, theirs)
    cp_a(base, ours)
    before = files(base)
    expected = _rows(base)
    stats = lance.dataset(str(theirs)).cleanup_old_versions(**kw)
    m = vacuum(None, str(ours), **kw)
    removed_theirs = set(before) - set(files(theirs))
    removed_ours = set(before) - set(files(ours))
    assert sorted(removed_ours - removed_theirs) == [] and sorted(removed_theirs - removed_ours) == []
    assert {s: getattr(m, s) for s in STATS} == {s: getattr(stats, s) for s in STATS}
    assert _rows(ours) == expected
    return removed_ours


@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("arrangement", list(ARRANGEMENTS))
def test_file_times_as_pylance(template: Path, tmp_path: Path, arrangement: str, policy: str) -> None:
    compare(template, tmp_path, ARRANGEMENTS[arrangement], **POLICIES[policy])


def test_cp_r_keeps_transactions(tmp_path: Path) -> None:
    """The issue's case: a fresh ``cp -r`` copy of the bundled example (its versions days old),
    ``older_than=0``: the transaction files of removed versions are newer than the kept
    version's timestamp, so pylance does not list them (we removed 24)."""
    example = Path(__file__).parents[2] / "jobs" / "example_data" / "example.lance"
    removed = compare(example, tmp_path, cp_r, older_than=timedelta(0))
    assert not any(p.startswith("_transactions/") for p in removed)
    assert sum(p.startswith("_versions/") for p in removed) >= 20


def test_fresh_copy_still_drops_old_indices(tmp_path: Path) -> None:
    """``_indices/`` is listed whole: an index only removed versions name goes from a fresh copy."""
    root = tmp_path / "src.lance"
    lance.write_dataset(table(900), root, max_rows_per_file=300)
    lance.dataset(root).create_scalar_index("id", "BTREE")
    lance.dataset(root).create_scalar_index("id", "BTREE", replace=True)
    lance.dataset(root).delete("id < 5")
    lance.dataset(root).optimize.compact_files(target_rows_per_fragment=2000)
    removed = compare(root, tmp_path / "a", cp_r, older_than=timedelta(0))
    assert any(p.startswith("_indices/") for p in removed)
    assert not any(p.startswith("data/") for p in removed)


def test_sparse_tag_lists_everything(tmp_path: Path) -> None:
    """A tagged old version pulls the earliest retained time back; removed versions newer than
    it make pylance list the whole tree again."""
    root = tmp_path / "src.lance"
    lance.write_dataset(table(300), root)
    for i in range(4):
        lance.write_dataset(table(50, 1000 + 100 * i), root, mode="append")
    lance.dataset(root).tags.create("keep", 2)
    lance.dataset(root).delete("id < 20")
    compare(root, tmp_path / "a", cp_a, older_than=timedelta(0), error_if_tagged_old_versions=False)
    compare(root, tmp_path / "b", aged, older_than=timedelta(0), error_if_tagged_old_versions=False)


@pytest.mark.parametrize("value", ["0s", "7d", "36h", "90m"])
def test_duration_strings(template: Path, tmp_path: Path, value: str) -> None:
    ours = tmp_path / "ours"
    cp_a(template, ours)
    m = vacuum(None, str(ours), older_than=value, dry_run=True, error_if_tagged_old_versions=False)
    assert m.old_versions >= (1 if value == "0s" else 0)


@pytest.mark.parametrize("value", [0, 1.5, "soon", "-1d", [1]])
def test_bad_older_than(template: Path, tmp_path: Path, value: object) -> None:
    ours = tmp_path / "ours"
    cp_a(template, ours)
    with pytest.raises(InvalidInputError, match="older_than"):
        vacuum(None, str(ours), older_than=value, dry_run=True)


def test_listing_cutoff_rules() -> None:
    """The cutoff alone: files at or before the earliest kept manifest's time are listed,
    ``_indices/`` always, none without a time (+inf); no cutoff behind a newer removed version."""
    from lance_spark_ops.table.cleanup import FileRefs, ListedFile, VersionInfo, listed_before, listing_cutoff

    def v(n: int, t: float) -> VersionInfo:
        return VersionInfo(n, int(t * 1e9), f"_versions/{n}.manifest", FileRefs())

    files = [ListedFile("data/a.lance", 1, 10.0), ListedFile("data/b.lance", 1, 20.0),
             ListedFile("data/c.lance", 1, float("inf")), ListedFile("_indices/u/i.idx", 1, 99.0)]
    assert listing_cutoff([v(1, 5.0)], [v(2, 15.0)]) == 15_000_000_000
    assert [f.path for f in listed_before(files, 15_000_000_000)] == ["data/a.lance", "_indices/u/i.idx"]
    assert listing_cutoff([v(1, 5.0), v(3, 25.0)], [v(2, 15.0), v(4, 30.0)]) is None  # v3 removed, newer
    assert len(listed_before(files, None)) == 4
