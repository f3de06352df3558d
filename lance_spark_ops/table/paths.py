"""Where things live inside a dataset directory, and the manifest naming schemes.

::

    _versions/{version}.manifest                       V1 naming (legacy)
    _versions/{u64::MAX - version:020}.manifest        V2 naming: newest sorts first
    _versions/latest_version_hint.json                 {"version": N}; a hint only
    _transactions/{read_version}-{uuid}.txn            raw Transaction protobuf
    _deletions/{fragment_id}-{read_version}-{id}.{arrow|bin}
    data/{DataFile.path}

Example: version 1 is ``1.manifest`` (V1) or ``18446744073709551614.manifest`` (V2). A V2
name is exactly 20 digits + ``.manifest``; a directory that mixes both schemes is corrupt.
Names that are not ``<digits>.manifest`` (temporary ``.tmp_*`` files, staged
``{v}.manifest-{uuid}`` files, detached ``d*.manifest`` versions) are ignored.

Relative paths read from a manifest go through ``safe_relative`` so that a crafted manifest
cannot make us read or delete outside the dataset root.
"""

from __future__ import annotations

import json
import os
import re
from enum import Enum
from typing import Any

from lance_spark_ops.errors import CorruptFileError
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.table.format.fragment import DataFile, DeletionFile, ExternalFile
from lance_spark_ops.table.format.rowids import U64_MAX

VERSIONS_DIR = "_versions"
DATA_DIR = "data"
DELETIONS_DIR = "_deletions"
TRANSACTIONS_DIR = "_transactions"
INDICES_DIR = "_indices"
MANIFEST_SUFFIX = ".manifest"
LATEST_VERSION_HINT = "latest_version_hint.json"
_V2_DIGITS = 20
_MANIFEST_RE = re.compile(r"^(\d+)\.manifest$")


class ManifestNamingScheme(Enum):
    V1 = "v1"
    V2 = "v2"

    def manifest_name(self, version: int) -> str:
        if not 0 <= version <= U64_MAX:
            raise ValueError(f"version {version} is not a u64")
        if self is ManifestNamingScheme.V1:
            return f"{version}{MANIFEST_SUFFIX}"
        return f"{U64_MAX - version:020d}{MANIFEST_SUFFIX}"

    def manifest_path(self, version: int) -> str:
        return f"{VERSIONS_DIR}/{self.manifest_name(version)}"

    def parse_version(self, name: str) -> int | None:
        m = _MANIFEST_RE.match(name)
        if m is None:
            return None
        number = int(m.group(1))
        if number > U64_MAX:
            return None
        return number if self is ManifestNamingScheme.V1 else U64_MAX - number


def detect_scheme(name: str) -> ManifestNamingScheme | None:
    """The scheme a ``_versions/`` entry is named by, or None if it is not a manifest."""
    m = _MANIFEST_RE.match(name)
    if m is None:
        return None
    return ManifestNamingScheme.V2 if len(m.group(1)) == _V2_DIGITS else ManifestNamingScheme.V1


def scan_versions(names: list[str], where: str | None = None) -> tuple[ManifestNamingScheme | None,
                                                                        dict[int, str]]:
    """From one listing of ``_versions/``: the naming scheme and ``{version: file name}``.

    A listing with both schemes raises CorruptFileError. An empty result means no dataset.
    """
    scheme: ManifestNamingScheme | None = None
    versions: dict[int, str] = {}
    for name in names:
        s = detect_scheme(name)
        if s is None:
            continue
        if scheme is None:
            scheme = s
        elif s is not scheme:
            raise CorruptFileError(
                f"_versions/ mixes manifest naming schemes {scheme.value} and {s.value} (e.g. {name!r})",
                path=where)
        v = s.parse_version(name)
        if v is not None:
            versions[v] = name
    return scheme, versions


def parse_version_hint(data: bytes) -> int | None:
    """The version in ``latest_version_hint.json``, or None when unreadable (it is only a hint)."""
    try:
        value = json.loads(data.decode("utf-8"))
        v = value.get("version") if isinstance(value, dict) else None
    except (UnicodeDecodeError, ValueError):
        return None
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= U64_MAX else None


def version_hint_bytes(version: int) -> bytes:
    """Content of ``latest_version_hint.json`` as pylance 14 writes it."""
    return json.dumps({"version": version}, separators=(",", ":")).encode()


# Components of letters, digits, '_', '-' and inner dots (no '.' or '..', none empty), joined by
# '/': inside the directory, whatever the platform (no drive, no scheme, no NUL).
_PLAIN_PATH = re.compile(r"[A-Za-z0-9_\-]+(?:\.[A-Za-z0-9_\-]+)*(?:/[A-Za-z0-9_\-]+(?:\.[A-Za-z0-9_\-]+)*)*")


def safe_relative(path: str, what: str, where: str | None = None) -> str:
    """``path`` if it stays inside the directory it is relative to, else CorruptFileError.

    Rejects empty paths, absolute paths (``/x``, ``C:\\x``, ``\\\\host``), URLs (``s3://``) and any
    ``..`` (or ``.``) component.
    """
    if _PLAIN_PATH.fullmatch(path):  # nearly every path: names (and dirs) of safe characters
        return path
    bad = None
    if not path:
        bad = "is empty"
    elif path.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", path):
        bad = "is absolute"
    elif "://" in path:
        bad = "is a URL"
    elif "\x00" in path:
        bad = "holds a NUL byte"
    else:
        parts = re.split(r"[/\\]", path)
        if any(p in ("..", ".") for p in parts):
            bad = "has a '..' or '.' component"
        elif any(p == "" for p in parts):
            bad = "has an empty component"
    if bad:
        raise CorruptFileError(f"{what} path {path!r} {bad}: it must stay inside the dataset root",
                               path=where)
    return path


def data_file_path(data_file: DataFile, where: str | None = None) -> str:
    return f"{DATA_DIR}/{safe_relative(data_file.path, 'data file', where)}"


def deletion_file_name(fragment_id: int, deletion_file: DeletionFile) -> str:
    d = deletion_file
    return f"{fragment_id}-{d.read_version}-{d.id}.{d.file_type.suffix}"


def deletion_file_path(fragment_id: int, deletion_file: DeletionFile) -> str:
    return f"{DELETIONS_DIR}/{deletion_file_name(fragment_id, deletion_file)}"


def transaction_file_path(name: str, where: str | None = None) -> str:
    return f"{TRANSACTIONS_DIR}/{safe_relative(name, 'transaction file', where)}"


def transaction_file_name(read_version: int, uuid: str) -> str:
    return f"{read_version}-{uuid}.txn"


def external_file_path(ext: ExternalFile, what: str, where: str | None = None) -> str:
    """Row-id / version sequence files are relative to the dataset root."""
    return safe_relative(ext.path, what, where)


# Paths a resolver remembers as checked (``BaseResolver._checked``); beyond that it forgets them
# all and checks again (a worker's dataset is asked about every data and deletion file of a job).
PATHS_KEPT = 4096


class BaseResolver:
    """Where a data / deletion file of a manifest lives: the dataset's own root, or one of the
    manifest's registered base paths (``Manifest.base_paths``, shallow clones and multi-base
    datasets) chosen by the file's ``base_id``.

    A base path that is a dataset root holds ``data/`` and ``_deletions/`` like any dataset;
    another base path holds data files directly (it cannot hold deletion files). On local
    file systems a resolved file whose real path (symlinks followed) leaves its root is refused.
    """

    def __init__(self, store: ObjectStore, base_paths: list[Any], where: str | None = None,
                 kept: int = PATHS_KEPT) -> None:
        """``kept``: checked paths remembered at most (``PATHS_KEPT``)."""
        self.store = store
        self.kept = kept
        self.where = where
        self.bases = {int(b.id): b for b in base_paths}
        self._stores: dict[int, ObjectStore] = {}
        self._real_dirs: dict[str, str] = {}
        self._passed: set[tuple[int, str]] = set()  # (id of a store held here, path) found inside
        self._roots: dict[str, tuple[str, str]] = {}

    def stores(self) -> list[ObjectStore]:
        """The dataset's store and those of the base paths resolved so far."""
        return [self.store, *self._stores.values()]

    def _base(self, base_id: int, what: str) -> tuple[Any, ObjectStore]:
        base = self.bases.get(base_id)
        if base is None:
            raise CorruptFileError(f"{what} names base path id {base_id}, which the manifest does not "
                                   f"register (ids: {sorted(self.bases)})", path=self.where)
        if base_id not in self._stores:
            path = base.path
            if not path or not (path.startswith("/") or "://" in path or re.match(r"^[A-Za-z]:[/\\]", path)):
                raise CorruptFileError(f"base path {base_id} {path!r} is not absolute", path=self.where)
            self._stores[base_id] = ObjectStore(path, self.store.storage_options)
        return base, self._stores[base_id]

    def data_file(self, data_file: DataFile, where: str | None = None) -> tuple[ObjectStore, str]:
        """(store, path relative to it) of a data file; the store notes the manifest's size of
        it (``file_size_bytes``): its footer is then read without a size request."""
        if data_file.base_id is None:
            store, rel = self._checked(self.store, data_file_path(data_file, where))
        else:
            base, store = self._base(data_file.base_id, f"data file {data_file.path!r}")
            rel = safe_relative(data_file.path, "data file", where)
            store, rel = self._checked(store, f"{DATA_DIR}/{rel}" if base.is_dataset_root else rel)
        if data_file.file_size_bytes and not store.is_local:
            store.note_size(rel, data_file.file_size_bytes)
        return store, rel

    def index_dir(self, uuid: str, base_id: int | None) -> tuple[ObjectStore, str]:
        """(store, path relative to it) of an index's directory ``_indices/<uuid>``: under the
        dataset's root, or under the dataset root ``base_id`` names (a shallow clone's source)."""
        rel = f"_indices/{uuid}"
        if base_id is None:
            return self.store, rel
        base, store = self._base(base_id, f"index {uuid}")
        if not base.is_dataset_root:
            raise CorruptFileError(f"index {uuid} names base path {base_id}, which is not a dataset root",
                                   path=self.where)
        return store, rel

    def deletion_file(self, fragment_id: int, deletion_file: DeletionFile) -> tuple[ObjectStore, str]:
        rel = deletion_file_path(fragment_id, deletion_file)
        if deletion_file.base_id is None:
            return self._checked(self.store, rel)
        base, store = self._base(deletion_file.base_id, f"deletion file of fragment {fragment_id}")
        if not base.is_dataset_root:
            raise CorruptFileError(f"deletion file of fragment {fragment_id} names base path "
                                   f"{deletion_file.base_id}, which is not a dataset root", path=self.where)
        return self._checked(store, rel)

    def _checked(self, store: ObjectStore, rel: str) -> tuple[ObjectStore, str]:
        if store.protocol != "file" or (id(store), rel) in self._passed:
            return store, rel
        full = store.full_path(rel)
        head, tail = os.path.split(full)
        if tail in ("", ".", "..") or os.path.islink(full):
            real = os.path.realpath(full)
        else:  # a plain last component: only its directory can lead elsewhere
            real = os.path.join(self._realpath(head), tail)
        root, prefix = self._root(store.root_path)
        if real != root and not real.startswith(prefix):
            raise CorruptFileError(f"{rel!r} resolves to {real!r} (a symbolic link), outside "
                                   f"{root!r}", path=store.uri(rel))
        if len(self._passed) >= self.kept:  # a cache: a worker's dataset checks a million paths
            self._passed.clear()
        self._passed.add((id(store), rel))
        return store, rel

    def _root(self, root_path: str) -> tuple[str, str]:
        """(real path of a store's root, the prefix of the real paths inside it)."""
        hit = self._roots.get(root_path)
        if hit is None:
            root = self._realpath(root_path)
            hit = self._roots[root_path] = (root, root.rstrip(os.sep) + os.sep)
        return hit

    def _realpath(self, path: str) -> str:
        """``os.path.realpath`` of a directory, once per resolver (per manifest): a task checks
        every data and deletion file, nearly all in the same two directories."""
        real = self._real_dirs.get(path)
        if real is None:
            real = self._real_dirs[path] = os.path.realpath(path)
        return real
