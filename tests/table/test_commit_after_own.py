"""``commit_transaction(expected_latest=N)``: right after our own commit of version N, the next
commit puts N + 1 without listing ``_versions/``; when another writer took N + 1 meanwhile the
put fails, the attempt lists, checks that writer's transaction and lands on top. pylance reads
every version."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from lance_spark_ops.table.commit import handler as handler_mod
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.format.transaction import ReserveFragments


def _listings(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    original = handler_mod.CommitHandler.recent_versions

    def counted(self, store, since=None):  # noqa: ANN001, ANN202
        calls.append(since)
        return original(self, store, since)

    monkeypatch.setattr(handler_mod.CommitHandler, "recent_versions", counted)
    return calls


@pytest.mark.parametrize("concurrent", [False, True])
def test_commit_on_top_of_our_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, concurrent: bool) -> None:
    import lance

    uri = str(tmp_path / "ds")
    lance.write_dataset(pa.table({"id": list(range(10))}), uri)
    ds = Dataset.open(uri)
    mine = ds.commit(ReserveFragments(2), ds.version)  # version 2, ours
    if concurrent:  # another writer takes version 3
        lance.write_dataset(pa.table({"id": [10, 11]}), uri, mode="append")
    calls = _listings(monkeypatch)
    out = mine.commit(ReserveFragments(3), ds.version,
                      known_manifests={ds.version: ds.manifest_file, mine.version: mine.manifest_file},
                      expected_latest=mine.version)
    assert out.version == (4 if concurrent else 3)
    assert len(calls) == (1 if concurrent else 0)  # listed only when its version was taken
    assert out.manifest.max_fragment_id == (1 + 2 + 1 + 3 - 1 if concurrent else 1 + 2 + 3 - 1)
    got = lance.dataset(uri)
    assert got.version == out.version and got.count_rows() == (12 if concurrent else 10)
    for v in range(1, out.version + 1):
        assert lance.dataset(uri, version=v).count_rows() in (10, 12)


def test_stale_or_unknown_hints_list_as_usual(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import lance

    uri = str(tmp_path / "ds")
    lance.write_dataset(pa.table({"id": list(range(10))}), uri)
    ds = Dataset.open(uri)
    mine = ds.commit(ReserveFragments(1), ds.version)
    calls = _listings(monkeypatch)
    # the hinted version's manifest not given: nothing to build on, so it lists
    out = mine.commit(ReserveFragments(1), ds.version, known_manifests={ds.version: ds.manifest_file},
                      expected_latest=mine.version)
    assert out.version == 3 and len(calls) == 1
    assert lance.dataset(uri).version == 3
