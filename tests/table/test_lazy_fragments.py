"""Lazily decoded fragments (``DataFragment.lazy``): a parsed manifest decodes a fragment only
when something other than its id is used, and any read or write of a fragment makes the next
serialization follow the fragment's current state, never the bytes it was parsed from."""

from __future__ import annotations

import pickle
from dataclasses import replace

import lance
import pyarrow as pa
import pytest

from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.format.fragment import (
    DataFragment,
    data_file_paths,
    has_deletion_file,
    row_counts,
)
from lance_spark_ops.table.format.manifest import parse_manifest_file, serialize_manifest_file
from lance_spark_ops.table.format.transaction import Append


def _latest(uri: str):
    ds = Dataset.open(uri)
    return ds, ds.store.read(ds.manifest_path)


def test_parsed_fragments_are_lazy_and_match_pylance(pylance_dataset) -> None:
    uri = pylance_dataset("deletions", "2.2")
    ds, _ = _latest(uri)
    theirs = {f.fragment_id: f for f in lance.dataset(uri).get_fragments()}
    assert [f.id for f in ds.fragments] == sorted(theirs)
    assert not any(f.is_decoded for f in ds.fragments)  # open + checks decoded nothing
    for f in ds.fragments:
        physical, deleted, _ = row_counts(f)
        meta = theirs[f.id].metadata
        assert physical == meta.physical_rows
        assert deleted == (meta.deletion_file.num_deleted_rows if meta.deletion_file else 0)
        assert has_deletion_file(f) == (meta.deletion_file is not None)
        assert data_file_paths(f) == [d.path for d in meta.files]
        assert not f.is_decoded
        # decoding gives the same answers
        assert f.physical_rows == meta.physical_rows and f.is_decoded
        assert [d.path for d in f.files] == [d.path for d in meta.files]
        assert f == DataFragment.from_pb(f.to_pb())


@pytest.mark.parametrize("change", ["scalar", "nested", "id"])
def test_changes_to_a_parsed_fragment_reach_the_next_serialization(pylance_dataset, change) -> None:
    uri = pylance_dataset("basic", "2.2")
    ds, data = _latest(uri)
    mf = parse_manifest_file(data)
    frag = mf.manifest.fragments[0]
    assert not frag.is_decoded
    if change == "scalar":
        frag.physical_rows = 7
    elif change == "nested":
        frag.files[0].path = "renamed.lance"
    else:
        frag.id = 99
    again = parse_manifest_file(serialize_manifest_file(mf.manifest, mf.transaction_bytes))
    got = again.manifest.fragments[0]
    if change == "scalar":
        assert got.physical_rows == 7
    elif change == "nested":
        assert got.files[0].path == "renamed.lance"
    else:
        assert got.id == 99
    # the untouched fragments are carried over exactly
    original = parse_manifest_file(data).manifest.fragments
    for a, b in zip(again.manifest.fragments[1:], original[1:], strict=True):
        assert a == b


def test_lazy_fragments_pickle_copy_and_replace(pylance_dataset) -> None:
    ds, data = _latest(pylance_dataset("deletions", "2.2"))
    frag = parse_manifest_file(data).manifest.fragments[1]
    eager = DataFragment.from_pb(frag.to_pb())
    back = pickle.loads(pickle.dumps(frag))
    assert back == eager and back.is_decoded
    frag2 = parse_manifest_file(data).manifest.fragments[1]
    assert replace(frag2, id=5) == replace(eager, id=5)


def test_commit_over_many_lazy_fragments_keeps_them_exact(tmp_path) -> None:
    """Fragments carried over by a commit (never decoded) read back as pylance sees them."""
    uri = str(tmp_path / "ds")
    lance.write_dataset(pa.table({"a": list(range(10))}), uri, data_storage_version="2.2")
    ds = Dataset.open(uri)
    proto = ds.fragments[0]

    def copies(n: int) -> list[DataFragment]:
        return [replace(proto, id=0, files=[replace(f) for f in proto.files]) for _ in range(n)]

    ds.commit(Append(copies(300)))
    lance.dataset(uri).delete("a = 3")  # a deletion file on every fragment
    before = {f.fragment_id: f.metadata for f in lance.dataset(uri).get_fragments()}
    Dataset.open(uri).commit(Append(copies(2)))  # carries the 301 fragments over undecoded
    ds = Dataset.open(ObjectStore(uri))
    assert len(ds.fragments) == 303 and not any(f.is_decoded for f in ds.fragments)
    theirs = lance.dataset(uri)
    after = {f.fragment_id: f.metadata for f in theirs.get_fragments()}
    assert all(after[i] == m for i, m in before.items())
    assert theirs.count_rows() == 301 * 9 + 2 * 10
    assert theirs.to_table().num_rows == ds.count_rows() == 301 * 9 + 2 * 10


def test_a_landed_commit_holds_what_its_file_holds(pylance_dataset, tmp_path) -> None:
    """The commit returns the manifest it built rather than parsing the file it wrote: both
    must agree, and pylance must read the version as ours describes it."""
    import shutil

    uri = str(tmp_path / "ds")
    shutil.copytree(pylance_dataset("deletions", "2.2"), uri)
    ds = Dataset.open(uri)
    frag = ds.fragments[0]
    new = ds.commit(Append([replace(frag, id=0, deletion_file=None, files=[replace(f) for f in frag.files])]))
    reread = Dataset.open(uri)
    assert new.version == reread.version
    assert new.manifest == reread.manifest
    assert new.manifest_file.transaction_bytes == reread.manifest_file.transaction_bytes
    assert new.manifest_file.index_section_bytes == reread.manifest_file.index_section_bytes
    theirs = lance.dataset(uri)
    assert [f.fragment_id for f in theirs.get_fragments()] == [f.id for f in new.fragments]
    assert theirs.count_rows() == new.count_rows()
