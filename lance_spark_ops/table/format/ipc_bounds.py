"""Bounds of the record batch in an Arrow IPC *file*, read from its flatbuffers without decoding.

Arrow deletion files are zstd-compressed IPC files; each compressed buffer starts with its
uncompressed length, and pyarrow allocates that much before decompressing. A damaged
600-byte file can so ask for petabytes. ``check_single_batch`` walks the footer and the one
record batch's metadata (Arrow's ``File.fbs`` / ``Message.fbs``) and refuses a file whose
row count or any buffer's claimed size exceeds what the rows can need, before pyarrow runs.

Flatbuffer layout used: a table starts with an i32 offset back to its vtable; the vtable is
``u16 vtable size, u16 table size, u16 field offsets...``; offsets to tables and vectors are
u32 relative to where they are stored; a vector is ``u32 count`` then its elements.
"""

from __future__ import annotations

import struct

import pyarrow as pa

from lance_spark_ops.errors import CorruptFileError

MAGIC = b"ARROW1"
_RECORD_BATCH = 3  # MessageHeader union tag
_MAX_ROWS = 1 << 32


_STRUCTS = {fmt: struct.Struct(fmt) for fmt in ("<b", "<B", "<h", "<H", "<i", "<I", "<q")}


class _Buf:
    def __init__(self, data: bytes | memoryview, path: str | None) -> None:
        self.data, self.path, self.size = data, path, len(data)

    def get(self, fmt: str, pos: int) -> int:
        st = _STRUCTS[fmt]
        if pos < 0 or pos + st.size > self.size:
            raise self.error(f"flatbuffer read of {st.size} bytes at {pos} lies outside the "
                             f"{self.size}-byte file")
        return st.unpack_from(self.data, pos)[0]

    def error(self, msg: str) -> CorruptFileError:
        return CorruptFileError(f"Arrow IPC file: {msg}", path=self.path)


class _Table:
    def __init__(self, buf: _Buf, pos: int) -> None:
        self.buf, self.pos = buf, pos
        self.vtable = pos - buf.get("<i", pos)
        self.vtable_size = buf.get("<H", self.vtable)

    def field(self, i: int) -> int:
        """Absolute position of field ``i``, or 0 when absent."""
        slot = 4 + 2 * i
        if slot + 2 > self.vtable_size:
            return 0
        off = self.buf.get("<H", self.vtable + slot)
        return self.pos + off if off else 0

    def scalar(self, i: int, fmt: str, default: int = 0) -> int:
        p = self.field(i)
        return self.buf.get(fmt, p) if p else default

    def table(self, i: int) -> _Table | None:
        p = self.field(i)
        return _Table(self.buf, p + self.buf.get("<I", p)) if p else None

    def vector(self, i: int, elem_size: int) -> tuple[int, int]:
        """(position of the first element, count); the elements must lie inside the file."""
        p = self.field(i)
        if not p:
            return 0, 0
        start = p + self.buf.get("<I", p)
        n = self.buf.get("<I", start)
        if start + 4 + n * elem_size > len(self.buf.data):
            raise self.buf.error(f"vector of {n} elements at {start} runs past the end of the file")
        return start + 4, n


def _footer(buf: _Buf) -> _Table:
    data = buf.data
    n = len(MAGIC)
    if len(data) < 2 * n + 4 or bytes(data[:n]) != MAGIC or bytes(data[-n:]) != MAGIC:
        raise buf.error("missing ARROW1 magic")
    footer_len = buf.get("<i", len(data) - len(MAGIC) - 4)
    start = len(data) - len(MAGIC) - 4 - footer_len
    if footer_len <= 0 or start < len(MAGIC):
        raise buf.error(f"footer length {footer_len} does not fit the file")
    return _Table(buf, start + buf.get("<I", start))


def _message(buf: _Buf, offset: int, meta_len: int) -> _Table:
    if offset < 0 or meta_len < 8 or offset + meta_len > len(buf.data):
        raise buf.error(f"record batch block ({offset}, {meta_len} bytes) lies outside the file")
    start = offset + 8 if buf.get("<I", offset) == 0xFFFFFFFF else offset + 4
    return _Table(buf, start + buf.get("<I", start))


def check_single_batch(data: bytes | memoryview, max_rows: int | None = None, bytes_per_row: int = 4,
                       path: str | None = None) -> int:
    """The row count of the file's only record batch, after checking that no buffer claims
    more than ``bytes_per_row`` per row (+64) and the count is at most ``max_rows``."""
    buf = _Buf(data, path)
    footer = _footer(buf)
    if footer.vector(2, 24)[1]:
        raise buf.error("has dictionary batches; a deletion file has none")
    first, count = footer.vector(3, 24)
    if count != 1:
        raise buf.error(f"holds {count} record batches, expected 1")
    offset, meta_len, body_len = buf.get("<q", first), buf.get("<i", first + 8), buf.get("<q", first + 16)
    body = offset + meta_len
    if body_len < 0 or body + body_len > len(data):
        raise buf.error(f"record batch body of {body_len} bytes at {body} runs past the end of the file")
    msg = _message(buf, offset, meta_len)
    batch = msg.table(2) if msg.scalar(1, "<B") == _RECORD_BATCH else None
    if batch is None:
        raise buf.error("the record batch block holds no record batch message")
    rows = batch.scalar(0, "<q")
    limit = _MAX_ROWS if max_rows is None else min(max_rows, _MAX_ROWS)
    if not 0 <= rows <= limit:
        raise buf.error(f"record batch claims {rows} rows, at most {limit} are possible")
    compressed = batch.field(3) != 0
    pos, n = batch.vector(2, 16)
    for k in range(n):
        b_off, b_len = buf.get("<q", pos + 16 * k), buf.get("<q", pos + 16 * k + 8)
        if b_off < 0 or b_len < 0 or b_off + b_len > body_len:
            raise buf.error(f"buffer {k} ({b_off}, {b_len} bytes) lies outside the {body_len}-byte body")
        if compressed and b_len:
            claimed = buf.get("<q", body + b_off) if b_len >= 8 else -2
            if claimed != -1 and not 0 <= claimed <= rows * bytes_per_row + 64:
                raise buf.error(f"buffer {k} claims {claimed} bytes uncompressed for {rows} rows")
    return rows


_INT_TYPE = 2  # Type union tag of ``Int``
_V5 = 4  # MetadataVersion of the messages pyarrow and Lance write
_CODECS = {0: "lz4", 1: "zstd"}  # BodyCompression.codec: LZ4_FRAME, ZSTD


def read_row_ids(data: bytes | memoryview) -> tuple[int, memoryview] | None:
    """(rows, raw little-endian u32 values) of a deletion file in the one shape Lance
    writes (one batch, one non-null ``row_id: uint32`` column, body uncompressed or zstd /
    lz4 per buffer); None for anything else, which the caller reads through pyarrow.
    Only called after ``check_single_batch`` accepted the file."""
    buf = _Buf(data, None)
    footer = _footer(buf)
    schema = footer.table(1)
    if schema is None or schema.scalar(0, "<h") or schema.field(2) or schema.field(3):
        return None  # big endian, metadata or features
    fpos, nfields = schema.vector(1, 4)
    if nfields != 1:
        return None
    field = _Table(buf, fpos + buf.get("<I", fpos))
    name_at = field.field(0)
    if not name_at:
        return None
    name_pos = name_at + buf.get("<I", name_at)
    if buf.get("<I", name_pos) != 6 or bytes(data[name_pos + 4:name_pos + 10]) != b"row_id":
        return None
    if (field.scalar(1, "<B") or field.scalar(2, "<B") != _INT_TYPE or field.field(4)
            or field.vector(5, 4)[1] or field.field(6)):
        return None  # nullable, not an int, dictionary, children or metadata
    int_type = field.table(3)
    if int_type is None or int_type.scalar(0, "<i") != 32 or int_type.scalar(1, "<B"):
        return None
    first, _ = footer.vector(3, 24)
    offset, meta_len = buf.get("<q", first), buf.get("<i", first + 8)
    body = offset + meta_len
    message = _message(buf, offset, meta_len)
    batch = message.table(2)
    if batch is None or message.scalar(0, "<h") != _V5:
        return None
    rows = batch.scalar(0, "<q")
    npos, nnodes = batch.vector(1, 16)
    bpos, nbufs = batch.vector(2, 16)
    if nnodes != 1 or nbufs != 2 or buf.get("<q", npos) != rows or buf.get("<q", npos + 8) != 0:
        return None
    compression = batch.table(3)
    codec = None
    if compression is not None:
        codec = _CODECS.get(compression.scalar(0, "<b"))
        if codec is None or compression.scalar(1, "<b"):
            return None
    v_off, v_len = body + buf.get("<q", bpos + 16), buf.get("<q", bpos + 24)
    raw = memoryview(data)[v_off:v_off + v_len]
    if codec is not None:
        if len(raw) < 8:
            return None
        claimed = int.from_bytes(raw[:8], "little", signed=True)
        if claimed == -1:
            raw = raw[8:]
        elif claimed < 4 * rows:
            return None
        else:
            try:
                out = pa.decompress(raw[8:], decompressed_size=claimed, codec=codec, asbytes=False)
            except (pa.ArrowException, ValueError, OSError):
                return None  # pyarrow's own read names the problem
            raw = memoryview(out)
    if len(raw) < 4 * rows:
        return None
    return rows, raw[:4 * rows]
