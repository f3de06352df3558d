"""Flat: fixed-width values stored as they are (``Flat { bits_per_value, data? }``).

On disk: ``ceil(n * bits_per_value / 8)`` bytes, values back to back, little endian; booleans
(``bits_per_value`` 1) are an LSB-first bitmap. When ``Flat.data`` (a ``BufferCompression``)
is set the bytes are first inflated with zstd / lz4 (see ``general.py`` for the framing).

Mini-block: each chunk has one buffer holding its values. Every chunk but the last holds
the same power-of-two count: Lance's ``find_log_vals_per_chunk`` starts at 2 values (8 for
sub-byte widths, whose size it counts as one byte per bit) and doubles while the doubled
byte size stays under ``MAX_MINIBLOCK_BYTES`` = 8186 and the count stays <= 4096. So int8
and booleans get 4096 values, int32 1024 (4096 bytes), int64 512, a 14-byte packed row 512.
The last chunk holds the rest and has log 0; when the count divides evenly every chunk is
full and keeps its log. Chunks are simply concatenated.

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
    check_chunk_counts,
    check_range_counts,
    check_ranges,
    gather_bit_ranges,
    gather_ranges,
    join_with_starts,
    pack_bits,
    ranges_to_chunks,
)
from lance_spark_ops.encoding.compression.buffer_compression import decompress_buffer
from lance_spark_ops.encoding.compression.contexts import CodecEncoders
from lance_spark_ops.encoding.compression.encoded import CodecLookup, CompressionParams, MiniBlockCompressed
from lance_spark_ops.encoding.compression.strategy import Codec
from lance_spark_ops.errors import CorruptFileError, InvalidInputError, UnsupportedError

MAX_MINIBLOCK_BYTES = 8 * 1024 - 6
MAX_MINIBLOCK_VALUES = 4096


def _bits(msg: pb.Flat) -> int:
    bits = int(msg.bits_per_value)
    if bits <= 0:
        raise CorruptFileError(f"flat encoding with {bits} bits per value")
    return bits


def _inflate(msg: pb.Flat, buf: memoryview, what: str) -> memoryview:
    if not msg.HasField("data"):
        return buf
    return memoryview(decompress_buffer(msg.data, buf, what))


def concat_fixed_ranges(
    data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, counts: np.ndarray, bits: int, what: str
) -> FixedWidthBlock:
    """Concatenate ``counts[i]`` values of ``bits`` bits from each byte range
    ``data[starts[i]:starts[i] + sizes[i]]``.

    Byte-aligned chunks are gathered with at most one copy (none when they are adjacent);
    chunks that end inside a byte (only possible for sub-byte widths) are stitched bit by
    bit (still vectorised).
    """
    counts = np.asarray(counts, dtype=np.int64)
    starts = np.asarray(starts, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    need = (counts * bits + 7) // 8
    if (sizes < need).any():
        i = int(np.argmax(sizes < need))
        raise CorruptFileError(
            f"{what}: chunk {i} holds {int(sizes[i])} bytes, {int(counts[i])} values of {bits} bits need "
            f"{int(need[i])}"
        )
    check_ranges(data, starts, sizes, what)
    total = int(counts.sum())
    if bits % 8 == 0 or not ((counts[:-1] * bits) % 8).any():
        return FixedWidthBlock(gather_ranges(data, starts, need), bits, total)
    bools = gather_bit_ranges(data, starts, sizes, counts * bits, what)
    return FixedWidthBlock(pack_bits(bools), bits, total)


def concat_fixed_chunks(
    bufs: Sequence[memoryview], counts: np.ndarray, bits: int, what: str
) -> FixedWidthBlock:
    """``concat_fixed_ranges`` over a list of per-chunk buffers."""
    if len(bufs) == 1:
        data = as_u8(bufs[0])
        return concat_fixed_ranges(data, np.zeros(1, np.int64), np.array([len(data)]), counts, bits, what)
    data, starts, sizes = join_with_starts(bufs)
    return concat_fixed_ranges(data, starts, sizes, counts, bits, what)


def decode_flat_miniblock(
    msg: pb.Flat, chunks: Sequence[Sequence[memoryview]], counts: np.ndarray,
    codecs: CodecLookup | None = None
) -> FixedWidthBlock:
    bits = _bits(msg)
    counts = check_chunk_counts(chunks, counts, 1, "flat mini-block")
    bufs = [_inflate(msg, c[0], f"flat mini-block chunk {i}") for i, c in enumerate(chunks)]
    return concat_fixed_chunks(bufs, counts, bits, "flat mini-block")


def decode_flat_miniblock_ranges(
    msg: pb.Flat, data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, counts: np.ndarray,
    codecs: CodecLookup | None = None
) -> FixedWidthBlock:
    """Mini-block chunks given as ``(k, 1)`` byte ranges of ``data`` (no per-chunk copies)."""
    counts = check_range_counts(starts, sizes, counts, 1, "flat mini-block")
    if msg.HasField("data"):
        return decode_flat_miniblock(msg, ranges_to_chunks(data, starts, sizes), counts)
    return concat_fixed_ranges(data, starts[:, 0], sizes[:, 0], counts, _bits(msg), "flat mini-block")


def decode_flat_blocks(msg: pb.Flat, buffers: Sequence[memoryview], counts: np.ndarray) -> FixedWidthBlock:
    """Many block-context buffers at once (e.g. raw levels of every mini-block chunk)."""
    return decode_flat_miniblock(msg, [[b] for b in buffers], counts)


def decode_flat_blocks_ranges(
    msg: pb.Flat, data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, counts: np.ndarray,
    codecs: CodecLookup | None = None
) -> FixedWidthBlock:
    """``decode_flat_blocks`` over byte ranges of ``data``."""
    return decode_flat_miniblock_ranges(msg, data, starts[:, None], sizes[:, None], counts)


def decode_flat_block(
    msg: pb.Flat, buffer: memoryview, num_values: int, codecs: CodecLookup | None = None
) -> FixedWidthBlock:
    bits = _bits(msg)
    buf = _inflate(msg, buffer, "flat block")
    need = (num_values * bits + 7) // 8
    if len(buf) < need:
        raise CorruptFileError(
            f"flat block: {len(buf)} bytes, {num_values} values of {bits} bits need {need}"
        )
    return FixedWidthBlock(as_u8(buf)[:need], bits, num_values)


def decode_flat_per_value(msg: pb.Flat, block: DataBlock, codecs: CodecLookup | None = None) -> DataBlock:
    if msg.HasField("data"):
        raise UnsupportedError("flat per-value values with buffer compression are not supported")
    if not isinstance(block, FixedWidthBlock):
        raise CorruptFileError(f"flat per-value decoding got a {type(block).__name__}")
    bits = _bits(msg)
    if block.bits_per_value != bits:
        raise CorruptFileError(f"flat per-value: {block.bits_per_value}-bit values, encoding says {bits}")
    return block


# ---------------------------------------------------------------------------- encoders


def flat_encoding(bits: int) -> pb.CompressiveEncoding:
    return pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=int(bits)))


def chunk_log_values(bytes_per_word: int, values_per_word: int = 1) -> int:
    """log2 of the values per full chunk (Lance's ``ValueEncoder::find_log_vals_per_chunk``).

    ``bytes_per_word`` covers ``values_per_word`` values (1, or 8 for sub-byte data, whose
    size Lance counts as ``bits_per_value`` bytes per 8 values).
    """
    log, num = (1, 2) if values_per_word == 1 else (3, 8)
    size = 2 * bytes_per_word
    if size >= MAX_MINIBLOCK_BYTES:
        raise UnsupportedError(f"values of {bytes_per_word} bytes are too wide for a mini-block chunk")
    while 2 * size < MAX_MINIBLOCK_BYTES and 2 * num <= MAX_MINIBLOCK_VALUES:
        log, size, num = log + 1, size * 2, num * 2
    return log


def fixed_chunks(
    num_values: int, log: int, chunk_bytes: int, total_bytes: int
) -> tuple[np.ndarray, np.ndarray]:
    """(byte sizes, logs) of chunks of ``2**log`` values of ``chunk_bytes`` bytes, the last
    holding what is left of ``total_bytes`` (log 0 unless it is full)."""
    per = 1 << log
    full = num_values // per
    sizes = np.full(full, chunk_bytes, dtype=np.int64)
    logs = np.full(full, log, dtype=np.uint8)
    if num_values % per:
        sizes = np.append(sizes, total_bytes - full * chunk_bytes)
        logs = np.append(logs, np.uint8(0))
    return sizes, logs


def _fixed(block: DataBlock, what: str) -> FixedWidthBlock:
    if not isinstance(block, FixedWidthBlock):
        raise InvalidInputError(f"{what} needs fixed-width values, got a {type(block).__name__}")
    if block.bits_per_value <= 0 or (block.bits_per_value % 8 and block.bits_per_value != 1):
        raise UnsupportedError(f"{what}: {block.bits_per_value} bits per value")
    return block


def _trimmed(block: FixedWidthBlock, what: str) -> np.ndarray:
    need = (block.num_values * block.bits_per_value + 7) // 8
    data = as_u8(block.data)
    if len(data) < need:
        raise InvalidInputError(
            f"{what}: {len(data)} bytes cannot hold {block.num_values} values of {block.bits_per_value} bits"
        )
    return data[:need]


def encode_flat_miniblock(
    block: DataBlock, params: CompressionParams | None = None,
    codec: Codec | None = None, codecs: CodecEncoders | None = None
) -> MiniBlockCompressed:
    """Values as they are, cut into equal power-of-two chunks (see module doc)."""
    block = _fixed(block, "flat mini-block")
    bits = block.bits_per_value
    data = _trimmed(block, "flat mini-block")
    bytes_per_word, per_word = (bits // 8, 1) if bits % 8 == 0 else (bits, 8)
    log = chunk_log_values(bytes_per_word, per_word)
    chunk_bytes = (1 << log) * bits // 8
    sizes, logs = fixed_chunks(block.num_values, log, chunk_bytes, len(data))
    return MiniBlockCompressed([data], sizes[:, None], logs, block.num_values, flat_encoding(bits))


def encode_flat_block(
    block: DataBlock, params: CompressionParams | None = None,
    codec: Codec | None = None, codecs: CodecEncoders | None = None
) -> tuple[np.ndarray, pb.CompressiveEncoding]:
    """One buffer: the values back to back (booleans as an LSB-first bitmap)."""
    block = _fixed(block, "flat block")
    return _trimmed(block, "flat block"), flat_encoding(block.bits_per_value)


def encode_flat_blocks(
    values: np.ndarray, counts: np.ndarray, codec: Codec | None = None
) -> tuple[np.ndarray, np.ndarray, pb.CompressiveEncoding]:
    """Many block buffers at once (raw levels of every mini-block chunk): the buffers back
    to back (simply ``values``' bytes), their sizes and their encoding."""
    counts = np.asarray(counts, dtype=np.int64)
    data = np.ascontiguousarray(values).view(np.uint8).reshape(-1)
    return data, counts * values.dtype.itemsize, flat_encoding(values.dtype.itemsize * 8)


def encode_flat_per_value(
    block: DataBlock, params: CompressionParams | None = None,
    codec: Codec | None = None, codecs: CodecEncoders | None = None
) -> tuple[DataBlock, pb.CompressiveEncoding]:
    """Full-zip values: Flat is the identity."""
    block = _fixed(block, "flat per-value")
    return block, flat_encoding(block.bits_per_value)
