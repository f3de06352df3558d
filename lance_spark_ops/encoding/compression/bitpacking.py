"""Bitpacking (fastlanes layout): InlineBitpacking and OutOfLineBitpacking.

Values are unsigned words of T = ``uncompressed_bits_per_value`` bits (8/16/32/64; signed and
float data are packed as their bit patterns) packed 1024 at a time into W bits each, in the
*fastlanes* transposed order:

- a block of 1024 values is W * LANES words of T bits, LANES = 1024 / T;
- lane ``l`` (0..LANES-1) owns words ``k * LANES + l`` for k = 0..W-1, read as one little-endian
  bit stream of W * T bits; row ``r`` (0..T-1) of the lane is bits ``[r*W, r*W + W)``;
- row r of lane l is value ``FL_ORDER[r // 8] * 16 + (r % 8) * 128 + l`` of the block, with
  ``FL_ORDER = [0, 4, 2, 6, 1, 5, 3, 7]``.

W = 0 packs to nothing (all zeros); W = T is the same transposition without shifting.

InlineBitpacking (mini-block values): every chunk holds 1024 values (the last fewer,
zero-padded to 1024 before packing) as one buffer ``[W as one T-bit word][1024 * W / T words]``;
each chunk has its own W. In the block context (2.2 dictionaries of <= 1024 items) the
buffer is one such chunk (several back to back if a writer ever packs more).

OutOfLineBitpacking (block context: rep/def levels, ``values`` = Flat(W) gives W):
``n // 1024`` packed blocks, then the tail of ``n % 1024`` values either packed as one more
zero-padded block or stored raw as T-bit words, whichever the writer found smaller; the
buffer length tells which (raw iff ``len == whole * 1024*W/T + tail`` words).

Worked example: u32 values 0..1023 with W = 10 -> 1024 * 10 / 32 = 320 words. Lane 0 holds
values 0, 128, 256, ..., (rows 0..7 at 128 apart), then 64, 192, ... (FL_ORDER[1] * 16 = 64).
In a mini-block chunk the buffer is ``0a 00 00 00`` followed by those 320 words (1284 bytes).

pylance picks InlineBitpacking for mini-block values whose chunks need fewer bits than
stored (small ranges, sorted ints, timestamps, floats with spare bits) and OutOfLineBitpacking
for levels and other block buffers of more than 1024 values (InlineBitpacking for <= 1024).

Writing follows Lance: W of a chunk is the bit length of the OR of its values (the last
chunk's real values only; it is packed zero-padded and its log is 0 even when full). The
out-of-line writer stores the tail packed iff ``W * (1024 - tail) < (T - W) * tail``
(padding costs less than packing saves), else raw.

Decoding and encoding are vectorised: chunks are grouped by bit width and each group is
(un)packed with a few numpy operations over all of its 1024-value blocks (packing loops
over the T rows of the transposed layout, never over values).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import DataBlock, FixedWidthBlock
from lance_spark_ops.encoding.compression._arrays import (
    alloc_empty,
    as_u8,
    check_chunk_counts,
    check_range_counts,
    check_ranges,
    exclusive_cumsum,
    gather_parts,
    join_with_starts,
    ragged_arange,
    ranges_to_chunks,
    scatter_ragged,
    strided_rows,
    uint_dtype,
    uint_view,
)
from lance_spark_ops.encoding.compression.buffer_compression import decompress_buffer
from lance_spark_ops.encoding.compression.contexts import CodecEncoders
from lance_spark_ops.encoding.compression.encoded import CodecLookup, CompressionParams, MiniBlockCompressed
from lance_spark_ops.encoding.compression.strategy import Codec
from lance_spark_ops.encoding.tuning import codec_tuning
from lance_spark_ops.errors import CorruptFileError, InvalidInputError, UnsupportedError

BLOCK = 1024
FL_ORDER = np.array([0, 4, 2, 6, 1, 5, 3, 7], dtype=np.int64)
_POSITIONS: dict[int, np.ndarray] = {}


def _positions(t_bits: int) -> np.ndarray:
    """positions[r, l] = index in the 1024-value block of row r of lane l."""
    pos = _POSITIONS.get(t_bits)
    if pos is None:
        rows = np.arange(t_bits, dtype=np.int64)[:, None]
        lanes = np.arange(BLOCK // t_bits, dtype=np.int64)[None, :]
        pos = FL_ORDER[rows // 8] * 16 + (rows % 8) * 128 + lanes
        _POSITIONS[t_bits] = pos
    return pos


# Blocks are unpacked in groups of about _UNPACK_GROUP_BYTES of output: long enough rows
# to amortise numpy's per-call cost, small enough for the transposes to stay in cache.
_UNPACK_GROUP_BYTES = 1 << 20


def _segments(t_bits: int) -> list[int]:
    """Row r = 8a + b of a T-bit block lands at ``out[b, seg[a] * LANES : +LANES]`` of the
    block seen as (8, 128) values (``FL_ORDER[a] * 16 = seg[a] * LANES``)."""
    lanes = BLOCK // t_bits
    return [int(FL_ORDER[a]) * 16 // lanes for a in range(t_bits // 8)]


def _row_order(t_bits: int) -> list[int]:
    """Rows in output order: slot q = seg * 8 + b holds row r = 8 * a + b where row group a
    lands at segment seg (``_segments``), so the rows of one group of blocks go to their
    places with a single transposing copy."""
    segs = _segments(t_bits)
    a_of_seg = {seg: a for a, seg in enumerate(segs)}
    return [8 * a_of_seg[q // 8] + q % 8 for q in range(t_bits)]


def _unpack_rows(words: np.ndarray, width: int, rows: np.ndarray, tmp: np.ndarray) -> None:
    """rows[q] = bits [r*W, r*W + W) of every lane stream, r = ``_row_order(T)[q]``:
    ``words`` is (W, m), one contiguous row of m lane words per packed word index;
    ``rows`` is (T, m). One vectorised step per row."""
    dt = words.dtype
    t_bits = dt.itemsize * 8
    mask = dt.type((1 << width) - 1) if width < t_bits else None
    for q, r in enumerate(_row_order(t_bits)):
        first, shift = divmod(r * width, t_bits)
        dst = rows[q]
        spill = shift + width > t_bits
        if shift:
            np.right_shift(words[first], dt.type(shift), out=dst)
        elif mask is not None and not spill:
            np.bitwise_and(words[first], mask, out=dst)
            continue
        else:
            np.copyto(dst, words[first])
        if spill:
            np.left_shift(words[first + 1], dt.type(t_bits - shift), out=tmp)
            np.bitwise_or(dst, tmp, out=dst)
        if mask is not None and shift + width != t_bits:
            np.bitwise_and(dst, mask, out=dst)


_ROW_PLANS: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
# Groups of fewer blocks than this do all rows in a few whole-array steps (gathers +
# broadcast shifts) instead of one step per row: fewer numpy calls on short rows.
_ROW_LOOP_MIN_BLOCKS = 128


def _row_plan(t_bits: int, width: int, dt: np.dtype) -> tuple[np.ndarray, ...]:
    plan = _ROW_PLANS.get((t_bits, width))
    if plan is None:
        r = np.array(_row_order(t_bits), dtype=np.int64)
        first, shift = r * width // t_bits, r * width % t_bits
        spill = np.flatnonzero(shift + width > t_bits)
        plan = (first, shift.astype(dt)[:, None], spill, first[spill] + 1,
                (t_bits - shift[spill]).astype(dt)[:, None])
        _ROW_PLANS[(t_bits, width)] = plan
    return plan


def _unpack_rows_whole(words: np.ndarray, width: int, rows: np.ndarray) -> None:
    """``_unpack_rows`` in a few whole-array steps (for short rows)."""
    dt = words.dtype
    t_bits = dt.itemsize * 8
    first, shift, spill, spill_next, spill_shift = _row_plan(t_bits, width, dt)
    np.take(words, first, axis=0, out=rows)
    np.right_shift(rows, shift, out=rows)
    if len(spill):
        hi = np.take(words, spill_next, axis=0)
        np.left_shift(hi, spill_shift, out=hi)
        rows[spill] |= hi
    if width < t_bits:
        np.bitwise_and(rows, dt.type((1 << width) - 1), out=rows)


def fastlanes_unpack(packed: np.ndarray, width: int, out: np.ndarray | None = None) -> np.ndarray:
    """Unpack blocks of 1024 values: ``packed`` is (n, width * LANES) words of T bits (any
    strides), the result (n, 1024) words of the same dtype (written into ``out`` if given).

    Per batch of blocks: one transposing copy makes each packed word index a contiguous
    row over all lanes of all blocks, then one vectorised step per output row of the
    transposed layout (T steps, a shift / or / mask each), then one transposing copy puts
    rows where FL_ORDER says. No step loops over values or blocks.
    """
    dt = packed.dtype
    t_bits = dt.itemsize * 8
    lanes = BLOCK // t_bits
    n = packed.shape[0]
    if out is None:
        out = alloc_empty((n, BLOCK), dt)
    elif out.shape != (n, BLOCK) or out.dtype != dt:
        raise ValueError("fastlanes_unpack: out has the wrong shape or dtype")
    if width == 0:
        out[...] = 0
        return out
    if not 0 < width <= t_bits or packed.ndim != 2 or packed.shape[1] != width * lanes:
        raise CorruptFileError(
            f"bitpacked block: {packed.shape[-1]} words of {t_bits} bits do not hold "
            f"1024 values of {width} bits"
        )
    if n == 0:
        return out
    nseg = 128 // lanes
    out4 = out.reshape(n, 8, nseg, lanes)
    src = packed.reshape(n, width, lanes)
    group = max(1, min(n, _UNPACK_GROUP_BYTES // (BLOCK * dt.itemsize)))
    words_buf = alloc_empty((width, group, lanes), dt)
    rows_buf = alloc_empty((t_bits, group * lanes), dt) if width < t_bits else None
    tmp_buf = alloc_empty(group * lanes, dt)
    for g0 in range(0, n, group):
        m = min(group, n - g0)
        words3 = words_buf if m == group else words_buf.reshape(-1)[: width * m * lanes].reshape(
            width, m, lanes)
        np.copyto(words3, src[g0 : g0 + m].transpose(1, 0, 2))
        words = words3.reshape(width, m * lanes)
        if rows_buf is None:  # W == T: row r is word r, no shifting
            rows5 = words.reshape(t_bits // 8, 8, m, lanes)
            for a, seg in enumerate(_segments(t_bits)):
                np.copyto(out4[g0 : g0 + m, :, seg, :], rows5[a].transpose(1, 0, 2))
            continue
        rows = rows_buf[:, : m * lanes]
        if m < _ROW_LOOP_MIN_BLOCKS:
            _unpack_rows_whole(words, width, rows)
        else:
            _unpack_rows(words, width, rows, tmp_buf[: m * lanes])
        # rows are in output order (_row_order): one transposing copy per group
        np.copyto(out4[g0 : g0 + m], rows.reshape(nseg, 8, m, lanes).transpose(2, 1, 0, 3))
    return out


# ---------------------------------------------------------------------------- inline


def _inline_chunks(
    data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, dt: np.dtype, what: str
) -> np.ndarray:
    """Unpack inline-bitpacked chunks (byte ``starts`` / ``sizes`` in ``data``) -> (k, 1024)."""
    wsize = dt.itemsize
    t_bits = wsize * 8
    starts = np.asarray(starts, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    if (sizes < wsize).any() or (sizes % wsize).any() or (starts % wsize).any():
        i = int(np.argmax((sizes < wsize) | (sizes % wsize != 0) | (starts % wsize != 0)))
        raise CorruptFileError(
            f"{what}: chunk {i} of {int(sizes[i])} bytes is not a whole number of "
            f"{t_bits}-bit words with a bit-width header"
        )
    check_ranges(data, starts, sizes, what)
    words = as_u8(data)[: len(data) - len(data) % wsize].view(dt)
    heads = starts // wsize
    widths = words[heads].astype(np.int64)
    expected = (1 + BLOCK * widths // t_bits) * wsize
    bad = (widths < 0) | (widths > t_bits) | (sizes != expected)
    if bad.any():
        i = int(np.argmax(bad))
        raise CorruptFileError(
            f"{what}: chunk {i} says {int(widths[i])} bits per value in {t_bits}-bit words "
            f"but holds {int(sizes[i])} bytes (expected {int(expected[i])})"
        )
    out = alloc_empty((len(starts), BLOCK), dt)
    if len(widths) == 0:
        return out
    uniq = np.unique(widths)
    for w in uniq:
        sel = None if len(uniq) == 1 else np.flatnonzero(widths == w)
        nwords = int(w) * (BLOCK // t_bits)
        packed = strided_rows(words, (heads if sel is None else heads[sel]) + 1, nwords)
        if sel is None:
            fastlanes_unpack(packed, int(w), out)
        elif int(sel[-1]) - int(sel[0]) == len(sel) - 1:  # a run of neighbouring chunks
            fastlanes_unpack(packed, int(w), out[int(sel[0]) : int(sel[-1]) + 1])
        else:
            out[sel] = fastlanes_unpack(packed, int(w))
    return out


def _take_counts(unpacked: np.ndarray, counts: np.ndarray, what: str) -> np.ndarray:
    if (counts > BLOCK).any():
        raise CorruptFileError(f"{what}: a chunk claims {int(counts.max())} values, at most 1024 fit")
    if len(counts) and (counts[:-1] == BLOCK).all():
        return unpacked.reshape(-1)[: (len(counts) - 1) * BLOCK + int(counts[-1])]
    return _keep_prefixes(unpacked, counts)


def _keep_prefixes(blocks: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The first ``keep[i]`` values of each row of ``blocks``, back to back."""
    keep = np.asarray(keep, dtype=np.int64)
    if len(keep) and (keep[:-1] == blocks.shape[1]).all():  # only the last row is cut short
        return blocks.reshape(-1)[: int(keep.sum())]
    out = alloc_empty(int(keep.sum()), blocks.dtype)
    src_starts = np.arange(len(keep), dtype=np.int64) * blocks.shape[1]
    scatter_ragged(out, exclusive_cumsum(keep), blocks.reshape(-1), src_starts, keep)
    return out


def _inline_ranges(
    msg: pb.InlineBitpacking, data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, counts: np.ndarray,
    what: str,
) -> FixedWidthBlock:
    dt = uint_dtype(msg.uncompressed_bits_per_value, what)
    unpacked = _inline_chunks(data, starts, sizes, dt, what)
    values = _take_counts(unpacked, counts, what)
    return FixedWidthBlock(values.view(np.uint8), dt.itemsize * 8, int(counts.sum()))


def decode_inline_bitpacking_miniblock(
    msg: pb.InlineBitpacking, chunks: Sequence[Sequence[memoryview]], counts: np.ndarray,
    codecs: CodecLookup | None = None
) -> FixedWidthBlock:
    uint_dtype(msg.uncompressed_bits_per_value, "inline bitpacking")
    counts = check_chunk_counts(chunks, counts, 1, "inline bitpacking")
    bufs = [c[0] for c in chunks]
    if msg.HasField("values"):
        bufs = [memoryview(decompress_buffer(msg.values, b, "inline bitpacking chunk")) for b in bufs]
    data, starts, sizes = join_with_starts(bufs)
    return _inline_ranges(msg, data, starts, sizes, counts, "inline bitpacking")


def decode_inline_bitpacking_miniblock_ranges(
    msg: pb.InlineBitpacking, data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, counts: np.ndarray,
    codecs: CodecLookup | None = None
) -> FixedWidthBlock:
    """Mini-block chunks given as ``(k, 1)`` byte ranges of ``data`` (no per-chunk copies)."""
    counts = check_range_counts(starts, sizes, counts, 1, "inline bitpacking")
    if msg.HasField("values"):
        return decode_inline_bitpacking_miniblock(msg, ranges_to_chunks(data, starts, sizes), counts)
    return _inline_ranges(msg, data, starts[:, 0], sizes[:, 0], counts, "inline bitpacking")


def decode_inline_bitpacking_block(
    msg: pb.InlineBitpacking, buffer: memoryview, num_values: int, codecs: CodecLookup | None = None
) -> FixedWidthBlock:
    dt = uint_dtype(msg.uncompressed_bits_per_value, "inline bitpacking block")
    data = as_u8(buffer)
    if msg.HasField("values"):
        data = as_u8(decompress_buffer(msg.values, buffer, "inline bitpacking block"))
    wsize, t_bits = dt.itemsize, dt.itemsize * 8
    nchunks = -(-num_values // BLOCK)
    starts, sizes, pos = [], [], 0
    for _ in range(nchunks):  # chunk sizes depend on each chunk's width: walk the headers
        if pos + wsize > len(data):
            raise CorruptFileError(
                f"inline bitpacking block: {len(data)} bytes end inside chunk {len(starts)} of {nchunks}"
            )
        width = int(data[pos : pos + wsize].view(dt)[0])
        size = (1 + BLOCK * min(width, t_bits + 1) // t_bits) * wsize
        starts.append(pos)
        sizes.append(size)
        pos += size
    if pos > len(data):
        raise CorruptFileError(f"inline bitpacking block: chunks need {pos} bytes, buffer has {len(data)}")
    counts = np.full(nchunks, BLOCK, dtype=np.int64)
    if nchunks:
        counts[-1] = num_values - BLOCK * (nchunks - 1)
    data = np.ascontiguousarray(data[:pos]) if len(starts) else data[:0]
    unpacked = _inline_chunks(
        data, np.array(starts, np.int64), np.array(sizes, np.int64), dt, "inline bitpacking block"
    )
    values = _take_counts(unpacked, counts, "inline bitpacking block")
    return FixedWidthBlock(values.view(np.uint8), t_bits, num_values)


def decode_inline_bitpacking_blocks(
    msg: pb.InlineBitpacking, buffers: Sequence[memoryview], counts: np.ndarray
) -> FixedWidthBlock:
    """Many block-context buffers at once (levels of every mini-block chunk). Buffers of at
    most 1024 values are single inline chunks and are unpacked together."""
    counts = np.asarray(counts, dtype=np.int64)
    if msg.HasField("values") or (counts > BLOCK).any():
        parts = [decode_inline_bitpacking_block(msg, b, int(n)) for b, n in zip(buffers, counts, strict=True)]
        data = (
            np.concatenate([np.asarray(p.data, np.uint8) for p in parts]) if parts else np.zeros(0, np.uint8)
        )
        return FixedWidthBlock(data, int(msg.uncompressed_bits_per_value), int(counts.sum()))
    return decode_inline_bitpacking_miniblock(msg, [[b] for b in buffers], counts)


def decode_inline_bitpacking_blocks_ranges(
    msg: pb.InlineBitpacking, data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, counts: np.ndarray,
    codecs: CodecLookup | None = None
) -> FixedWidthBlock:
    """``decode_inline_bitpacking_blocks`` over byte ranges of ``data``."""
    counts = np.asarray(counts, dtype=np.int64)
    if msg.HasField("values") or (counts > BLOCK).any():
        chunks = ranges_to_chunks(data, starts[:, None], sizes[:, None])
        return decode_inline_bitpacking_blocks(msg, [c[0] for c in chunks], counts)
    return decode_inline_bitpacking_miniblock_ranges(msg, data, starts[:, None], sizes[:, None], counts)


# ---------------------------------------------------------------------------- out of line


def _ool_widths(msg: pb.OutOfLineBitpacking) -> tuple[np.dtype, int]:
    dt = uint_dtype(msg.uncompressed_bits_per_value, "out-of-line bitpacking")
    if msg.values.WhichOneof("compression") != "flat":
        raise CorruptFileError("out-of-line bitpacking: packed values must be described by Flat")
    width = int(msg.values.flat.bits_per_value)
    if width > dt.itemsize * 8:
        raise CorruptFileError(
            f"out-of-line bitpacking: {width} bits per value packed into {dt.itemsize * 8}-bit words"
        )
    return dt, width


def decode_out_of_line_bitpacking_blocks_ranges(
    msg: pb.OutOfLineBitpacking, data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, counts: np.ndarray,
    codecs: CodecLookup | None = None
) -> FixedWidthBlock:
    """Decode many independently packed buffers (byte ranges of ``data``, e.g. the levels
    of every mini-block chunk) at once; the result holds their values back to back."""
    dt, width = _ool_widths(msg)
    wsize, t_bits = dt.itemsize, dt.itemsize * 8
    wpb = BLOCK * width // t_bits  # words per packed block
    counts = np.asarray(counts, dtype=np.int64)
    starts = np.asarray(starts, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    if len(counts) != len(starts) or (counts < 0).any():
        raise CorruptFileError(f"out-of-line bitpacking: {len(starts)} buffers, {len(counts)} value counts")
    if (sizes % wsize).any() or (starts % wsize).any():
        i = int(np.argmax((sizes % wsize != 0) | (starts % wsize != 0)))
        raise CorruptFileError(
            f"out-of-line bitpacking: a buffer of {int(sizes[i])} bytes is not a whole number of "
            f"{t_bits}-bit words"
        )
    check_ranges(data, starts, sizes, "out-of-line bitpacking")
    nwords = sizes // wsize
    whole, tail = counts // BLOCK, counts % BLOCK
    raw = (tail > 0) & (nwords == whole * wpb + tail)
    padded = (tail > 0) & ~raw
    expect = whole * wpb + np.where(raw, tail, 0) + np.where(padded, wpb, 0)
    if (nwords != expect).any():
        i = int(np.argmax(nwords != expect))
        raise CorruptFileError(
            f"out-of-line bitpacking: buffer {i} holds {int(nwords[i])} words, "
            f"{int(counts[i])} values of {width} bits need {int(expect[i])}"
        )
    u8 = as_u8(data)
    words = u8[: len(u8) - len(u8) % wsize].view(dt)
    word_starts = starts // wsize
    nblocks = whole + padded
    total = int(counts.sum())
    if len(nblocks) and (nblocks <= 1).all():  # one block per buffer (the usual levels)
        block_starts = word_starts[nblocks == 1]
    else:
        block_no = ragged_arange(np.zeros_like(nblocks), nblocks)
        block_starts = np.repeat(word_starts, nblocks) + block_no * wpb
    packed = strided_rows(words, block_starts, wpb) if wpb else np.zeros((len(block_starts), 0), dtype=dt)
    unpacked = fastlanes_unpack(packed, width)
    if not raw.any():
        # each buffer: its whole blocks, then (padded tail) part of one more block
        if not padded.any():
            values = unpacked.reshape(-1)
        else:
            keep = np.full(len(block_starts), BLOCK, dtype=np.int64)
            last = (exclusive_cumsum(nblocks) + nblocks - 1)[padded]
            keep[last] = tail[padded]
            values = _keep_prefixes(unpacked, keep)
        return FixedWidthBlock(values.view(np.uint8), t_bits, total)
    # Each buffer's values: a run of unpacked values, then (raw tail) a run of raw words.
    values = alloc_empty(total, dt)
    dst = exclusive_cumsum(counts)
    packed_len = whole * BLOCK + np.where(padded, tail, 0)
    scatter_ragged(values, dst, unpacked.reshape(-1), exclusive_cumsum(nblocks) * BLOCK, packed_len)
    scatter_ragged(values, dst + packed_len, words, word_starts + whole * wpb, np.where(raw, tail, 0))
    return FixedWidthBlock(values.view(np.uint8), t_bits, total)


def decode_out_of_line_bitpacking_blocks(
    msg: pb.OutOfLineBitpacking, buffers: Sequence[memoryview], counts: np.ndarray
) -> FixedWidthBlock:
    """Decode many independently packed buffers (e.g. the levels of every mini-block chunk)
    at once; the result holds their values back to back."""
    _ool_widths(msg)
    data, starts, sizes = join_with_starts(buffers)
    return decode_out_of_line_bitpacking_blocks_ranges(msg, data, starts, sizes, counts)


def decode_out_of_line_bitpacking_block(
    msg: pb.OutOfLineBitpacking, buffer: memoryview, num_values: int, codecs: CodecLookup | None = None
) -> FixedWidthBlock:
    return decode_out_of_line_bitpacking_blocks(msg, [buffer], np.array([num_values], dtype=np.int64))


def decode_out_of_line_bitpacking_miniblock(
    msg: pb.OutOfLineBitpacking, chunks: Sequence[Sequence[memoryview]], counts: np.ndarray,
    codecs: CodecLookup | None = None
) -> FixedWidthBlock:
    counts = check_chunk_counts(chunks, counts, 1, "out-of-line bitpacking mini-block")
    return decode_out_of_line_bitpacking_blocks(msg, [c[0] for c in chunks], counts)


def decode_out_of_line_bitpacking_miniblock_ranges(
    msg: pb.OutOfLineBitpacking, data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, counts: np.ndarray,
    codecs: CodecLookup | None = None
) -> FixedWidthBlock:
    counts = check_range_counts(starts, sizes, counts, 1, "out-of-line bitpacking mini-block")
    return decode_out_of_line_bitpacking_blocks_ranges(msg, data, starts[:, 0], sizes[:, 0], counts)


# ---------------------------------------------------------------------------- encoders


def fastlanes_pack(values: np.ndarray, width: int) -> np.ndarray:
    """Pack blocks of 1024 values: ``values`` is (n, 1024) words of T bits, each fitting in
    ``width`` bits; the result is (n, width * LANES) words (inverse of ``fastlanes_unpack``).

    Row ``r`` of the transposed layout lands in output word ``r * width // T`` shifted left by
    ``r * width % T``, its high bits spilling into the next word. Row r of every lane is one
    contiguous run of LANES values of the block (block row ``perm[r]`` when the block is seen
    as (T, LANES)), so each step of ``_pack_steps`` is one ``take`` of whole block rows, one
    shift in place and one OR into a strided slice of output words: no full transposed copy
    and no fancy-indexed read-modify-write."""
    dt = values.dtype
    t_bits = dt.itemsize * 8
    lanes = BLOCK // t_bits
    n = values.shape[0]
    out = np.empty((n, width, lanes), dtype=dt)
    if width == 0:
        return out.reshape(n, 0)
    v = values.reshape(n, t_bits, lanes)
    steps = _pack_steps(t_bits, width)
    src, shift, _, _ = steps[0]  # every word's first row: assigns all of ``out``
    np.take(v, src, axis=1, out=out, mode="clip")  # "clip": indices are valid; no buffering
    if shift is not None:
        np.left_shift(out, shift, out=out)
    for src, shift, right, words in steps[1:]:
        part = np.take(v, src, axis=1, mode="clip")
        if shift is not None:
            (np.right_shift if right else np.left_shift)(part, shift, out=part)
        out[:, words, :] |= part
    return out.reshape(n, width * lanes)


@functools.cache
def _pack_steps(
    t_bits: int, width: int
) -> tuple[tuple[np.ndarray, np.ndarray | None, bool, slice], ...]:
    """The OR terms of ``fastlanes_pack`` grouped into steps over strided runs of output
    words: (block rows to take, shifts (None if all 0), right shift?, output word slice). The first
    step is the first row of every word (k = 0), then the k-th rows of words with more, then
    the spills of rows crossing a word boundary (right-shifted into the next word)."""
    lanes = BLOCK // t_bits
    pos = _positions(t_bits)
    perm = pos[:, 0] // lanes
    first, shift, starts, spill = _pack_plan(t_bits, width)
    run = np.diff(np.append(starts, t_bits))  # rows per output word
    terms = []
    for k in range(int(run.max())):
        words = np.flatnonzero(run > k)
        terms.append((words, starts[words] + k, shift[starts[words] + k], False))
    if spill.size:
        terms.append((first[spill] + 1, spill, t_bits - shift[spill], True))
    dt = np.dtype(f"u{t_bits // 8}")
    steps = []
    for words, rows, shifts, right in terms:
        for a, b in _arithmetic_runs(words):
            # shifts spelled out per lane: numpy's inner loop then runs over whole rows
            sh = np.repeat(shifts[a:b].astype(dt), lanes)[None, :, None].reshape(1, b - a, lanes)
            sh = sh if shifts[a:b].any() else None
            step = int(words[a + 1] - words[a]) if b - a > 1 else 1
            steps.append((perm[rows[a:b]], sh, right, slice(int(words[a]), int(words[b - 1]) + 1, step)))
    return tuple(steps)


def _arithmetic_runs(words: np.ndarray) -> list[tuple[int, int]]:
    """Split increasing ``words`` greedily into runs with a constant step ([a, b) index
    ranges), so each run is one strided slice of the output."""
    runs, i, n = [], 0, len(words)
    while i < n:
        j = i + 1
        if j < n:
            d = words[j] - words[i]
            while j + 1 < n and words[j + 1] - words[j] == d:
                j += 1
        runs.append((i, min(j + 1, n)))
        i = min(j + 1, n)
    return runs


@functools.cache
def _pack_plan(t_bits: int, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per transposed row: output word, shift, the first row of each word, spilling rows."""
    r = np.arange(t_bits, dtype=np.int64)
    first, shift = np.divmod(r * width, t_bits)
    starts = np.flatnonzero(np.r_[True, first[1:] != first[:-1]])
    spill = np.flatnonzero(shift + width > t_bits)
    return first, shift, starts, spill


def _chunk_widths(blocks: np.ndarray) -> np.ndarray:
    """Bit length of the OR of each row (int64)."""
    ors = np.bitwise_or.reduce(blocks, axis=1).astype(np.uint64)
    return np.searchsorted(_POW2, ors, side="right").astype(np.int64)


_POW2 = np.array([1 << k for k in range(64)], dtype=np.uint64)


def _values_of(block: DataBlock, what: str) -> np.ndarray:
    if not isinstance(block, FixedWidthBlock):
        raise InvalidInputError(f"{what} needs fixed-width values, got a {type(block).__name__}")
    return uint_view(block.data, block.bits_per_value, block.num_values, what)


def _inline_pack(blocks: np.ndarray, widths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Inline chunks ``[W][packed words]`` of each row of ``blocks``: words back to back
    and the size of each chunk in words."""
    return _inline_pack_rows(lambda i, j: blocks[i:j], widths, blocks.dtype, lambda: blocks)


def _inline_pack_rows(
    rows: Callable[[int, int], np.ndarray], widths: np.ndarray, dt: np.dtype,
    all_rows: Callable[[], np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """``_inline_pack`` over blocks given by ``rows(i, j)`` (blocks i..j-1 as (j - i, 1024)).

    Consecutive chunks of one width are contiguous in the output, so each such run is packed
    and copied into its slice of it (a 2-D view past the width words; packing straight into
    that strided view measured slower). When widths change too
    often for that (more runs than ``CodecTuning.bitpack_max_runs``), each width is packed once over all its
    blocks (``all_rows()[sel]``) and scattered."""
    t_bits = dt.itemsize * 8
    lanes = BLOCK // t_bits
    sizes = 1 + BLOCK * widths // t_bits
    starts = exclusive_cumsum(sizes)
    out = np.empty(int(sizes.sum()), dtype=dt)
    if not len(widths):
        return out, sizes
    bounds = np.flatnonzero(np.diff(widths)) + 1
    if len(bounds) < codec_tuning().bitpack_max_runs:
        for i, j in zip(np.r_[0, bounds].tolist(), np.r_[bounds, len(widths)].tolist(), strict=True):
            w = int(widths[i])
            run = out[starts[i] : starts[i] + (j - i) * (1 + w * lanes)].reshape(j - i, 1 + w * lanes)
            run[:, 0] = w
            if w:
                run[:, 1:] = fastlanes_pack(rows(i, j), w)
        return out, sizes
    blocks = all_rows()
    out[starts] = widths.astype(dt)
    for w in np.unique(widths):
        sel = np.flatnonzero(widths == w)
        nwords = int(w) * lanes
        if nwords:
            packed = fastlanes_pack(blocks[sel], int(w)).reshape(-1)
            each = np.full(len(sel), nwords, dtype=np.int64)
            scatter_ragged(out, starts[sel] + 1, packed, exclusive_cumsum(each), each)
    return out, sizes


def _value_rows(values: np.ndarray) -> Callable[[int, int], np.ndarray]:
    """``rows(i, j)`` of 1-D ``values`` cut into 1024-value blocks, the last zero-padded: whole
    blocks are views; only a range reaching the partial last block is copied."""
    n = len(values)
    whole = n // BLOCK

    def rows(i: int, j: int) -> np.ndarray:
        if j <= whole:
            return values[i * BLOCK : j * BLOCK].reshape(j - i, BLOCK)
        padded = np.zeros((j - i, BLOCK), dtype=values.dtype)
        padded.reshape(-1)[: n - i * BLOCK] = values[i * BLOCK :]
        return padded

    return rows


def inline_bitpacking_encoding(bits: int) -> pb.CompressiveEncoding:
    return pb.CompressiveEncoding(
        inline_bitpacking=pb.InlineBitpacking(uncompressed_bits_per_value=int(bits))
    )


def encode_inline_bitpacking_miniblock(
    block: DataBlock, params: CompressionParams | None = None,
    codec: Codec | None = None, codecs: CodecEncoders | None = None
) -> MiniBlockCompressed:
    """One chunk per 1024 values, each ``[W][1024 values packed in W bits]`` (module doc)."""
    values = _values_of(block, "inline bitpacking")
    n = len(values)
    rows = _value_rows(values)
    nblocks = -(-n // BLOCK)
    whole = n // BLOCK
    widths = _chunk_widths(rows(0, whole))
    if nblocks > whole:
        widths = np.concatenate([widths, _chunk_widths(rows(whole, nblocks))])
    words, sizes = _inline_pack_rows(rows, widths, values.dtype, lambda: rows(0, nblocks))
    logs = np.full(len(sizes), 10, dtype=np.uint8)
    if len(logs):
        logs[-1] = 0
    wsize = values.dtype.itemsize
    return MiniBlockCompressed(
        [words.view(np.uint8)], (sizes * wsize)[:, None], logs, n, inline_bitpacking_encoding(wsize * 8)
    )


def encode_inline_bitpacking_block(
    block: DataBlock, params: CompressionParams | None = None,
    codec: Codec | None = None, codecs: CodecEncoders | None = None
) -> tuple[np.ndarray, pb.CompressiveEncoding]:
    """The inline chunks of all values in one buffer (2.2 dictionaries, <= 1024 levels)."""
    compressed = encode_inline_bitpacking_miniblock(block, params)
    return compressed.buffers[0], compressed.encoding


def encode_inline_bitpacking_blocks(
    values: np.ndarray, counts: np.ndarray, codec: Codec | None = None
) -> tuple[np.ndarray, np.ndarray, pb.CompressiveEncoding]:
    """Many block buffers at once (the levels of every mini-block chunk): each part is
    packed on its own; returns the buffers back to back, their byte sizes and their encoding."""
    blocks, nblocks = gather_parts(values, counts, BLOCK)
    words, sizes = _inline_pack(blocks, _chunk_widths(blocks))
    part_words = np.add.reduceat(sizes, exclusive_cumsum(nblocks)) if len(sizes) else sizes
    part_words = np.where(nblocks > 0, part_words, 0) if len(nblocks) else part_words
    return words.view(np.uint8), part_words * values.dtype.itemsize, inline_bitpacking_encoding(
        values.dtype.itemsize * 8)


def out_of_line_bitpacking_encoding(bits: int, width: int) -> pb.CompressiveEncoding:
    return pb.CompressiveEncoding(
        out_of_line_bitpacking=pb.OutOfLineBitpacking(
            uncompressed_bits_per_value=int(bits),
            values=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=int(width))),
        )
    )


def pack_tail(tail: np.ndarray | int, width: int, t_bits: int) -> np.ndarray:
    """Whether a tail of ``tail`` (< 1024) values is stored packed (else raw), as Lance's
    out-of-line writer decides."""
    tail = np.asarray(tail, dtype=np.int64)
    return (tail > 0) & (width * (BLOCK - tail) < (t_bits - width) * tail)


def encode_out_of_line_bitpacking_blocks(
    values: np.ndarray, counts: np.ndarray, width: int
) -> tuple[np.ndarray, np.ndarray, pb.CompressiveEncoding]:
    """Pack consecutive parts of ``values`` (``counts[i]`` each) with one bit ``width``:
    per part its whole 1024-blocks, then the tail packed or raw (module doc). Returns the
    buffers back to back, their byte sizes and their encoding."""
    dt = values.dtype
    t_bits = dt.itemsize * 8
    if not 0 <= width <= t_bits:
        raise InvalidInputError(f"out-of-line bitpacking: width {width} for {t_bits}-bit values")
    enc = out_of_line_bitpacking_encoding(t_bits, width)
    counts = np.asarray(counts, dtype=np.int64)
    wpb = BLOCK * width // t_bits
    whole, tail = counts // BLOCK, counts % BLOCK
    packed_tail = pack_tail(tail, width, t_bits)
    raw_tail = np.where(packed_tail, 0, tail)
    part_starts = exclusive_cumsum(counts)
    # every block to pack: whole blocks plus packed tails, zero padded
    nblocks = whole + packed_tail
    packed = fastlanes_pack(_part_blocks(values, part_starts, counts, nblocks), width).reshape(-1)
    # assemble each part as [its packed words][its raw tail values]
    sizes = nblocks * wpb + raw_tail
    if not raw_tail.any():  # the parts' packed words are already back to back
        return packed.view(np.uint8), sizes * dt.itemsize, enc
    total = int(sizes.sum())
    pos = np.arange(total, dtype=np.int64) - np.repeat(exclusive_cumsum(sizes), sizes)  # word in its part
    is_packed = pos < np.repeat(nblocks * wpb, sizes)
    out = np.empty(total, dtype=dt)
    out[is_packed] = packed
    out[~is_packed] = values[ragged_arange(part_starts + whole * BLOCK, raw_tail)]
    return out.view(np.uint8), sizes * dt.itemsize, enc


def encode_out_of_line_bitpacking_codec_blocks(
    values: np.ndarray, counts: np.ndarray, codec: Codec
) -> tuple[np.ndarray, np.ndarray, pb.CompressiveEncoding]:
    """``encode_out_of_line_bitpacking_blocks`` at the page-wide width the strategy chose."""
    if codec.compressed_bits is None:
        raise UnsupportedError("out-of-line bitpacking codec without a packed width")
    return encode_out_of_line_bitpacking_blocks(values, counts, int(codec.compressed_bits))


def _part_blocks(values: np.ndarray, part_starts: np.ndarray, counts: np.ndarray,
                 nblocks: np.ndarray) -> np.ndarray:
    """(sum(nblocks), 1024): part i's first ``nblocks[i]`` blocks of 1024 values from
    ``values[part_starts[i]:+counts[i]]``, zero past the part's end. Rows are copied out of
    a sliding-window view (no element index arrays): levels cut into ~1 000 chunk parts
    per flush would otherwise cost one Python step or one 8-byte index per value."""
    nrows = int(nblocks.sum())
    if nrows == 0:
        return np.zeros((0, BLOCK), dtype=values.dtype)
    row_part = np.repeat(np.arange(len(counts)), nblocks)
    k = np.arange(nrows, dtype=np.int64) - np.repeat(exclusive_cumsum(nblocks), nblocks)  # block in its part
    row_start = part_starts[row_part] + k * BLOCK
    row_len = np.minimum(BLOCK, counts[row_part] - k * BLOCK)
    padded = np.concatenate([values, np.zeros(BLOCK, dtype=values.dtype)])
    blocks = np.lib.stride_tricks.sliding_window_view(padded, BLOCK)[row_start]
    short = np.flatnonzero(row_len < BLOCK)
    if len(short):
        rows = blocks[short]
        rows[np.arange(BLOCK)[None, :] >= row_len[short][:, None]] = 0
        blocks[short] = rows
    return blocks


def encode_out_of_line_bitpacking_block(
    block: DataBlock, params: CompressionParams | None = None, codec: Codec | None = None,
    codecs: CodecEncoders | None = None, *, width: int | None = None,
) -> tuple[np.ndarray, pb.CompressiveEncoding]:
    """One buffer packed at ``width`` bits (else the strategy's page-wide width, else the bit
    length of the largest value)."""
    values = _values_of(block, "out-of-line bitpacking")
    if width is None and codec is not None and codec.compressed_bits is not None:
        width = int(codec.compressed_bits)
    if width is None:
        width = int(_chunk_widths(values.reshape(1, -1)).max()) if len(values) else 0
    data, _, enc = encode_out_of_line_bitpacking_blocks(values, np.array([len(values)]), width)
    return data, enc
