"""Every single-bit flip and every truncation of small deletion files and row-id sequences,
decoded in-process: a LanceError or a valid result, never another exception, and nothing
expanded beyond the fragment's rows (huge counts described in a few bytes are refused)."""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pytest
from pyroaring import BitMap

from lance_spark_ops.errors import CorruptFileError, LanceError
from lance_spark_ops.table.deletion import decode_arrow, decode_bitmap, encode_arrow, encode_bitmap
from lance_spark_ops.table.format.rowids import RangeSegment, RangeWithBitmapSegment, RowIdSequence
from lance_spark_ops.table.rowids import decode_row_ids, encode_row_ids, segment_len

ROWS = 6000


def _variants(data: bytes):
    for i in range(len(data)):
        for bit in range(8):
            b = bytearray(data)
            b[i] ^= 1 << bit
            yield bytes(b)
    for n in range(len(data)):
        yield data[:n]


def _survives(decode, data: bytes) -> np.ndarray | None:
    try:
        out = decode(data)
    except LanceError as e:
        assert e.path == "f", e
        assert not isinstance(e.__cause__, (MemoryError, pa.ArrowMemoryError)), e  # refused, not attempted
        return None
    assert out.size <= ROWS
    return out


def test_arrow_deletion_every_flip() -> None:
    data = encode_arrow(np.array([3, 17, 400, 5999], dtype=np.uint32))
    caught = sum(_survives(lambda d: decode_arrow(d, "f", ROWS), v) is None for v in _variants(data))
    assert caught > len(data)  # most damage is noticed


def test_roaring_deletion_every_flip() -> None:
    data = encode_bitmap(np.array([0, 5, 70, 5000, 5999], dtype=np.uint32))
    for v in _variants(data):
        out = _survives(lambda d: decode_bitmap(d, "f", ROWS), v)
        assert out is None or (out.size == 0 or int(out.max()) < ROWS)


def test_row_ids_every_flip() -> None:
    seqs = [encode_row_ids(np.arange(ROWS, dtype=np.uint64)),
            encode_row_ids(np.array([1, 5, 9, 1000, 70000], dtype=np.uint64)),
            encode_row_ids(np.delete(np.arange(100, 100 + ROWS + 3, dtype=np.uint64), [7, 900, 4000]))]
    for seq in seqs:
        n = int(sum(segment_len(s) for s in seq.segments))
        for v in _variants(seq.to_bytes()):
            try:
                ids = decode_row_ids(RowIdSequence.from_bytes(v, "f"), n, "f")
            except LanceError:
                continue
            assert ids.size == n


def test_huge_counts_refused_before_expanding() -> None:
    # 2**62 ids in a handful of bytes
    seq = RowIdSequence([RangeSegment(0, 1 << 62)])
    with pytest.raises(CorruptFileError, match="fragment has 6000 rows"):
        decode_row_ids(RowIdSequence.from_bytes(seq.to_bytes()), ROWS, "m")
    with pytest.raises(CorruptFileError, match="bitmap holds 8 bits"):
        segment_len(RangeWithBitmapSegment(0, 1 << 40, b"\xff"))
    # a roaring bitmap of 2**28 offsets in ~40 KB of run containers
    bm = BitMap()
    bm.add_range(0, 1 << 28)
    bm.run_optimize()
    data = bm.serialize()
    assert len(data) < 100_000
    with pytest.raises(CorruptFileError, match="268435456 row offsets"):
        decode_bitmap(data, "d", ROWS)


def test_arrow_field_name_not_utf8() -> None:
    data = encode_arrow(np.array([1, 2], dtype=np.uint32))
    bad = data.replace(b"row_id", b"\xff\xfe\xfd\xfc\xfb\xfa")
    with pytest.raises(CorruptFileError, match="deletion file"):
        decode_arrow(bad, "d", ROWS)


def test_arrow_huge_uncompressed_length_refused_before_allocating() -> None:
    data = encode_arrow(np.arange(0, 4000, 4, dtype=np.uint32))  # 1000 offsets: 4000 bytes
    prefix = struct.pack("<q", 4000)
    assert data.count(prefix) == 1  # the data buffer's uncompressed length
    for huge in (1 << 56, 1 << 40, 4065):
        bad = data.replace(prefix, struct.pack("<q", huge))
        with pytest.raises(CorruptFileError, match=f"claims {huge} bytes uncompressed") as e:
            decode_arrow(bad, "d", ROWS)
        assert e.value.__cause__ is None
    with pytest.raises(CorruptFileError, match="1000 rows, at most 999"):
        decode_arrow(data, "d", 999)
