"""Which files a vacuum removes: pure decisions from manifests, refs and a file listing.

Follows pylance 14's ``cleanup_old_versions`` (``rust/lance/src/dataset/cleanup.rs``):

* a version is *old* when its manifest is older than ``before_timestamp`` and below
  ``before_version`` (whichever are set), is not the latest, is not tagged
  (``_refs/tags/*.json``) and is not the parent of a branch (``_refs/branches/*.json``)
  whose manifests use files of this root;
* only files modified at or before the earliest retained manifest's timestamp are looked at
  (all of them when a removed manifest is newer than that; ``_indices/`` always): a copy
  made with fresh file times (``cp -r``) keeps its unreferenced files, as in pylance;
* files referenced by a kept version (the latest, young or tagged versions, and every
  manifest of every branch under ``tree/``) stay; files referenced only by old versions are
  *verified* and go; files nobody references (failed or in-flight writes) go only when their
  mtime is older than the unverified threshold or ``delete_unverified`` is set;
* a branch's parent version keeps its manifest but (as in pylance 14) does not keep its
  files: the branch's own manifests name the files it still needs.

No I/O here: ``spark.vacuum`` lists and reads, this module decides. Every path handled is
relative to the dataset root and is checked to stay inside it (``guard_path``).
"""

from __future__ import annotations

import json
import posixpath
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import DecodeError

from lance_spark_ops._pb import table_pb2
from lance_spark_ops.errors import CorruptFileError, InvalidInputError, LanceError
from lance_spark_ops.table.format.fragment import DataFragment
from lance_spark_ops.table.format.manifest import Manifest
from lance_spark_ops.table.paths import (
    DATA_DIR,
    DELETIONS_DIR,
    INDICES_DIR,
    TRANSACTIONS_DIR,
    VERSIONS_DIR,
    data_file_path,
    deletion_file_path,
    safe_relative,
    transaction_file_path,
)

TAGS_DIR = "_refs/tags"
BRANCHES_DIR = "_refs/branches"
BRANCH_TREE = "tree"
# the only top-level directories a vacuum lists or deletes from
CLEANED_PREFIXES = (DATA_DIR, DELETIONS_DIR, TRANSACTIONS_DIR, INDICES_DIR, VERSIONS_DIR)
KINDS = ("data", "deletion", "transaction", "index", "manifest", "temp_manifest")


class CleanupError(LanceError):
    """Cleanup refused (tagged old versions with ``error_if_tagged_old_versions``, bad refs)."""


@dataclass(frozen=True)
class ListedFile:
    """One object found by the listing: path relative to the root, size, mtime (epoch s)."""

    path: str
    size: int
    mtime: float


@dataclass
class FileRefs:
    """Files (relative to the dataset root) that a set of manifests references."""

    data: set[str] = field(default_factory=set)
    deletions: set[str] = field(default_factory=set)
    transactions: set[str] = field(default_factory=set)
    index_uuids: set[str] = field(default_factory=set)

    def empty(self) -> bool:
        return not (self.data or self.deletions or self.transactions or self.index_uuids)

    def update(self, other: FileRefs) -> None:
        self.data |= other.data
        self.deletions |= other.deletions
        self.transactions |= other.transactions
        self.index_uuids |= other.index_uuids


@dataclass(frozen=True)
class VersionInfo:
    """What a vacuum needs of one manifest of the dataset."""

    version: int
    timestamp_nanos: int
    manifest_path: str  # relative, under _versions/
    refs: FileRefs


@dataclass(frozen=True)
class Policy:
    """Which versions are old (pylance's ``CleanupPolicy``) and when unreferenced files may go."""

    before_timestamp_nanos: int | None
    before_version: int | None
    delete_unverified: bool
    unverified_before: float  # epoch seconds: unreferenced files modified before this may go
    error_if_tagged_old_versions: bool = True

    def should_clean(self, v: VersionInfo) -> bool:
        ok = True
        if self.before_timestamp_nanos is not None:
            ok &= v.timestamp_nanos < self.before_timestamp_nanos
        if self.before_version is not None:
            ok &= v.version < self.before_version
        return ok


@dataclass(frozen=True)
class Removal:
    path: str
    kind: str
    size: int


@dataclass
class CleanupPlan:
    """Old manifests (deleted last) and unreferenced files (deleted first)."""

    old_versions: list[VersionInfo]
    kept_versions: list[int]
    files: list[Removal]

    @property
    def manifests(self) -> list[Removal]:
        return [Removal(v.manifest_path, "manifest", 0) for v in self.old_versions]


# -- refs from manifests -------------------------------------------------------------
def _norm_root(path: str) -> str:
    return posixpath.normpath(path.rstrip("/")) if path else path


def _in_root(base_id: int | None, bases: dict[int, tuple[bool, str]], own_base: bool, root_path: str,
             where: str | None) -> bool:
    """Does a file with this ``base_id`` live under our root?"""
    if base_id is None:
        return own_base
    if base_id not in bases:
        raise CorruptFileError(f"file names base_id {base_id}, not among the manifest's base paths "
                               f"{sorted(bases)}", path=where)
    is_root, path = bases[base_id]
    return is_root and _norm_root(path.split("://", 1)[-1]) == root_path


def index_uuid(raw: bytes, where: str | None = None) -> str:
    if len(raw) != 16:
        raise CorruptFileError(f"index uuid has {len(raw)} bytes, expected 16", path=where)
    return str(uuid.UUID(bytes=raw))


def _parse_fragment(body: bytes, where: str | None) -> table_pb2.DataFragment:
    try:
        return table_pb2.DataFragment.FromString(body)
    except DecodeError as e:
        raise CorruptFileError(f"a fragment does not parse: {e}", path=where) from e


def _fragment_refs(frag: Any, bases: dict[int, tuple[bool, str]], own_base: bool, root_path: str,
                   where: str | None) -> tuple[tuple[str, ...], str | None]:
    """(data files, deletion file or None) of one fragment that live under our root."""
    data = tuple(data_file_path(f, where) for f in frag.files
                 if _in_root(f.base_id, bases, own_base, root_path, where))
    d = frag.deletion_file
    deletion = None
    if d is not None and _in_root(d.base_id, bases, own_base, root_path, where):
        deletion = deletion_file_path(frag.id, d)
    return data, deletion


def manifest_refs(manifest: Manifest, index_section: table_pb2.IndexSection | None, root_path: str,
                  where: str | None = None, own_base: bool = True, memo: dict | None = None,
                  bodies: list[bytes] | None = None) -> FileRefs:
    """Files under our root that ``manifest`` references (``own_base``: False for a branch's
    manifest, whose base-less files live in its own ``tree/`` directory). ``memo`` (a dict the
    caller keeps across the manifests of one dataset): each fragment's files by its wire bytes,
    so that the fragments versions share (most of them) are decoded once, not once per version;
    ``bodies``: the fragments' wire bytes when ``manifest`` was parsed without them
    (``parse_manifest_bodies``)."""
    root_path = _norm_root(root_path)
    bases = {b.id: (b.is_dataset_root, b.path) for b in manifest.base_paths}
    refs = FileRefs()
    if memo is not None and bodies is None:
        run = manifest.fragment_run()
        bodies = run.bodies if run is not None else None
    if memo is not None and bodies is not None:
        known = memo.setdefault((tuple(sorted(bases.items())), own_base, root_path), {})
        for b in bodies:
            if b not in known:
                frag = DataFragment.from_pb(_parse_fragment(b, where))
                known[b] = _fragment_refs(frag, bases, own_base, root_path, where)
        data, deletions = refs.data, refs.deletions
        for b in bodies:
            files, deletion = known[b]
            data.update(files)
            if deletion is not None:
                deletions.add(deletion)
    else:
        for frag in manifest.fragments:
            files, deletion = _fragment_refs(frag, bases, own_base, root_path, where)
            refs.data.update(files)
            if deletion is not None:
                refs.deletions.add(deletion)
    if manifest.transaction_file and own_base:
        refs.transactions.add(transaction_file_path(manifest.transaction_file, where))
    for idx in (index_section.indices if index_section is not None else []):
        base = idx.base_id if idx.HasField("base_id") else None
        if _in_root(base, bases, own_base, root_path, where):
            refs.index_uuids.add(index_uuid(idx.uuid.uuid, where))
    return refs


# -- refs (tags, branches) --------------------------------------------------------------
def _ref_json(data: bytes, where: str) -> dict:
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise CorruptFileError(f"ref file is not JSON: {e}", path=where) from e
    if not isinstance(value, dict):
        raise CorruptFileError("ref file is not a JSON object", path=where)
    return value


def _version_field(value: dict, key: str, where: str) -> int:
    v = value.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise CorruptFileError(f"ref file field {key!r} is {v!r}, expected a version number", path=where)
    return v


def tag_version(data: bytes, where: str) -> int | None:
    """Version a ``_refs/tags/*.json`` protects in the main branch (None: a tag on a branch)."""
    value = _ref_json(data, where)
    branch = value.get("branch")
    if branch not in (None, "main"):
        return None
    return _version_field(value, "version", where)


def branch_parent_version(data: bytes, where: str) -> int | None:
    """Main-branch version a ``_refs/branches/*.json`` was created from (None: from a branch)."""
    value = _ref_json(data, where)
    if value.get("parentBranch") not in (None, "main"):
        return None
    return _version_field(value, "parentVersion", where)


# -- the decisions -------------------------------------------------------------------
def retain_before_version(versions: list[int], n: int) -> int:
    """pylance's ``retain_n_versions``: versions below the result are old."""
    if n <= 0:
        raise InvalidInputError(f"retain_versions must be positive, got {n}")
    versions = sorted(versions)
    return versions[0] if len(versions) <= n else versions[len(versions) - n]


def classify_versions(versions: list[VersionInfo], latest: int, tags: dict[str, int],
                      branch_parents: set[int], policy: Policy) -> tuple[list[VersionInfo], list[VersionInfo],
                                                                          list[VersionInfo]]:
    """(old, kept, protected-by-branch): manifests to delete, in the working set, and kept
    manifests whose files are not protected. CleanupError for tagged old versions if asked."""
    tagged = set(tags.values())
    old, kept, branch_only = [], [], []
    tagged_old: set[int] = set()
    for v in versions:
        latest_or_newer = v.version >= latest
        clean = policy.should_clean(v)
        if v.version in tagged and clean and not latest_or_newer:
            tagged_old.add(v.version)
        if latest_or_newer or not clean or v.version in tagged:
            kept.append(v)
        elif v.version in branch_parents:
            branch_only.append(v)
        else:
            old.append(v)
    if policy.error_if_tagged_old_versions and tagged_old:
        names = {k: t for k, t in sorted(tags.items()) if t in tagged_old}
        raise CleanupError(f"{len(names)} tagged version(s) have been marked for cleanup. Either set "
                           f"error_if_tagged_old_versions=False or delete the following tag(s) to enable "
                           f"cleanup: {names}")
    return old, kept, branch_only


def _kind(path: str) -> str | None:
    top, _, rest = path.partition("/")
    ext = posixpath.splitext(path)[1]
    if top == INDICES_DIR and rest:
        return "index"
    if top == DATA_DIR and ext == ".lance":
        return "data"
    if top == DELETIONS_DIR and ext in (".arrow", ".bin"):
        return "deletion"
    if top == TRANSACTIONS_DIR and ext == ".txn":
        return "transaction"
    if top == VERSIONS_DIR and rest.startswith(".tmp"):
        return "temp_manifest"
    return None


def _referenced(path: str, kind: str, refs: FileRefs) -> bool:
    if kind == "index":
        return path.split("/")[1] in refs.index_uuids
    by_kind = {"data": refs.data, "deletion": refs.deletions, "transaction": refs.transactions}
    return path in by_kind.get(kind, ())


def unreferenced_files(listing: Iterable[ListedFile], kept: FileRefs, verified: FileRefs,
                       policy: Policy) -> list[Removal]:
    """Listed files to delete: not referenced by a kept version, and either referenced by an
    old version (verified) or old enough (or ``delete_unverified``)."""
    out = []
    for f in listing:
        path = guard_path(f.path)
        kind = _kind(path)
        if kind is None or _referenced(path, kind, kept):
            continue
        maybe_in_progress = not policy.delete_unverified and f.mtime >= policy.unverified_before
        if not maybe_in_progress or (kind != "temp_manifest" and _referenced(path, kind, verified)):
            out.append(Removal(path, kind, f.size))
    return out


def listing_cutoff(old: list[VersionInfo], retained: list[VersionInfo]) -> int | None:
    """pylance 14 lists only files modified at or before the earliest retained manifest's
    timestamp (nanoseconds; a file written after it may belong to a commit in flight), unless
    a removed manifest is newer than that (a tagged or otherwise retained old version): then
    everything. None: no cutoff. ``_indices/`` is always listed whole."""
    if not retained:
        return None
    earliest = min(v.timestamp_nanos for v in retained)
    if old and max(v.timestamp_nanos for v in old) > earliest:
        return None
    return earliest


def listed_before(listing: Iterable[ListedFile], cutoff: int | None) -> list[ListedFile]:
    """The listed files pylance considers under ``listing_cutoff``."""
    if cutoff is None:
        return list(listing)
    # float compare: a store that gives no time lists files as +inf (never old, never listed)
    return [f for f in listing if f.path.startswith(INDICES_DIR + "/") or f.mtime * 1e9 <= cutoff]


def plan_cleanup(versions: list[VersionInfo], latest: int, tags: dict[str, int], branch_parents: set[int],
                 branch_refs: FileRefs, listing: Iterable[ListedFile], policy: Policy) -> CleanupPlan:
    """The whole decision: old manifests and the files that go with them."""
    old, kept, branch_only = classify_versions(versions, latest, tags, branch_parents, policy)
    listing = listed_before(listing, listing_cutoff(old, kept + branch_only))
    kept_refs, verified = FileRefs(), FileRefs()
    kept_refs.update(branch_refs)
    for v in kept:
        kept_refs.update(v.refs)
    for v in old + branch_only:
        verified.update(v.refs)
    files = unreferenced_files(listing, kept_refs, verified, policy)
    kept_versions = sorted(v.version for v in kept + branch_only)
    return CleanupPlan(sorted(old, key=lambda v: v.version), kept_versions, files)


def guard_path(path: str) -> str:
    """``path`` if it is a relative path inside one of the directories a vacuum cleans."""
    safe_relative(path, "vacuum")
    if path.split("/", 1)[0] not in CLEANED_PREFIXES or "/" not in path:
        raise CorruptFileError(f"vacuum refuses to touch {path!r}: outside {CLEANED_PREFIXES}")
    return path
