"""Row-id sequences <-> numpy ``uint64`` arrays, vectorised, with Lance's segment choice.

Decoding expands every segment kind (see ``table.format.rowids`` for the byte layout) into
one preallocated ``uint64`` array. Encoding follows ``U64Segment::from_slice`` in Lance's
``rowids/segment.rs``:

* empty                         -> ``Range(0, 0)``
* strictly ascending, no gaps   -> ``Range(min, max + 1)``
* strictly ascending with gaps  -> the smallest of (ties resolved in this order)
  ``RangeWithHoles`` (24 + 4 * holes bytes), ``RangeWithBitmap`` (24 + ceil(span / 8)),
  ``SortedArray`` (24 + 2 * n)
* otherwise                     -> ``Array``

and ``EncodedU64Array`` picks u16 offsets from the minimum when ``max - min <= 65535``,
u32 when ``<= 2**32 - 1``, else raw u64 (an empty array is raw u64). Example:
``[0, 1, 2, 4]`` has 1 hole: holes = 28 B, bitmap = 25 B, sorted array = 32 B, so it becomes
``RangeWithBitmap(0, 5, bitmap=0b10111)``. Lance counts repeated values as "sorted" (ids are
unique, so it never sees them); here repeats give an ``Array`` so that every input
round-trips, and a sorted run ending at ``2**64 - 1`` (a range end would overflow) gives a
``SortedArray``.

A whole sequence made from one array is a single segment (``RowIdSequence::from(&[u64])``);
``extend_sequence`` concatenates sequences, merging a trailing and a leading ``Range`` that
touch, as ``RowIdSequence::extend`` does.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lance_spark_ops.errors import CorruptFileError
from lance_spark_ops.table.format.rowids import (
    U64_MAX,
    ArraySegment,
    ArrayWidth,
    EncodedU64Array,
    RangeSegment,
    RangeWithBitmapSegment,
    RangeWithHolesSegment,
    RowDatasetVersionRun,
    RowDatasetVersionSequence,
    RowIdSequence,
    SortedArraySegment,
    U64Segment,
)

__all__ = [
    "decode_array",
    "decode_row_ids",
    "decode_segment",
    "decode_versions",
    "encode_array",
    "encode_row_ids",
    "encode_segment",
    "encode_versions",
    "extend_sequence",
    "segment_len",
]

_U64 = np.uint64


# -- decoding ----------------------------------------------------------------
def decode_array(arr: EncodedU64Array) -> np.ndarray:
    """Values of an ``EncodedU64Array`` as a new ``uint64`` array."""
    if arr.width is ArrayWidth.U64:
        return arr.offsets.astype(_U64)
    if arr.offsets.size and arr.base > U64_MAX - int(arr.offsets.max()):
        raise CorruptFileError(f"encoded array base {arr.base} plus offset {int(arr.offsets.max())} "
                               "overflows u64")
    out = arr.offsets.astype(_U64)
    out += _U64(arr.base)
    return out


def _arange(start: int, stop: int) -> np.ndarray:
    out = np.arange(stop - start, dtype=_U64)
    out += _U64(start)
    return out


def _bitmap_bits(seg: RangeWithBitmapSegment) -> np.ndarray:
    n = seg.end - seg.start
    if len(seg.bitmap) * 8 < n:  # unpackbits would pad the missing bits with zeros (and allocate)
        raise CorruptFileError(f"range-with-bitmap segment spans {n} ids but its bitmap holds "
                               f"{len(seg.bitmap) * 8} bits")
    return np.unpackbits(np.frombuffer(seg.bitmap, dtype=np.uint8), count=n, bitorder="little").view(bool)


def _hole_mask(seg: RangeWithHolesSegment) -> np.ndarray:
    """True for present positions of ``start .. end``."""
    n = seg.end - seg.start
    keep = np.ones(n, dtype=bool)
    holes = decode_array(seg.holes)
    inside = holes[(holes >= _U64(seg.start)) & (holes < _U64(seg.end))]
    keep[(inside - _U64(seg.start)).astype(np.int64)] = False
    return keep


def segment_len(seg: U64Segment) -> int:
    """Number of ids the segment holds."""
    if isinstance(seg, RangeSegment):
        return seg.end - seg.start
    if isinstance(seg, RangeWithHolesSegment):  # without expanding the range (it may be huge)
        holes = decode_array(seg.holes)
        inside = np.unique(holes[(holes >= _U64(seg.start)) & (holes < _U64(seg.end))])
        return seg.end - seg.start - int(inside.size)
    if isinstance(seg, RangeWithBitmapSegment):
        return int(np.count_nonzero(_bitmap_bits(seg)))
    return len(seg.array)


def _check_total(lengths: Sequence[int], expected: int | None, what: str, where: str | None) -> None:
    """A few bytes can describe 2**64 ids: compare the count with the rows before expanding."""
    total = sum(lengths)
    if expected is not None and total != expected:
        raise CorruptFileError(f"{what} holds {total} entries but the fragment has {expected} rows",
                               path=where)


def decode_segment(seg: U64Segment) -> np.ndarray:
    """The ids of one segment, in order, as ``uint64``."""
    if isinstance(seg, RangeSegment):
        return _arange(seg.start, seg.end)
    if isinstance(seg, RangeWithHolesSegment):
        return _arange(seg.start, seg.end)[_hole_mask(seg)]
    if isinstance(seg, RangeWithBitmapSegment):
        out = np.flatnonzero(_bitmap_bits(seg)).astype(_U64)
        out += _U64(seg.start)
        return out
    if isinstance(seg, (SortedArraySegment, ArraySegment)):
        return decode_array(seg.array)
    raise TypeError(f"not a row-id segment: {seg!r}")


def decode_row_ids(seq: RowIdSequence, expected: int | None = None, where: str | None = None) -> np.ndarray:
    """All ids of a sequence, in row order, as one ``uint64`` array (``expected``: the
    fragment's row count, checked before anything is allocated)."""
    if expected is not None:
        _check_total([segment_len(s) for s in seq.segments], expected, "row-id sequence", where)
    parts = [decode_segment(s) for s in seq.segments]
    if not parts:
        return np.empty(0, dtype=_U64)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def decode_versions(seq: RowDatasetVersionSequence, expected: int | None = None,
                    where: str | None = None) -> np.ndarray:
    """Per-row versions: run ``i`` repeated ``len(span_i)`` times (``expected`` as for row ids)."""
    if not seq.runs:
        return np.empty(0, dtype=_U64)
    counts = [segment_len(r.span) for r in seq.runs]
    _check_total(counts, expected, "version sequence", where)
    lengths = np.array(counts, dtype=np.int64)
    versions = np.array([r.version for r in seq.runs], dtype=_U64)
    return np.repeat(versions, lengths)


# -- encoding ----------------------------------------------------------------
def _as_u64(values: Sequence[int] | np.ndarray) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype != _U64:
        if arr.size and np.issubdtype(arr.dtype, np.signedinteger) and arr.min() < 0:
            raise ValueError("row ids must be non-negative")
        arr = arr.astype(_U64)
    return arr.ravel()


def encode_array(values: Sequence[int] | np.ndarray) -> EncodedU64Array:
    """Narrowest ``EncodedU64Array`` for ``values`` (order kept)."""
    v = _as_u64(values)
    if v.size == 0:
        return EncodedU64Array(ArrayWidth.U64, 0, np.empty(0, dtype="<u8"))
    lo, hi = int(v.min()), int(v.max())
    if hi - lo <= 0xFFFF:
        return EncodedU64Array(ArrayWidth.U16, lo, (v - _U64(lo)).astype("<u2"))
    if hi - lo <= 0xFFFFFFFF:
        return EncodedU64Array(ArrayWidth.U32, lo, (v - _U64(lo)).astype("<u4"))
    return EncodedU64Array(ArrayWidth.U64, 0, v.astype("<u8"))


def encode_segment(values: Sequence[int] | np.ndarray) -> U64Segment:
    """The segment Lance would choose for ``values`` (see module docstring)."""
    v = _as_u64(values)
    n = int(v.size)
    if n == 0:
        return RangeSegment(0, 0)
    if n > 1 and not bool(np.all(v[1:] > v[:-1])):
        return ArraySegment(encode_array(v))
    lo, hi = int(v[0]), int(v[-1])
    if hi == U64_MAX:  # a range would end at 2**64, which a u64 cannot hold
        return SortedArraySegment(encode_array(v))
    total = hi - lo + 1
    n_holes = total - n
    if n_holes == 0:
        return RangeSegment(lo, hi + 1)
    sizes = (24 + 4 * n_holes, 24 + (total + 7) // 8, 24 + 2 * n)
    best = min(sizes)
    if best == sizes[0] or best == sizes[1]:
        present = np.zeros(total, dtype=bool)  # total < n + n_holes, bounded by the size rule
        present[(v - _U64(lo)).astype(np.int64)] = True
        if best == sizes[0]:
            holes = np.flatnonzero(~present).astype(_U64) + _U64(lo)
            return RangeWithHolesSegment(lo, hi + 1, encode_array(holes))
        return RangeWithBitmapSegment(lo, hi + 1, np.packbits(present, bitorder="little").tobytes())
    return SortedArraySegment(encode_array(v))


def encode_row_ids(values: Sequence[int] | np.ndarray) -> RowIdSequence:
    """One-segment sequence for ``values`` (``RowIdSequence::from(&[u64])``)."""
    return RowIdSequence([encode_segment(values)])


def extend_sequence(first: RowIdSequence, *others: RowIdSequence) -> RowIdSequence:
    """Concatenate sequences; touching ``Range`` segments at a junction become one."""
    segments = list(first.segments)
    for other in others:
        rest = list(other.segments)
        if (segments and rest and isinstance(segments[-1], RangeSegment)
                and isinstance(rest[0], RangeSegment) and segments[-1].end == rest[0].start):
            segments[-1] = RangeSegment(segments[-1].start, rest[0].end)
            rest = rest[1:]
        segments.extend(rest)
    return RowIdSequence(segments)


def encode_versions(values: Sequence[int] | np.ndarray) -> RowDatasetVersionSequence:
    """Runs of equal consecutive versions; each span is the ``Range`` of row positions."""
    v = _as_u64(values)
    if v.size == 0:
        return RowDatasetVersionSequence([])
    starts = np.concatenate([[0], np.flatnonzero(v[1:] != v[:-1]) + 1])
    ends = np.append(starts[1:], v.size)
    return RowDatasetVersionSequence([RowDatasetVersionRun(RangeSegment(int(s), int(e)), int(v[s]))
                                      for s, e in zip(starts, ends, strict=True)])
