"""Deletion files: Arrow and roaring encodings round-trip, the arrow/bitmap choice follows
pylance, pylance's files decode, and pylance reads the files we write."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lance_spark_ops import CorruptFileError, Dataset
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.table.deletion import (
    ARROW_SCHEMA,
    choose_file_type,
    decode_arrow,
    decode_bitmap,
    encode_arrow,
    encode_bitmap,
    keep_mask,
    read_deletion_file,
    write_deletion_file,
)
from lance_spark_ops.table.format.fragment import DeletionFileType
from lance_spark_ops.table.paths import deletion_file_path

offsets = st.sets(st.integers(0, 2**32 - 1), max_size=300).map(lambda s: np.array(sorted(s), dtype=np.uint32))


@settings(deadline=None)
@given(offsets)
def test_arrow_roundtrip(values: np.ndarray) -> None:
    assert np.array_equal(decode_arrow(encode_arrow(values)), values)


@settings(deadline=None)
@given(offsets)
def test_bitmap_roundtrip(values: np.ndarray) -> None:
    assert np.array_equal(decode_bitmap(encode_bitmap(values)), values)


def test_arrow_file_layout() -> None:
    reader = ipc.open_file(pa.py_buffer(encode_arrow(np.array([3, 1, 2], dtype=np.uint32))))
    assert reader.schema.equals(ARROW_SCHEMA, check_metadata=True) and reader.schema.metadata is None
    assert reader.num_record_batches == 1


@pytest.mark.parametrize("total,previous,expected", [
    (1, None, DeletionFileType.ARROW_ARRAY),
    (4999, None, DeletionFileType.ARROW_ARRAY),
    (5000, None, DeletionFileType.BITMAP),  # pylance: one delete of 5000 rows -> .bin
    (5000, DeletionFileType.ARROW_ARRAY, DeletionFileType.ARROW_ARRAY),  # 4000 then 1000 -> .arrow
    (5001, DeletionFileType.ARROW_ARRAY, DeletionFileType.BITMAP),
    (3, DeletionFileType.BITMAP, DeletionFileType.BITMAP),
])
def test_choice(total: int, previous: DeletionFileType | None, expected: DeletionFileType) -> None:
    assert choose_file_type(total, previous) is expected


def test_threshold_as_pylance_writes(tmp_path: Path) -> None:
    import lance

    uri = str(tmp_path / "t")
    table = pa.table({"a": pa.array(range(30000), pa.int64())})
    ds = lance.write_dataset(table, uri, max_rows_per_file=10000)
    ds.delete("a < 5000")                          # fragment 0: 5000 at once
    ds.delete("a >= 10000 AND a < 14999")          # fragment 1: 4999 at once
    ds.delete("a >= 20000 AND a < 24000")          # fragment 2: 4000 ...
    ds.delete("a >= 24000 AND a < 25000")          # ... then 1000 more
    kinds = {f.id: f.deletion_file.file_type for f in Dataset.open(uri).fragments}
    assert kinds == {0: choose_file_type(5000), 1: choose_file_type(4999),
                     2: choose_file_type(5000, choose_file_type(4000))}


def test_pylance_files_decode(pylance_dataset) -> None:
    ds = Dataset.open(pylance_dataset("deletions", "2.2"))
    f0, f1 = ds.fragments
    assert np.array_equal(read_deletion_file(ds.store, 0, f0.deletion_file), np.arange(10))
    expected = np.append(np.arange(5500), 5999)
    assert np.array_equal(read_deletion_file(ds.store, 1, f1.deletion_file), expected)
    # our bitmap encoding is byte-identical to pylance's
    assert encode_bitmap(expected) == ds.store.read(deletion_file_path(1, f1.deletion_file))


def test_pylance_reads_our_files(dataset_copy) -> None:
    import lance

    uri = dataset_copy("deletions", "2.1")
    before = lance.dataset(uri).to_table(with_row_id=True)
    ds = Dataset.open(uri)
    for frag in ds.fragments:
        dfile = frag.deletion_file
        deleted = read_deletion_file(ds.store, frag.id, dfile)
        arrow = dfile.file_type is DeletionFileType.ARROW_ARRAY
        data = encode_arrow(deleted) if arrow else encode_bitmap(deleted)
        ds.store.write(deletion_file_path(frag.id, dfile), data)
    assert lance.dataset(uri).to_table(with_row_id=True).equals(before)


def test_write_deletion_file(tmp_path: Path) -> None:
    store = ObjectStore(str(tmp_path))
    small = write_deletion_file(store, 7, 3, [5, 1, 5, 9])
    assert small is not None and small.file_type is DeletionFileType.ARROW_ARRAY
    assert small.num_deleted_rows == 3 and small.read_version == 3
    assert os.listdir(tmp_path / "_deletions") == [f"7-3-{small.id}.arrow"]
    assert list(read_deletion_file(store, 7, small)) == [1, 5, 9]
    big = write_deletion_file(store, 8, 4, np.arange(6000))
    assert big is not None and big.file_type is DeletionFileType.BITMAP
    assert len(read_deletion_file(store, 8, big)) == 6000
    assert write_deletion_file(store, 9, 4, []) is None
    with pytest.raises(ValueError):
        write_deletion_file(store, 9, 4, [-1])


def test_corrupt_deletion_files() -> None:
    with pytest.raises(CorruptFileError):
        decode_arrow(b"garbage")
    with pytest.raises(CorruptFileError):
        decode_bitmap(b"\x01\x02\x03")
    wrong = pa.schema([pa.field("id", pa.int64())])
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, wrong) as w:
        w.write_batch(pa.record_batch([pa.array([1], pa.int64())], schema=wrong))
    with pytest.raises(CorruptFileError, match="schema"):
        decode_arrow(sink.getvalue().to_pybytes())
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, ARROW_SCHEMA) as w:
        for _ in range(2):
            w.write_batch(pa.record_batch([pa.array([1], pa.uint32())], schema=ARROW_SCHEMA))
    with pytest.raises(CorruptFileError, match="2 record batches"):
        decode_arrow(sink.getvalue().to_pybytes())
    with pytest.raises(CorruptFileError, match="names row 10"):
        keep_mask(np.array([10], dtype=np.uint32), 10, "x")


def _ipc_file(values: pa.Array, schema: pa.Schema, compression: str | None) -> bytes:
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, schema, options=ipc.IpcWriteOptions(compression=compression)) as w:
        w.write_batch(pa.record_batch([values], schema=schema))
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize("compression", [None, "zstd", "lz4"])
def test_arrow_files_read_without_pyarrow_ipc(compression: str | None) -> None:
    """Files in the shape Lance writes are read from their flatbuffers (``read_row_ids``); the
    offsets are pyarrow's, sorted."""
    from lance_spark_ops.table.format.ipc_bounds import read_row_ids

    values = pa.array(np.random.default_rng(3).permutation(3000)[:700].astype(np.uint32))
    data = _ipc_file(values, ARROW_SCHEMA, compression)
    assert read_row_ids(data) is not None
    assert np.array_equal(decode_arrow(data, max_rows=3000), np.sort(values.to_numpy()))
    with pytest.raises(CorruptFileError, match="700"):
        decode_arrow(data, max_rows=600)


def test_other_arrow_shapes_go_through_pyarrow() -> None:
    """A nullable column, or one with nulls, is not the fast path's shape: pyarrow reads it and
    the errors stay typed."""
    from lance_spark_ops.table.format.ipc_bounds import read_row_ids

    nullable = pa.schema([pa.field("row_id", pa.uint32())])
    plain = _ipc_file(pa.array([4, 2], pa.uint32()), nullable, "zstd")
    assert read_row_ids(plain) is None
    assert list(decode_arrow(plain)) == [2, 4]
    holes = _ipc_file(pa.array([4, None], pa.uint32()), nullable, "zstd")
    with pytest.raises(CorruptFileError, match="null row ids"):
        decode_arrow(holes)
    cut = _ipc_file(pa.array(np.arange(500, dtype=np.uint32)), ARROW_SCHEMA, "zstd")
    for damaged in (cut[:-20], cut[:100] + bytes(50) + cut[150:]):
        with pytest.raises(CorruptFileError):
            decode_arrow(damaged)
