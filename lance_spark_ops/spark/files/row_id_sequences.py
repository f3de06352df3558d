"""Re-encode a fragment's row-id sequence as compactly as Lance's segment kinds allow.

Why deleted rows are not dropped. A fragment's sequence is positional: id ``i`` belongs to
physical row ``i``, and every reader (Lance's scan, its row-id index, our ``Dataset``) requires
``len(sequence) == physical_rows``. Deleting rows only adds a deletion vector; the data files -
and so the physical rows - stay. What "dropping the ids of deleted rows" can mean without
rewriting data is: *the id stored at a deleted position is never read* (scans and Lance's
``RowIdIndex::new`` filter deleted offsets first), so it is free to be whatever encodes
smallest. Live rows keep their ids exactly; ``_rowid`` and every lookup are unchanged.

Algorithm (vectorised except for one pass over runs):

1. **Fill** every deleted position so that it continues the run it sits in: the previous live
   id plus the distance (``fill_deleted``). ``Range(0, 100)`` with rows 10..19 deleted stays
   ``Range(0, 100)``; ``[5, 6, x, x, 9]`` becomes ``Range(5, 10)``; leading deleted rows count
   back from the first live id. When the live ids leave no room (the next live id is too
   close) the run just breaks there, as it would anyway.
2. **Runs**: maximal stretches where each id is the previous plus one.
3. **Segmentation** by dynamic programming over runs: after each run, the cheapest encoding of
   everything so far that ends in an open segment of each kind - ``Range`` (one run),
   ``RangeWithHoles`` (extends over an ascending gap, 2-8 bytes per hole),
   ``RangeWithBitmap`` (1 bit per id of the span), ``SortedArray`` (2-8 bytes per id) and
   ``Array`` (any order) - is kept; a segment either extends the same kind's open segment or
   starts after the cheapest closed prefix. Byte costs mirror the protobuf sizes (varints
   estimated, offset width from the span), so the pass is exact for those estimates.
4. Each chosen piece is encoded with Lance's own choice (``encode_segment``), so the output
   is exactly what Lance would write for those ids; the result is kept only if it is smaller
   than the original bytes, and checked: live positions must decode to the original ids.

Example: ids ``[0..1000) ++ [5000..6000)`` with 10 deleted rows in each half were one
``SortedArray`` (4 kB) after a compaction; they become two ``Range`` segments (about 30 B).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lance_spark_ops.errors import CorruptFileError
from lance_spark_ops.table.format.rowids import U64_MAX, RangeSegment, RowIdSequence, U64Segment
from lance_spark_ops.table.rowids import decode_row_ids, encode_row_ids, encode_segment

_U64 = np.uint64
# Fixed protobuf overhead per segment kind (tags, lengths, array header), bytes.
_C_RANGE, _C_HOLES, _C_BITMAP, _C_ARRAY = 6, 12, 8, 8
MAX_DP_RUNS = 250_000  # beyond this many runs the sequence is encoded as one piece


def _vlen(x: int) -> int:
    """Bytes of ``x`` as a protobuf varint."""
    return max(1, (int(x).bit_length() + 6) // 7)


def _width(span: int) -> int:
    return 2 if span <= 0xFFFF else 4 if span <= 0xFFFFFFFF else 8


def fill_deleted(ids: np.ndarray, deleted: np.ndarray) -> np.ndarray:
    """``ids`` with each deleted position set to continue its neighbour's run (see step 1)."""
    ids = np.asarray(ids, dtype=_U64)
    n = ids.size
    live = ~np.asarray(deleted, dtype=bool)
    if n == 0 or live.all():
        return ids.copy()
    pos = np.arange(n, dtype=np.int64)
    if not live.any():
        start = int(ids[0])
        return ids.copy() if start > U64_MAX - n else np.arange(start, start + n, dtype=_U64)
    out = ids.copy()
    prev = np.maximum.accumulate(np.where(live, pos, -1))
    fwd = ~live & (prev >= 0)
    q = prev[fwd]
    out[fwd] = ids[q] + (pos[fwd] - q).astype(_U64)
    first = int(np.argmax(live))
    if first > 0 and int(ids[first]) >= first:
        out[:first] = ids[first] - (first - pos[:first]).astype(_U64)
    return out


@dataclass
class _Runs:
    """Maximal consecutive runs of a sequence: start position, length, first and last id."""

    pos: np.ndarray
    length: np.ndarray
    first: np.ndarray
    last: np.ndarray


def _runs(v: np.ndarray) -> _Runs:
    n = v.size
    cont = (v[1:] == v[:-1] + _U64(1)) & (v[:-1] != _U64(U64_MAX))
    starts = np.concatenate([[0], np.flatnonzero(~cont) + 1]).astype(np.int64)
    ends = np.append(starts[1:], n)
    return _Runs(starts, ends - starts, v[starts], v[ends - 1])


def _plan_pieces(v: np.ndarray) -> list[tuple[int, int]]:
    """Positions ``[start, stop)`` of the segments chosen by the run DP (step 3)."""
    r = _runs(v)
    k = r.pos.size
    if k == 1 or k > MAX_DP_RUNS:
        return [(0, int(v.size))]
    first = r.first.tolist()
    last = r.last.tolist()
    length = r.length.tolist()
    inf = float("inf")
    best = [0.0] * k
    back = [0] * k  # start run of the best segment ending at run j
    # open segments per kind: (base cost, start run, lo id, hi id, values, holes)
    holes = bitmap = srt = arr = None
    for j in range(k):
        base = best[j - 1] if j else 0.0
        a, b, n = first[j], last[j], length[j]
        asc = j > 0 and a > last[j - 1]
        gap = a - last[j - 1] - 1 if asc else 0
        # Range: this run alone.
        c_range = base + _C_RANGE + _vlen(a) + _vlen(b + 1)
        cands = [(c_range, j)]
        # RangeWithHoles / RangeWithBitmap / SortedArray extend over an ascending gap.
        if asc and holes is not None:
            holes = (holes[0], holes[1], holes[2], b, holes[4] + n, holes[5] + gap)
        else:
            holes = (base, j, a, b, n, 0)
        if asc and bitmap is not None:
            bitmap = (bitmap[0], bitmap[1], bitmap[2], b, 0, 0)
        else:
            bitmap = (base, j, a, b, 0, 0)
        if asc and srt is not None:
            srt = (srt[0], srt[1], srt[2], b, srt[4] + n, 0)
        else:
            srt = (base, j, a, b, n, 0)
        if arr is not None:
            arr = (arr[0], arr[1], min(arr[2], a), max(arr[3], b), arr[4] + n, 0)
        new_arr = (base, j, a, b, n, 0)
        head = _vlen(holes[2])
        c_holes = holes[0] + _C_HOLES + head + _vlen(holes[3] + 1) + _width(holes[3] - holes[2]) * holes[5]
        span = bitmap[3] - bitmap[2] + 1
        c_bitmap = bitmap[0] + _C_BITMAP + _vlen(bitmap[2]) + _vlen(bitmap[3] + 1) + (span + 7) // 8
        c_sorted = srt[0] + _C_ARRAY + _vlen(srt[2]) + _width(srt[3] - srt[2]) * srt[4]
        cands += [(c_holes, holes[1]), (c_bitmap, bitmap[1]), (c_sorted, srt[1])]
        c_new_arr = base + _C_ARRAY + _vlen(a) + _width(b - a) * n
        if arr is not None:
            c_arr = arr[0] + _C_ARRAY + _vlen(arr[2]) + _width(arr[3] - arr[2]) * arr[4]
            if c_new_arr < c_arr:
                arr, c_arr = new_arr, c_new_arr
        else:
            arr, c_arr = new_arr, c_new_arr
        cands.append((c_arr, arr[1]))
        cost, start = inf, j
        for c, s in cands:
            if c < cost:
                cost, start = c, s
        best[j], back[j] = cost, start
        # A kind whose open segment costs more than closing here and restarting never wins later.
        holes = holes if c_holes <= cost + _C_HOLES + 16 else None
        bitmap = bitmap if c_bitmap <= cost + _C_BITMAP + 16 else None
        srt = srt if c_sorted <= cost + _C_ARRAY + 16 else None
    pieces: list[tuple[int, int]] = []
    j = k - 1
    while j >= 0:
        s = back[j]
        pieces.append((int(r.pos[s]), int(r.pos[j] + r.length[j])))
        j = s - 1
    pieces.reverse()
    return pieces


def _merge_ranges(segments: list[U64Segment]) -> list[U64Segment]:
    out: list[U64Segment] = []
    for seg in segments:
        if (out and isinstance(seg, RangeSegment) and isinstance(out[-1], RangeSegment)
                and out[-1].end == seg.start):
            out[-1] = RangeSegment(out[-1].start, seg.end)
        else:
            out.append(seg)
    return out


def compact_sequence(ids: np.ndarray, deleted: np.ndarray) -> RowIdSequence:
    """The most compact sequence holding ``ids`` at every live position (see module doc)."""
    ids = np.asarray(ids, dtype=_U64)
    deleted = np.asarray(deleted, dtype=bool)
    if ids.size == 0:
        return RowIdSequence([RangeSegment(0, 0)])
    v = fill_deleted(ids, deleted)
    segments = [encode_segment(v[s:e]) for s, e in _plan_pieces(v)]
    seq = RowIdSequence(_merge_ranges(segments))
    whole = encode_row_ids(v)  # Lance's one-segment choice; keep whichever is smaller
    if len(whole.to_bytes()) < len(seq.to_bytes()):
        seq = whole
    check_live_ids(seq, ids, deleted)
    return seq


def check_live_ids(seq: RowIdSequence, ids: np.ndarray, deleted: np.ndarray,
                   where: str | None = None) -> None:
    """CorruptFileError unless ``seq`` has one id per row and the live ones equal ``ids``."""
    got = decode_row_ids(seq)
    if got.size != ids.size:
        raise CorruptFileError(f"re-encoded row-id sequence has {got.size} ids for {ids.size} rows",
                               path=where)
    live = ~deleted
    if not np.array_equal(got[live], ids[live]):
        bad = int(np.flatnonzero(live & (got != ids))[0])
        raise CorruptFileError(f"re-encoded row-id sequence changes the id of live row {bad}: "
                               f"{int(ids[bad])} -> {int(got[bad])}", path=where)
