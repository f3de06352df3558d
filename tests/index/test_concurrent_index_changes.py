"""Index changes committed between our plan and our commit (lance#5143): the compaction
prepares its index part again on top of them, never commits a remap over a newer version of
an index, and leaves no index file of an attempt that did not land."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lance_spark_ops.spark.files.compaction import compact
from lance_spark_ops.spark.indices.index_remap import index_entries
from lance_spark_ops.table.dataset import Dataset
from tests.index.helpers import VECTOR, build, queries, unindexed
from tests.support.commit_hooks import once_before_commit
from tests.support.pylance_indices import index_segments

SCALARS = (("id", "BTREE", None), ("cat", "BITMAP", None), ("text", "INVERTED", None))


def _index_dirs_referenced(uri: str) -> bool:
    """Every file under _indices/ belongs to an index of some version (none orphaned by us; a
    local filesystem may keep the emptied directories)."""
    import lance

    ds = lance.dataset(uri)
    known = set()
    for v in ds.versions():
        for idx in index_entries(Dataset.open(uri, v["version"])):
            h = bytes(idx.uuid.uuid).hex()
            known.add(f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")
    root = Path(uri) / "_indices"
    return {d for d in os.listdir(root) if os.listdir(root / d)} <= known


@pytest.mark.parametrize("defer", [False, True])
def test_index_created_concurrently(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, defer: bool) -> None:
    import lance

    uri = str(tmp_path / "ds")
    build(uri, "2.2", False, scalar=SCALARS, vector=())
    hook = once_before_commit(lambda: lance.dataset(uri).create_scalar_index(
        "labels", "LABEL_LIST"))
    m = compact(None, uri, target_rows_per_fragment=1000, tuning=hook, defer_index_remap=defer)
    ds = lance.dataset(uri)
    assert len(ds.get_fragments()) < 8 and m.commits == 1
    assert "labels_idx" in {i["name"] for i in index_segments(ds)}
    assert set(unindexed(ds).values()) == {0}
    q = queries(ds)
    assert q["labels"] == sorted(ds.to_table(filter="array_has_any(labels, ['l3'])", columns=["id"],
                                             use_scalar_index=False).column("id").to_pylist())
    assert _index_dirs_referenced(uri)


def test_index_replaced_concurrently(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The BTREE we remapped was replaced meanwhile: the replacement is remapped instead."""
    import lance

    uri = str(tmp_path / "ds")
    before = queries(build(uri, "2.2", False, scalar=SCALARS, vector=()))
    old = {i.name: bytes(i.uuid.uuid) for i in index_entries(Dataset.open(uri))}
    replaced = {}

    def replace() -> None:
        lance.dataset(uri).create_scalar_index("id", "BTREE", replace=True)
        replaced.update({i.name: bytes(i.uuid.uuid) for i in index_entries(Dataset.open(uri))})

    hook = once_before_commit(replace)
    m = compact(None, uri, target_rows_per_fragment=1000, tuning=hook)
    ds = lance.dataset(uri)
    now = {i.name: bytes(i.uuid.uuid) for i in index_entries(Dataset.open(uri))}
    assert replaced["id_idx"] != old["id_idx"] and now["id_idx"] not in (old["id_idx"], replaced["id_idx"])
    assert m.indices_remapped == {"BTREE": 1, "BITMAP": 1, "INVERTED": 1}
    assert queries(ds) == before and set(unindexed(ds).values()) == {0}
    assert _index_dirs_referenced(uri)


def test_index_dropped_concurrently(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import lance

    uri = str(tmp_path / "ds")
    before = queries(build(uri, "2.2", False, scalar=SCALARS, vector=()))
    hook = once_before_commit(lambda: lance.dataset(uri).drop_index("cat_idx"))
    m = compact(None, uri, target_rows_per_fragment=1000, tuning=hook)
    ds = lance.dataset(uri)
    assert "cat_idx" not in {i["name"] for i in index_segments(ds)}
    assert m.indices_remapped == {"BTREE": 1, "INVERTED": 1}
    assert queries(ds) == before and set(unindexed(ds).values()) == {0}
    assert _index_dirs_referenced(uri)


@pytest.mark.parametrize("defer", [False, True])
def test_concurrent_delete_on_indexed_fragments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                defer: bool) -> None:
    """A delete committed meanwhile is carried onto the new fragments; the remapped indices and
    the fragment reuse index (built from our read version) still answer right."""
    import lance

    uri = str(tmp_path / "ds")
    build(uri, "2.2", False, scalar=SCALARS, vector=VECTOR[:2])
    expected = {}

    def delete() -> None:
        lance.dataset(uri).delete("id % 10 = 7")
        expected.update(queries(lance.dataset(uri)))

    hook = once_before_commit(delete)
    m = compact(None, uri, target_rows_per_fragment=1000, tuning=hook, defer_index_remap=defer)
    ds = lance.dataset(uri)
    assert m.commits == 1 and len(ds.get_fragments()) < 8
    assert queries(ds) == expected and set(unindexed(ds).values()) == {0}
    assert ds.count_rows(filter="id % 10 = 7") == 0
