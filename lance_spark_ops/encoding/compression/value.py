"""Flat: fixed-width values stored as they are (``Flat { bits_per_value, data? }``).

On disk: ``ceil(n * bits_per_value / 8)`` bytes, values back to back, little endian; booleans
(``bits_per_value`` 1) are an LSB-first bitmap. When ``Flat.data`` (a ``BufferCompression``)
is set the bytes are first inflated with zstd / lz4 (see ``general.py`` for the framing).

Mini-block: each chunk has one buffer holding its values. The writer picks the largest
power-of-two number of values that keeps a chunk under ~4 KiB (bytes per value x count),
so every chunk but the last holds the same count and booleans always break at byte
boundaries. The last chunk holds the rest. Chunks are simply concatenated.

Worked example (int32, 1500 values, 2.1): chunk 0 has 1024 values = a 4096-byte buffer
(header ``00 00 | 00 10 | fe fe fe fe``), chunk 1 the remaining 476 values = 1904 bytes.

Block context: the buffer holds the values (dictionary items, nested buffers).
Per-value (full-zip): values already cut out of the zipped data; Flat is the identity.

pylance picks Flat for full-range integers, fixed-size binary, booleans and as the leaf of
FixedSizeList / PackedStruct / ByteStreamSplit / Rle / OutOfLineBitpacking descriptions.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import DataBlock, FixedWidthBlock
from lance_spark_ops.encoding.compression._arrays import (
    as_u8,
    buffer_sizes,
    check_chunk_counts,
    gather_bit_runs,
    join,
    pack_bits,
)
from lance_spark_ops.errors import CorruptFileError, UnsupportedError


def _bits(msg: pb.Flat) -> int:
    bits = int(msg.bits_per_value)
    if bits <= 0:
        raise CorruptFileError(f"flat encoding with {bits} bits per value")
    return bits


def _inflate(msg: pb.Flat, buf: memoryview, what: str) -> memoryview:
    if not msg.HasField("data"):
        return buf
    from lance_spark_ops.encoding.compression.general import decompress_buffer

    return memoryview(decompress_buffer(msg.data, buf, what))


def concat_fixed_chunks(
    bufs: Sequence[memoryview], counts: np.ndarray, bits: int, what: str
) -> FixedWidthBlock:
    """Concatenate per-chunk buffers of ``counts[i]`` values of ``bits`` bits each.

    Byte-aligned chunks are joined with one copy; chunks that end inside a byte (only
    possible for sub-byte widths) are stitched bit by bit (still vectorised).
    """
    counts = np.asarray(counts, dtype=np.int64)
    need = (counts * bits + 7) // 8
    sizes = buffer_sizes(bufs)
    if (sizes < need).any():
        i = int(np.argmax(sizes < need))
        raise CorruptFileError(
            f"{what}: chunk {i} holds {int(sizes[i])} bytes, {int(counts[i])} values of {bits} bits need "
            f"{int(need[i])}"
        )
    total = int(counts.sum())
    if bits % 8 == 0 or not ((counts[:-1] * bits) % 8).any():
        trimmed = [b[: int(n)] if len(b) != n else b for b, n in zip(bufs, need, strict=True)]
        data = join(trimmed) if trimmed else np.zeros(0, np.uint8)
        return FixedWidthBlock(data, bits, total)
    bools = gather_bit_runs(bufs, counts * bits, what)
    return FixedWidthBlock(pack_bits(bools), bits, total)


def decode_flat_miniblock(
    msg: pb.Flat, chunks: Sequence[Sequence[memoryview]], counts: np.ndarray
) -> FixedWidthBlock:
    bits = _bits(msg)
    counts = check_chunk_counts(chunks, counts, 1, "flat mini-block")
    bufs = [_inflate(msg, c[0], f"flat mini-block chunk {i}") for i, c in enumerate(chunks)]
    return concat_fixed_chunks(bufs, counts, bits, "flat mini-block")


def decode_flat_blocks(msg: pb.Flat, buffers: Sequence[memoryview], counts: np.ndarray) -> FixedWidthBlock:
    """Many block-context buffers at once (e.g. raw levels of every mini-block chunk)."""
    return decode_flat_miniblock(msg, [[b] for b in buffers], counts)


def decode_flat_block(msg: pb.Flat, buffer: memoryview, num_values: int) -> FixedWidthBlock:
    bits = _bits(msg)
    buf = _inflate(msg, buffer, "flat block")
    need = (num_values * bits + 7) // 8
    if len(buf) < need:
        raise CorruptFileError(
            f"flat block: {len(buf)} bytes, {num_values} values of {bits} bits need {need}"
        )
    return FixedWidthBlock(as_u8(buf)[:need], bits, num_values)


def decode_flat_per_value(msg: pb.Flat, block: DataBlock) -> DataBlock:
    if msg.HasField("data"):
        raise UnsupportedError("flat per-value values with buffer compression are not supported")
    if not isinstance(block, FixedWidthBlock):
        raise CorruptFileError(f"flat per-value decoding got a {type(block).__name__}")
    bits = _bits(msg)
    if block.bits_per_value != bits:
        raise CorruptFileError(f"flat per-value: {block.bits_per_value}-bit values, encoding says {bits}")
    return block
