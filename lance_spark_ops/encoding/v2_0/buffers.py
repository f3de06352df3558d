"""Columns, pages and buffers of a Lance 2.0 file, and the buffer compression of ``Flat``.

On disk (file version 2.0, footer version bytes 0.3) every column has a ``ColumnMetadata``
(``file2.proto``): an ``encoding`` (a ``google.protobuf.Any`` holding a
``lance.encodings.ColumnEncoding``; normally ``values {}``, ``blob {inner}`` for blob
columns), optional column buffers, and pages. A page has ``length`` (rows), its buffers
(absolute file ``buffer_offsets`` / ``buffer_sizes``) and an ``encoding`` holding a
``lance.encodings.ArrayEncoding`` tree. Leaves of that tree name their bytes with
``Buffer{buffer_index, buffer_type}``: ``page`` -> the page's buffer list, ``column`` -> the
column-metadata buffers, ``file`` -> the global buffers.

Compressed ``Flat`` buffers (``Flat.compression.scheme``; only written by the 2.0 writer for
the bytes of binary columns with ``lance-encoding:compression``) are framed as:

- ``zstd``: ``u64 LE uncompressed length`` + one zstd stream. A buffer that starts with the
  zstd magic ``28 B5 2F FD`` and whose frame-header reserved bit (0x10 of byte 4) is clear
  is a raw zstd frame without the prefix (old writers).
- ``lz4``: ``u32 LE uncompressed length`` + one raw LZ4 block (lz4 ``prepend_size``).
- ``none`` (or no ``compression``): the bytes as they are.

The writer side (``compress``) produces the same framing: zstd at the field's
``lance-encoding:compression-level`` (default 0 = zstd's default level 3, content size in the
frame header), lz4 as one block at the default acceleration (a level is recorded in the
``Compression`` message but, as in pylance, not used). ``PageBuffers`` hands out the
``Buffer{buffer_index}`` references of one page being encoded, in the order the encoders
add buffers (pylance's ``buffer_index`` counter).

Worked example: the zstd buffer ``fa 08 00 00 00 00 00 00 | 28 b5 2f fd ...`` holds
0x8fa = 2298 bytes once decompressed; ``decompress("zstd", buf)`` returns them as uint8.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import zstandard
from google.protobuf.message import DecodeError

from lance_spark_ops._pb import encodings_v2_0_pb2 as pb
from lance_spark_ops._pb import file2_pb2
from lance_spark_ops.encoding.any_encoding import unpack_any
from lance_spark_ops.errors import CorruptFileError, UnsupportedError

# fetch([(absolute offset, size), ...]) -> the bytes of each range, in order.
Fetch = Callable[[Sequence[tuple[int, int]]], list[memoryview]]

ARRAY_ENCODING = "lance.encodings.ArrayEncoding"
COLUMN_ENCODING = "lance.encodings.ColumnEncoding"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_MAX_DECOMPRESSED = 1 << 40
_ZSTD_LEVELS = (-(1 << 17), 22)

# What an encoder may hand over as a page buffer.
BufferData = np.ndarray | bytes


@dataclass
class ColumnPages:
    """One 2.0 column: its metadata and a way to read absolute byte ranges of the file.

    ``file_buffers`` ((offset, size) of each global buffer) is only needed when a page names
    a ``file`` buffer (never seen in files written by pylance); ``index`` is the column's
    position in the file, used in error messages.
    """

    meta: file2_pb2.ColumnMetadata
    fetch: Fetch
    file_buffers: Sequence[tuple[int, int]] | None = None
    index: int | None = None
    _starts: np.ndarray | None = field(default=None, init=False, repr=False)
    _encodings: dict[int, pb.ArrayEncoding] = field(default_factory=dict, init=False, repr=False)
    _column_encoding: pb.ColumnEncoding | None = field(default=None, init=False, repr=False)

    @property
    def name(self) -> str:
        return f"column {self.index}" if self.index is not None else "column"

    def page_starts(self) -> np.ndarray:
        """First row of every page, plus the total row count at the end (int64)."""
        if self._starts is None:
            lengths = np.fromiter((p.length for p in self.meta.pages), dtype=np.int64,
                                  count=len(self.meta.pages))
            self._starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        return self._starts

    @property
    def num_rows(self) -> int:
        return int(self.page_starts()[-1])

    def pages_in(self, start: int, stop: int) -> Iterator[tuple[int, int, int]]:
        """``(page, lo, hi)``: the rows ``[lo, hi)`` of each non-empty page inside
        ``[start, stop)`` (rows counted from the column's first row)."""
        starts = self.page_starts()
        if not 0 <= start <= stop <= int(starts[-1]):
            raise CorruptFileError(
                f"{self.name}: rows {start}..{stop} requested but its pages hold {int(starts[-1])} rows"
            )
        if start == stop:
            return
        first = int(np.searchsorted(starts, start, side="right")) - 1
        last = int(np.searchsorted(starts, stop, side="left"))
        for p in range(first, last):
            ps, pe = int(starts[p]), int(starts[p + 1])
            lo, hi = max(start, ps), min(stop, pe)
            if hi > lo:
                yield p, lo - ps, hi - ps

    def column_encoding(self) -> pb.ColumnEncoding:
        if self._column_encoding is None:
            enc = pb.ColumnEncoding()
            type_name, payload = unpack_any(self.meta.encoding, "", self.name)
            if type_name == "":
                enc.values.SetInParent()
            elif type_name != COLUMN_ENCODING:
                raise UnsupportedError(
                    f"{self.name}: expected a 2.0 column encoding ({COLUMN_ENCODING}), found {type_name!r}"
                )
            else:
                _parse(enc, payload, f"{self.name} encoding")
            self._column_encoding = enc
        return self._column_encoding

    def encoding(self, page: int) -> pb.ArrayEncoding:
        """The page's ``ArrayEncoding`` (parsed once)."""
        enc = self._encodings.get(page)
        if enc is None:
            where = f"{self.name} page {page}"
            type_name, payload = unpack_any(self.meta.pages[page].encoding, "", where)
            if type_name != ARRAY_ENCODING:
                raise UnsupportedError(
                    f"{where}: expected a 2.0 page encoding ({ARRAY_ENCODING}), found {type_name or 'none'!r}"
                )
            enc = pb.ArrayEncoding()
            _parse(enc, payload, where)
            if enc.WhichOneof("array_encoding") is None:
                raise CorruptFileError(f"{where}: page encoding is empty")
            self._encodings[page] = enc
        return enc

    def context(self, page: int) -> PageContext:
        return PageContext(self, page)


def _parse(msg: object, payload: bytes, where: str) -> None:
    try:
        msg.ParseFromString(payload)  # type: ignore[attr-defined]
    except DecodeError as e:
        raise CorruptFileError(f"{where}: protobuf does not parse ({e})") from e


class PageContext:
    """Resolves the ``Buffer`` references of one page and reads (parts of) them."""

    def __init__(self, column: ColumnPages, page: int) -> None:
        self.column = column
        self.page = page
        self.meta = column.meta.pages[page]
        self.where = f"{column.name} page {page}"
        self._decompressed: dict[tuple[int, int, str], np.ndarray] = {}

    def locate(self, buf: pb.Buffer) -> tuple[int, int]:
        """Absolute (offset, size) of a referenced buffer."""
        i = buf.buffer_index
        kind = buf.buffer_type
        if kind == pb.Buffer.page:
            table = list(zip(self.meta.buffer_offsets, self.meta.buffer_sizes, strict=False))
            what = "page"
        elif kind == pb.Buffer.column:
            table = list(zip(self.column.meta.buffer_offsets, self.column.meta.buffer_sizes,
                             strict=False))
            what = "column"
        elif kind == pb.Buffer.file:
            if self.column.file_buffers is None:
                raise UnsupportedError(f"{self.where}: refers to global buffer {i} but no global "
                                       "buffer table was given")
            table = [(int(o), int(s)) for o, s in self.column.file_buffers]
            what = "global"
        else:
            raise CorruptFileError(f"{self.where}: unknown buffer type {kind}")
        if not 0 <= i < len(table):
            raise CorruptFileError(f"{self.where}: refers to {what} buffer {i} but there are {len(table)}")
        off, size = table[i]
        return int(off), int(size)

    def read(self, buf: pb.Buffer, start: int, size: int, what: str) -> memoryview:
        """``size`` bytes at ``start`` inside a referenced (uncompressed) buffer."""
        off, total = self.locate(buf)
        if start < 0 or size < 0 or start + size > total:
            raise CorruptFileError(
                f"{self.where}: {what} needs bytes {start}..{start + size} of a {total}-byte buffer"
            )
        if size == 0:
            return memoryview(b"")
        (data,) = self.column.fetch([(off + start, size)])
        data = memoryview(data)
        if len(data) != size:
            raise CorruptFileError(f"{self.where}: read {len(data)} bytes of {what}, expected {size}")
        return data

    def read_decompressed(self, buf: pb.Buffer, scheme: str, what: str) -> np.ndarray:
        """A whole referenced buffer, decompressed (uint8); cached for this page."""
        off, total = self.locate(buf)
        key = (off, total, scheme)
        out = self._decompressed.get(key)
        if out is None:
            raw = self.read(buf, 0, total, what)
            out = decompress(scheme, raw, f"{self.where}: {what}")
            self._decompressed[key] = out
        return out


def decompress(scheme: str, data: memoryview | bytes, where: str) -> np.ndarray:
    """Undo a 2.0 buffer compression (see the module docstring for the framing)."""
    data = memoryview(data)
    if scheme in ("", "none"):
        return np.frombuffer(data, dtype=np.uint8)
    if scheme == "zstd":
        return _zstd(data, where)
    if scheme == "lz4":
        return _lz4(data, where)
    raise UnsupportedError(f"{where}: buffer compression scheme {scheme!r} is not supported "
                           "(expected zstd, lz4 or none)")


def _zstd(data: memoryview, where: str) -> np.ndarray:
    if len(data) == 0:
        return np.zeros(0, np.uint8)
    raw_frame = len(data) < 8 or (bytes(data[:4]) == _ZSTD_MAGIC and not data[4] & 0x10)
    expected = None
    if not raw_frame:
        (expected,) = struct.unpack_from("<Q", data, 0)
        if expected > _MAX_DECOMPRESSED:
            raise CorruptFileError(f"{where}: zstd length prefix claims {expected} bytes")
        data = data[8:]
    try:
        out = zstandard.ZstdDecompressor().decompressobj().decompress(bytes(data))
    except zstandard.ZstdError as e:
        raise CorruptFileError(f"{where}: zstd data does not decompress ({e})") from e
    if expected is not None and len(out) != expected:
        raise CorruptFileError(f"{where}: zstd data decompressed to {len(out)} bytes, prefix says {expected}")
    return np.frombuffer(out, dtype=np.uint8)


def _lz4(data: memoryview, where: str) -> np.ndarray:
    if len(data) < 4:
        raise CorruptFileError(f"{where}: lz4 buffer of {len(data)} bytes has no 4-byte length prefix")
    (expected,) = struct.unpack_from("<I", data, 0)
    if expected == 0:
        return np.zeros(0, np.uint8)
    try:
        out = pa.decompress(bytes(data[4:]), decompressed_size=expected, codec="lz4_raw", asbytes=False)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise CorruptFileError(f"{where}: lz4 block does not decompress to {expected} bytes ({e})") from e
    if out.size != expected:
        raise CorruptFileError(f"{where}: lz4 block decompressed to {out.size} bytes, prefix says {expected}")
    return np.frombuffer(out, dtype=np.uint8)


# -- writing -------------------------------------------------------------------------------
class PageBuffers:
    """The buffers of one page being encoded; ``add`` returns the reference to put in the
    encoding (``buffer_index`` = position in ``buffers``, ``buffer_type`` page)."""

    def __init__(self) -> None:
        self.buffers: list[BufferData] = []

    def add(self, data: BufferData) -> pb.Buffer:
        ref = pb.Buffer(buffer_index=len(self.buffers), buffer_type=pb.Buffer.page)
        self.buffers.append(data)
        return ref


def compress(scheme: str, data: np.ndarray | bytes, level: int | None = None) -> BufferData:
    """Compress a whole ``Flat`` buffer with the 2.0 framing (see the module docstring)."""
    if scheme == "none":
        return data
    raw = memoryview(data).cast("B") if not isinstance(data, bytes) else data
    if scheme == "zstd":
        lo, hi = _ZSTD_LEVELS
        lvl = min(max(int(level or 0), lo), hi)
        frame = zstandard.ZstdCompressor(level=lvl).compress(raw)
        return struct.pack("<Q", len(raw)) + frame
    if scheme == "lz4":
        if len(raw) > 0xFFFFFFFF:
            raise UnsupportedError(f"lz4 buffer compression holds at most 4 GiB, got {len(raw)} bytes")
        block = pa.compress(raw, codec="lz4_raw", asbytes=True)
        return struct.pack("<I", len(raw)) + block
    raise UnsupportedError(f"buffer compression scheme {scheme!r} is not supported "
                           "(expected zstd, lz4 or none)")
