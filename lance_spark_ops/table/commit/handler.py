"""Commit handlers: the atomic put of a dataset's next manifest, and where versions live.

Two handlers, behind one interface (``CommitHandler``):

* ``PutIfNotExistsCommitHandler`` (the default) writes ``_versions/<name>`` with the store's
  put-if-not-exists (``ObjectStore.put_if_not_exists``: local files are written to a temp
  file and ``os.link``-ed, which fails atomically when the name exists; fsspec backends use
  their conditional put; ``memory://`` checks its dict). This is what pylance does on local
  disks and on stores with conditional puts, so both libraries can commit to one dataset.
* ``ExternalManifestCommitHandler`` for stores without conditional puts: the table format's
  external manifest store protocol, with the KV store behind ``ExternalManifestStore``::

      1. PUT object store   _versions/{name}-{uuid}          stage the manifest
      2. PUT_IF_NOT_EXISTS  kv[(base_uri, version)] = staged  the commit point
      3. COPY               staged -> _versions/{name}        materialise
      4. PUT_IF_EXISTS      kv[(base_uri, version)] = final   finalise; delete the staged file

  The commit has happened after step 2; steps 3-4 may be finished by any reader or writer
  that finds a staged path in the KV store (``finalize``). ``{name}`` follows the dataset's
  naming scheme, e.g. ``_versions/18446744073709551613.manifest-6f1c...`` for version 2 (V2).
  ``SqliteManifestStore`` is a KV store for one host (one SQLite file, shared by processes).

No handler interprets manifests: they move bytes and list versions.
"""

from __future__ import annotations

import sqlite3
import uuid as uuidlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lance_spark_ops.errors import (
    CommitConflict,
    CorruptFileError,
    LanceError,
    NotFoundError,
    UnsupportedError,
)
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.table.paths import VERSIONS_DIR, ManifestNamingScheme, scan_versions

__all__ = [
    "CommitHandler",
    "ExternalManifestCommitHandler",
    "ExternalManifestStore",
    "PutIfNotExistsCommitHandler",
    "SqliteManifestStore",
    "VersionListing",
    "handler_for",
    "register_uri_store",
]


@dataclass
class VersionListing:
    """Every committed version of a dataset: the naming scheme and ``{version: relative path}``."""

    scheme: ManifestNamingScheme | None
    paths: dict[int, str]
    complete: bool = True  # False: the newest versions only (``CommitHandler.recent_versions``)

    @property
    def latest(self) -> int | None:
        return max(self.paths) if self.paths else None


RECENT_PAGE = 16  # keys of the one LIST page that finds the latest versions (V2 naming): 64 cost
# adlfs ~20 ms more of parsing (azure-storage-blob models ~0.3 ms a blob), s3fs ~3 ms
RECENT_LOOKUPS = 16  # versions after a known one looked up one by one in an external store


class CommitHandler(ABC):
    """Puts the next manifest atomically and says which versions exist."""

    recent_page: int = RECENT_PAGE  # keys of the LIST page ``recent_versions`` reads

    def list_versions(self, store: ObjectStore) -> VersionListing:
        """All versions (one listing of ``_versions/``); CorruptFileError on mixed naming."""
        scheme, names = scan_versions(store.list(VERSIONS_DIR), store.uri(VERSIONS_DIR))
        return VersionListing(scheme, {v: f"{VERSIONS_DIR}/{n}" for v, n in names.items()})

    def recent_versions(self, store: ObjectStore, since: int | None = None) -> VersionListing:
        """A listing holding the latest version and every version after ``since`` (not
        necessarily older ones): under the V2 naming scheme names count down, so the key order
        of S3, GCS and Azure listings puts the newest first and one page of ``recent_page`` keys
        holds them (as pylance finds the latest version); else, or when the page does not reach
        back to ``since``, ``list_versions``."""
        page = store.list_page(VERSIONS_DIR, self.recent_page)
        if page is not None:
            items, complete = page
            scheme, names = scan_versions([n for n, _ in items], store.uri(VERSIONS_DIR))
            listing = VersionListing(scheme, {v: f"{VERSIONS_DIR}/{n}" for v, n in names.items()})
            if complete:
                return listing
            if scheme is ManifestNamingScheme.V2 and names and (since is None or min(names) <= since + 1):
                listing.complete = False
                return listing
        return self.list_versions(store)

    def listing_for(self, store: ObjectStore, version: int | None) -> VersionListing:
        """A listing holding ``version`` (None: the latest), for opening it."""
        return self.recent_versions(store, None if version is None else version - 1)

    def resolve(self, store: ObjectStore, version: int, listing: VersionListing) -> str | None:
        """Relative path of ``version`` (None when it does not exist)."""
        return listing.paths.get(version)

    def check_store(self, store: ObjectStore) -> None:  # noqa: B027 - optional
        """Raise (before anything is written) when this handler cannot commit safely to ``store``."""

    @abstractmethod
    def commit(self, store: ObjectStore, version: int, scheme: ManifestNamingScheme, data: bytes) -> str:
        """Create ``version`` with manifest bytes ``data``; its relative path.

        Raises CommitConflict when the version already exists (nothing of ours landed). Any
        other exception leaves the outcome to ``landed``.
        """

    def landed(self, store: ObjectStore, version: int, scheme: ManifestNamingScheme,
               data: bytes) -> bool | None:
        """After an unexpected error in ``commit``: True if our manifest is ``version``, False if
        another one is, None if it cannot be told (the commit state is unknown)."""
        rel = scheme.manifest_path(version)
        try:
            found = store.read(rel)
        except NotFoundError:
            # A local link is synchronous: absent now means it never happened.
            return False if store.protocol in ("file", "local") else None
        except Exception:  # noqa: BLE001 - the store itself is failing; we cannot tell
            return None
        return found == data


class PutIfNotExistsCommitHandler(CommitHandler):
    """Default handler: the object store's own atomic create-if-absent.

    On S3 that is a PUT with ``If-None-Match: *``: 412 means another writer has the version.
    A client retry of a PUT that did land also sees 412, so a conflict on a remote store is
    checked by reading the object back: our own bytes mean the commit is ours.
    """

    def __init__(self, recent_page: int = RECENT_PAGE) -> None:
        self.recent_page = recent_page

    def check_store(self, store: ObjectStore) -> None:
        if not store.conditional_put:
            raise UnsupportedError(f"{store.protocol}:// has no conditional put (see storage_options "
                                   "aws_conditional_put); refusing to commit without an external manifest "
                                   "store (manifest_store=...), which could lose a concurrent commit",
                                   path=store.uri(""))

    def commit(self, store: ObjectStore, version: int, scheme: ManifestNamingScheme, data: bytes) -> str:
        self.check_store(store)
        rel = scheme.manifest_path(version)
        try:
            store.put_if_not_exists(rel, data)
        except CommitConflict:
            if store.protocol in ("file", "local", "memory") or not self._ours(store, rel, data):
                raise
        return rel

    @staticmethod
    def _ours(store: ObjectStore, rel: str, data: bytes) -> bool:
        try:
            return store.read(rel) == data
        except NotFoundError:
            return False


# -- external manifest store ---------------------------------------------------------------
class ExternalManifestStore(ABC):
    """A KV store with put-if-not-exists: ``(base_uri, version) -> manifest path``.

    Paths are relative to the dataset root (``_versions/...``). A path that does not end in
    ``.manifest`` is a staged manifest whose commit is not yet finalised.
    """

    @abstractmethod
    def get(self, base_uri: str, version: int) -> str | None:
        """The path recorded for ``version``, or None."""

    @abstractmethod
    def get_latest(self, base_uri: str) -> tuple[int, str] | None:
        """The highest recorded version and its path, or None when the dataset is unknown."""

    @abstractmethod
    def put_if_not_exists(self, base_uri: str, version: int, path: str, size: int) -> None:
        """Record ``version``; CommitConflict if it is already recorded."""

    @abstractmethod
    def put_if_exists(self, base_uri: str, version: int, path: str, size: int) -> None:
        """Re-point an already recorded ``version``; NotFoundError if it is not recorded."""

    def delete(self, base_uri: str) -> None:  # noqa: B027 - optional
        """Forget a dataset (optional)."""


class SqliteManifestStore(ExternalManifestStore):
    """``ExternalManifestStore`` in one SQLite file: for many processes on one host.

    One row per (base_uri, version); the primary key makes the insert a put-if-not-exists.
    Each call opens its own connection, so instances can be pickled to other processes.
    """

    _SCHEMA = ("CREATE TABLE IF NOT EXISTS manifests (base_uri TEXT NOT NULL, version INTEGER NOT NULL, "
               "path TEXT NOT NULL, size INTEGER NOT NULL, PRIMARY KEY (base_uri, version))")

    def __init__(self, path: str, timeout: float = 30.0) -> None:
        self.path = str(path)
        self.timeout = timeout
        with self._connect() as conn:
            conn.execute(self._SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
        except sqlite3.Error as e:
            raise LanceError(f"cannot open the SQLite manifest store: {e}", path=self.path) from e
        return conn

    def _query(self, sql: str, args: tuple) -> list[tuple]:
        conn = self._connect()
        try:
            return list(conn.execute(sql, args))
        finally:
            conn.close()

    def get(self, base_uri: str, version: int) -> str | None:
        rows = self._query("SELECT path FROM manifests WHERE base_uri = ? AND version = ?",
                           (base_uri, version))
        return rows[0][0] if rows else None

    def get_latest(self, base_uri: str) -> tuple[int, str] | None:
        rows = self._query("SELECT version, path FROM manifests WHERE base_uri = ? ORDER BY version DESC "
                           "LIMIT 1", (base_uri,))
        return (int(rows[0][0]), rows[0][1]) if rows else None

    def put_if_not_exists(self, base_uri: str, version: int, path: str, size: int) -> None:
        conn = self._connect()
        try:
            conn.execute("INSERT INTO manifests (base_uri, version, path, size) VALUES (?, ?, ?, ?)",
                         (base_uri, version, path, size))
        except sqlite3.IntegrityError as e:
            raise CommitConflict(f"version {version} is already recorded in the manifest store",
                                 path=base_uri) from e
        finally:
            conn.close()

    def put_if_exists(self, base_uri: str, version: int, path: str, size: int) -> None:
        conn = self._connect()
        try:
            cur = conn.execute("UPDATE manifests SET path = ?, size = ? WHERE base_uri = ? AND version = ?",
                               (path, size, base_uri, version))
            if cur.rowcount != 1:
                raise NotFoundError(f"version {version} is not recorded in the manifest store", path=base_uri)
        finally:
            conn.close()

    def delete(self, base_uri: str) -> None:
        self._query("DELETE FROM manifests WHERE base_uri = ?", (base_uri,))

    def __repr__(self) -> str:
        return f"SqliteManifestStore({self.path!r})"


def _is_final(path: str) -> bool:
    return path.endswith(".manifest")


class ExternalManifestCommitHandler(CommitHandler):
    """Commits through an ``ExternalManifestStore`` (see the module docstring)."""

    def __init__(self, kv: ExternalManifestStore) -> None:
        self.kv = kv

    @staticmethod
    def base_uri(store: ObjectStore) -> str:
        return store.uri("")

    def list_versions(self, store: ObjectStore) -> VersionListing:
        """Versions in ``_versions/`` plus the KV store's latest, finalising it if it is staged."""
        listing = super().list_versions(store)
        latest = self.kv.get_latest(self.base_uri(store))
        if latest is not None:
            version, path = latest
            if not _is_final(path) or version not in listing.paths:
                final = self.finalize(store, version, path)
                scheme = _scheme_of(final, store)
                if listing.scheme is not None and scheme is not listing.scheme:
                    raise CorruptFileError(f"the manifest store names version {version} {final!r}, which "
                                           "mixes "
                                           f"naming schemes with _versions/", path=store.uri(VERSIONS_DIR))
                listing.scheme = scheme
                listing.paths[version] = final
        return listing

    def recent_versions(self, store: ObjectStore, since: int | None = None) -> VersionListing:
        """The KV store's latest version (one query, as pylance resolves it: a final path is
        trusted, a staged one finalised) and each version after ``since`` looked up there; with
        no record (a table committed without the store) or more than ``RECENT_LOOKUPS``
        versions after ``since``, the whole listing (``list_versions``)."""
        base = self.base_uri(store)
        latest = self.kv.get_latest(base)
        if latest is None:
            return self.list_versions(store)
        version, path = latest
        first = version if since is None else min(since + 1, version)
        if version - first > RECENT_LOOKUPS:
            return self.list_versions(store)
        paths: dict[int, str] = {}
        for v in range(first, version + 1):
            rel = path if v == version else self.kv.get(base, v)
            if rel is None:  # a gap in the store's records: the listing knows better
                return self.list_versions(store)
            paths[v] = self._trusted(store, v, rel)
        return VersionListing(_scheme_of(paths[version], store), paths, complete=False)

    def listing_for(self, store: ObjectStore, version: int | None) -> VersionListing:
        """A version asked for by number: its record alone (one lookup); else as for the latest."""
        if version is not None:
            rel = self.kv.get(self.base_uri(store), version)
            if rel is not None:
                final = self._trusted(store, version, rel)
                return VersionListing(_scheme_of(final, store), {version: final}, complete=False)
        return super().listing_for(store, version)

    def _trusted(self, store: ObjectStore, version: int, rel: str) -> str:
        """A recorded path taken on the store's word (no request), as pylance does; a staged one finalised."""
        return rel if _is_final(rel) else self.finalize(store, version, rel)

    def resolve(self, store: ObjectStore, version: int, listing: VersionListing) -> str | None:
        """Path of ``version``: from the listing, else from the KV store (finalised here)."""
        if version in listing.paths:
            return listing.paths[version]
        path = self.kv.get(self.base_uri(store), version)
        return None if path is None else self.finalize(store, version, path)

    def finalize(self, store: ObjectStore, version: int, path: str, size: int | None = None) -> str:
        """Finish steps 3-4 for a recorded ``path`` (of ``size`` bytes when known); the final
        path. Errors if it cannot be repaired."""
        if _is_final(path):
            if not store.exists(path):
                raise missing_record(store, version, path)
            return path
        cut = path.rfind(".manifest-")
        final = path[: cut + len(".manifest")] if cut >= 0 else ""
        if not _is_final(final) or "/" in path[cut:]:
            raise CorruptFileError(f"staged manifest path {path!r} of version {version} does not end in "
                                   "'.manifest-<uuid>'", path=store.uri(path))
        try:
            store.copy(path, final)
        except NotFoundError:
            # Another reader or writer finished it first (copied, re-pointed, deleted the staged file).
            if not store.exists(final):
                raise NotFoundError(f"version {version} is staged at {path!r} but neither it nor {final!r} "
                                    "exists; refusing to load", path=store.uri(path)) from None
            return final
        if size is None:
            size = store.size(final)
        self.kv.put_if_exists(self.base_uri(store), version, final, size)
        store.delete(path)
        return final

    def commit(self, store: ObjectStore, version: int, scheme: ManifestNamingScheme, data: bytes) -> str:
        final = scheme.manifest_path(version)
        staged = f"{final}-{uuidlib.uuid4()}"
        store.write(staged, data)
        try:
            self.kv.put_if_not_exists(self.base_uri(store), version, staged, len(data))
        except CommitConflict:
            store.delete(staged)
            raise
        except BaseException:
            # The KV store may or may not hold our staged path: keep the file (landed() decides).
            raise
        try:
            return self.finalize(store, version, staged, len(data))
        except Exception:  # noqa: BLE001 - committed at step 2; readers will finish the copy
            return staged

    def landed(self, store: ObjectStore, version: int, scheme: ManifestNamingScheme,
               data: bytes) -> bool | None:
        try:
            path = self.kv.get(self.base_uri(store), version)
        except Exception:  # noqa: BLE001
            return None
        if path is None:
            return None
        try:
            return store.read(path) == data
        except Exception:  # noqa: BLE001
            return None


def missing_record(store: ObjectStore, version: int, rel: str) -> NotFoundError:
    """The error of a manifest an external store records at ``rel`` that is not there."""
    return NotFoundError(f"the manifest store records version {version} at {rel!r}, which is missing",
                         path=store.uri(rel))


def _scheme_of(rel: str, store: ObjectStore) -> ManifestNamingScheme:
    name = rel.rsplit("/", 1)[-1]
    stem = name[: -len(".manifest")]
    if not stem.isdigit():
        raise CorruptFileError(f"manifest path {rel!r} does not follow a naming scheme", path=store.uri(rel))
    return ManifestNamingScheme.V2 if len(stem) == 20 else ManifestNamingScheme.V1


# URI scheme suffix ("ddb" of s3+ddb://) -> factory(query params, storage options, root) of its store
_URI_STORES: dict[str, Callable[[Mapping[str, str], Mapping[str, Any], str], ExternalManifestStore]] = {}


def register_uri_store(suffix: str, factory: Callable[[Mapping[str, str], Mapping[str, Any], str],
                                                      ExternalManifestStore]) -> None:
    """Make ``<scheme>+<suffix>://...`` URIs commit through the store ``factory`` builds."""
    _URI_STORES[suffix] = factory


def handler_for(manifest_store: ExternalManifestStore | CommitHandler | None,
                store: ObjectStore | None = None) -> CommitHandler:
    """The handler for a manifest store (or handler) given by the caller; else the one the URI
    names (``s3+ddb://...?ddbTableName=T``: DynamoDB); default put-if-not-exists."""
    if manifest_store is None and store is not None and store.external_scheme is not None:
        factory = _URI_STORES.get(store.external_scheme)
        if factory is None:
            raise UnsupportedError(f"no external manifest store for the URI scheme suffix "
                                   f"+{store.external_scheme}", path=store.root)
        kv = factory(store.external_params, store.storage_options, store.root)
        return ExternalManifestCommitHandler(kv)
    if manifest_store is None:
        return PutIfNotExistsCommitHandler()
    if isinstance(manifest_store, CommitHandler):
        return manifest_store
    if isinstance(manifest_store, ExternalManifestStore):
        return ExternalManifestCommitHandler(manifest_store)
    raise TypeError(f"not a manifest store or commit handler: {manifest_store!r}")
