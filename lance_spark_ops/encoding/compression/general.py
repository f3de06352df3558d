"""General (opaque) compression: zstd or lz4 over another encoding's bytes.

On disk (``General { compression: BufferCompression, values: CompressiveEncoding }``):

- zstd buffer: ``u64 LE uncompressed size`` then one zstd frame. Files from older writers may
  hold a bare zstd frame (magic ``28 b5 2f fd`` with the frame-header reserved bit clear); both
  are accepted, as Lance does.
- lz4 buffer: ``u32 LE uncompressed size`` then one LZ4 *block* (not frame); decoded with
  pyarrow's ``lz4_raw`` codec.

Contexts:

- mini-block: only the *first* buffer of every chunk is compressed (chunk by chunk); the
  other buffers stay as the inner encoding wrote them. After decompression the chunks go to
  the inner mini-block codec unchanged.
- block: the whole buffer is compressed; the inner block codec decodes the result
  (2.2 dictionaries: ``General(lz4, Flat)`` or ``General(lz4, Variable)``).
- per-value (full-zip): every value of a ``VariableWidthBlock`` is compressed on its own.
  One decompress call per value is inherent here; pylance only picks this for values of
  32 KiB and more, so values are few.

Worked example (zstd, mini-block over ByteStreamSplit(Flat32), 1024 values): the chunk's
buffer 0 is ``00 10 00 00 00 00 00 00 | 28 b5 2f fd ...``: 4096 bytes once inflated, which the
inner ByteStreamSplit codec turns back into 1024 int32.

pylance picks General when field metadata sets ``lance-encoding:compression`` to zstd / lz4
(levels from ``lance-encoding:compression-level``), for 2.2 dictionaries (lz4) and for
full-zip values of 32 KiB and more (zstd level 0).

Writing (byte-identical to pylance 14: zstd is one frame with the content size, written by
``zstandard`` at the given level, 0 meaning zstd's default 3; lz4 is pyarrow's ``lz4_raw``
block):

- ``encode_general_miniblock(block, params, inner)``: ``inner`` is the mini-block encoder of
  the wrapped codec, a callable ``DataBlock -> MiniBlockCompressed`` chosen by the strategy
  (e.g. ``functools.partial(encode_inline_bitpacking_miniblock, params=params)``). Like
  Lance's ``GeneralMiniBlockCompressor`` it returns the inner result unchanged when its
  first buffer is under 4 KiB in total or when compressing every chunk's first buffer does
  not make it smaller; otherwise ``General(scheme, level?, inner)``.
- ``encode_general_block(block, params, inner=None)``: the inner block encoder's bytes
  compressed whole; ``inner`` defaults to raw Flat for fixed-width blocks (pass the
  variable codec's block encoder for variable-width ones).
- ``encode_general_per_value(block, params)``: each value of a ``VariableWidthBlock``
  compressed on its own, ``General(zstd level (default 0) | lz4, Variable)``.

The registry calls the ``encode_general_codec_*`` forms: they take the scheme and level from
the strategy's ``Codec`` node and compress the inner codec through the registry.

The level is written into ``BufferCompression`` exactly when ``params.compression_level``
is set (per-value zstd always writes it, as Lance does).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import DataBlock, FixedWidthBlock, VariableWidthBlock
from lance_spark_ops.encoding.compression._arrays import as_u8, check_chunk_counts, exclusive_cumsum
from lance_spark_ops.encoding.compression.buffer_compression import (
    SCHEMES,
    BufferCompressor,
    buffer_compression,
    compress_buffer,
    decompress_buffer,
)
from lance_spark_ops.encoding.compression.contexts import CodecEncoders
from lance_spark_ops.encoding.compression.encoded import CodecLookup, CompressionParams, MiniBlockCompressed
from lance_spark_ops.encoding.compression.strategy import Codec
from lance_spark_ops.encoding.compression.value import encode_flat_block
from lance_spark_ops.encoding.compression.variable import encode_variable_block
from lance_spark_ops.errors import CorruptFileError, InvalidInputError, UnsupportedError

MIN_BUFFER_SIZE_FOR_COMPRESSION = 4 * 1024


def _inner(msg: pb.General) -> pb.CompressiveEncoding:
    if not msg.HasField("values"):
        raise CorruptFileError("general compression has no inner encoding")
    if not msg.HasField("compression"):
        raise CorruptFileError("general compression has no compression scheme")
    return msg.values


def decode_general_miniblock(
    msg: pb.General, chunks: Sequence[Sequence[memoryview]], counts: np.ndarray, codecs: CodecLookup
) -> DataBlock:
    inner = _inner(msg)
    if chunks and len(chunks[0]) == 0:
        raise CorruptFileError("general mini-block chunk has no buffers")
    check_chunk_counts(chunks, counts, len(chunks[0]) if chunks else 0, "general mini-block")
    inflated = [
        [memoryview(decompress_buffer(msg.compression, c[0], f"general mini-block chunk {i}")), *c[1:]]
        for i, c in enumerate(chunks)
    ]
    return codecs.decompress_miniblock_chunks(inner, inflated, counts)


def decode_general_block(
    msg: pb.General, buffer: memoryview, num_values: int, codecs: CodecLookup
) -> DataBlock:
    inner = _inner(msg)
    raw = decompress_buffer(msg.compression, buffer, "general block")
    return codecs.decompress_block(inner, memoryview(raw), num_values)


def decode_general_per_value(
    msg: pb.General, block: DataBlock, codecs: CodecLookup | None = None
) -> DataBlock:
    """Inflate every value of a variable-width block on its own (the inflated values are
    the inner Variable's raw values, so ``codecs`` is not needed)."""
    if not isinstance(block, VariableWidthBlock):
        raise UnsupportedError(f"general per-value compression over {type(block).__name__} is not supported")
    offsets = np.asarray(block.offsets, dtype=np.int64)
    if len(offsets) != block.num_values + 1:
        raise CorruptFileError(f"general per-value: {len(offsets)} offsets for {block.num_values} values")
    if (np.diff(offsets) < 0).any() or offsets[-1] > len(block.data):
        raise CorruptFileError("general per-value: offsets are not monotonic or overrun the data")
    data = memoryview(np.ascontiguousarray(block.data, dtype=np.uint8))
    pieces = [
        decompress_buffer(msg.compression, data[int(a) : int(b)], f"general per-value value {i}")
        for i, (a, b) in enumerate(zip(offsets[:-1], offsets[1:], strict=True))
    ]
    lengths = np.fromiter((len(p) for p in pieces), dtype=np.int64, count=len(pieces))
    new_offsets = np.zeros(len(pieces) + 1, dtype=np.int64)
    np.cumsum(lengths, out=new_offsets[1:])
    out_dtype = np.uint32 if new_offsets[-1] < 2**32 and block.offsets.dtype == np.uint32 else np.uint64
    return VariableWidthBlock(new_offsets.astype(out_dtype), as_u8(b"".join(pieces)), block.num_values)


# ---------------------------------------------------------------------------- encoders


def _scheme(params: CompressionParams) -> str:
    scheme = (params.compression or "").lower()
    if scheme not in SCHEMES:
        raise InvalidInputError(f"general compression needs zstd or lz4, got {params.compression!r}")
    return scheme


def general_encoding(scheme: str, level: int | None, inner: pb.CompressiveEncoding) -> pb.CompressiveEncoding:
    return pb.CompressiveEncoding(
        general=pb.General(compression=buffer_compression(scheme, level), values=inner)
    )


def encode_general_miniblock(
    block: DataBlock, params: CompressionParams, inner: Callable[[DataBlock], MiniBlockCompressed]
) -> MiniBlockCompressed:
    """``inner``'s chunks with each chunk's first buffer compressed (module doc)."""
    scheme = _scheme(params)
    base = inner(block)
    if not base.buffers or len(base.buffers[0]) < MIN_BUFFER_SIZE_FOR_COMPRESSION:
        return base
    compressor = BufferCompressor(scheme, params.compression_level)
    first = as_u8(base.buffers[0])
    sizes = base.chunk_buffer_sizes[:, 0].astype(np.int64)
    starts = exclusive_cumsum(sizes)
    pieces = [
        compressor.compress(first[a : a + n]) for a, n in zip(starts.tolist(), sizes.tolist(), strict=True)
    ]
    new_sizes = np.fromiter((len(p) for p in pieces), dtype=np.int64, count=len(pieces))
    if int(new_sizes.sum()) >= int(sizes.sum()):
        return base
    chunk_sizes = base.chunk_buffer_sizes.astype(np.int64).copy()
    chunk_sizes[:, 0] = new_sizes
    return MiniBlockCompressed(
        [as_u8(b"".join(pieces)), *base.buffers[1:]],
        chunk_sizes,
        base.chunk_log_values,
        base.num_values,
        general_encoding(scheme, params.compression_level, base.encoding),
    )


def _default_block_inner(block: DataBlock) -> tuple[np.ndarray, pb.CompressiveEncoding]:
    if isinstance(block, FixedWidthBlock):
        return encode_flat_block(block)
    if isinstance(block, VariableWidthBlock):
        return encode_variable_block(block, CompressionParams())
    raise UnsupportedError(f"general block compression of a {type(block).__name__} needs an inner encoder")


def encode_general_block(
    block: DataBlock,
    params: CompressionParams,
    inner: Callable[[DataBlock], tuple[np.ndarray, pb.CompressiveEncoding]] | None = None,
) -> tuple[np.ndarray, pb.CompressiveEncoding]:
    """The inner block encoding's buffer compressed as a whole (2.2 dictionaries, big blocks)."""
    scheme = _scheme(params)
    data, inner_enc = (inner or _default_block_inner)(block)
    out = compress_buffer(data, scheme, params.compression_level)
    return as_u8(out), general_encoding(scheme, params.compression_level, inner_enc)


def encode_general_per_value(
    block: DataBlock, params: CompressionParams
) -> tuple[VariableWidthBlock, pb.CompressiveEncoding]:
    """Every value compressed on its own; offsets keep their width (module doc)."""
    scheme = _scheme(params)
    if not isinstance(block, VariableWidthBlock):
        raise InvalidInputError(
            f"general per-value compression needs variable-width values, got {type(block).__name__}"
        )
    level = None if scheme == "lz4" else (params.compression_level or 0)
    compressor = BufferCompressor(scheme, level)
    offsets = np.asarray(block.offsets).astype(np.int64)
    data = as_u8(block.data)
    pieces = [
        compressor.compress(data[a:b])
        for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)
    ]
    new_offsets = np.zeros(len(pieces) + 1, dtype=np.int64)
    np.cumsum(np.fromiter((len(p) for p in pieces), dtype=np.int64, count=len(pieces)), out=new_offsets[1:])
    dtype = np.asarray(block.offsets).dtype
    if dtype.itemsize == 4 and new_offsets[-1] >= 2**32:
        raise UnsupportedError("compressed values overflow 32-bit offsets")
    bits = dtype.itemsize * 8
    variable = pb.CompressiveEncoding(
        variable=pb.Variable(offsets=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=bits)))
    )
    out = VariableWidthBlock(new_offsets.astype(dtype), as_u8(b"".join(pieces)), block.num_values)
    return out, general_encoding(scheme, level, variable)


# ---------------------------------------------------------------------------- registry forms


def _node_params(codec: Codec, params: CompressionParams) -> CompressionParams:
    """``params`` as the General node sees them (its scheme and level)."""
    return dataclasses.replace(params, compression=codec.scheme, compression_level=codec.level)


def _inner_codec(codec: Codec) -> Codec:
    if codec.inner is None:
        raise UnsupportedError(f"{codec.kind} codec without an inner codec")
    return codec.inner


def encode_general_codec_miniblock(block: DataBlock, params: CompressionParams, codec: Codec,
                                   codecs: CodecEncoders) -> MiniBlockCompressed:
    """``encode_general_miniblock`` over the node's inner codec, at the node's scheme and level."""
    inner = _inner_codec(codec)
    return encode_general_miniblock(block, _node_params(codec, params),
                                    lambda b: codecs.compress_miniblock(inner, b, params))


def encode_general_codec_block(block: DataBlock, params: CompressionParams, codec: Codec,
                               codecs: CodecEncoders) -> tuple[np.ndarray, pb.CompressiveEncoding]:
    """``encode_general_block`` over the node's inner codec, at the node's scheme and level."""
    inner = _inner_codec(codec)
    return encode_general_block(block, _node_params(codec, params),
                                lambda b: codecs.compress_block(inner, b, params))


def encode_general_codec_per_value(
    block: DataBlock, params: CompressionParams, codec: Codec, codecs: CodecEncoders
) -> tuple[VariableWidthBlock, pb.CompressiveEncoding]:
    """``encode_general_per_value`` at the node's scheme and level (it writes its values raw)."""
    return encode_general_per_value(block, _node_params(codec, params))
