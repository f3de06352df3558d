"""Blob columns as pylance 14 writes them: descriptions read as pylance's ``to_table``, bytes as
its ``take_blobs``, and compaction keeping them (pylance reads the result identically)."""

from __future__ import annotations

import lance
import pyarrow as pa
import pytest

from lance_spark_ops.errors import UnsupportedError
from lance_spark_ops.spark.files.compaction import compact
from lance_spark_ops.table.dataset import Dataset

SIZES = [0, 10, 5000, 70_000, 0, 300, 150_000, 1]


def _blob_table(start: int = 0) -> pa.Table:
    values = [None if i % 5 == 4 else bytes([i % 251]) * s for i, s in enumerate(SIZES)]
    schema = pa.schema([pa.field("id", pa.int64()),
                        pa.field("b", pa.large_binary(), metadata={"lance-encoding:blob": "true"})])
    return pa.table({"id": pa.array(range(start, start + len(SIZES)), pa.int64()),
                     "b": pa.array(values, pa.large_binary())}, schema=schema)


def _make(uri: str, version: str) -> lance.LanceDataset:
    ds = lance.write_dataset(_blob_table(), uri, data_storage_version=version, max_rows_per_file=4)
    ds = lance.write_dataset(_blob_table(100), uri, mode="append", max_rows_per_file=3)
    ds.delete("id = 2 or id = 101")
    return ds


def _pylance_blobs(uri: str, n: int) -> list[bytes | None]:
    blobs = lance.dataset(uri).take_blobs("b", indices=list(range(n)))
    return [None if b is None else b.readall() for b in blobs]


def _assert_like_pylance(uri: str) -> None:
    theirs = lance.dataset(uri).to_table(with_row_id=True, with_row_address=True)
    ds = Dataset.open(uri)
    ours = ds.to_table(with_row_id=True, with_row_address=True)
    assert ours.schema.equals(theirs.schema), (ours.schema, theirs.schema)
    assert ours.equals(theirs), (ours["b"].to_pylist(), theirs["b"].to_pylist())
    n = ours.num_rows
    assert ds.take_blobs("b", list(range(n))) == _pylance_blobs(uri, n)
    idx = [n - 1, 0, 3, 3]
    assert ds.take_blobs("b", idx) == [None if b is None else b.readall()
                                       for b in lance.dataset(uri).take_blobs("b", indices=idx)]


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_blob_read_like_pylance(tmp_path, version):
    uri = str(tmp_path / "ds")
    _make(uri, version)
    _assert_like_pylance(uri)


def test_blob_v2_every_kind(tmp_path):
    """inline, packed sidecar, dedicated sidecar and external blobs of a 2.2 dataset."""
    from lance.blob import Blob, BlobType, blob_field

    ext = tmp_path / "ext.bin"
    ext.write_bytes(bytes(range(256)) * 4)
    vals = [None, Blob.empty(), Blob.from_bytes(b"a" * 50), Blob.from_bytes(b"b" * 5000),
            Blob.from_bytes(b"c" * 40000), Blob.from_bytes(b"d" * 90000),
            Blob.from_uri(f"file://{ext}", 10, 20)]
    storage = pa.array([None if v is None else {"data": v.data, "uri": v.uri, "position": v.position,
                                                "size": v.size} for v in vals], BlobType().storage_type)
    field = blob_field("b", inline_size_threshold=100, dedicated_size_threshold=50_000)
    t = pa.table({"id": pa.array(range(len(vals)), pa.int64()),
                  "b": pa.ExtensionArray.from_storage(BlobType(), storage)},
                 schema=pa.schema([pa.field("id", pa.int64()), field]))
    uri = str(tmp_path / "ds")
    lance.write_dataset(t, uri, allow_external_blob_outside_bases=True)
    kinds = {d["kind"] for d in lance.dataset(uri).to_table()["b"].to_pylist() if d}
    assert kinds == {0, 1, 2, 3}
    theirs = lance.dataset(uri).to_table()
    ds = Dataset.open(uri)
    assert ds.to_table().equals(theirs)
    with pytest.raises(UnsupportedError, match="outside the dataset"):
        ds.take_blobs("b", [6])
    assert ds.take_blobs("b", list(range(len(vals))), allow_external=True) == _pylance_blobs(uri, len(vals))


@pytest.mark.parametrize("version", ["2.0", "2.1"])
@pytest.mark.parametrize("mode", ["reencode", "try_binary_copy"])
def test_blob_compaction_keeps_payloads(tmp_path, version, mode):
    uri = str(tmp_path / "ds")
    _make(uri, version)
    before = _pylance_blobs(uri, Dataset.open(uri).count_rows())
    metrics = compact(None, uri, target_rows_per_fragment=100, materialize_deletions_threshold=0.0,
                      compaction_mode=mode)
    assert metrics.new_version is not None and len(lance.dataset(uri).get_fragments()) == 1
    assert _pylance_blobs(uri, len(before)) == before
    _assert_like_pylance(uri)


@pytest.mark.parametrize("deleted", [False, True])
def test_blob_v2_compaction_keeps_payloads(tmp_path, deleted):
    """2.2 blob v2: inline, packed and dedicated payloads are carried into the new file's
    sidecars; pylance's take_blobs returns the same bytes after our compaction."""
    from lance.blob import Blob, BlobType, blob_field

    uri = str(tmp_path / "ds")
    sizes = [0, 50, 5000, 40000, 90000, None, 3, 70000]
    vals = [None if s is None else (Blob.empty() if s == 0 else Blob.from_bytes(bytes([i]) * s))
            for i, s in enumerate(sizes)]
    storage = pa.array([None if v is None else {"data": v.data, "uri": None, "position": None, "size": None}
                        for v in vals], BlobType().storage_type)
    field = blob_field("b", inline_size_threshold=100, dedicated_size_threshold=50_000)
    t = pa.table({"id": pa.array(range(len(vals)), pa.int64()),
                  "b": pa.ExtensionArray.from_storage(BlobType(), storage)},
                 schema=pa.schema([pa.field("id", pa.int64()), field]))
    ds = lance.write_dataset(t, uri, max_rows_per_file=3)
    if deleted:
        ds.delete("id = 4")
    n = lance.dataset(uri).count_rows()
    before = _pylance_blobs(uri, n)
    compact(None, uri, target_rows_per_fragment=100)
    after = lance.dataset(uri)
    assert len(after.get_fragments()) == 1
    assert _pylance_blobs(uri, n) == before
    assert after.to_table()["id"].equals(lance.dataset(uri, version=ds.version).to_table()["id"])
    assert Dataset.open(uri).to_table().equals(after.to_table())
    assert Dataset.open(uri).take_blobs("b", list(range(n))) == before
