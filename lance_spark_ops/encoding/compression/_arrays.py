"""Small vectorised numpy helpers shared by the codecs and the mini-block layout.

They exist so that codecs never loop over values in Python: ragged ranges, joining chunk
buffers, gathering bit ranges out of bitmaps.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lance_spark_ops.errors import CorruptFileError, UnsupportedError

UINT_BY_BITS: dict[int, np.dtype] = {
    8: np.dtype("<u1"),
    16: np.dtype("<u2"),
    32: np.dtype("<u4"),
    64: np.dtype("<u8"),
}


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
    sizes = buffer_sizes(bufs)
    need = (np.asarray(bit_counts, dtype=np.int64) + 7) // 8
    if (sizes < need).any():
        i = int(np.argmax(sizes < need))
        raise CorruptFileError(f"{what}: chunk {i} holds {int(sizes[i])} bytes of bits, needs {int(need[i])}")
    data = join(bufs)
    bits = np.unpackbits(data, bitorder="little").view(bool)
    return bits[ragged_arange(exclusive_cumsum(sizes) * 8, bit_counts)]


def check_chunk_counts(
    chunks: Sequence[Sequence[object]], counts: np.ndarray, num_buffers: int, what: str
) -> np.ndarray:
    """Validate the shape of a batched mini-block decode call; return counts as int64."""
    counts = np.asarray(counts, dtype=np.int64).reshape(-1)
    if len(chunks) != len(counts):
        raise CorruptFileError(f"{what}: {len(chunks)} chunks but {len(counts)} value counts")
    for i, c in enumerate(chunks):
        if len(c) != num_buffers:
            raise CorruptFileError(f"{what}: chunk {i} has {len(c)} buffers, expected {num_buffers}")
    if (counts < 0).any():
        raise CorruptFileError(f"{what}: negative value count")
    return counts
