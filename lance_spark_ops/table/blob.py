"""Blob columns as pylance 14 stores them, read as pylance reads them.

Two generations:

* blob v1 (datasets of file version 2.0 / 2.1): a ``large_binary`` field with the metadata
  ``lance-encoding:blob = true``. The file column holds one ``(position, size)`` descriptor
  per row; the payload is at that absolute offset of the same data file. pylance's
  ``to_table`` returns the descriptors as ``struct<position: uint64, size: uint64>`` (a null
  row: 2.0 ``{1, 0}``, 2.1 null).
* blob v2 (2.2 datasets, ``lance.blob_field`` or the same metadata): the dataset field is the
  ``lance.blob.v2`` extension ``struct<data, uri[, position, size]>``; the data file stores a
  packed descriptor ``struct<kind: u8, position: u64, size: u64, blob_id: u32, blob_uri: str>``
  which ``to_table`` returns as is. ``kind``: 0 inline (absolute offset in the data file),
  1 packed (slice of sidecar ``data/<file stem>/<blob_id as 32 bits, least significant
  first>.blob``), 2 dedicated (that whole sidecar file), 3 external (``blob_uri``, slice
  ``[position, position + size)`` or the whole object when ``size`` is 0).

``take_blobs`` here returns the payload bytes, as pylance's ``take_blobs(...).readall()``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from lance_spark_ops._pb import file_pb2
from lance_spark_ops.errors import CorruptFileError, UnsupportedError
from lance_spark_ops.file.schema import LanceField, arrow_to_logical_type
from lance_spark_ops.io.storage import ObjectStore

BLOB_KEY = b"lance-encoding:blob"
PACKED_KEY = b"lance-encoding:packed"
V2_EXTENSION = "lance.blob.v2"
V1_DESCRIPTION = pa.struct([("position", pa.uint64()), ("size", pa.uint64())])
V2_DESCRIPTION = pa.struct([
    pa.field("kind", pa.uint8(), False), pa.field("position", pa.uint64(), False),
    pa.field("size", pa.uint64(), False), pa.field("blob_id", pa.uint32(), False),
    pa.field("blob_uri", pa.string(), False),
])
KIND_INLINE, KIND_PACKED, KIND_DEDICATED, KIND_EXTERNAL = 0, 1, 2, 3


def blob_version(field: LanceField) -> int | None:
    """1 or 2 for a blob column (see module doc), None otherwise."""
    ext = field.extension_name or field.metadata.get(b"ARROW:extension:name", b"").decode()
    if ext == V2_EXTENSION:
        return 2
    if field.metadata.get(BLOB_KEY, b"").lower() == b"true" and field.logical_type in (
            "large_binary", "binary"):
        return 1
    return None


def description_field(field: LanceField) -> pa.Field:
    """The Arrow field pylance's ``to_table`` returns for blob column ``field``."""
    if blob_version(field) == 2:
        return pa.field(field.name, V2_DESCRIPTION, field.nullable, {BLOB_KEY: b"true", PACKED_KEY: b"true"})
    return pa.field(field.name, V1_DESCRIPTION, field.nullable, field.metadata or None)


def v1_descriptions(pos: np.ndarray, size: np.ndarray, valid: np.ndarray | None) -> pa.StructArray:
    mask = None if valid is None or valid.all() else pa.array(~valid)
    return pa.StructArray.from_arrays([pa.array(pos, pa.uint64()), pa.array(size, pa.uint64())],
                                      fields=list(V1_DESCRIPTION), mask=mask)


def sidecar_name(blob_id: int) -> str:
    """``<32 bits of blob_id, least significant first>.blob`` (blob id 1 -> ``1000...0.blob``)."""
    return format(blob_id, "032b")[::-1] + ".blob"


def read_payloads(store: ObjectStore, data_rel: str, descriptions: pa.StructArray, version: int,
                  *, allow_external: bool = False) -> list[bytes | None]:
    """Payload bytes of each description (None for a null row)."""
    if version == 1:
        pos = descriptions.field("position").to_numpy(zero_copy_only=False)
        size = descriptions.field("size").to_numpy(zero_copy_only=False)
        valid = descriptions.is_valid().to_numpy(zero_copy_only=False) & ~((pos == 1) & (size == 0))
        want = [(int(p), int(s)) for p, s, v in zip(pos, size, valid, strict=True) if v and s > 0]
        got = iter(store.read_ranges(data_rel, want)) if want else iter(())
        return [None if not v else (bytes(next(got)) if s > 0 else b"")
                for s, v in zip(size, valid, strict=True)]
    rows = descriptions.to_pylist()
    return [None if d is None else _v2_payload(store, data_rel, d, allow_external) for d in rows]


def _v2_payload(store: ObjectStore, data_rel: str, d: dict, allow_external: bool) -> bytes:
    kind, pos, size = d["kind"], d["position"], d["size"]
    stem = data_rel[: -len(".lance")] if data_rel.endswith(".lance") else data_rel
    if kind == KIND_INLINE:
        return store.read_range(data_rel, pos, size) if size else b""
    if kind in (KIND_PACKED, KIND_DEDICATED):
        rel = f"{stem}/{sidecar_name(d['blob_id'])}"
        data = store.read_range(rel, pos, size) if size else b""
        if len(data) != size:
            raise CorruptFileError(f"blob sidecar holds {len(data)} of {size} bytes at {pos}",
                                   path=store.uri(rel))
        return data
    if kind == KIND_EXTERNAL:
        uri = d["blob_uri"]
        if not allow_external:
            raise UnsupportedError(f"blob stored outside the dataset at {uri!r}; pass allow_external=True "
                                   "to read it", path=store.uri(data_rel))
        ext, rel = ObjectStore.for_file(uri)
        return ext.read_range(rel, pos, size) if size else ext.read(rel)
    raise UnsupportedError(f"blob kind {kind} is not known", path=store.uri(data_rel))



def descriptor_lance_field(field: LanceField) -> LanceField:
    """The Lance field a data file stores for blob v2 column ``field``: the packed descriptor
    struct (children with id -1, as pylance 14 writes them), under the dataset field's id."""
    children = [LanceField(-1, c.name, arrow_to_logical_type(c.type), c.nullable, {},
                           encoding=file_pb2.PLAIN if c.name != "blob_uri" else file_pb2.VAR_BINARY)
                for c in V2_DESCRIPTION]
    meta = {BLOB_KEY: b"true", PACKED_KEY: b"true"}
    return LanceField(field.id, field.name, "struct", field.nullable, meta, children)


def blob_data_file(frag: Any, field: LanceField, resolver: Any) -> tuple[ObjectStore, str]:
    """(store, relative path) of the data file holding blob ``field`` in fragment ``frag``."""
    for df in frag.files:
        if field.id in df.stored_field_ids():
            return resolver.data_file(df, resolver.where)
    raise CorruptFileError(f"fragment {frag.id} stores no data for blob column {field.name!r}",
                           path=resolver.where)


class BlobCarrier:
    """Carries blob v2 payloads of rewritten rows into the sidecars of one new data file.

    Inline and packed payloads are appended to one packed sidecar (blob id 1, kind 1);
    a dedicated sidecar is copied whole under a new blob id (kind 2); external blobs and nulls
    keep their descriptors. The new data file's descriptors point at the new sidecars, so the
    old files can go.
    """

    def __init__(self, store: ObjectStore, data_rel: str) -> None:
        self.store = store
        self.stem = data_rel[: -len(".lance")] if data_rel.endswith(".lance") else data_rel
        self.written: list[str] = []
        self._packed: Any = None
        self._packed_pos = 0
        self._next_id = 2

    def carry(self, desc: pa.StructArray, src: tuple[ObjectStore, str]) -> pa.StructArray:
        kind = desc.field("kind").to_numpy(zero_copy_only=False).copy()
        pos = desc.field("position").to_numpy(zero_copy_only=False).copy()
        size = desc.field("size").to_numpy(zero_copy_only=False)
        blob_id = desc.field("blob_id").to_numpy(zero_copy_only=False).copy()
        valid = desc.is_valid().to_numpy(zero_copy_only=False)
        src_store, src_rel = src
        src_stem = src_rel[: -len(".lance")] if src_rel.endswith(".lance") else src_rel
        for i in np.flatnonzero(valid & (kind != KIND_EXTERNAL) & ((size > 0) | (kind != KIND_INLINE))):
            k, p, s = int(kind[i]), int(pos[i]), int(size[i])
            if k == KIND_DEDICATED:
                rel = f"{self.stem}/{sidecar_name(self._next_id)}"
                self.store.write(rel, src_store.read(f"{src_stem}/{sidecar_name(int(blob_id[i]))}"))
                self.written.append(rel)
                blob_id[i], self._next_id = self._next_id, self._next_id + 1
                continue
            if k not in (KIND_INLINE, KIND_PACKED):
                raise UnsupportedError(f"blob kind {k} is not known", path=src_store.uri(src_rel))
            where = src_rel if k == KIND_INLINE else f"{src_stem}/{sidecar_name(int(blob_id[i]))}"
            data = src_store.read_range(where, p, s)
            if len(data) != s:
                raise CorruptFileError(f"blob payload of {s} bytes at {p} is short",
                                       path=src_store.uri(where))
            kind[i], pos[i], blob_id[i] = KIND_PACKED, self._append(data), 1
        arrays = [pa.array(kind, pa.uint8()), pa.array(pos, pa.uint64()), desc.field("size"),
                  pa.array(blob_id, pa.uint32()), desc.field("blob_uri")]
        mask = None if valid.all() else pa.array(~valid)
        return pa.StructArray.from_arrays(arrays, fields=list(V2_DESCRIPTION), mask=mask)

    def _append(self, data: bytes) -> int:
        if self._packed is None:
            rel = f"{self.stem}/{sidecar_name(1)}"
            self._packed = self.store.open_output(rel)
            self.written.append(rel)
        at = self._packed_pos
        self._packed.write(data)
        self._packed_pos += len(data)
        return at

    def close(self) -> None:
        if self._packed is not None:
            self._packed.close()
            self._packed = None

    def abort(self) -> None:
        self.close()
        self.store.delete_many(self.written)
