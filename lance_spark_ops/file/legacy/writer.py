"""``LegacyFileWriter``: write a legacy (file format 0.1) data file as pylance 14 writes one.

Rows are grouped into batches of ``max_rows_per_group`` (pylance's default 1024); each
batch writes one page per field, fields in schema order, depth first. ``close`` writes the
page table (i64 position, length per field id ``min..max`` and batch; (0, 0) where a field
has no page, e.g. structs), then each dictionary field's values, then the schema as a
``Manifest`` protobuf (its dictionary fields pointing at those values), then the
``Metadata`` protobuf (batch offsets, page table and manifest positions; no statistics) and
the 16-byte footer ``i64 metadata position, u16 0, u16 2, "LANC"``. Dictionary fields need
one dictionary for the whole file: every batch's dictionary must equal the first one (or
the field's ``dictionary`` given in the Lance schema).
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pyarrow as pa

from lance_spark_ops._pb import table_pb2
from lance_spark_ops.encoding.v0_1.encode import LegacyPage, dictionary_values_page, encode_field, place
from lance_spark_ops.errors import InvalidInputError, SchemaError, UnsupportedError
from lance_spark_ops.file.legacy.container import FOOTER, MAGIC
from lance_spark_ops.file.schema import LanceSchema, schema_from_arrow, schema_to_pb
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.pb_wire import encode_varint

DEFAULT_ROWS_PER_GROUP = 1024
LEGACY_MINOR = 2  # what pylance 14 writes in the footer and records in DataFile
_U32 = struct.Struct("<I")


def metadata_bytes(manifest_pos: int, batch_offsets: list[int], page_table_pos: int) -> bytes:
    """A ``lance.file.Metadata`` protobuf (fields 1, 2 packed, 3)."""
    packed = b"".join(encode_varint(v) for v in batch_offsets)
    return (b"\x08" + encode_varint(manifest_pos) + b"\x12" + encode_varint(len(packed)) + packed
            + b"\x18" + encode_varint(page_table_pos))


class LegacyFileWriter:
    """Write rows into one v1 file; ``close`` returns (rows, file size)."""

    def __init__(self, rel: str, schema: pa.Schema, *, store: ObjectStore,
                 lance_schema: LanceSchema | None = None, max_rows_per_group: int = DEFAULT_ROWS_PER_GROUP,
                 **_: Any) -> None:
        if max_rows_per_group <= 0:
            raise InvalidInputError(f"max_rows_per_group must be positive, got {max_rows_per_group}")
        self.schema = schema
        self.lance_schema = lance_schema if lance_schema is not None else schema_from_arrow(schema)
        self.store, self.rel = store, rel
        self.group = max_rows_per_group
        self._out = store.open_output(rel)
        self._pos = 0
        self._batch_offsets = [0]
        self._pages: dict[tuple[int, int], tuple[int, int]] = {}
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        self._result: tuple[int, int] | None = None
        self._dicts: dict[int, pa.Array] = {f.id: f.dictionary for f in self.lance_schema.walk()
                                            if f.dictionary is not None}

    @property
    def version(self) -> str:
        return "0.1"

    @property
    def dictionaries(self) -> dict[int, pa.Array]:
        """Field id -> dictionary values written (a legacy manifest must carry them too)."""
        return dict(self._dicts)

    @property
    def rows_written(self) -> int:
        return self._batch_offsets[-1] + self._pending_rows

    @property
    def bytes_pending(self) -> int:
        return self._pos

    def can_copy_pages_from(self, reader: Any) -> str | None:
        return "legacy files are always re-encoded"

    def write(self, data: pa.Table | pa.RecordBatch) -> None:
        if self._result is not None:
            raise InvalidInputError("write() after close()", path=self.store.uri(self.rel))
        batches = data.to_batches() if isinstance(data, pa.Table) else [data]
        for b in batches:
            if b.schema.names != self.schema.names:
                raise SchemaError(f"batch columns {b.schema.names} differ from the file's "
                                  f"{self.schema.names}",
                                  path=self.store.uri(self.rel))
            self._pending.append(b)
            self._pending_rows += b.num_rows
            while self._pending_rows >= self.group:
                self._flush(self.group)

    def _flush(self, rows: int) -> None:
        table = pa.Table.from_batches(self._pending, schema=self._pending[0].schema)
        head, rest = table.slice(0, rows).combine_chunks(), table.slice(rows)  # slices: no copy of the rest
        self._pending = rest.to_batches() if rest.num_rows else []
        self._pending_rows = rest.num_rows
        batch_id = len(self._batch_offsets) - 1
        for field, column in zip(self.lance_schema.fields, head.columns, strict=True):
            arr = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
            self._check_dictionaries(field, arr)
            for page in encode_field(field, arr):
                self._write_page(page, batch_id)
        self._batch_offsets.append(self._batch_offsets[-1] + rows)

    def _check_dictionaries(self, field: Any, arr: pa.Array) -> None:
        if pa.types.is_dictionary(arr.type):
            known = self._dicts.setdefault(field.id, arr.dictionary)
            if not known.equals(arr.dictionary):
                raise UnsupportedError(f"field {field.name!r}: a legacy file holds one dictionary per field; "
                                       "this batch has another", path=self.store.uri(self.rel))
        elif pa.types.is_struct(arr.type):
            for child in field.children:
                self._check_dictionaries(child, arr.field(child.name))

    def _write_page(self, page: LegacyPage, batch_id: int) -> None:
        data, position = place(page, self._pos)
        self._out.write(data)
        self._pos += len(data)
        self._pages[(page.field_id, batch_id)] = (position, page.length)

    def close(self) -> tuple[int, int]:
        """Write the page table, dictionaries, schema, metadata and footer (once)."""
        if self._result is not None:
            return self._result
        try:
            self._result = self._finish()
        except BaseException:
            self.abort()
            raise
        return self._result

    def _finish(self) -> tuple[int, int]:
        if self._pending_rows:
            self._flush(self._pending_rows)
        ids = [f.id for f in self.lance_schema.walk()]
        batches = len(self._batch_offsets) - 1
        table = np.zeros((max(ids) - min(ids) + 1, batches, 2), dtype="<i8")
        for (fid, b), (pos, length) in self._pages.items():
            table[fid - min(ids), b] = (pos, length)
        table_pos = self._pos
        self._emit(table.tobytes())
        placed = {}
        for fid, values in self._dicts.items():
            data, position = place(dictionary_values_page(fid, values), self._pos)
            self._emit(data)
            placed[fid] = (position, len(values))
        manifest = table_pb2.Manifest(fields=schema_to_pb(self.lance_schema))
        for k, v in self.lance_schema.metadata.items():
            manifest.schema_metadata[k.decode()] = v
        for f in manifest.fields:
            if f.id in placed:
                f.dictionary.offset, f.dictionary.length = placed[f.id]
        manifest.data_format.file_format, manifest.data_format.version = "lance", "0.1"
        manifest_pos = self._pos
        body = manifest.SerializeToString()
        self._emit(_U32.pack(len(body)) + body)
        meta_pos = self._pos
        meta = metadata_bytes(manifest_pos, self._batch_offsets, table_pos)
        self._emit(_U32.pack(len(meta)) + meta)
        self._emit(FOOTER.pack(meta_pos, 0, LEGACY_MINOR, MAGIC))
        self._out.close()
        return self._batch_offsets[-1], self._pos

    def _emit(self, data: bytes) -> None:
        self._out.write(data)
        self._pos += len(data)

    def abort(self) -> None:
        try:
            getattr(self._out, "discard", self._out.close)()  # an upload is aborted, not completed
        finally:
            self.store.delete(self.rel)

    def __enter__(self) -> LegacyFileWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
