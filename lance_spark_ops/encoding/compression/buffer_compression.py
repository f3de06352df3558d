"""Lance's ``BufferCompressor`` framing of one buffer (zstd / lz4), shared by General and by
codecs whose messages carry a ``BufferCompression`` (Flat ``data``, InlineBitpacking
``values``).

- zstd: ``u64 LE uncompressed size`` then one zstd frame (content size in the frame header,
  level 0 = zstd's default 3). Files from older writers may hold a bare zstd frame (magic
  ``28 b5 2f fd`` with the frame-header reserved bit clear); both are read, as Lance does.
- lz4: ``u32 LE uncompressed size`` then one LZ4 *block* (not frame), pyarrow's ``lz4_raw``.

Worked example: ``00 10 00 00 00 00 00 00 | 28 b5 2f fd ...`` inflates to 4096 bytes.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.errors import CorruptFileError, InvalidInputError, UnsupportedError

SCHEMES = {"zstd": pb.COMPRESSION_ALGORITHM_ZSTD, "lz4": pb.COMPRESSION_ALGORITHM_LZ4}
ZSTD_DEFAULT_LEVEL = 3

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


def buffer_compression(scheme: str, level: int | None) -> pb.BufferCompression:
    msg = pb.BufferCompression(scheme=SCHEMES[scheme])
    if level is not None:
        msg.level = int(level)
    return msg


class BufferCompressor:
    """Lance's ``BufferCompressor`` for one scheme: ``compress(bytes) -> framed bytes``."""

    def __init__(self, scheme: str, level: int | None = None) -> None:
        self.scheme = scheme
        if scheme == "zstd":
            import zstandard

            self._zstd = zstandard.ZstdCompressor(level=int(level) if level else ZSTD_DEFAULT_LEVEL)
        elif scheme == "lz4":
            self._lz4 = pa.Codec("lz4_raw")
        else:
            raise InvalidInputError(f"unknown buffer compression {scheme!r}")

    def compress(self, data: bytes | memoryview | np.ndarray) -> bytes:
        raw = memoryview(np.ascontiguousarray(data, dtype=np.uint8)) if isinstance(data, np.ndarray) else data
        n = len(raw)
        if self.scheme == "zstd":
            return n.to_bytes(8, "little") + self._zstd.compress(raw)
        if n >= 2**32:
            raise InvalidInputError(f"lz4 buffer of {n} bytes is too large (u32 size prefix)")
        return n.to_bytes(4, "little") + self._lz4.compress(raw, asbytes=True)


def compress_buffer(data: bytes | memoryview | np.ndarray, scheme: str, level: int | None = None) -> bytes:
    """Frame and compress one buffer (module doc)."""
    return BufferCompressor(scheme, level).compress(data)
