"""Executor side of ``validate``: check a range of fragments' files, or an index's files.

A fragment task opens every data file of its fragments (the footer: rows, version; the
object's size), reads each deletion file (its count, offsets in range) and checks that external
row-id files exist; an index task lists each index directory against the sizes the manifest
records. Results are ``table.validate.Finding`` s, as dicts.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from lance_spark_ops.concurrency import map_concurrently, read_ahead
from lance_spark_ops.errors import AccessDeniedError, LanceError, NotFoundError
from lance_spark_ops.file.pylance_quirks import struct_validity_mixes
from lance_spark_ops.file.reader import LanceFileReader
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.spark.runtime.runner import TaskContext
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.format.fragment import DataFragment, ExternalFile
from lance_spark_ops.table.paths import external_file_path
from lance_spark_ops.table.validate import Finding, deletion_finding, file_findings


@dataclass(frozen=True)
class FragmentsTask:
    uri: str
    storage_options: dict[str, Any] = field(repr=False)  # secrets: not in reprs
    version: int
    fragment_positions: tuple[int, int]  # [start, stop) in manifest order


@dataclass(frozen=True)
class IndicesTask:
    uri: str
    storage_options: dict[str, Any] = field(repr=False)
    version: int
    positions: tuple[int, ...]  # entries of the index section


def _finding(check: str, detail: str, fragment: int | None = None, file: str | None = None) -> dict[str, Any]:
    return asdict(Finding(check, detail, fragment, file))


def check_fragments(task: FragmentsTask, ctx: TaskContext) -> dict[str, Any]:
    """Every data, deletion and row-id file of the task's fragments against the manifest."""
    ds = Dataset.open(task.uri, task.version, storage_options=task.storage_options)
    a, b = task.fragment_positions
    trust = ds.manifest.writer_version is not None
    out: list[dict[str, Any]] = []
    files = 0
    # object stores: several fragments checked at once, each its own round trips (a footer, a
    # deletion file; in turn they were one request in flight); findings in manifest order, and
    # an error raised when its fragment's turn comes, as before
    window = 1 if ds.store.is_local else ds.store.budget.max_requests
    for found, n in read_ahead(lambda frag: _check_fragment(ds, frag, trust), ds.fragments[a:b], window):
        out.extend(found)
        files += n
    return {"findings": out, "files": files}


def _pylance_unreadable(reader: LanceFileReader, frag: DataFragment, path: str) -> list[dict[str, Any]]:
    """Columns whose pages pylance 14 cannot read together (``file.pylance_quirks``)."""
    try:
        mixes = struct_validity_mixes(reader.metadata, reader.schema)
    except LanceError as e:  # a page layout that does not parse: the read says so too
        return [_finding("footer", f"a page layout does not parse: {e.message}", frag.id, path)]
    return [_finding("pylance_unreadable", f"field {name!r} (column {c}) mixes pages whose struct over a "
                     "list is ALL_VALID with pages where it is NULLABLE: pylance 14 fails to read it "
                     "(\"Incorrect number of nulls for StructArray\"); this library reads it, and a "
                     "re-encoding rewrite of the fragment (compact, materialize_deletions) makes it "
                     "readable", frag.id, path) for c, name in mixes]


def _check_fragment(ds: Dataset, frag: DataFragment, trust: bool) -> tuple[list[dict[str, Any]], int]:
    """One fragment's findings and the files it checked."""
    out: list[dict[str, Any]] = []
    files = 0
    rows = None
    for df in frag.files:
        files += 1
        try:
            store, rel = ds.base_resolver.data_file(df, f"fragment {frag.id}")
            size = store.size(rel)
        except NotFoundError:
            out.append(_finding("missing_file", "the data file does not exist", frag.id, df.path))
            continue
        except AccessDeniedError:  # the store refuses us: nothing to say about the table
            raise
        except LanceError as e:
            out.append(_finding("data_file", e.message, frag.id, df.path))
            continue
        try:
            reader = LanceFileReader(rel, store=store, legacy=df.is_legacy)
        except NotFoundError:  # an object store, its size from the manifest: the read finds it gone
            out.append(_finding("missing_file", "the data file does not exist", frag.id, df.path))
            continue
        except AccessDeniedError:
            raise
        except LanceError as e:
            out.append(_finding("footer", f"the data file does not open: {e.message}", frag.id, df.path))
            continue
        n = reader.num_rows
        if rows is not None and n != rows:
            out.append(_finding("file_rows", f"data file has {n} rows, the fragment's first {rows}",
                                frag.id, df.path))
        rows = n if rows is None else rows
        recorded = ds.recorded_physical_rows.get(frag.id)
        if recorded is not None and recorded != n:
            out.append(_finding("physical_rows_unverified", f"data file has {n} rows, the fragment "
                                f"records {recorded} in a manifest naming no writer (Lance <= 0.8, "
                                "lance#1531): read with the file's count, repaired by the next commit",
                                frag.id, df.path))
        out.extend(asdict(f) for f in file_findings(
            frag, df, footer_rows=n, footer_version=None if df.is_legacy else reader.version,
            object_size=size, trust_counts=trust))
        if not df.is_legacy:
            out.extend(_pylance_unreadable(reader, frag, df.path))
        if df.file_size_bytes and df.is_legacy and df.file_size_bytes != size:
            out.append(_finding("file_size", f"the object has {size} bytes, the manifest records "
                                f"{df.file_size_bytes}", frag.id, df.path))
    d = frag.deletion_file
    if d is not None:
        files += 1
        try:
            deleted = ds.deleted_offsets(frag)
        except NotFoundError:
            out.append(_finding("missing_file", "the deletion file does not exist", frag.id,
                                f"_deletions/{frag.id}-{d.read_version}-{d.id}"))
            deleted = None
        except AccessDeniedError:
            raise
        except LanceError as e:
            out.append(_finding("deletion_file", e.message, frag.id))
            deleted = None
        if deleted is not None:
            found = deletion_finding(frag, len(np.unique(deleted)))
            if found is not None:
                out.append(asdict(found))
            n = rows if rows is not None else frag.physical_rows
            if n is not None and len(deleted) and int(np.max(deleted)) >= n:
                top = int(np.max(deleted))
                out.append(_finding("deletion_range", f"deleted offset {top} is past the fragment's {n} "
                                    "rows", frag.id))
    for meta, what in ((frag.row_id_meta, "row-id sequence"),
                       (frag.created_at_version_meta, "created-at versions"),
                       (frag.last_updated_at_version_meta, "last-updated-at versions")):
        if isinstance(meta, ExternalFile):
            files += 1
            rel = external_file_path(meta, what, ds.store.uri(ds.manifest_path))
            try:
                size = ds.store.size(rel)
            except NotFoundError:
                out.append(_finding("missing_file", f"the {what} file does not exist", frag.id, rel))
                continue
            if meta.offset + meta.size > size:
                out.append(_finding("file_size", f"the {what} lies at {meta.offset}+{meta.size}, past "
                                    f"the object's {size} bytes", frag.id, rel))
    return out, files


def check_indices(task: IndicesTask, ctx: TaskContext) -> dict[str, Any]:
    """Each index's directory exists and holds the files (and sizes) the manifest records."""
    from lance_spark_ops.index.kinds import uuid_str

    ds = Dataset.open(task.uri, task.version, storage_options=task.storage_options)
    section = ds.manifest_file.index_section
    entries = list(section.indices) if section is not None else []
    out: list[dict[str, Any]] = []
    files = 0
    for k in task.positions:
        idx = entries[k]
        uuid = uuid_str(idx.uuid.uuid)
        store, rel = ds.base_resolver.index_dir(uuid, idx.base_id if idx.HasField("base_id") else None)
        if not idx.files:  # older writers record no file list: the directory must hold something
            files += 1
            if not store.list(rel) and idx.name != "__lance_frag_reuse":  # the FRI may be inline only
                out.append(_finding("missing_file", f"index {idx.name!r}: its directory holds no file", None,
                                    rel))
            continue
        paths = [f"{rel}/{f.path}" for f in idx.files]
        # object stores: the files' sizes asked together (an INVERTED index holds three files a
        # partition: in turn, one round trip each)
        sizes = map_concurrently(lambda p, st=store: _size_or_none(st, p), paths,
                                 max_workers=1 if store.is_local else store.budget.max_requests)
        for f, path, got in zip(idx.files, paths, sizes, strict=True):
            files += 1
            if got is None:
                out.append(_finding("missing_file", f"index {idx.name!r}: the file does not exist", None,
                                    path))
                continue
            if f.size_bytes and got != f.size_bytes:
                out.append(_finding("file_size", f"index {idx.name!r}: the object has {got} bytes, the "
                                    f"manifest records {f.size_bytes}", None, path))
    return {"findings": out, "files": files}


def _size_or_none(store: ObjectStore, rel: str) -> int | None:
    """The object's size; None when it does not exist."""
    try:
        return store.size(rel)
    except NotFoundError:
        return None
