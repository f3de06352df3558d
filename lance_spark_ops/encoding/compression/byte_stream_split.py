"""ByteStreamSplit: byte planes of fixed-width values (``ByteStreamSplit { values: Flat(bits) }``).

Mini-block only. A chunk of n values of B bytes stores byte j of value i at ``j * n + i``: first
byte 0 of every value, then byte 1 of every value, and so on. Chunks hold 1024 values for
32-bit data and 512 for 64-bit data (the last chunk fewer).

Worked example (two float32 1.0 = ``00 00 80 3f`` and 2.0 = ``00 00 00 40``): the chunk is
``00 00 | 00 00 | 80 00 | 3f 40``.

The writer's last chunk always has log 0, even when it holds a full 1024 / 512 values.

It does not shrink data by itself, so pylance only picks it under General compression:
``lance-encoding:compression`` = zstd / lz4 on integers (entropy check) or with
``lance-encoding:bss`` = on.

Decoding groups chunks of equal length and transposes each group in one numpy operation;
encoding transposes all full chunks at once and the last one on its own.
"""

from __future__ import annotations

from collections.abc import Sequence

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
    join_with_starts,
    strided_rows,
    uniform_stride,
)
from lance_spark_ops.encoding.compression.contexts import CodecEncoders
from lance_spark_ops.encoding.compression.encoded import CodecLookup, CompressionParams, MiniBlockCompressed
from lance_spark_ops.encoding.compression.strategy import Codec
from lance_spark_ops.errors import CorruptFileError, InvalidInputError, UnsupportedError

CHUNK_VALUES = {32: 1024, 64: 512}  # largest power of two under 8186 bytes


def _bss_width(msg: pb.ByteStreamSplit) -> int:
    if msg.values.WhichOneof("compression") != "flat":
        raise UnsupportedError("byte stream split: only Flat inner values are supported")
    bits = int(msg.values.flat.bits_per_value)
    if bits <= 0 or bits % 8:
        raise UnsupportedError(f"byte stream split over {bits}-bit values is not supported")
    return bits // 8


def decode_byte_stream_split_miniblock(
    msg: pb.ByteStreamSplit, chunks: Sequence[Sequence[memoryview]], counts: np.ndarray,
    codecs: CodecLookup | None = None
) -> FixedWidthBlock:
    _bss_width(msg)
    counts = check_chunk_counts(chunks, counts, 1, "byte stream split")
    data, starts, sizes = join_with_starts([c[0] for c in chunks])
    return _unsplit(msg, data, starts, sizes, counts)


def decode_byte_stream_split_miniblock_ranges(
    msg: pb.ByteStreamSplit, data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, counts: np.ndarray,
    codecs: CodecLookup | None = None
) -> FixedWidthBlock:
    """Mini-block chunks given as ``(k, 1)`` byte ranges of ``data``."""
    _bss_width(msg)
    counts = check_range_counts(starts, sizes, counts, 1, "byte stream split")
    return _unsplit(msg, data, starts[:, 0], sizes[:, 0], counts)


def _unsplit(
    msg: pb.ByteStreamSplit, data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, counts: np.ndarray
) -> FixedWidthBlock:
    width = _bss_width(msg)
    if (sizes != counts * width).any():
        i = int(np.argmax(sizes != counts * width))
        raise CorruptFileError(
            f"byte stream split: chunk {i} holds {int(sizes[i])} bytes, {int(counts[i])} "
            f"values of {width} bytes need {int(counts[i]) * width}"
        )
    check_ranges(data, starts, sizes, "byte stream split")
    out = alloc_empty(int(sizes.sum()), np.uint8)
    dst = exclusive_cumsum(sizes)
    for n in np.unique(counts):
        if n == 0:
            continue
        sel = np.flatnonzero(counts == n)
        span = int(n) * width
        src = strided_rows(data, starts[sel], span)
        planes = src.reshape(len(sel), width, int(n)).transpose(0, 2, 1)
        if uniform_stride(dst[sel]) == span:  # consecutive equal chunks: one transposing copy
            d0 = int(dst[sel[0]])
            out[d0 : d0 + len(sel) * span].reshape(len(sel), int(n), width)[...] = planes
        else:
            out[dst[sel][:, None] + np.arange(span, dtype=np.int64)[None, :]] = planes.reshape(len(sel), span)
    return FixedWidthBlock(out, width * 8, int(counts.sum()))


def byte_stream_split_encoding(bits: int) -> pb.CompressiveEncoding:
    return pb.CompressiveEncoding(
        byte_stream_split=pb.ByteStreamSplit(
            values=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=int(bits)))
        )
    )


def encode_byte_stream_split_miniblock(
    block: DataBlock, params: CompressionParams | None = None,
    codec: Codec | None = None, codecs: CodecEncoders | None = None
) -> MiniBlockCompressed:
    """Chunks of 1024 (32-bit) / 512 (64-bit) values, each stored as its byte planes."""
    if not isinstance(block, FixedWidthBlock):
        raise InvalidInputError(f"byte stream split needs fixed-width values, got a {type(block).__name__}")
    bits = block.bits_per_value
    if bits not in CHUNK_VALUES:
        raise UnsupportedError(f"byte stream split over {bits}-bit values (32 or 64 expected)")
    width, per = bits // 8, CHUNK_VALUES[bits]
    n = block.num_values
    data = as_u8(block.data)[: n * width]
    if len(data) < n * width:
        raise InvalidInputError(f"byte stream split: {len(data)} bytes for {n} values of {width} bytes")
    out = np.empty(n * width, dtype=np.uint8)
    full = n // per
    split = full * per * width
    out[:split] = data[:split].reshape(full, per, width).transpose(0, 2, 1).reshape(-1)
    rest = n - full * per
    if rest:
        out[split:] = data[split:].reshape(rest, width).T.reshape(-1)
    counts = np.full(full + (rest > 0), per, dtype=np.int64)
    if rest:
        counts[-1] = rest
    logs = np.full(len(counts), per.bit_length() - 1, dtype=np.uint8)
    if len(logs):
        logs[-1] = 0
    return MiniBlockCompressed([out], (counts * width)[:, None], logs, n, byte_stream_split_encoding(bits))
