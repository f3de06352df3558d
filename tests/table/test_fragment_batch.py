"""``table.fragment_batch.FragmentBatch`` on pylance-made datasets: live masks, row ids and the
simple files' rows as pylance reads them; fragments that are not simple are left to
``FragmentScan`` (None). Also the shortcuts of a commit over many fragments: a Rewrite's
transaction serialized from the manifest's bytes, nothing decoded."""

from __future__ import annotations

from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops.errors import CorruptFileError
from lance_spark_ops.file import metadata as file_metadata
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.format import transaction as txn_format
from lance_spark_ops.table.format.fragment import DataFragment
from lance_spark_ops.table.format.transaction import Rewrite, RewriteGroup, Transaction
from lance_spark_ops.table.fragment_batch import FragmentBatch


def _small(uri: str, stable: bool = False, version: str = "2.1") -> None:
    n = 600
    table = pa.table({"id": pa.array(np.arange(n, dtype=np.int64)),
                      "s": pa.array([f"v{i % 13}" for i in range(n)]),
                      "x": pa.array(np.random.default_rng(3).random(n))})
    lance.write_dataset(table, uri, max_rows_per_file=100, data_storage_version=version,
                        enable_stable_row_ids=stable)
    lance.dataset(uri).delete("id % 5 = 1 and id < 250")  # two fragments with deletions


@pytest.mark.parametrize("stable", [False, True])
def test_answers_match_pylance(tmp_path: Path, stable: bool) -> None:
    uri = str(tmp_path / "ds")
    _small(uri, stable)
    ds = Dataset.open(uri)
    batch = FragmentBatch(ds, ds.fragments)
    theirs = {f.fragment_id: f for f in lance.dataset(uri).get_fragments()}
    masks = batch.live_masks()
    assert list(batch.physical_rows()) == [theirs[f.id].metadata.physical_rows for f in ds.fragments]
    assert [int(m.sum()) for m in masks] == [theirs[f.id].count_rows() for f in ds.fragments]
    simple = batch.simple_files(masks, blobs="bytes")
    assert simple is not None
    files, scan_schema, _metadata = simple
    for frag, f, keep, ids in zip(ds.fragments, files, masks, batch.row_ids(), strict=True):
        expected = theirs[frag.id].to_table(with_row_id=stable)
        rows = f.reader.read()
        if f.keep is not None:
            assert f.keep is keep  # the mask given, not read again
            rows = rows.filter(pa.array(f.keep))
        assert rows.schema.names == scan_schema.names
        assert rows.equals(expected.select(scan_schema.names))
        if stable:
            assert ids[keep].tolist() == expected["_rowid"].to_pylist()
        else:
            assert ids is None


def test_not_simple_is_left_to_fragment_scan(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    _small(uri)
    ds = Dataset.open(uri)
    assert FragmentBatch(ds, ds.fragments).simple_files([None] * len(ds.fragments)) is not None
    lance.dataset(uri).alter_columns({"path": "s", "name": "renamed"})  # the files still say "s"
    ds = Dataset.open(uri)
    simple = FragmentBatch(ds, ds.fragments).simple_files([None] * len(ds.fragments))
    assert simple is not None and simple[1].names == ["id", "renamed", "x"]  # read under the new name
    lance.dataset(uri).drop_columns(["x"])  # the files still hold it: not column i = field i
    ds = Dataset.open(uri)
    assert FragmentBatch(ds, ds.fragments).simple_files([None] * len(ds.fragments)) is None
    lance.dataset(uri).add_columns({"twice": "id * 2"})  # a second data file per fragment
    ds = Dataset.open(uri)
    assert all(len(f.files) == 2 for f in ds.fragments)
    assert FragmentBatch(ds, ds.fragments).simple_files([None] * len(ds.fragments)) is None


def test_cached_column_metadata_still_checks_the_file_size(tmp_path: Path) -> None:
    """Column metadata is parsed once per distinct bytes; a file too small for the buffers it
    names is still refused (as the uncached parse refuses it)."""
    uri = str(tmp_path / "ds")
    _small(uri)
    ds = Dataset.open(uri)
    frag = ds.fragments[0]
    store, rel = ds.base_resolver.data_file(frag.files[0])
    from lance_spark_ops.file.reader import LanceFileReader

    meta = LanceFileReader(rel, store=store).metadata
    pos, size = (int(x) for x in meta.column_table[0])
    raw = meta._tail[pos - meta._tail_start:pos - meta._tail_start + size]
    assert file_metadata._column_metadata(raw, 0, meta.size, "f") is meta.column(0)  # shared
    with pytest.raises(CorruptFileError, match="outside the file"):
        file_metadata._column_metadata(raw, 0, 10, "small-file")


def test_rewrite_transaction_from_manifest_bytes(tmp_path: Path) -> None:
    """A Rewrite's old fragments are written as the manifest's bytes (undecoded, unchanged) and
    the transaction is the one built from protobuf messages."""
    uri = str(tmp_path / "ds")
    _small(uri, stable=True)
    ds = Dataset.open(uri)
    old = ds.fragments
    new = [DataFragment.from_pb(old[0].to_pb())]
    new[0].id = 77
    _ = old[2].files  # one old fragment decoded: serialized from its fields
    groups = [RewriteGroup(old[:2], new), RewriteGroup(old[2:], [])]
    txn = Transaction(ds.version, "u-1", Rewrite(groups))
    data = txn.to_bytes()
    assert not any(f.is_decoded for i, f in enumerate(old) if i != 2)
    pb = txn_format.PbTransaction(read_version=ds.version, uuid="u-1")
    pb.rewrite.SetInParent()
    for g in groups:
        pb.rewrite.groups.add(old_fragments=[f.to_pb() for f in g.old_fragments],
                              new_fragments=[f.to_pb() for f in g.new_fragments])
    assert data == pb.SerializeToString()
    back = Transaction.from_bytes(data)
    ids = [[f.id for f in g.old_fragments] for g in groups]
    assert [[f.id for f in g.old_fragments] for g in back.operation.groups] == ids
    assert back.operation.groups[1].old_fragments[0].to_pb() == old[2].to_pb()
