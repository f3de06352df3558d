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
import re
from enum import Enum

from lance_spark_ops.errors import CorruptFileError
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


def safe_relative(path: str, what: str, where: str | None = None) -> str:
    """``path`` if it stays inside the directory it is relative to, else CorruptFileError.

    Rejects empty paths, absolute paths (``/x``, ``C:\\x``, ``\\\\host``), URLs (``s3://``) and any
    ``..`` (or ``.``) component.
    """
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
