"""Write Arrow data as a Lance dataset version (``write_dataset``) and delete rows by offset
(``delete_rows``), both committed through ``table.commit``.

``write_dataset`` splits the rows into data files of at most ``max_rows_per_file`` rows,
written by our ``LanceFileWriter`` as ``data/{24 binary digits}{26 hex digits}.lance`` (the
name pylance gives: the 16 bytes of a uuid4, the first 3 as bits). Each becomes one fragment
whose ``DataFile`` lists, per file column, the dataset field it holds - every field in
pre-order for file version 2.0 (structs and lists have columns), only leaves (and packed
structs) for 2.1+ - with column indices ``0..n-1`` and file version ``(2, 0)``, ``(2, 1)`` or
``(2, 2)``. Example: ``{a: int64, st: struct<x: int32, y: string>}`` records fields
``[0, 1, 2, 3]`` in 2.0 and ``[0, 2, 3]`` in 2.1. Then one Append or Overwrite is committed;
if the commit fails for sure, the data files are deleted again.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa

from lance_spark_ops.errors import (
    CommitStateUnknown,
    InvalidInputError,
    NotFoundError,
    SchemaError,
    UnsupportedError,
)
from lance_spark_ops.file.legacy.writer import LEGACY_MINOR, LegacyFileWriter
from lance_spark_ops.file.schema import LanceField, LanceSchema, schema_from_arrow
from lance_spark_ops.file.writer import DEFAULT_PAGE_BYTES, LanceFileWriter
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.table.commit.commit import DEFAULT_MAX_RETRIES, commit_transaction
from lance_spark_ops.table.commit.handler import CommitHandler, ExternalManifestStore
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.deletion import deleted_offsets, write_deletion_file
from lance_spark_ops.table.format.fragment import DataFile, DataFragment
from lance_spark_ops.table.format.transaction import Append, Delete, Overwrite
from lance_spark_ops.table.paths import DATA_DIR, deletion_file_path
from lance_spark_ops.table.scan import column_owners

__all__ = ["data_file_name", "delete_rows", "write_dataset", "write_fragments"]

MODES = ("create", "append", "overwrite")
VERSIONS = ("0.1", "2.0", "2.1", "2.2")
DEFAULT_MAX_ROWS_PER_FILE = 1024 * 1024

Data = pa.Table | pa.RecordBatch | pa.RecordBatchReader | Iterable[pa.RecordBatch]


def data_file_name() -> str:
    """``{24 bits}{26 hex}.lance`` from a uuid4, as pylance names data files."""
    raw = uuidlib.uuid4().bytes
    return "".join(f"{b:08b}" for b in raw[:3]) + raw[3:].hex() + ".lance"


def _batches(data: Data, schema: pa.Schema | None) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    if isinstance(data, pa.Table):
        return data.schema, iter(data.to_batches())
    if isinstance(data, pa.RecordBatch):
        return data.schema, iter([data])
    if isinstance(data, pa.RecordBatchReader):
        return data.schema, iter(data)
    it = iter(data)
    if schema is not None:
        return schema, it
    try:
        first = next(it)
    except StopIteration:
        raise InvalidInputError("no batches and no schema: cannot tell the dataset's schema") from None

    def chain() -> Iterator[pa.RecordBatch]:
        yield first
        yield from it

    return first.schema, chain()


def conform_batch(batch: pa.RecordBatch, target: pa.Schema, where: str, *, cast: bool = False,
                  source: str = "data") -> pa.RecordBatch:
    """``batch`` with ``target``'s column order and field metadata. Same types required, or
    with ``cast`` converted by safe casts only (a Spark DataFrame's types differ by design)."""
    if batch.schema.equals(target, check_metadata=False):
        return pa.RecordBatch.from_arrays(batch.columns, schema=target)
    names = batch.schema.names
    missing = [n for n in target.names if n not in names]
    extra = [n for n in names if n not in target.names]
    if missing or extra:
        raise SchemaError(f"{source} columns {names} do not match the dataset's {target.names} "
                          f"(missing {missing}, extra {extra})", path=where)
    cols = []
    for f in target:
        col = batch.column(names.index(f.name))
        if col.type != f.type and not cast:
            raise SchemaError(f"column {f.name!r} is {col.type}, the dataset stores {f.type}", path=where)
        if col.type != f.type:
            try:
                col = col.cast(f.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise SchemaError(f"column {f.name!r}: {col.type} from {source} cannot be stored as the "
                                  f"dataset's {f.type} ({e})", path=where) from None
        cols.append(col)
    return pa.RecordBatch.from_arrays(cols, schema=target)


def appended_schema(dataset: LanceSchema, data: pa.Schema, where: str) -> LanceSchema:
    """The part of ``dataset``'s schema that appended ``data`` holds (ids kept), as pylance
    accepts it: nullable fields (or struct children) may be left out and read as null; a
    left-out non-nullable field or a column the dataset lacks is a SchemaError."""

    def pick(fields: list[LanceField], present: dict[str, pa.Field], path: str) -> list[LanceField]:
        known = {f.name for f in fields}
        extra = [n for n in present if n not in known]
        if extra:
            raise SchemaError(f"data has column(s) {[path + n for n in extra]} the dataset does not have",
                              path=where)
        out = []
        for f in fields:
            given = present.get(f.name)
            if given is None:
                if not f.nullable:
                    raise SchemaError(f"non-nullable column {path + f.name!r} is missing from the appended "
                                      "data", path=where)
                continue
            if f.logical_type == "struct" and pa.types.is_struct(given.type) and not _packed(f):
                kids = {given.type.field(i).name: given.type.field(i) for i in range(given.type.num_fields)}
                out.append(replace(f, children=pick(f.children, kids, f"{path}{f.name}.")))
            else:
                out.append(f)
        return out

    return LanceSchema(pick(dataset.fields, {f.name: f for f in data}, ""), dataset.metadata)


def _packed(f: LanceField) -> bool:
    return any(f.metadata.get(k, b"").lower() == b"true" for k in (b"packed", b"lance-encoding:packed"))


def _rows_per_file(batches: Iterator[pa.RecordBatch], limit: int) -> Iterator[list[pa.RecordBatch]]:
    """Group rows into lists of batches holding at most ``limit`` rows each."""
    group: list[pa.RecordBatch] = []
    n = 0
    for batch in batches:
        offset = 0
        while offset < batch.num_rows:
            take = min(limit - n, batch.num_rows - offset)
            group.append(batch.slice(offset, take))
            n += take
            offset += take
            if n == limit:
                yield group
                group, n = [], 0
    if group:
        yield group


def write_fragments(store: ObjectStore, batches: Iterable[pa.RecordBatch], schema: LanceSchema, version: str,
                    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
                    written: list[str] | None = None, page_bytes: int | None = None) -> list[DataFragment]:
    """Write data files under ``data/`` and describe them as new fragments (id 0, unassigned).

    Relative paths of the files written are appended to ``written`` as they are created, so a
    caller can delete them if anything later fails.
    """
    if max_rows_per_file <= 0:
        raise InvalidInputError(f"max_rows_per_file must be positive, got {max_rows_per_file}")
    arrow_schema = schema.to_arrow()
    if version == "0.1":  # legacy: every field, pre-order, no column indices, recorded as (0, 2)
        owners, indices, (major, minor) = list(schema.walk()), [], (0, LEGACY_MINOR)
    else:
        owners = column_owners(schema.fields, version)
        indices = list(range(len(owners)))
        major, minor = (int(x) for x in version.split("."))
    frags: list[DataFragment] = []
    conformed = (conform_batch(b, arrow_schema, store.uri("")) for b in batches)
    for group in _rows_per_file(conformed, max_rows_per_file):
        name = data_file_name()
        rel = f"{DATA_DIR}/{name}"
        if written is not None:
            written.append(rel)
        if version == "0.1":
            w: Any = LegacyFileWriter(rel, arrow_schema, store=store, lance_schema=schema)
        else:
            w = LanceFileWriter(rel, arrow_schema, version=version, store=store,
                                page_bytes=page_bytes or DEFAULT_PAGE_BYTES)
        with w:
            for b in group:
                w.write(b)
        rows, size = w.close()
        if version == "0.1":  # the manifest of a legacy dataset carries the dictionaries too
            for node in schema.walk():
                if node.dictionary is None and node.id in w.dictionaries:
                    node.dictionary = w.dictionaries[node.id]
        files = [DataFile(name, [o.id for o in owners], indices, major, minor, size)]
        frags.append(DataFragment(0, files, physical_rows=rows))
    return frags


def _open(store: ObjectStore, manifest_store: ExternalManifestStore | CommitHandler | None) -> Dataset | None:
    try:
        return Dataset.open(store, manifest_store=manifest_store)
    except NotFoundError:
        return None


def storage_version(requested: str | None, existing: Dataset | None, mode: str) -> str:
    """The file version a write in ``mode`` makes: an append keeps the dataset's (and refuses
    another), a create / overwrite takes ``requested`` (aliases resolved; default 2.2)."""
    if mode == "append" and existing is not None:
        v = existing.data_storage_version
        if requested is not None and requested != v:
            raise InvalidInputError(f"the dataset stores version {v} files; cannot append version "
                                    f"{requested}")
    else:
        v = requested or (existing.data_storage_version if existing is not None else "2.2")
    v = {"stable": "2.2", "legacy": "0.1"}.get(v, v)
    if v not in VERSIONS:
        raise UnsupportedError(f"data storage version {v!r} is not supported (use 0.1/legacy, 2.0, 2.1 "
                               "or 2.2)")
    return v


def write_dataset(data: Data, uri: str, schema: pa.Schema | None = None, mode: str = "create", *,
                  data_storage_version: str | None = None,
                  max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE, enable_stable_row_ids: bool = False,
                  storage_options: dict[str, Any] | None = None, enable_v2_manifest_paths: bool = True,
                  manifest_store: ExternalManifestStore | CommitHandler | None = None,
                  max_retries: int = DEFAULT_MAX_RETRIES, page_bytes: int | None = None) -> Dataset:
    """Write ``data`` (Table, RecordBatch, RecordBatchReader or batches) to ``uri``; arguments in
    pylance's order (``schema`` then ``mode``).

    ``mode``: ``create`` (fails if the dataset exists), ``append`` (creates it when absent) or
    ``overwrite``. ``data_storage_version`` is 2.0, 2.1 or 2.2 (default: the dataset's, or 2.2).
    Appended data must have the dataset's types (any column order); nullable columns and
    struct children may be left out (they read as null), as pylance allows.
    ``page_bytes`` overrides the writer's page size (default 8 MiB).
    """
    if mode not in MODES:
        raise InvalidInputError(f"mode must be one of {MODES}, got {mode!r}")
    store = ObjectStore(uri, storage_options or {})
    existing = _open(store, manifest_store)
    if mode == "create" and existing is not None:
        raise InvalidInputError("a dataset already exists here; use mode='append' or 'overwrite'",
                                path=store.uri(""))
    arrow_schema, batches = _batches(data, schema)
    version = storage_version(data_storage_version, existing, mode)
    if existing is not None:
        existing.check_writable()
    if mode == "append" and existing is not None:
        lance_schema = appended_schema(existing.lance_schema, arrow_schema, store.uri(""))
        if version == "0.1" and len(list(lance_schema.walk())) != len(list(existing.lance_schema.walk())):
            raise SchemaError("appends to a legacy (0.1) dataset must hold every column (pylance refuses "
                              "them too)", path=store.uri(""))
    else:
        lance_schema = schema_from_arrow(arrow_schema)
    written: list[str] = []
    try:
        frags = write_fragments(store, batches, lance_schema, version, max_rows_per_file, written, page_bytes)
        if mode == "append" and existing is not None:
            op: Append | Overwrite = Append(frags)
        else:
            op = Overwrite(frags, lance_schema)
        return Dataset.from_commit(commit_transaction(
            store, op, existing.version if existing is not None else 0, manifest_store=manifest_store,
            max_retries=max_retries, enable_v2_manifest_paths=enable_v2_manifest_paths,
            enable_stable_row_ids=enable_stable_row_ids and existing is None,
            data_storage_version=version if isinstance(op, Overwrite) else None,
            must_create=mode == "create",
            known_manifests={existing.version: existing.manifest_file} if existing is not None else None))
    except CommitStateUnknown:
        raise
    except Exception:  # surely not committed; an interrupt may have committed: keep files then
        store.delete_many(written)
        raise


def delete_rows(dataset: Dataset, offsets: Mapping[int, Sequence[int] | np.ndarray], *, predicate: str = "",
                max_retries: int = DEFAULT_MAX_RETRIES) -> Dataset:
    """Delete rows by ``{fragment id: physical row offsets}`` from ``dataset``'s version.

    Writes one new deletion file per fragment (old and new offsets together; a fragment left
    empty is removed whole) and commits a Delete. The deletion files are deleted again when
    the commit surely failed, or when a rebase onto a concurrent delete replaced them.
    """
    updated: list[DataFragment] = []
    removed: list[int] = []
    written: list[str] = []
    store = dataset.store
    try:
        for fid, rows in offsets.items():
            frag = dataset._select_fragments([fid])[0]
            new = np.asarray(rows, dtype=np.int64)
            n = dataset._physical_rows(frag)
            if new.size and (new.min() < 0 or new.max() >= n):
                raise InvalidInputError(f"fragment {fid} has {n} rows; cannot delete offsets "
                                        f"{int(new.min())}..{int(new.max())}", path=dataset.uri)
            merged = np.union1d(deleted_offsets(store, frag, dataset.base_resolver).astype(np.int64), new)
            if merged.size == n:
                removed.append(fid)
                continue
            if merged.size == frag.num_deleted_rows:
                continue  # nothing new
            previous = frag.deletion_file.file_type if frag.deletion_file is not None else None
            dfile = write_deletion_file(store, fid, dataset.version, merged, previous)
            if dfile is not None:
                written.append(deletion_file_path(fid, dfile))
            updated.append(replace(frag, deletion_file=dfile, physical_rows=n))
        new_version = dataset.commit(Delete(updated, removed, predicate), dataset.version,
                                     max_retries=max_retries)
    except CommitStateUnknown:
        raise
    except Exception:  # surely not committed (an interrupt may have committed: keep files then)
        store.delete_many(written)
        raise
    # A rebase may have replaced some of our deletion files by merged ones: drop the unused.
    txn = new_version.transaction
    used = {deletion_file_path(f.id, f.deletion_file) for f in getattr(txn.operation, "updated_fragments", [])
            if f.deletion_file is not None} if txn is not None else set(written)
    store.delete_many(p for p in written if p not in used)
    return new_version
