"""The Lance 2.x file container: footer, offset tables, column metadata (no I/O here).

File tail (all little endian, spec "File Layout"):

    ... data pages ... | column metadata * N | CMO table: (u64 pos, u64 size) * N
    | GBO table: (u64 pos, u64 size) * G | footer (40 bytes)

    footer = u64 column_meta_start, u64 cmo_table_pos, u64 gbo_table_pos,
             u32 num_global_buffers, u32 num_columns, u16 major, u16 minor, b"LANC"

Version bytes: 2.0 -> (0, 3); 2.1 -> (2, 1); 2.2 -> (2, 2).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
from google.protobuf.message import DecodeError

from lance_spark_ops._pb import file2_pb2
from lance_spark_ops.encoding.any_encoding import unpack_any as unpack_any  # re-exported
from lance_spark_ops.errors import CorruptFileError, UnsupportedError

MAGIC = b"LANC"
FOOTER_SIZE = 40
_FOOTER = struct.Struct("<QQQIIHH4s")

VERSION_BY_BYTES = {(0, 3): "2.0", (2, 1): "2.1", (2, 2): "2.2"}
BYTES_BY_VERSION = {v: k for k, v in VERSION_BY_BYTES.items()}


@dataclass(frozen=True)
class Footer:
    column_meta_start: int
    cmo_table_pos: int
    gbo_table_pos: int
    num_global_buffers: int
    num_columns: int
    major: int
    minor: int

    @property
    def version(self) -> str:
        return VERSION_BY_BYTES[(self.major, self.minor)]

    def pack(self) -> bytes:
        return _FOOTER.pack(
            self.column_meta_start,
            self.cmo_table_pos,
            self.gbo_table_pos,
            self.num_global_buffers,
            self.num_columns,
            self.major,
            self.minor,
            MAGIC,
        )


def parse_footer(tail: bytes, file_size: int, path: str) -> Footer:
    """Parse and validate the 40-byte footer (``tail`` ends at the end of the file)."""
    if file_size < FOOTER_SIZE or len(tail) < FOOTER_SIZE:
        raise CorruptFileError(f"file is {file_size} bytes, too small for a Lance footer", path=path)
    cms, cmo, gbo, ngb, ncol, major, minor, magic = _FOOTER.unpack(bytes(tail[-FOOTER_SIZE:]))
    if magic != MAGIC:
        raise CorruptFileError(f"bad magic {magic!r} (expected {MAGIC!r}); not a Lance file", path=path)
    if (major, minor) not in VERSION_BY_BYTES:
        if (major, minor) in ((0, 1), (0, 2)):
            raise UnsupportedError("legacy Lance file format v1 (0.1) is not supported", path=path)
        raise UnsupportedError(f"unknown Lance file version {major}.{minor}", path=path)
    meta_end = file_size - FOOTER_SIZE
    if not (cms <= cmo <= gbo <= meta_end):
        raise CorruptFileError(
            f"footer offsets out of order or outside the file (column meta {cms}, CMO table {cmo}, "
            f"GBO table {gbo}, metadata end {meta_end})",
            path=path,
        )
    if cmo + 16 * ncol > gbo or gbo + 16 * ngb > meta_end:
        raise CorruptFileError(
            f"offset tables overflow: {ncol} columns / {ngb} global buffers do not fit", path=path
        )
    return Footer(cms, cmo, gbo, ngb, ncol, major, minor)


_SMALL_TABLE = 16  # offset tables up to this many entries are checked in Python


def parse_offset_table(
    data: bytes | memoryview, count: int, file_size: int, what: str, path: str
) -> np.ndarray:
    """(count, 2) array of (position, size), each range checked against the file."""
    table = np.frombuffer(data, dtype="<u8", count=2 * count).reshape(count, 2)
    if count <= _SMALL_TABLE:  # Python ints (no wrap-around): cheaper than numpy on a few rows
        flat = table.ravel().tolist()
        bad = next((i for i in range(count) if flat[2 * i] + flat[2 * i + 1] > file_size), None)
    else:
        ends = table[:, 0] + table[:, 1]
        over = (ends > file_size) | (ends < table[:, 0])
        bad = int(np.argmax(over)) if over.any() else None
    if bad is not None:
        raise CorruptFileError(
            f"{what} {bad} at {int(table[bad, 0])} size {int(table[bad, 1])} lies outside the "
            f"file ({file_size} bytes)",
            path=path,
        )
    return table


def parse_column_metadata(
    data: bytes | memoryview, index: int, file_size: int, path: str
) -> file2_pb2.ColumnMetadata:
    """Decode one column's metadata and check every page buffer lies inside the file."""
    meta = file2_pb2.ColumnMetadata()
    try:
        meta.ParseFromString(bytes(data))
    except DecodeError as e:
        raise CorruptFileError(f"column {index}: metadata protobuf does not parse ({e})", path=path) from e
    for p, page in enumerate(meta.pages):
        if len(page.buffer_offsets) != len(page.buffer_sizes):
            raise CorruptFileError(
                f"column {index} page {p}: {len(page.buffer_offsets)} buffer offsets but "
                f"{len(page.buffer_sizes)} sizes",
                path=path,
            )
        for b, (off, size) in enumerate(zip(page.buffer_offsets, page.buffer_sizes, strict=True)):
            if off + size > file_size:
                raise CorruptFileError(
                    f"column {index} page {p} buffer {b}: bytes {off}..{off + size} outside the file "
                    f"({file_size} bytes)",
                    path=path,
                )
    return meta


