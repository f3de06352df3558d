"""Row-id sequence spec objects: ``RowIdSequence``, its ``U64Segment`` kinds and the
per-row dataset-version sequences, with exact protobuf (``rowids.proto``) conversion.

On disk (fragment metadata ``inline_row_ids`` or an external file slice) a row-id sequence
is a serialized ``RowIdSequence`` protobuf: a list of segments, each one of

=====================  ==========================================================  ===========
segment                values                                                      size (B)
=====================  ==========================================================  ===========
``Range``              ``start .. end`` (end exclusive)                            16
``RangeWithHoles``     ``start .. end`` minus ``holes`` (absolute, sorted)         24 + 4/hole
``RangeWithBitmap``    ``start + i`` for every set bit ``i`` (LSB first)           24 + len/8
``SortedArray``        an ascending ``EncodedU64Array``                            24 + 2/value
``Array``              an ``EncodedU64Array`` in any order                         24 + 2/value
=====================  ==========================================================  ===========

``EncodedU64Array`` stores ``base + offset`` with little-endian u16 or u32 offsets, or raw
little-endian u64 values. Example: ``RangeWithHoles{start: 10, end: 14, holes: U16{base: 12,
offsets: [0]}}`` holds ids ``[10, 11, 13]``; ``RangeWithBitmap{start: 10, end: 14, bitmap:
[0b1011]}`` holds the same ids (and is what Lance picks for them: 25 bytes against 28).

A ``RowDatasetVersionSequence`` (created-at / last-updated-at versions) is a list of runs
``(span, version)``: the span is a ``U64Segment`` over row *positions*, and only its length
matters when expanding (run i contributes ``len(span_i)`` copies of ``version_i``).

These objects hold numpy views of the protobuf bytes (zero-copy) and never do I/O; the
vectorised expansion and the compact-encoding choice live in ``lance_spark_ops.table.rowids``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import numpy as np
from google.protobuf.message import DecodeError

from lance_spark_ops._pb import rowids_pb2
from lance_spark_ops.errors import CorruptFileError

U64_MAX = (1 << 64) - 1


class ArrayWidth(Enum):
    """Width of the stored offsets of an ``EncodedU64Array``."""

    U16 = "u16"
    U32 = "u32"
    U64 = "u64"


_DTYPES = {ArrayWidth.U16: np.dtype("<u2"), ArrayWidth.U32: np.dtype("<u4"), ArrayWidth.U64: np.dtype("<u8")}


@dataclass(frozen=True, eq=False)
class EncodedU64Array:
    """``base + offsets`` (U16 / U32) or raw ``offsets`` (U64, base 0)."""

    width: ArrayWidth
    base: int
    offsets: np.ndarray  # little-endian u2 / u4 / u8 view

    def __len__(self) -> int:
        return int(self.offsets.size)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, EncodedU64Array) and self.width == other.width
                and self.base == other.base and np.array_equal(self.offsets, other.offsets))

    def __hash__(self) -> int:  # pragma: no cover - frozen dataclasses need one
        return hash((self.width, self.base, self.offsets.tobytes()))

    @classmethod
    def from_pb(cls, pb: rowids_pb2.EncodedU64Array, where: str = "") -> EncodedU64Array:
        kind = pb.WhichOneof("array")
        if kind == "u16_array":
            return cls(ArrayWidth.U16, pb.u16_array.base, _view(pb.u16_array.offsets, ArrayWidth.U16, where))
        if kind == "u32_array":
            return cls(ArrayWidth.U32, pb.u32_array.base, _view(pb.u32_array.offsets, ArrayWidth.U32, where))
        if kind == "u64_array":
            return cls(ArrayWidth.U64, 0, _view(pb.u64_array.values, ArrayWidth.U64, where))
        raise CorruptFileError(f"{where}EncodedU64Array has no array kind set")

    def to_pb(self) -> rowids_pb2.EncodedU64Array:
        data = np.ascontiguousarray(self.offsets, dtype=_DTYPES[self.width]).tobytes()
        pb = rowids_pb2.EncodedU64Array()
        if self.width is ArrayWidth.U16:
            pb.u16_array.base = self.base
            pb.u16_array.offsets = data
        elif self.width is ArrayWidth.U32:
            pb.u32_array.base = self.base
            pb.u32_array.offsets = data
        else:
            pb.u64_array.values = data
        return pb


def _view(data: bytes, width: ArrayWidth, where: str) -> np.ndarray:
    dt = _DTYPES[width]
    if len(data) % dt.itemsize:
        raise CorruptFileError(f"{where}{width.value} array holds {len(data)} bytes, not a multiple of "
                               f"{dt.itemsize}")
    return np.frombuffer(data, dtype=dt)


@dataclass(frozen=True)
class RangeSegment:
    """``start .. end`` (end exclusive)."""

    start: int
    end: int


@dataclass(frozen=True)
class RangeWithHolesSegment:
    """``start .. end`` minus the (absolute, ascending) ``holes``."""

    start: int
    end: int
    holes: EncodedU64Array


@dataclass(frozen=True)
class RangeWithBitmapSegment:
    """``start + i`` for each set bit ``i`` of ``bitmap`` (LSB-first bytes, ``end - start`` bits)."""

    start: int
    end: int
    bitmap: bytes


@dataclass(frozen=True)
class SortedArraySegment:
    array: EncodedU64Array


@dataclass(frozen=True)
class ArraySegment:
    array: EncodedU64Array


U64Segment = (RangeSegment | RangeWithHolesSegment | RangeWithBitmapSegment | SortedArraySegment
              | ArraySegment)


def _check_range(start: int, end: int, where: str) -> None:
    if end < start:
        raise CorruptFileError(f"{where}segment range end {end} is before its start {start}")


def segment_from_pb(pb: rowids_pb2.U64Segment, where: str = "") -> U64Segment:
    kind = pb.WhichOneof("segment")
    if kind == "range":
        _check_range(pb.range.start, pb.range.end, where)
        return RangeSegment(pb.range.start, pb.range.end)
    if kind == "range_with_holes":
        r = pb.range_with_holes
        _check_range(r.start, r.end, where)
        if not r.HasField("holes"):
            raise CorruptFileError(f"{where}RangeWithHoles segment has no holes array")
        return RangeWithHolesSegment(r.start, r.end, EncodedU64Array.from_pb(r.holes, where))
    if kind == "range_with_bitmap":
        r = pb.range_with_bitmap
        _check_range(r.start, r.end, where)
        need = (r.end - r.start + 7) // 8
        if len(r.bitmap) < need:
            raise CorruptFileError(f"{where}RangeWithBitmap over {r.end - r.start} ids needs {need} bitmap "
                                   f"bytes, found {len(r.bitmap)}")
        return RangeWithBitmapSegment(r.start, r.end, bytes(r.bitmap))
    if kind == "sorted_array":
        return SortedArraySegment(EncodedU64Array.from_pb(pb.sorted_array, where))
    if kind == "array":
        return ArraySegment(EncodedU64Array.from_pb(pb.array, where))
    raise CorruptFileError(f"{where}U64Segment has no segment kind set")


def segment_to_pb(seg: U64Segment) -> rowids_pb2.U64Segment:
    pb = rowids_pb2.U64Segment()
    if isinstance(seg, RangeSegment):
        pb.range.start, pb.range.end = seg.start, seg.end
        if seg.start == 0 and seg.end == 0:
            pb.range.SetInParent()
    elif isinstance(seg, RangeWithHolesSegment):
        pb.range_with_holes.start, pb.range_with_holes.end = seg.start, seg.end
        pb.range_with_holes.holes.CopyFrom(seg.holes.to_pb())
    elif isinstance(seg, RangeWithBitmapSegment):
        pb.range_with_bitmap.start, pb.range_with_bitmap.end = seg.start, seg.end
        pb.range_with_bitmap.bitmap = seg.bitmap
    elif isinstance(seg, SortedArraySegment):
        pb.sorted_array.CopyFrom(seg.array.to_pb())
    elif isinstance(seg, ArraySegment):
        pb.array.CopyFrom(seg.array.to_pb())
    else:
        raise TypeError(f"not a row-id segment: {seg!r}")
    return pb


def _parse(msg_type: type, data: bytes, what: str, path: str | None) -> object:
    msg = msg_type()
    try:
        msg.ParseFromString(bytes(data))
    except DecodeError as e:
        raise CorruptFileError(f"{what} does not parse: {e}", path=path) from e
    return msg


@dataclass
class RowIdSequence:
    """The row ids of a fragment's physical rows, in row order."""

    segments: list[U64Segment] = field(default_factory=list)

    @classmethod
    def from_pb(cls, pb: rowids_pb2.RowIdSequence) -> RowIdSequence:
        return cls([segment_from_pb(s, f"row-id segment {i}: ") for i, s in enumerate(pb.segments)])

    def to_pb(self) -> rowids_pb2.RowIdSequence:
        return rowids_pb2.RowIdSequence(segments=[segment_to_pb(s) for s in self.segments])

    @classmethod
    def from_bytes(cls, data: bytes, path: str | None = None) -> RowIdSequence:
        pb = _parse(rowids_pb2.RowIdSequence, data, "RowIdSequence", path)
        try:
            return cls.from_pb(pb)  # type: ignore[arg-type]
        except CorruptFileError as e:
            raise CorruptFileError(str(e), path=path) from e

    def to_bytes(self) -> bytes:
        return self.to_pb().SerializeToString()


@dataclass(frozen=True)
class RowDatasetVersionRun:
    """``len(span)`` consecutive rows that share ``version``."""

    span: U64Segment
    version: int


@dataclass
class RowDatasetVersionSequence:
    """Per-row dataset versions (created-at or last-updated-at), as runs in row order."""

    runs: list[RowDatasetVersionRun] = field(default_factory=list)

    @classmethod
    def from_pb(cls, pb: rowids_pb2.RowDatasetVersionSequence) -> RowDatasetVersionSequence:
        runs = []
        for i, r in enumerate(pb.runs):
            if not r.HasField("span"):
                raise CorruptFileError(f"version run {i} has no span")
            runs.append(RowDatasetVersionRun(segment_from_pb(r.span, f"version run {i}: "), r.version))
        return cls(runs)

    def to_pb(self) -> rowids_pb2.RowDatasetVersionSequence:
        return rowids_pb2.RowDatasetVersionSequence(
            runs=[rowids_pb2.RowDatasetVersionRun(span=segment_to_pb(r.span), version=r.version)
                  for r in self.runs])

    @classmethod
    def from_bytes(cls, data: bytes, path: str | None = None) -> RowDatasetVersionSequence:
        pb = _parse(rowids_pb2.RowDatasetVersionSequence, data, "RowDatasetVersionSequence", path)
        try:
            return cls.from_pb(pb)  # type: ignore[arg-type]
        except CorruptFileError as e:
            raise CorruptFileError(str(e), path=path) from e

    def to_bytes(self) -> bytes:
        return self.to_pb().SerializeToString()
