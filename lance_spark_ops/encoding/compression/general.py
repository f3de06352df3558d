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
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import DataBlock, VariableWidthBlock
from lance_spark_ops.encoding.compression._arrays import as_u8, check_chunk_counts
from lance_spark_ops.errors import CorruptFileError, UnsupportedError

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_MAX_INFLATE = 1 << 34  # refuse absurd declared sizes instead of allocating them


def _zstd_is_raw_frame(data: memoryview) -> bool:
    if len(data) < 8:
        return True
    if bytes(data[:4]) != ZSTD_MAGIC:
        return False
    return (data[4] & 0x10) == 0  # reserved bit of the frame header descriptor must be 0


def _zstd(data: memoryview, what: str) -> bytes:
    import zstandard

    try:
        if _zstd_is_raw_frame(data):
            return zstandard.ZstdDecompressor().decompressobj().decompress(bytes(data))
        size = int.from_bytes(data[:8], "little")
        if size > _MAX_INFLATE:
            raise CorruptFileError(f"{what}: zstd buffer declares {size} uncompressed bytes")
        if size == 0:
            return b""
        out = zstandard.ZstdDecompressor().decompress(bytes(data[8:]), max_output_size=size)
    except zstandard.ZstdError as e:
        raise CorruptFileError(f"{what}: zstd data does not decompress ({e})") from e
    if len(out) != size:
        raise CorruptFileError(f"{what}: zstd buffer declares {size} bytes but inflates to {len(out)}")
    return out


def _lz4(data: memoryview, what: str) -> bytes:
    if len(data) < 4:
        raise CorruptFileError(f"{what}: lz4 buffer of {len(data)} bytes has no 4-byte size prefix")
    size = int.from_bytes(data[:4], "little")
    if size == 0:
        return b""
    codec = pa.Codec("lz4_raw")
    payload = bytes(data[4:])
    try:
        out = codec.decompress(payload, decompressed_size=size, asbytes=True)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise CorruptFileError(f"{what}: lz4 block does not decompress to {size} bytes ({e})") from e
    # pyarrow returns a buffer of the declared size even when the block inflates to less;
    # the block inflates to exactly `size` bytes iff it does not fit into size - 1.
    if size == 1:
        return out
    try:
        codec.decompress(payload, decompressed_size=size - 1, asbytes=True)
    except (pa.ArrowException, OSError, ValueError):
        return out
    raise CorruptFileError(f"{what}: lz4 buffer declares {size} bytes but inflates to fewer")


def decompress_buffer(compression: pb.BufferCompression, data: memoryview | bytes, what: str) -> bytes:
    """Inflate one buffer compressed by Lance's ``BufferCompressor`` (see module doc)."""
    data = memoryview(data)
    if len(data) == 0:
        return b""
    scheme = compression.scheme
    if scheme == pb.COMPRESSION_ALGORITHM_ZSTD:
        return _zstd(data, what)
    if scheme == pb.COMPRESSION_ALGORITHM_LZ4:
        return _lz4(data, what)
    raise UnsupportedError(f"{what}: buffer compression scheme {scheme} is not supported")


def _inner(msg: pb.General) -> pb.CompressiveEncoding:
    if not msg.HasField("values"):
        raise CorruptFileError("general compression has no inner encoding")
    if not msg.HasField("compression"):
        raise CorruptFileError("general compression has no compression scheme")
    return msg.values


def decode_general_miniblock(
    msg: pb.General, chunks: Sequence[Sequence[memoryview]], counts: np.ndarray
) -> DataBlock:
    from lance_spark_ops.encoding.compression.decompress import decompress_miniblock_chunks

    inner = _inner(msg)
    if chunks and len(chunks[0]) == 0:
        raise CorruptFileError("general mini-block chunk has no buffers")
    check_chunk_counts(chunks, counts, len(chunks[0]) if chunks else 0, "general mini-block")
    inflated = [
        [memoryview(decompress_buffer(msg.compression, c[0], f"general mini-block chunk {i}")), *c[1:]]
        for i, c in enumerate(chunks)
    ]
    return decompress_miniblock_chunks(inner, inflated, counts)


def decode_general_block(msg: pb.General, buffer: memoryview, num_values: int) -> DataBlock:
    from lance_spark_ops.encoding.compression.decompress import decompress_block

    inner = _inner(msg)
    raw = decompress_buffer(msg.compression, buffer, "general block")
    return decompress_block(inner, memoryview(raw), num_values)


def decode_general_per_value(msg: pb.General, block: DataBlock) -> DataBlock:
    """Inflate every value of a variable-width block on its own."""
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
