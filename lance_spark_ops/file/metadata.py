"""Load a data file's tail: footer, offset tables, column metadata and the schema.

One ranged read of the last ``TAIL_READ`` bytes covers the metadata of nearly every file;
a second read fetches the rest when the metadata is larger (spec "Reading Strategy"). A
small file (``WHOLE_FILE_READ``) is read whole by that one request; when its size and every
byte it interprets (schema, column metadata, offset tables, footer) equal those of a small
file opened before, it is that file's twin and shares its parsed metadata (``twin_of``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from google.protobuf.message import DecodeError

from lance_spark_ops import cache
from lance_spark_ops._pb import file2_pb2, file_pb2
from lance_spark_ops.errors import CorruptFileError
from lance_spark_ops.file.container import (
    FOOTER_SIZE,
    Footer,
    parse_column_metadata,
    parse_footer,
    parse_offset_table,
)
from lance_spark_ops.file.schema import LanceSchema, schema_from_pb
from lance_spark_ops.io.storage import ObjectStore

TAIL_READ = 64 * 1024
# A file up to this size is read whole with its tail: its pages are then served from memory
# (``FileMetadata.cached_ranges``), one request per file instead of one per page, which is
# most of a small file's read cost (datasets of many small fragments).
WHOLE_FILE_READ = 512 * 1024


@dataclass
class FileMetadata:
    """Everything the reader needs before touching data pages."""

    path: str
    size: int
    footer: Footer
    schema: LanceSchema
    num_rows: int
    column_table: np.ndarray  # (num_columns, 2): position, size
    global_buffers: np.ndarray  # (num_global_buffers, 2)
    _tail: memoryview
    _tail_start: int
    _columns: dict[int, file2_pb2.ColumnMetadata] = field(default_factory=dict)
    arrow_schema: pa.Schema | None = None  # schema.to_arrow(), shared with other files of this schema

    def shares_layout_with(self, other: FileMetadata) -> bool:
        """Whether both files have the same size and metadata bytes (twins): same columns, pages,
        page buffer positions and schema object, so whatever is derived from one's metadata
        (page decoders, row checks) holds for the other's."""
        return self._columns is other._columns

    def twin(self, path: str, tail: memoryview) -> FileMetadata:
        """The metadata of another file of this size whose bytes ``tail`` (the whole file) hold
        the same metadata bytes: everything parsed is shared, the bytes are its own."""
        out = object.__new__(FileMetadata)
        out.__dict__.update(self.__dict__)
        out.path, out._tail = path, tail
        return out

    @property
    def version(self) -> str:
        return self.footer.version

    @property
    def num_columns(self) -> int:
        return self.footer.num_columns

    def cached_ranges(self, ranges: list[tuple[int, int]]) -> list[memoryview] | None:
        """Views of absolute (offset, size) ranges when the bytes read with the tail hold them
        all (small files are read whole), else None."""
        start, end = self._tail_start, self._tail_start + len(self._tail)
        out = []
        for off, size in ranges:
            if off < start or size < 0 or off + size > end:
                return None
            out.append(self._tail[off - start:off - start + size])
        return out

    def column(self, index: int) -> file2_pb2.ColumnMetadata:
        """Parsed metadata of one column (cached)."""
        if index not in self._columns:
            if not 0 <= index < self.num_columns:
                raise CorruptFileError(
                    f"column {index} requested but the file has {self.num_columns} columns", path=self.path
                )
            pos, size = (int(x) for x in self.column_table[index])
            raw = self._tail[pos - self._tail_start : pos - self._tail_start + size]
            self._columns[index] = _column_metadata(raw, index, self.size, self.path)
        return self._columns[index]


# Parsed column metadata by its bytes: the small files of one writer usually hold byte-identical
# column metadata (same page layout, lengths, buffer positions), and parsing and checking it is
# a good part of opening such a file. Shared, read-only; kept with the end of its last buffer,
# checked against each file's size as ``parse_column_metadata`` would.
# Larger metadata (many pages, over 4 KiB) is parsed every time.
_COLUMN_METAS = cache.region("file.column_metadata", max_entries=256, max_entry_bytes=cache.parsed_size(4096))


def _column_metadata(raw: memoryview, index: int, file_size: int, path: str) -> file2_pb2.ColumnMetadata:
    key = bytes(raw)
    hit = _COLUMN_METAS.get(key)
    if hit is not None and hit[1] <= file_size:
        return hit[0]
    meta = parse_column_metadata(key, index, file_size, path)
    if cache.parsed_size(len(key)) <= _COLUMN_METAS.max_entry_bytes:
        end = max((off + size for page in meta.pages
                   for off, size in zip(page.buffer_offsets, page.buffer_sizes, strict=True)), default=0)
        _COLUMN_METAS.put(key, (meta, end), cache.parsed_size(len(key)))
    return meta


# Small files read whole, by (size, column metadata start): (first byte interpreted, the bytes
# from there to the end, their parsed metadata). A file of that size whose bytes from there on
# are equal is parsed to the same metadata: the small files of one writer (a streaming ingest's
# fragments) nearly all are, and then opening one is a read and a comparison.
_TWINS = cache.region("file.twins", max_entries=64)


def load_metadata(store: ObjectStore, rel: str, tail_read: tuple[int, bytes] | None = None) -> FileMetadata:
    """The file's metadata from its tail (``tail_read``: that tail, (size, bytes), already read
    by ``store.read_tail(rel, TAIL_READ, WHOLE_FILE_READ)``)."""
    path = store.uri(rel)
    size, tail = tail_read if tail_read is not None else store.read_tail(rel, TAIL_READ, WHOLE_FILE_READ)
    if size < FOOTER_SIZE:
        raise CorruptFileError(f"file is {size} bytes, too small for a Lance footer", path=path)
    tail_start = size - len(tail)
    whole = tail_start == 0 and size <= WHOLE_FILE_READ
    if whole:
        key = (size, int.from_bytes(tail[size - FOOTER_SIZE:size - FOOTER_SIZE + 8], "little"))
        hit = _TWINS.get(key)
        if hit is not None and tail[hit[0]:] == hit[1]:
            return hit[2].twin(path, memoryview(tail))
    meta = _parse_metadata(store, rel, path, size, tail, tail_start)
    if whole:
        # every byte the parse looked at: footer and tables (from the column metadata start),
        # the column metadata and the schema (global buffer 0)
        first = min([meta.footer.column_meta_start, int(meta.global_buffers[0, 0]),
                     *meta.column_table[:, 0].tolist()])
        _TWINS.put(key, (first, bytes(tail[first:]), meta), len(tail) + cache.parsed_size(size - first))
    return meta


def _parse_metadata(store: ObjectStore, rel: str, path: str, size: int, tail: bytes, tail_start: int
                    ) -> FileMetadata:
    if tail_start != (0 if size <= WHOLE_FILE_READ else max(0, size - TAIL_READ)):
        raise CorruptFileError(f"short read of the file's last {size - tail_start} bytes", path=path)
    footer = parse_footer(tail, size, path)
    if footer.column_meta_start < tail_start:
        extra = store.read_range(rel, footer.column_meta_start, tail_start - footer.column_meta_start)
        tail = extra + tail
        tail_start = footer.column_meta_start
    view = memoryview(tail)

    def region(pos: int, length: int) -> memoryview:
        return view[pos - tail_start : pos - tail_start + length]

    cols = parse_offset_table(
        region(footer.cmo_table_pos, 16 * footer.num_columns),
        footer.num_columns,
        size,
        "column metadata",
        path,
    )
    gbs = parse_offset_table(
        region(footer.gbo_table_pos, 16 * footer.num_global_buffers),
        footer.num_global_buffers,
        size,
        "global buffer",
        path,
    )
    if footer.num_global_buffers < 1:
        raise CorruptFileError("no global buffers: the schema (global buffer 0) is missing", path=path)
    gb_pos, gb_size = (int(x) for x in gbs[0])
    if gb_pos >= tail_start:
        schema_bytes = bytes(region(gb_pos, gb_size))
    else:
        schema_bytes = store.read_range(rel, gb_pos, gb_size)
    if len(cols) and min(cols[:, 0].tolist()) < tail_start:
        raise CorruptFileError("column metadata lies before the metadata section", path=path)
    schema, arrow_schema, num_rows = _described(schema_bytes, path)
    return FileMetadata(
        path=path,
        size=size,
        footer=footer,
        schema=schema,
        num_rows=num_rows,
        column_table=cols,
        global_buffers=gbs,
        _tail=view,
        _tail_start=tail_start,
        arrow_schema=arrow_schema,
    )


# Parsed schemas by their serialized protobuf: the files of one dataset nearly always share one
# schema, and rebuilding the tree and its Arrow schema per file costs more than reading a small
# file's tail. Only successes are kept; the objects are shared, and nothing mutates them.
_SCHEMAS = cache.region("file.schemas", max_entries=64)


# Whole file descriptors (schema and row count) by their bytes: small files of one schema and
# row count share these bytes, and skip the descriptor's parse and the schema key's encoding.
_DESCRIPTORS = cache.region("file.descriptors", max_entries=64)


def _described(raw: bytes, path: str) -> tuple[LanceSchema, pa.Schema, int]:
    """(schema, Arrow schema, rows) of global buffer 0, a ``FileDescriptor``."""
    hit = _DESCRIPTORS.get(raw)
    if hit is not None:
        return hit
    descriptor = file_pb2.FileDescriptor()
    try:
        descriptor.ParseFromString(raw)
    except DecodeError as e:
        raise CorruptFileError(f"schema (global buffer 0) does not parse: {e}", path=path) from e
    hit = (*_parsed_schema(descriptor, path), int(descriptor.length))
    _DESCRIPTORS.put(raw, hit, len(raw) + cache.parsed_size(len(raw)))
    return hit


def _parsed_schema(descriptor: file_pb2.FileDescriptor, path: str) -> tuple[LanceSchema, pa.Schema]:
    key = descriptor.schema.SerializeToString(deterministic=True)
    hit = _SCHEMAS.get(key)
    if hit is not None:
        return hit
    try:
        schema = schema_from_pb(descriptor.schema.fields, dict(descriptor.schema.metadata))
    except Exception as e:  # SchemaError carries no path yet
        raise CorruptFileError(f"schema: {e}", path=path) from e
    hit = (schema, schema.to_arrow())
    _SCHEMAS.put(key, hit, len(key) + cache.parsed_size(len(key)))
    return hit
