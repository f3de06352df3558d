"""Row-id sequences: every segment kind round-trips (hypothesis) and the encoder picks the kind
Lance picks; sequences pylance wrote decode to pylance's ``_rowid`` and re-encode unchanged."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lance_spark_ops import CorruptFileError, Dataset
from lance_spark_ops._pb import rowids_pb2
from lance_spark_ops.table.format.rowids import (
    ArraySegment,
    ArrayWidth,
    EncodedU64Array,
    RangeSegment,
    RangeWithBitmapSegment,
    RangeWithHolesSegment,
    RowDatasetVersionSequence,
    RowIdSequence,
    SortedArraySegment,
    segment_to_pb,
)
from lance_spark_ops.table.rowids import (
    decode_row_ids,
    decode_segment,
    decode_versions,
    encode_array,
    encode_row_ids,
    encode_segment,
    encode_versions,
    extend_sequence,
)

U64_MAX = 2**64 - 1
starts = st.one_of(st.integers(0, 1000), st.integers(0, U64_MAX - 2**42))
wide_starts = st.one_of(st.integers(0, 1000), st.integers(0, 2**63))  # room for 2**51 of spread


def roundtrip(values: np.ndarray, kind: type) -> None:
    seg = encode_segment(values)
    assert isinstance(seg, kind), f"expected {kind.__name__}, encoder chose {type(seg).__name__}"
    assert np.array_equal(decode_segment(seg), values)
    again = RowIdSequence.from_bytes(encode_row_ids(values).to_bytes())
    assert again.segments == [seg]
    got = decode_row_ids(again)
    assert got.dtype == np.uint64 and np.array_equal(got, values)


def _u64(start: int, offsets: np.ndarray) -> np.ndarray:
    return offsets.astype(np.uint64) + np.uint64(start)


@settings(deadline=None)
@given(starts, st.integers(1, 3000))
def test_range(start: int, n: int) -> None:
    roundtrip(_u64(start, np.arange(n)), RangeSegment)


@settings(deadline=None)
@given(starts, st.data())
def test_range_with_holes(start: int, data: st.DataObject) -> None:
    span = data.draw(st.integers(80, 5000))
    k = data.draw(st.integers(1, span // 40))  # 4k < span / 8: holes beat the bitmap
    holes = data.draw(st.sets(st.integers(1, span - 2), min_size=k, max_size=k))
    keep = np.ones(span, dtype=bool)
    keep[list(holes)] = False
    roundtrip(_u64(start, np.flatnonzero(keep)), RangeWithHolesSegment)


@settings(deadline=None)
@given(starts, st.data())
def test_range_with_bitmap(start: int, data: st.DataObject) -> None:
    span = data.draw(st.integers(64, 5000))
    k = data.draw(st.integers(span // 32 + 2, span // 2))  # bitmap beats holes and sorted array
    holes = data.draw(st.sets(st.integers(1, span - 2), min_size=k, max_size=k))
    keep = np.ones(span, dtype=bool)
    keep[list(holes)] = False
    roundtrip(_u64(start, np.flatnonzero(keep)), RangeWithBitmapSegment)


@settings(deadline=None)
@given(wide_starts, st.lists(st.integers(40, 2**20), min_size=1, max_size=300), st.booleans())
def test_sorted_array(start: int, gaps: list[int], wide: bool) -> None:
    offsets = np.concatenate([[0], np.cumsum(np.array(gaps, dtype=np.uint64) * (2**22 if wide else 1))])
    roundtrip(_u64(start, offsets), SortedArraySegment)


@settings(deadline=None)
@given(starts, st.lists(st.integers(0, 2**40), min_size=2, max_size=300, unique=True), st.randoms())
def test_array(start: int, values: list[int], rnd) -> None:
    values = sorted(values)
    values[0], values[-1] = values[-1], values[0]  # at least one descent
    rnd.shuffle(values[1:-1])
    roundtrip(_u64(start, np.array(values, dtype=np.uint64)), ArraySegment)


@settings(deadline=None)
@given(st.lists(st.integers(0, U64_MAX), max_size=200))
def test_any_values_roundtrip(values: list[int]) -> None:
    arr = np.array(values, dtype=np.uint64)
    assert np.array_equal(decode_row_ids(RowIdSequence.from_bytes(encode_row_ids(arr).to_bytes())), arr)


@pytest.mark.parametrize("spread,width", [(0xFFFF, ArrayWidth.U16), (0x10000, ArrayWidth.U32),
                                          (0xFFFFFFFF, ArrayWidth.U32), (0x100000000, ArrayWidth.U64)])
def test_encoded_array_width(spread: int, width: ArrayWidth) -> None:
    base = 2**50
    values = np.array([base + spread, base, base + 7], dtype=np.uint64)
    enc = encode_array(values)
    assert enc.width is width
    assert enc.base == (0 if width is ArrayWidth.U64 else base)
    pb = enc.to_pb()
    assert EncodedU64Array.from_pb(rowids_pb2.EncodedU64Array.FromString(pb.SerializeToString())) == enc


def test_lance_choices_by_hand() -> None:
    assert encode_segment([]) == RangeSegment(0, 0)
    assert encode_segment([5, 6, 7]) == RangeSegment(5, 8)
    # [0, 1, 2, 4]: holes 28 B, bitmap 25 B, sorted array 32 B
    assert encode_segment([0, 1, 2, 4]) == RangeWithBitmapSegment(0, 5, bytes([0b10111]))
    hole = encode_segment([i for i in range(100) if i != 50])  # holes 28, bitmap 37
    assert isinstance(hole, RangeWithHolesSegment) and list(decode_segment(hole)) == [
        i for i in range(100) if i != 50]
    assert hole.holes.width is ArrayWidth.U16 and hole.holes.base == 50
    assert isinstance(encode_segment([0, 1000, 2000]), SortedArraySegment)
    assert isinstance(encode_segment([3, 3, 4]), ArraySegment)  # repeats: kept as an array
    assert isinstance(encode_segment([2, 1]), ArraySegment)


def test_extend_merges_touching_ranges() -> None:
    a, b = encode_row_ids(np.arange(0, 10)), encode_row_ids(np.arange(10, 20))
    c = encode_row_ids(np.array([30, 25], dtype=np.uint64))
    seq = extend_sequence(a, b, c)
    assert seq.segments[0] == RangeSegment(0, 20) and isinstance(seq.segments[1], ArraySegment)
    assert list(decode_row_ids(seq)) == [*range(20), 30, 25]


@settings(deadline=None)
@given(st.lists(st.integers(1, 5), max_size=300))
def test_versions_roundtrip(values: list[int]) -> None:
    arr = np.array(values, dtype=np.uint64)
    seq = RowDatasetVersionSequence.from_bytes(encode_versions(arr).to_bytes())
    assert np.array_equal(decode_versions(seq), arr)
    assert len(seq.runs) == (0 if not values else 1 + int(np.count_nonzero(np.diff(arr))))


def test_version_runs_count_present_positions() -> None:
    """A run's span may be any segment; only its length counts."""
    seq = RowDatasetVersionSequence.from_pb(rowids_pb2.RowDatasetVersionSequence(runs=[
        rowids_pb2.RowDatasetVersionRun(span=segment_to_pb(encode_segment([0, 1, 2, 4])), version=3),
        rowids_pb2.RowDatasetVersionRun(span=segment_to_pb(RangeSegment(5, 7)), version=9)]))
    assert list(decode_versions(seq)) == [3, 3, 3, 3, 9, 9]


@pytest.mark.parametrize("data", [
    b"\xff\xff\xff",  # not a protobuf
    rowids_pb2.RowIdSequence(segments=[rowids_pb2.U64Segment()]).SerializeToString(),  # no kind
    rowids_pb2.RowIdSequence(segments=[rowids_pb2.U64Segment(
        range=rowids_pb2.U64Segment.Range(start=9, end=3))]).SerializeToString(),  # end < start
    rowids_pb2.RowIdSequence(segments=[rowids_pb2.U64Segment(
        range_with_bitmap=rowids_pb2.U64Segment.RangeWithBitmap(start=0, end=20, bitmap=b"\xff"))]
    ).SerializeToString(),  # bitmap too short
    rowids_pb2.RowIdSequence(segments=[rowids_pb2.U64Segment(array=rowids_pb2.EncodedU64Array(
        u16_array=rowids_pb2.EncodedU64Array.U16Array(base=1, offsets=b"\x01")))]).SerializeToString(),
])
def test_corrupt_sequences(data: bytes) -> None:
    with pytest.raises(CorruptFileError):
        RowIdSequence.from_bytes(data, "somewhere")


def test_empty_sequence() -> None:
    assert decode_row_ids(RowIdSequence.from_bytes(b"")).size == 0


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_pylance_sequences(pylance_dataset, version: str) -> None:
    """Segments pylance chose re-encode to the same segment; ids match pylance's ``_rowid``."""
    import lance

    uri = pylance_dataset("stable_row_ids", version)
    kinds = set()
    for v in [x["version"] for x in lance.dataset(uri).versions()]:
        ds = Dataset.open(uri, version=v)
        for frag in ds.fragments:
            seq = ds.row_id_sequence(frag)
            for seg in seq.segments:
                kinds.add(type(seg))
                assert encode_segment(decode_segment(seg)) == seg
    assert {RangeSegment, RangeWithBitmapSegment, SortedArraySegment} <= kinds
