"""``Dataset``: open one version of a Lance dataset and scan it.

Opening lists ``_versions/`` once (the naming scheme and every version come from that one
listing; ``latest_version_hint.json`` is not trusted), reads the chosen manifest file whole
and parses it (``table.format.manifest``). A reader feature flag this library does not know
makes ``open`` fail with UnsupportedError, as the table format demands of readers.

Scans go fragment by fragment in manifest order (``table.scan``): deleted rows are dropped,
columns stitched across data files by field id, ``_rowid`` / ``_rowaddr`` appended after the
data columns, matching pylance's ``to_table(with_row_id=True, with_row_address=True)``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa

from lance_spark_ops.errors import CorruptFileError, InvalidInputError, LanceError, NotFoundError
from lance_spark_ops.file.schema import LanceField, LanceSchema
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.table.commit.commit import DEFAULT_MAX_RETRIES, CommitResult, commit_transaction
from lance_spark_ops.table.commit.handler import (
    CommitHandler,
    ExternalManifestCommitHandler,
    ExternalManifestStore,
    PutIfNotExistsCommitHandler,
    handler_for,
    missing_record,
)
from lance_spark_ops.table.deletion import deleted_offsets, keep_mask
from lance_spark_ops.table.format.feature_flags import check_readable, check_writable
from lance_spark_ops.table.format.fragment import DataFragment, ExternalFile
from lance_spark_ops.table.format.manifest import (
    Manifest,
    ManifestFile,
    ManifestSlice,
    fragments_from_entries,
    parse_manifest_file,
    parse_manifest_head,
)
from lance_spark_ops.table.format.rowids import RowDatasetVersionSequence, RowIdSequence
from lance_spark_ops.table.format.support import check_manifest
from lance_spark_ops.table.format.transaction import Operation, Transaction
from lance_spark_ops.table.paths import (
    PATHS_KEPT,
    VERSIONS_DIR,
    BaseResolver,
    ManifestNamingScheme,
    deletion_file_path,
    detect_scheme,
    external_file_path,
)
from lance_spark_ops.table.rowids import decode_row_ids, decode_versions
from lance_spark_ops.table.scan import FragmentScan, output_schema
from lance_spark_ops.table.validate import Finding, manifest_findings, refusal

DEFAULT_BATCH_ROWS = 64 * 1024
# A manifest file at most this big keeps its bytes (``Dataset.manifest_bytes``): the driver hands
# them to its tasks, which then parse the version instead of reading it (``scan_tasks.ship``).
SHIPPED_MANIFEST_BYTES = 256 * 1024



def dataset_present(uri: str, storage_options: dict[str, Any] | None = None) -> bool:
    """Whether ``uri`` looks like a Lance dataset - its ``_versions/`` exists - in one cheap
    request, without reading a manifest (a caller's check before starting expensive work).
    External manifest stores (``s3+ddb://``) keep their manifests in ``_versions/`` too."""
    return ObjectStore(uri, storage_options or {}).present(VERSIONS_DIR)


def _untrusted_counts(mf: ManifestFile) -> ManifestFile:
    """A manifest that names no writer (pylance <= 0.8) may record wrong ``physical_rows``
    (Lance 0.7.5 recorded them after deletions; lance#1531): pylance 14 counts such a
    fragment's rows from its files, and so do we - the fragments are given no recorded count
    (a commit recounts them all: ``table.commit.migrate``)."""
    m = mf.manifest
    if all(f.physical_rows is None for f in m.fragments):
        return mf
    fixed = copy.copy(m)
    fixed.__dict__.pop("_fragment_source", None)
    fixed.fragments = [replace(f, physical_rows=None) for f in m.fragments]
    return replace(mf, manifest=fixed)


class Dataset:
    """One version of a Lance dataset. Build with ``Dataset.open``."""

    def __init__(self, store: ObjectStore, manifest_file: ManifestFile, naming_scheme: ManifestNamingScheme,
                 manifest_name: str,
                 manifest_store: ExternalManifestStore | CommitHandler | None = None) -> None:
        self.store = store
        self.recorded_physical_rows: dict[int, int] = {}  # counts a no-writer manifest recorded
        if manifest_file.manifest.writer_version is None:
            self.recorded_physical_rows = {f.id: f.physical_rows for f in manifest_file.manifest.fragments
                                           if f.physical_rows is not None}
            manifest_file = _untrusted_counts(manifest_file)
        self.manifest_file = manifest_file
        self.naming_scheme = naming_scheme
        self.manifest_path = f"{VERSIONS_DIR}/{manifest_name}"
        self.manifest_store = manifest_store
        self.manifest_bytes: bytes | None = None  # the file as read, when small (see ``_parsed``)
        self.paths_kept = PATHS_KEPT  # checked file paths its resolver remembers (``BaseResolver``)

    # -- opening ---------------------------------------------------------
    @classmethod
    def open(cls, uri: str | ObjectStore, version: int | None = None, *,
             storage_options: dict[str, Any] | None = None,
             manifest_store: ExternalManifestStore | CommitHandler | None = None) -> Dataset:
        """Open the latest version (or ``version``). NotFoundError if either does not exist.

        With ``manifest_store`` (an external manifest store, see ``table.commit.handler``) the
        latest version comes from it too, and a version staged but not yet copied into
        ``_versions/`` is finished (copied, re-pointed) before it is read.
        """
        store = uri if isinstance(uri, ObjectStore) else ObjectStore(uri, storage_options or {})
        handler = handler_for(manifest_store, store)
        if version is not None and isinstance(handler, PutIfNotExistsCommitHandler) and not store.is_local:
            # a known version's V2 name says where it is: one GET, no listing (404: V1 names)
            rel = ManifestNamingScheme.V2.manifest_path(version)
            try:
                data = store.read(rel)
            except NotFoundError:
                pass
            else:
                return cls._parsed(store, data, rel, version, ManifestNamingScheme.V2, manifest_store)
        # the newest versions only (one short LIST page under the V2 naming scheme; an external
        # store's record)
        listing = handler.listing_for(store, version)
        if listing.scheme is None or not listing.paths:
            raise NotFoundError("no Lance dataset here: _versions/ holds no manifest", path=store.uri(""))
        if version is None:
            version = max(listing.paths)
        rel = handler.resolve(store, version, listing)
        if rel is None:  # the error names the versions there are: all of them
            listing = handler.list_versions(store)
            rel = handler.resolve(store, version, listing)
        versions = listing.paths
        if rel is None:
            raise NotFoundError(f"version {version} does not exist (versions {min(versions)}.."
                                f"{max(versions)})", path=store.uri(""))
        try:
            data = store.read(rel)
        except NotFoundError as e:
            if isinstance(handler, ExternalManifestCommitHandler):  # its record is trusted, as pylance's
                raise missing_record(store, version, rel) from e
            raise
        return cls._parsed(store, data, rel, version, listing.scheme, manifest_store)

    @classmethod
    def _parsed(cls, store: ObjectStore, data: bytes, rel: str, version: int, scheme: ManifestNamingScheme,
                manifest_store: ExternalManifestStore | CommitHandler | None) -> Dataset:
        path = store.uri(rel)
        mf = parse_manifest_file(data, path)
        if mf.manifest.version != version:
            raise CorruptFileError(f"manifest file for version {version} holds version {mf.manifest.version}",
                                   path=path)
        check_readable(mf.manifest.reader_feature_flags, path)
        check_manifest(mf.manifest, path)
        ds = cls(store, mf, scheme, rel.rsplit("/", 1)[-1], manifest_store)
        ds._keep_manifest_bytes(data)
        return ds

    def _keep_manifest_bytes(self, data: bytes | bytearray | memoryview | None) -> None:
        """Keep the manifest file as read or written when it is small (``manifest_bytes``)."""
        if data is not None and len(data) <= SHIPPED_MANIFEST_BYTES:
            self.manifest_bytes = bytes(data)

    @classmethod
    def from_manifest_bytes(cls, uri: str | ObjectStore, data: bytes, rel: str, version: int, *,
                            storage_options: dict[str, Any] | None = None) -> Dataset:
        """Version ``version`` from its manifest file's bytes (``data``, the file at ``rel``
        under ``uri`` as another process read it: ``Dataset.manifest_bytes``); nothing is read.
        The checks are ``open``'s."""
        store = uri if isinstance(uri, ObjectStore) else ObjectStore(uri, storage_options or {})
        scheme = detect_scheme(rel.rsplit("/", 1)[-1])
        if scheme is None:
            raise InvalidInputError(f"{rel} is not a manifest file name", path=store.uri(rel))
        return cls._parsed(store, data, rel, version, scheme, None)

    @classmethod
    def open_slice(cls, uri: str | ObjectStore, slc: ManifestSlice, *,
                   storage_options: dict[str, Any] | None = None) -> Dataset | None:
        """A task's view of one version: the manifest but its fragments, read from the ranges
        ``slc`` names (``Manifest.fragment_slice``, made by the driver from the same file); the
        task's fragments come from ``fragments_in_slice``. Reads a few KB where ``open`` reads
        every fragment, and nothing when the slice carries its bytes (``ManifestSlice.inline``).
        None when the file does not hold what ``slc`` says (open it whole)."""
        store = uri if isinstance(uri, ObjectStore) else ObjectStore(uri, storage_options or {})
        (a, la), (b, lb) = slc.head
        path = store.uri(slc.path)
        chunks: dict[tuple[int, int], bytes] = {}
        if slc.inline is not None:
            first, last = slc.inline[0], slc.inline[1]
        elif store.is_local:
            first, last = store.read_range(slc.path, a, la), store.read_range(slc.path, b, lb)
        else:  # one round trip (coalesced or in flight together) for the head and the task's chunks
            spans = [(offset, length) for offset, length, _ in slc.chunks]
            try:
                got = store.read_ranges(slc.path, [(a, la), (b, lb), *spans])
            except NotFoundError:
                raise
            except LanceError:  # shorter than the slice says: not the file the driver read
                return None
            first, last = bytes(got[0]), bytes(got[1])
            chunks = {span: bytes(v) for span, v in zip(spans, got[2:], strict=True)}
        mf = parse_manifest_head(first, last, slc, path)
        scheme = detect_scheme(slc.path.rsplit("/", 1)[-1])
        if mf is None or scheme is None:
            return None
        check_readable(mf.manifest.reader_feature_flags, path)
        check_manifest(mf.manifest, path)
        ds = cls(store, mf, scheme, slc.path.rsplit("/", 1)[-1])
        ds._slice_chunks = chunks
        return ds

    def fragments_in_slice(self, slc: ManifestSlice, ids: Sequence[int]) -> Iterator[list[DataFragment]]:
        """The fragments ``ids`` (in order) of a ``ManifestSlice``, one chunk at a time, each
        read when reached."""
        at = 0
        held = getattr(self, "_slice_chunks", None) or {}
        spans = ((o, n) for o, n, _ in slc.chunks)
        carried = dict(zip(spans, slc.inline[2:], strict=True)) if slc.inline else {}
        for offset, length, count in slc.chunks:
            data = carried.get((offset, length)) or held.get((offset, length))
            if data is None or len(data) != length:
                data = self.store.read_range(slc.path, offset, length)
            yield fragments_from_entries(data, ids[at:at + count], self.store.uri(slc.path))
            at += count
        if at != len(ids):
            raise InvalidInputError(f"the manifest slice holds {at} fragments, the task names {len(ids)}")

    @classmethod
    def from_commit(cls, result: CommitResult) -> Dataset:
        """The version a commit just wrote (``commit_transaction``'s result)."""
        ds = cls(result.store, result.manifest_file, result.naming_scheme, result.manifest_name,
                 manifest_store=result.handler)
        ds._keep_manifest_bytes(result.manifest_bytes)
        return ds

    def checkout(self, version: int) -> Dataset:
        return Dataset.open(self.store, version, manifest_store=self.manifest_store)

    # -- committing ---------------------------------------------------------
    def commit(self, operation: Operation, read_version: int | None = None, *,
               max_retries: int = DEFAULT_MAX_RETRIES,
               manifest_store: ExternalManifestStore | CommitHandler | None = None,
               **kwargs: Any) -> Dataset:
        """Commit ``operation`` (built from ``read_version``, default this version); the new version.

        See ``table.commit.commit.commit_transaction`` for the protocol, the errors and who
        deletes which files when it fails.
        """
        self.check_writable()
        read = self.version if read_version is None else read_version
        store = manifest_store if manifest_store is not None else self.manifest_store
        kwargs.setdefault("known_manifests", {self.version: self.manifest_file})  # parsed already
        return Dataset.from_commit(commit_transaction(self.store, operation, read, max_retries=max_retries,
                                                      manifest_store=store, **kwargs))

    # -- metadata --------------------------------------------------------
    @property
    def uri(self) -> str:
        return self.store.root

    @property
    def manifest(self) -> Manifest:
        return self.manifest_file.manifest

    @property
    def version(self) -> int:
        return self.manifest.version

    @property
    def timestamp(self) -> datetime:
        return self.manifest.timestamp

    @property
    def lance_schema(self) -> LanceSchema:
        return self.manifest.schema

    @property
    def schema(self) -> pa.Schema:
        return self.manifest.schema.to_arrow()

    @property
    def fragments(self) -> list[DataFragment]:
        return self.manifest.fragments

    def fragments_with_ids(self, ids: Iterable[int]) -> dict[int, DataFragment]:
        """Fragment id -> fragment for these ids (absent ones left out); see ``Manifest``."""
        return self.manifest.fragments_with_ids(ids)

    def fragment_slice(self, ids: Sequence[int], size: int, inline: int = 0) -> ManifestSlice | None:
        """``Manifest.fragment_slice`` of this version's manifest file."""
        return self.manifest.fragment_slice(ids, size, self.manifest_path, inline)

    def fragments_in_chunks(self, ids: Sequence[int], size: int) -> Iterator[list[DataFragment]]:
        """The fragments with these ids, in order, ``size`` at a time (absent ones left out);
        see ``Manifest.fragments_in_chunks``."""
        return self.manifest.fragments_in_chunks(ids, size)

    @property
    def next_row_id(self) -> int:
        return self.manifest.next_row_id

    @property
    def max_fragment_id(self) -> int | None:
        return self.manifest.fragment_max_id()

    @property
    def data_storage_version(self) -> str:
        return self.manifest.data_storage_version

    @property
    def config(self) -> dict[str, str]:
        return self.manifest.config

    @property
    def table_metadata(self) -> dict[str, str]:
        return self.manifest.table_metadata

    @property
    def reader_feature_flags(self) -> int:
        return self.manifest.reader_feature_flags

    @property
    def writer_feature_flags(self) -> int:
        return self.manifest.writer_feature_flags

    @property
    def uses_stable_row_ids(self) -> bool:
        return self.manifest.uses_stable_row_ids

    @property
    def transaction(self) -> Transaction | None:
        """The transaction that made this version (inline copy in the manifest file)."""
        return self.manifest_file.transaction

    def check_writable(self) -> None:
        """UnsupportedError if the manifest has a writer flag this library does not know."""
        check_writable(self.manifest.writer_feature_flags, self.store.uri(self.manifest_path))

    def findings(self, deep: bool = True) -> list[Finding]:
        """Every inconsistency the manifest shows without reading a file (``table.validate``:
        duplicate fragment ids, fragments without files, file versions, shared files, row ids,
        index coverage); ``deep=False``: from the fragment columns only (no fragment object
        built; legacy datasets' file lists too). Computed once per manifest."""
        cache = getattr(self, "_findings", None)
        if cache is None or cache[0] is not self.manifest:
            cache = self._findings = (self.manifest, {})
        if deep not in cache[1]:
            section = self.manifest_file.index_section
            indices = list(section.indices) if section else None
            cache[1][deep] = manifest_findings(self.manifest, indices, deep=deep)
        return cache[1][deep]

    def check_consistent(self, what: str) -> list[Finding]:
        """Before a rewrite: ``InconsistentDatasetError`` naming the fragments when a finding
        refuses one (the dataset is left as it is), else the findings only reported. From the
        fragment columns (cheap at a million fragments); what only the file lists or the files
        show is refused where the rewrite's tasks open them."""
        found = self.findings(deep=False)
        err = refusal(found, what, self.uri)
        if err is not None:
            raise err
        return found

    def versions(self) -> list[int]:
        """Every version present now (one listing), ascending."""
        return sorted(handler_for(self.manifest_store, self.store).list_versions(self.store).paths)

    def latest_version(self) -> int:
        versions = self.versions()
        if not versions:
            raise NotFoundError("no manifests left in _versions/", path=self.store.uri(VERSIONS_DIR))
        return versions[-1]

    def count_rows(self) -> int:
        """Live rows, from fragment metadata (deletion files are read when counts are missing)."""
        total = 0
        for f in self.fragments:
            n = f.num_rows
            if n is None:
                n = int(self._keep(f, self._physical_rows(f)).sum())
            total += n
        return total

    # -- per-fragment metadata -------------------------------------------------
    def _read_external(self, ext: ExternalFile, what: str) -> bytes:
        rel = external_file_path(ext, what, self.store.uri(self.manifest_path))
        data = self.store.read_range(rel, ext.offset, ext.size)
        if len(data) != ext.size:
            raise CorruptFileError(f"{what}: wanted {ext.size} bytes at {ext.offset}, got {len(data)}",
                                   path=self.store.uri(rel))
        return data

    def row_id_sequence(self, fragment: DataFragment) -> RowIdSequence | None:
        """The fragment's row-id sequence (None when the dataset has no stable row ids)."""
        meta = fragment.row_id_meta
        if meta is None:
            if self.uses_stable_row_ids:
                raise CorruptFileError(f"fragment {fragment.id} has no row ids but the dataset uses stable "
                                       "row ids", path=self.store.uri(self.manifest_path))
            return None
        data = self._read_external(meta, "row-id sequence") if isinstance(meta, ExternalFile) else meta
        return RowIdSequence.from_bytes(data, self.store.uri(self.manifest_path))

    def row_ids(self, fragment: DataFragment) -> np.ndarray | None:
        """Row ids of every physical row of the fragment, or None (ids are row addresses)."""
        seq = self.row_id_sequence(fragment) if self.uses_stable_row_ids else None
        if seq is None:
            return None
        return decode_row_ids(seq, fragment.physical_rows, self.store.uri(self.manifest_path))

    def _versions_of(self, fragment: DataFragment, which: str) -> np.ndarray | None:
        meta = getattr(fragment, f"{which}_version_meta")
        if meta is None:
            return None
        data = self._read_external(meta, f"{which} versions") if isinstance(meta, ExternalFile) else meta
        where = self.store.uri(self.manifest_path)
        seq = RowDatasetVersionSequence.from_bytes(data, where)
        return decode_versions(seq, fragment.physical_rows, where)

    def created_at_versions(self, fragment: DataFragment) -> np.ndarray | None:
        return self._versions_of(fragment, "created_at")

    def last_updated_at_versions(self, fragment: DataFragment) -> np.ndarray | None:
        return self._versions_of(fragment, "last_updated_at")

    @property
    def base_resolver(self) -> BaseResolver:
        """Locates data and deletion files, also under the manifest's registered base paths."""
        cached = getattr(self, "_resolver", None)
        if cached is None or cached[0] is not self.manifest or cached[1].kept != self.paths_kept:
            cached = (self.manifest, BaseResolver(self.store, self.manifest.base_paths,
                                                  self.store.uri(self.manifest_path), self.paths_kept))
            self._resolver = cached
        return cached[1]

    def stop_prefetch(self) -> None:
        """Drop what was fetched ahead for a task (``FragmentBatch.prefetch``), on every store."""
        resolver = getattr(self, "_resolver", None)
        for store in resolver[1].stores() if resolver is not None else [self.store]:
            store.stop_prefetch()

    def deleted_offsets(self, fragment: DataFragment) -> np.ndarray:
        return deleted_offsets(self.store, fragment, self.base_resolver)

    def live_mask(self, fragment: DataFragment) -> np.ndarray | None:
        """True per physical row that is not deleted; None when the fragment has no deletions."""
        if fragment.deletion_file is None:
            return None
        return self._keep(fragment, self._physical_rows(fragment))

    def dense_live_mask(self, fragment: DataFragment) -> np.ndarray:
        """``live_mask`` as an array for every fragment (all True without deletions)."""
        keep = self.live_mask(fragment)
        return keep if keep is not None else np.ones(self.physical_rows(fragment), dtype=bool)

    def live_rows(self, fragment: DataFragment) -> int:
        """Live rows of the fragment: the manifest's count, else its deletion file's rows
        counted (without one, the manifest's physical rows; 0 when it does not record them)."""
        n = fragment.num_rows
        if n is None:
            mask = self.live_mask(fragment)
            n = int(mask.sum()) if mask is not None else int(fragment.physical_rows or 0)
        return int(n)

    def _keep(self, fragment: DataFragment, physical_rows: int) -> np.ndarray:
        deleted = self.deleted_offsets(fragment)
        where = None
        if fragment.deletion_file is not None:
            where = self.store.uri(deletion_file_path(fragment.id, fragment.deletion_file))
        return keep_mask(deleted, physical_rows, where)

    def physical_rows(self, fragment: DataFragment) -> int:
        """Rows of the fragment, deleted ones included (read from its files when the manifest
        does not record them: pylance <= 0.7)."""
        return self._physical_rows(fragment)

    def _physical_rows(self, fragment: DataFragment) -> int:
        if fragment.physical_rows is not None:
            return fragment.physical_rows
        return FragmentScan(self.store, fragment, [], row_ids=None, keep=None, with_row_id=False,
                            with_row_address=False, resolver=self.base_resolver,
                            storage_version=self.data_storage_version).num_rows

    # -- scanning ----------------------------------------------------------
    def _fields(self, columns: Sequence[str] | None) -> list[LanceField]:
        tops = self.manifest.schema.fields
        if columns is None:
            return list(tops)
        if isinstance(columns, str):
            raise InvalidInputError(f"columns must be a list of names, got the string {columns!r}")
        by_name = {f.name: f for f in tops}
        missing = [c for c in columns if c not in by_name]
        if missing:
            raise NotFoundError(f"no column(s) {missing} in the dataset (columns: {list(by_name)})",
                                path=self.uri)
        return [by_name[c] for c in columns]

    def _fragments_by_id(self) -> dict[int, DataFragment]:
        frags = self.fragments
        key = (id(frags), len(frags))  # built once per manifest (tasks look fragments up one by one)
        cached = getattr(self, "_by_id", None)
        if cached is None or cached[0] != key:
            cached = (key, {f.id: f for f in frags})
            self._by_id = cached
        return cached[1]

    def fragment(self, fragment_id: int) -> DataFragment:
        """The fragment with this id (``NotFoundError`` if this version has none)."""
        return self._select_fragments([fragment_id])[0]

    def _select_fragments(self, fragment_ids: Sequence[int] | None) -> list[DataFragment]:
        if fragment_ids is None:
            return list(self.fragments)
        by_id = self._fragments_by_id()
        missing = [i for i in fragment_ids if i not in by_id]
        if missing:
            raise NotFoundError(f"no fragment(s) {missing} in version {self.version}", path=self.uri)
        return [by_id[i] for i in fragment_ids]

    def output_schema(self, columns: Sequence[str] | None = None, with_row_id: bool = False,
                      with_row_address: bool = False, blobs: str = "descriptions") -> pa.Schema:
        """Schema of scans; blob columns are descriptions unless ``blobs="bytes"`` (``table.scan``)."""
        return self._scan_schemas(columns, with_row_id, with_row_address, blobs)[0]

    def _scan_schemas(self, columns: Sequence[str] | None, with_row_id: bool, with_row_address: bool,
                      blobs: str) -> tuple[pa.Schema, pa.Schema]:
        """``output_schema`` and the same without metadata (``FragmentScan``'s), built once per
        manifest and arguments: a task scans many fragments with the same ones."""
        key = (None if columns is None else tuple(columns) if not isinstance(columns, str) else columns,
               bool(with_row_id), bool(with_row_address), blobs)
        cache = getattr(self, "_schemas", None)
        if cache is None or cache[0] is not self.manifest:
            cache = self._schemas = (self.manifest, {})
        hit = cache[1].get(key)
        if hit is None:
            fields = self._fields(columns)
            hit = (output_schema(fields, with_row_id, with_row_address, self.manifest.schema.metadata, blobs),
                   output_schema(fields, with_row_id, with_row_address, blobs=blobs))
            cache[1][key] = hit
        return hit

    def scan_fragment(self, fragment: DataFragment | int, columns: Sequence[str] | None = None,
                      with_row_id: bool = False, with_row_address: bool = False,
                      batch_rows: int = DEFAULT_BATCH_ROWS, include_deleted: bool = False,
                      blobs: str = "descriptions",
                      row_range: tuple[int, int] | None = None,
                      live: np.ndarray | None = None,
                      keep_dictionaries: bool = False) -> Iterator[pa.RecordBatch]:
        """Live rows of one fragment in batches of at most ``batch_rows`` physical rows
        (``include_deleted``: every physical row, in order; ``live_mask`` tells them apart;
        ``row_range``: only physical rows ``start..stop``; ``live``: the fragment's
        ``live_mask`` when the caller holds it already, saving a second deletion-file read;
        ``keep_dictionaries``: see ``FragmentScan``, for a re-encode)."""
        if batch_rows <= 0:
            raise InvalidInputError(f"batch_rows must be positive, got {batch_rows}")
        scan, schema = self.fragment_scan(fragment, columns, with_row_id, with_row_address, include_deleted,
                                          blobs, live)
        scan.keep_dictionaries = keep_dictionaries
        first, last = row_range if row_range is not None else (0, None)
        for batch in scan.batches(batch_rows, first, last):
            yield batch.replace_schema_metadata(schema.metadata)

    def fragment_scan(self, fragment: DataFragment | int, columns: Sequence[str] | None = None,
                      with_row_id: bool = False, with_row_address: bool = False,
                      include_deleted: bool = False, blobs: str = "descriptions",
                      live: np.ndarray | None = None) -> tuple[FragmentScan, pa.Schema]:
        """The checked and planned ``FragmentScan`` behind ``scan_fragment`` (its files opened,
        deleted rows known) and the schema of its batches, with the dataset's metadata."""
        frag = self._select_fragments([fragment])[0] if isinstance(fragment, int) else fragment
        fields = self._fields(columns)
        schema, scan_schema = self._scan_schemas(columns, with_row_id, with_row_address, blobs)
        row_ids = self.row_ids(frag) if with_row_id else None
        scan = FragmentScan(self.store, frag, fields, row_ids=None, keep=None,
                            with_row_id=with_row_id, with_row_address=with_row_address, blobs=blobs,
                            resolver=self.base_resolver, schema=scan_schema,
                            storage_version=self.data_storage_version)
        n = scan.num_rows
        if row_ids is not None and len(row_ids) != n:
            raise CorruptFileError(f"fragment {frag.id} has {n} rows but {len(row_ids)} row ids",
                                   path=self.store.uri(self.manifest_path))
        scan.row_ids = row_ids
        scan.keep = None
        if frag.deletion_file is not None and not include_deleted:
            if live is not None and len(live) != n:
                raise InvalidInputError(f"live mask of {len(live)} rows for fragment {frag.id} of {n} rows")
            scan.keep = live if live is not None else self._keep(frag, n)
        return scan, schema

    def iter_fragment_batches(self, columns: Sequence[str] | None = None, with_row_id: bool = False,
                              with_row_address: bool = False, fragment_ids: Sequence[int] | None = None,
                              batch_rows: int = DEFAULT_BATCH_ROWS) -> Iterator[pa.RecordBatch]:
        """Batches of every selected fragment, fragments in manifest order."""
        self._fields(columns)  # fail on bad names before any I/O
        for frag in self._select_fragments(fragment_ids):
            yield from self.scan_fragment(frag, columns, with_row_id, with_row_address, batch_rows)

    def to_table(self, columns: Sequence[str] | None = None, with_row_id: bool = False,
                 with_row_address: bool = False, fragment_ids: Sequence[int] | None = None,
                 blobs: str = "descriptions") -> pa.Table:
        """All live rows of the selected fragments (default: all) as one table (blob columns:
        descriptions, as pylance; ``blobs="bytes"`` reads blob v1 payloads instead)."""
        schema = self.output_schema(columns, with_row_id, with_row_address, blobs)
        batches = []
        for frag in self._select_fragments(fragment_ids):
            rows = frag.physical_rows or DEFAULT_BATCH_ROWS
            batches.extend(self.scan_fragment(frag, columns, with_row_id, with_row_address, max(rows, 1),
                                              blobs=blobs))
        return pa.Table.from_batches(batches, schema=schema)

    def take_blobs(self, column: str, indices: Sequence[int], *, allow_external: bool = False
                   ) -> list[bytes | None]:
        """Payload bytes of blob column ``column`` at live-row ``indices`` (as ``to_table`` rows
        are numbered), like pylance's ``take_blobs(column, indices=...)`` read whole; None for
        null rows. Blobs stored outside the dataset (``blob_uri``) need ``allow_external``."""
        from lance_spark_ops.table.blob import blob_data_file, blob_version, read_payloads

        (field,) = self._fields([column])
        version = blob_version(field)
        if version is None:
            raise InvalidInputError(f"column {column!r} is not a blob column", path=self.uri)
        want = np.asarray(indices, dtype=np.int64)
        out: list[bytes | None] = [None] * len(want)
        base = 0
        for frag in self.fragments:
            n = frag.num_rows
            if n is None:
                n = int(self._keep(frag, self._physical_rows(frag)).sum())
            sel = np.flatnonzero((want >= base) & (want < base + n))
            if sel.size:
                desc = pa.Table.from_batches(list(self.scan_fragment(frag, [column])),
                                             schema=self.output_schema([column])).column(0).combine_chunks()
                store, rel = blob_data_file(frag, field, self.base_resolver)
                got = read_payloads(store, rel, desc.take(pa.array(want[sel] - base)), version,
                                    allow_external=allow_external)
                for i, g in zip(sel.tolist(), got, strict=True):
                    out[i] = g
            base += n
        bad = want[(want < 0) | (want >= base)]
        if bad.size:
            raise InvalidInputError(f"row index {int(bad[0])} out of range ({base} rows)", path=self.uri)
        return out

    def __repr__(self) -> str:
        return (f"Dataset({self.uri!r}, version={self.version}, fragments={len(self.fragments)}, "
                f"format={self.data_storage_version})")

