"""Small vectorised numpy helpers shared by the codecs and the mini-block layout.

They exist so that codecs never loop over values in Python: ragged ranges, joining chunk
buffers, gathering bit ranges out of bitmaps.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from lance_spark_ops.errors import CorruptFileError, InvalidInputError, UnsupportedError

UINT_BY_BITS: dict[int, np.dtype] = {
    8: np.dtype("<u1"),
    16: np.dtype("<u2"),
    32: np.dtype("<u4"),
    64: np.dtype("<u8"),
}


# Buffers at least this large come from Arrow's memory pool (mimalloc / jemalloc), which
# recycles freed pages: a fresh numpy allocation of that size is an mmap whose page faults
# cost about as much as filling it.
_POOL_MIN_BYTES = 1 << 16


def alloc_empty(shape: int | tuple[int, ...], dtype: np.dtype | type = np.uint8) -> np.ndarray:
    """An uninitialised, writable, 64-byte aligned array (large ones from Arrow's pool)."""
    dt = np.dtype(dtype)
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    count = 1
    for d in shape:
        count *= int(d)
    if count * dt.itemsize < _POOL_MIN_BYTES:
        return np.empty(shape, dtype=dt)
    buf = pa.allocate_buffer(count * dt.itemsize)
    return np.frombuffer(buf, dtype=dt, count=count).reshape(shape)


def uint_dtype(bits: int, what: str) -> np.dtype:
    """The little-endian unsigned dtype of ``bits`` (8/16/32/64) bits."""
    dt = UINT_BY_BITS.get(int(bits))
    if dt is None:
        raise UnsupportedError(f"{what}: word width {bits} bits is not supported (expected 8, 16, 32 or 64)")
    return dt


def item_dtype(bits: int, what: str) -> np.dtype:
    """A dtype whose items are ``bits`` wide: unsigned ints when possible, else raw bytes."""
    if bits in UINT_BY_BITS:
        return UINT_BY_BITS[bits]
    if bits <= 0 or bits % 8:
        raise UnsupportedError(f"{what}: {bits} bits per value is not a whole number of bytes")
    return np.dtype((np.void, bits // 8))


def as_u8(buf: bytes | bytearray | memoryview | np.ndarray) -> np.ndarray:
    """A zero-copy uint8 view of a buffer."""
    if isinstance(buf, np.ndarray):
        return buf.view(np.uint8).reshape(-1)
    return np.frombuffer(buf, dtype=np.uint8)


def ragged_arange(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(starts[i], starts[i] + lengths[i])`` for all i (int64)."""
    starts = np.asarray(starts, dtype=np.int64).reshape(-1)
    lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
    keep = lengths > 0
    starts, lengths = starts[keep], lengths[keep]
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    steps = np.ones(total, dtype=np.int64)
    steps[0] = starts[0]
    bounds = np.cumsum(lengths)[:-1]
    steps[bounds] = starts[1:] - (starts[:-1] + lengths[:-1] - 1)
    return np.cumsum(steps)


def exclusive_cumsum(values: np.ndarray) -> np.ndarray:
    """``[0, v0, v0 + v1, ...]`` without the grand total (int64)."""
    values = np.asarray(values, dtype=np.int64)
    out = np.zeros(len(values), dtype=np.int64)
    if len(values) > 1:
        np.cumsum(values[:-1], out=out[1:])
    return out


def join(bufs: Sequence[memoryview | bytes]) -> np.ndarray:
    """Concatenate buffers into one uint8 array (a single copy)."""
    if len(bufs) == 1:
        return as_u8(bufs[0])
    return np.frombuffer(b"".join(bufs), dtype=np.uint8)


def buffer_sizes(bufs: Sequence[memoryview | bytes]) -> np.ndarray:
    return np.fromiter((len(b) for b in bufs), dtype=np.int64, count=len(bufs))


def join_with_starts(bufs: Sequence[memoryview | bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``join(bufs)`` plus each buffer's start and size in the result (the bridge from
    lists of chunk buffers to the ``*_ranges`` decoders)."""
    sizes = buffer_sizes(bufs)
    data = join(bufs) if len(bufs) else np.zeros(0, np.uint8)
    return data, exclusive_cumsum(sizes), sizes


def check_ranges(data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, what: str) -> None:
    """Every range ``[starts[i], starts[i] + sizes[i])`` lies inside ``data``."""
    if len(starts) and ((starts < 0).any() or (sizes < 0).any() or int((starts + sizes).max()) > len(data)):
        raise CorruptFileError(f"{what}: a chunk buffer lies outside the {len(data)} bytes read")


def ranges_to_chunks(data: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> list[list[memoryview]]:
    """``(k, nbuf)`` byte ranges of ``data`` as per-chunk lists of memoryviews (for codecs
    without a ``*_ranges`` decoder)."""
    view = memoryview(np.ascontiguousarray(data))
    k, nbuf = starts.shape
    ends = starts + sizes
    if nbuf == 1:
        return [[view[a:b]] for a, b in zip(starts[:, 0].tolist(), ends[:, 0].tolist(), strict=True)]
    cuts = [view[a:b] for a, b in zip(starts.reshape(-1).tolist(), ends.reshape(-1).tolist(), strict=True)]
    return [cuts[i : i + nbuf] for i in range(0, k * nbuf, nbuf)]


def uniform_stride(starts: np.ndarray) -> int | None:
    """The common difference of ``starts`` when it is an arithmetic progression (>= 0), else None."""
    if len(starts) < 2:
        return 0
    step = int(starts[1] - starts[0])
    if step < 0 or (np.diff(starts) != step).any():
        return None
    return step


def count_below(values: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """How many of the sorted ``values`` lie below each of the sorted ``keys``
    (``np.searchsorted(values, keys)``). With fewer values than keys (the null / empty list
    levels among row starts) each value is placed among the keys and the placements are
    counted up: one binary search per value, not per key."""
    if len(values) >= len(keys):
        return np.searchsorted(values, keys)
    # value v lies below key i exactly when i >= (number of keys <= v)
    placed = np.bincount(np.searchsorted(keys, values, side="right"), minlength=len(keys) + 1)
    return np.cumsum(placed[:-1])


def strided_rows(data: np.ndarray, starts: np.ndarray, length: int) -> np.ndarray:
    """The rows ``data[starts[i]:starts[i] + length]`` as a (k, length) array: a zero-copy
    strided view when ``starts`` are evenly spaced, else a gather. Bounds are checked."""
    k = len(starts)
    if k == 0 or length == 0:
        return np.zeros((k, length), dtype=data.dtype)
    lo, hi = int(starts.min()), int(starts.max()) + length
    if lo < 0 or hi > len(data):
        raise CorruptFileError(f"rows {lo}..{hi} lie outside {len(data)} values")
    step = uniform_stride(starts)
    if step is not None and step > 0:
        item = data.strides[0]
        return np.lib.stride_tricks.as_strided(
            data[int(starts[0]):], shape=(k, length), strides=(step * item, item), writeable=False
        )
    if step == 0 and k == 1:
        return data[int(starts[0]) : int(starts[0]) + length][None, :]
    # rows of a sliding-window view: the gather indexes k rows, not k x length values
    return np.lib.stride_tricks.sliding_window_view(data, length)[np.asarray(starts, dtype=np.int64)]


def gather_ranges(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``data[starts[i]:starts[i] + lengths[i]]`` back to back (bounds checked).

    Zero-copy when the ranges are adjacent; evenly spaced ranges of one length (all but
    possibly the last) are copied as one strided 2-D block; long ranges slice by slice;
    many short ones with one vectorised gather.
    """
    starts = np.asarray(starts, dtype=np.int64).reshape(-1)
    lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
    k = len(starts)
    if k == 0:
        return data[:0]
    check_ranges(data, starts, lengths, "gather")
    total = int(lengths.sum())
    if k == 1 or ((starts[1:] == starts[:-1] + lengths[:-1]).all()):
        return data[int(starts[0]) : int(starts[0]) + total]
    out = alloc_empty(total, data.dtype)
    full = int(lengths[0])
    if full and (lengths[:-1] == full).all() and uniform_stride(starts[:-1]) is not None:
        body = (k - 1) * full
        out[:body].reshape(k - 1, full)[...] = strided_rows(data, starts[:-1], full)
        last = int(lengths[-1])
        out[body:] = data[int(starts[-1]) : int(starts[-1]) + last]
        return out
    scatter_ragged(out, exclusive_cumsum(lengths), data, starts, lengths)
    return out


def gather_bit_ranges(
    data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, bit_counts: np.ndarray, what: str
) -> np.ndarray:
    """Concatenate the first ``bit_counts[i]`` bits (LSB first) of the byte ranges
    ``data[starts[i]:starts[i] + sizes[i]]`` (bools)."""
    bit_counts = np.asarray(bit_counts, dtype=np.int64)
    need = (bit_counts + 7) // 8
    if (sizes < need).any():
        i = int(np.argmax(sizes < need))
        raise CorruptFileError(f"{what}: chunk {i} holds {int(sizes[i])} bytes of bits, needs {int(need[i])}")
    packed = gather_ranges(data, starts, need)
    bits = np.unpackbits(packed, bitorder="little").view(bool)
    if len(bit_counts) <= 1 or not (bit_counts[:-1] % 8).any():
        return bits[: int(bit_counts.sum())]
    return bits[ragged_arange(exclusive_cumsum(need) * 8, bit_counts)]


def unpack_bits(data: np.ndarray, num_bits: int) -> np.ndarray:
    """The first ``num_bits`` bits (LSB first) of ``data`` as bools."""
    if data.size * 8 < num_bits:
        raise CorruptFileError(f"bitmap of {data.size} bytes cannot hold {num_bits} bits")
    return np.unpackbits(data, count=num_bits, bitorder="little").view(bool)


def pack_bits(bits: np.ndarray) -> np.ndarray:
    """Pack bools LSB first into uint8."""
    return np.packbits(np.asarray(bits, dtype=bool), bitorder="little")


def gather_bit_runs(bufs: Sequence[memoryview | bytes], bit_counts: np.ndarray, what: str) -> np.ndarray:
    """Concatenate the first ``bit_counts[i]`` bits of each ``bufs[i]`` (bools)."""
    data, starts, sizes = join_with_starts(bufs)
    return gather_bit_ranges(data, starts, sizes, bit_counts, what)


def check_chunk_counts(
    chunks: Sequence[Sequence[object]], counts: np.ndarray, num_buffers: int, what: str
) -> np.ndarray:
    """Validate the shape of a batched mini-block decode call; return counts as int64."""
    counts = np.asarray(counts, dtype=np.int64).reshape(-1)
    if len(chunks) != len(counts):
        raise CorruptFileError(f"{what}: {len(chunks)} chunks but {len(counts)} value counts")
    lens = set(map(len, chunks))
    if lens and lens != {num_buffers}:
        i = next(i for i, c in enumerate(chunks) if len(c) != num_buffers)
        raise CorruptFileError(f"{what}: chunk {i} has {len(chunks[i])} buffers, expected {num_buffers}")
    if (counts < 0).any():
        raise CorruptFileError(f"{what}: negative value count")
    return counts


def check_range_counts(
    starts: np.ndarray, sizes: np.ndarray, counts: np.ndarray, num_buffers: int, what: str
) -> np.ndarray:
    """``check_chunk_counts`` for chunks given as ``(k, num_buffers)`` byte ranges."""
    counts = np.asarray(counts, dtype=np.int64).reshape(-1)
    if starts.ndim != 2 or starts.shape != sizes.shape or starts.shape[0] != len(counts):
        raise CorruptFileError(f"{what}: {starts.shape[0]} chunks but {len(counts)} value counts")
    if starts.shape[1] != num_buffers:
        raise CorruptFileError(f"{what}: chunks have {starts.shape[1]} buffers, expected {num_buffers}")
    if (counts < 0).any():
        raise CorruptFileError(f"{what}: negative value count")
    return counts


# ---------------------------------------------------------------------------- encoder helpers


def pad_to(n: np.ndarray | int, align: int) -> np.ndarray | int:
    """``n`` rounded up to a multiple of ``align`` (element-wise for arrays)."""
    return (n + align - 1) // align * align


def uint_view(data: np.ndarray, bits: int, num_values: int, what: str) -> np.ndarray:
    """The first ``num_values`` values of a byte buffer as unsigned ints of ``bits`` bits
    (8/16/32/64); copies only when the buffer is not aligned for the dtype."""
    dt = uint_dtype(bits, what)
    raw = as_u8(data)
    need = num_values * dt.itemsize
    if len(raw) < need:
        raise InvalidInputError(f"{what}: {len(raw)} bytes cannot hold {num_values} values of {bits} bits")
    raw = raw[:need]
    if raw.ctypes.data % dt.itemsize:
        raw = raw.copy()
    return raw.view(dt)


def gather_parts(values: np.ndarray, counts: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """Cut consecutive parts (``counts[i]`` values each) of ``values`` into zero-padded
    blocks of ``block`` values: returns the (num_blocks, block) array and the number of
    blocks of each part (``ceil(count / block)``)."""
    counts = np.asarray(counts, dtype=np.int64)
    nblocks = (counts + block - 1) // block
    total = int(nblocks.sum())
    out = np.zeros((total, block), dtype=values.dtype)
    flat = out.reshape(-1)
    if len(counts) == 1 or not (counts[:-1] % block).any():
        flat[: int(counts.sum())] = values[: int(counts.sum())]
    elif total:
        scatter_ragged(flat, exclusive_cumsum(nblocks) * block, values, exclusive_cumsum(counts), counts)
    return out, nblocks


def scatter_ragged(
    out: np.ndarray, dst_starts: np.ndarray, src: np.ndarray, src_starts: np.ndarray, lengths: np.ndarray
) -> None:
    """``out[dst_starts[i]:+lengths[i]] = src[src_starts[i]:+lengths[i]]`` for all i.

    Long pieces are copied slice by slice (memcpy speed, one Python step per piece);
    many short pieces with one vectorised gather.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if not len(lengths):
        return
    total = int(lengths.sum())
    if total >= 64 * len(lengths):
        if len(lengths) > 1:  # pieces continuing the previous one in both arrays: one copy
            dst_starts = np.asarray(dst_starts, dtype=np.int64)
            src_starts = np.asarray(src_starts, dtype=np.int64)
            cont = ((dst_starts[1:] == dst_starts[:-1] + lengths[:-1])
                    & (src_starts[1:] == src_starts[:-1] + lengths[:-1]))
            if cont.any():
                heads = np.flatnonzero(np.concatenate(([True], ~cont)))
                lengths = np.add.reduceat(lengths, heads)
                dst_starts, src_starts = dst_starts[heads], src_starts[heads]
        for d, s, n in zip(dst_starts.tolist(), src_starts.tolist(), lengths.tolist(), strict=True):
            if n:
                out[d : d + n] = src[s : s + n]
        return
    out[ragged_arange(dst_starts, lengths)] = src[ragged_arange(src_starts, lengths)]


def pack_bit_ranges(
    bits: np.ndarray, starts: np.ndarray, lengths: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """LSB-first bitmaps of the ranges ``bits[starts[i]:+lengths[i]]``, each starting on a
    byte boundary: returns the bitmaps back to back and their byte sizes."""
    lengths = np.asarray(lengths, dtype=np.int64)
    nbytes = (lengths + 7) // 8
    padded = np.zeros(int(nbytes.sum()) * 8, dtype=bool)
    dst = exclusive_cumsum(nbytes) * 8
    scatter_ragged(padded, dst, np.asarray(bits, dtype=bool), np.asarray(starts, dtype=np.int64), lengths)
    return np.packbits(padded, bitorder="little"), nbytes
