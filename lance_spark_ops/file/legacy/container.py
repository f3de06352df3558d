"""The legacy (file format 0.1, "v1") Lance container: footer, metadata, schema, page table.

File layout (all little endian), as pylance 14 writes it with ``data_storage_version="legacy"``::

    pages of batch 0 (field by field) | pages of batch 1 | ...
    | page table: i64 (position, length) per (field id, batch), field ids min..max of the schema
    | dictionary values | u32 len + Manifest protobuf (schema; dictionary offset/length per field)
    | u32 len + Metadata protobuf | i64 metadata position, u16 major (0), u16 minor (1|2), "LANC"

Rows are written in batches (``max_rows_per_group``); every field has one page per batch whose
``length`` counts rows (list offsets: rows + 1; null columns: rows, no bytes). Structs have no
pages of their own (page table entry (0, 0)). ``Metadata``: 1 manifest_position, 2
batch_offsets (packed int32, cumulative rows, starting at 0), 3 page_table_position,
5 statistics (per-batch min/max/null counts; not needed to read).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
from google.protobuf.message import DecodeError

from lance_spark_ops._pb import file_pb2, table_pb2
from lance_spark_ops.errors import CorruptFileError, UnsupportedError
from lance_spark_ops.file.schema import LanceSchema, schema_from_pb
from lance_spark_ops.io.storage import ObjectStore

MAGIC = b"LANC"
FOOTER = struct.Struct("<qHH4s")
FOOTER_SIZE = FOOTER.size  # 16
LEGACY_MINOR_VERSIONS = (1, 2)  # (0, 1) and (0, 2) are the v1 container
TAIL_READ = 64 * 1024
_U32 = struct.Struct("<I")


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        b = data[pos]
        pos += 1
        out |= (b & 0x7F) << shift
        if b < 0x80:
            return out, pos
        shift += 7


def parse_metadata(data: bytes) -> tuple[int, list[int], int]:
    """(manifest_position, batch_offsets, page_table_position) of a ``lance.file.Metadata``.

    Hand-decoded (our generated protos hold no v1 ``Metadata``); unknown fields are skipped as
    protobuf requires, field 5 (statistics) included.
    """
    manifest_pos = page_table_pos = 0
    offsets: list[int] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            if number == 1:
                manifest_pos = value
            elif number == 2:
                offsets.append(value - (1 << 64) if value >= 1 << 63 else value)
            elif number == 3:
                page_table_pos = value
        elif wire == 2:
            n, pos = _varint(data, pos)
            if pos + n > len(data):
                raise ValueError("truncated field")
            if number == 2:
                end, p = pos + n, pos
                while p < end:
                    value, p = _varint(data, p)
                    offsets.append(value - (1 << 64) if value >= 1 << 63 else value)
            pos += n
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"wire type {wire}")
    return manifest_pos, offsets, page_table_pos


@dataclass
class LegacyFileMetadata:
    """Everything needed before touching the pages of a v1 file."""

    path: str
    size: int
    minor: int
    schema: LanceSchema
    batch_offsets: np.ndarray  # cumulative rows, len = batches + 1
    pages: dict[int, np.ndarray]  # field id -> (batches, 2) int64 (position, length)
    dictionaries: dict[int, tuple[int, int]]  # field id -> (position, length) of its values

    @property
    def version(self) -> str:
        return "0.1"

    @property
    def num_rows(self) -> int:
        return int(self.batch_offsets[-1]) if len(self.batch_offsets) else 0

    @property
    def num_batches(self) -> int:
        return max(len(self.batch_offsets) - 1, 0)

    def describe(self) -> str:
        """A few lines for ``jobs/inspect_file.py``: batches and each field's pages."""
        lines = [f"{self.path}: legacy Lance file (0.{self.minor}), {self.num_rows} rows in "
                 f"{self.num_batches} batches, {self.size} bytes"]
        for f in self.schema.walk():
            table = self.pages.get(f.id)
            rows = [] if table is None else table[:, 1].tolist()
            lines.append(f"  field {f.id} {f.name!r} ({f.logical_type}): page lengths {rows[:8]}"
                         + (" ..." if len(rows) > 8 else ""))
        return "\n".join(lines)

    def page(self, field_id: int, batch: int) -> tuple[int, int]:
        table = self.pages.get(field_id)
        if table is None:
            raise CorruptFileError(f"field id {field_id} has no page table entries", path=self.path)
        pos, length = table[batch]
        return int(pos), int(length)


def is_legacy_footer(tail: bytes) -> bool:
    """True when the last 16 bytes are a v1 footer (major 0, minor 1 or 2)."""
    if len(tail) < FOOTER_SIZE:
        return False
    _pos, major, minor, magic = FOOTER.unpack_from(tail, len(tail) - FOOTER_SIZE)
    return magic == MAGIC and major == 0 and minor in LEGACY_MINOR_VERSIONS


def _section(store: ObjectStore, rel: str, tail: bytes, tail_start: int, pos: int, limit: int,
             what: str, path: str) -> bytes:
    """The u32-length-prefixed section at ``pos`` (it must end at or before ``limit``)."""
    if pos < 0 or pos + 4 > limit:
        raise CorruptFileError(f"{what} at {pos} lies outside the file", path=path)
    head = tail[pos - tail_start:pos - tail_start + 4] if pos >= tail_start else store.read_range(rel, pos, 4)
    (n,) = _U32.unpack(bytes(head))
    if pos + 4 + n > limit:
        raise CorruptFileError(f"{what} at {pos} claims {n} bytes, past byte {limit}", path=path)
    if pos >= tail_start:
        return bytes(tail[pos + 4 - tail_start:pos + 4 + n - tail_start])
    return store.read_range(rel, pos + 4, n)


def load_legacy_metadata(store: ObjectStore, rel: str) -> LegacyFileMetadata:
    """Read and check the footer, metadata, embedded schema and page table of a v1 file."""
    path = store.uri(rel)
    size = store.size(rel)
    if size < FOOTER_SIZE:
        raise CorruptFileError(f"file is {size} bytes, too small for a Lance footer", path=path)
    tail_start = max(0, size - TAIL_READ)
    tail = store.read_range(rel, tail_start, size - tail_start)
    meta_pos, major, minor, magic = FOOTER.unpack_from(tail, len(tail) - FOOTER_SIZE)
    if magic != MAGIC:
        raise CorruptFileError(f"bad magic {magic!r} (expected {MAGIC!r}); not a Lance file", path=path)
    if major != 0 or minor not in LEGACY_MINOR_VERSIONS:
        raise UnsupportedError(f"not a legacy (v1) Lance file: version {major}.{minor}", path=path)
    end = size - FOOTER_SIZE
    try:
        manifest_pos, offsets, table_pos = parse_metadata(
            _section(store, rel, tail, tail_start, meta_pos, end, "metadata", path))
    except ValueError as e:
        raise CorruptFileError(f"metadata protobuf does not parse ({e})", path=path) from e
    manifest = table_pb2.Manifest()
    try:
        body = _section(store, rel, tail, tail_start, manifest_pos, meta_pos, "schema", path)
        manifest.ParseFromString(body)
    except DecodeError as e:
        raise CorruptFileError(f"embedded manifest (schema) does not parse ({e})", path=path) from e
    schema, dictionaries = _schema(manifest, path)
    batch_offsets = np.asarray(offsets or [0], dtype=np.int64)
    if batch_offsets[0] != 0 or (np.diff(batch_offsets) < 0).any():
        raise CorruptFileError(f"batch offsets {batch_offsets.tolist()[:8]}... are not ascending from 0",
                               path=path)
    pages = _page_table(store, rel, schema, len(batch_offsets) - 1, table_pos, manifest_pos, path)
    return LegacyFileMetadata(path, size, minor, schema, batch_offsets, pages, dictionaries)


def _schema(manifest: table_pb2.Manifest, path: str) -> tuple[LanceSchema, dict[int, tuple[int, int]]]:
    try:
        schema = schema_from_pb(list(manifest.fields), dict(manifest.schema_metadata))
    except Exception as e:  # SchemaError carries no path
        raise CorruptFileError(f"schema: {e}", path=path) from e
    dictionaries = {f.id: (int(f.dictionary.offset), int(f.dictionary.length))
                    for f in manifest.fields if f.encoding == file_pb2.DICTIONARY}
    return schema, dictionaries


def _page_table(store: ObjectStore, rel: str, schema: LanceSchema, batches: int, pos: int, limit: int,
                path: str) -> dict[int, np.ndarray]:
    ids = [f.id for f in schema.walk()]
    if not ids or batches == 0:
        return {i: np.zeros((0, 2), np.int64) for i in ids}
    lo, hi = min(ids), max(ids)
    nbytes = (hi - lo + 1) * batches * 16
    if pos < 0 or pos + nbytes > limit:
        raise CorruptFileError(f"page table at {pos} ({nbytes} bytes) overlaps the schema at {limit}",
                               path=path)
    table = np.frombuffer(store.read_range(rel, pos, nbytes), dtype="<i8").reshape(hi - lo + 1, batches, 2)
    if (table < 0).any() or (table[:, :, 0] > limit).any():
        raise CorruptFileError("page table entry points outside the file", path=path)
    return {i: table[i - lo] for i in ids}
