"""What a vacuum's plan (``table.cleanup``, pure) is made from, read from the store: a prefix's
files, the versions' manifests, tags and branches; and ``cleanup_figures``, what a vacuum would
find, computed in this process (fleet health). The vacuum job runs the same readers as Spark
tasks (``spark.files.vacuuming_tasks``). Listings never follow symbolic links (a linked
directory is not entered; a linked file is reported as the link itself), and every listed path
is checked to lie under the dataset root."""

from __future__ import annotations

import concurrent.futures
import os
import posixpath
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from lance_spark_ops.errors import CorruptFileError, InvalidInputError, NotFoundError
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.table.cleanup import (
    BRANCH_TREE,
    BRANCHES_DIR,
    TAGS_DIR,
    FileRefs,
    ListedFile,
    Policy,
    VersionInfo,
    branch_parent_version,
    manifest_refs,
    plan_cleanup,
    retain_before_version,
    tag_version,
)
from lance_spark_ops.table.format.manifest import parse_manifest_bodies, parse_manifest_file
from lance_spark_ops.table.paths import (
    DATA_DIR,
    DELETIONS_DIR,
    INDICES_DIR,
    TRANSACTIONS_DIR,
    VERSIONS_DIR,
    safe_relative,
    scan_versions,
)

LOCAL_PROTOCOLS = ("file", "local")
DEFAULT_OLDER_THAN = timedelta(days=14)


def _mtime(info: dict[str, Any]) -> float:
    """Modification time (epoch s) from an fsspec info dict; +inf (never 'old') when absent."""
    for key in ("mtime", "LastModified", "last_modified", "updated", "created"):
        v = info.get(key)
        if isinstance(v, (int, float)):
            return float(v)
        if isinstance(v, datetime):
            return v.timestamp()
        if isinstance(v, str):
            try:
                return datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return float("inf")


def _walk_local(root: str, prefix: str) -> list[ListedFile]:
    top = os.path.join(root, prefix)
    if os.path.islink(top):
        return []  # a linked prefix directory may point anywhere
    if os.path.isfile(top):
        st = os.lstat(top)
        return [ListedFile(prefix, st.st_size, st.st_mtime)]
    out = []
    for d, _dirs, files in os.walk(top, followlinks=False):
        for name in files:
            full = os.path.join(d, name)
            try:
                st = os.lstat(full)
            except FileNotFoundError:
                continue  # gone since the directory was read (a writer's temporary file): nothing to remove
            out.append(ListedFile(os.path.relpath(full, root).replace(os.sep, "/"), st.st_size, st.st_mtime))
    return out


def list_files(store: ObjectStore, prefix: str) -> list[ListedFile]:
    """Every object under ``prefix`` (recursively), paths relative to the dataset root."""
    if store.protocol in LOCAL_PROTOCOLS:
        files = _walk_local(store.root_path, prefix)
    else:
        files = [ListedFile(p, int(info.get("size") or 0), _mtime(info))
                 for p, info in store.find_rel(prefix, detail=True).items()]
    for f in files:
        safe_relative(f.path, "listed", store.uri(prefix))
        if f.path != prefix and not f.path.startswith(prefix.rstrip("/") + "/"):
            raise CorruptFileError(f"listing returned {f.path!r}, outside {prefix!r}",
                                   path=store.uri(""))
    return files


def read_versions(store: ObjectStore, manifests: Sequence[tuple[int, str]]) -> list[VersionInfo]:
    """Parse each manifest ((version, relative path)) and keep only what a vacuum needs
    (version, time, references)."""
    out: list[VersionInfo] = []
    memo: dict = {}  # fragment refs by wire bytes: versions share most fragments
    parts = [manifests[at:at + MANIFESTS_IN_FLIGHT] for at in range(0, len(manifests), MANIFESTS_IN_FLIGHT)]
    if len(parts) > 1 and not store.is_local:
        # object stores: each part in flight together, the next one fetched while this one parses
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            ahead = pool.submit(store.read_all, [rel for _, rel in parts[0]])
            for i, part in enumerate(parts):
                datas = ahead.result()
                if i + 1 < len(parts):
                    ahead = pool.submit(store.read_all, [rel for _, rel in parts[i + 1]])
                out += _parse_versions(store, part, datas, memo)
        return out
    for part in parts:
        out += _parse_versions(store, part, store.read_all([rel for _, rel in part]), memo)
    return out


def _parse_versions(store: ObjectStore, part: Sequence[tuple[int, str]], datas: list[bytes],
                    memo: dict) -> list[VersionInfo]:
    out = []
    for (version, rel), data in zip(part, datas, strict=True):
        where = store.uri(rel)
        fast = parse_manifest_bodies(data, where)  # fragments as bytes: their refs memoised
        mf, bodies = fast if fast is not None else (parse_manifest_file(data, where), None)
        m = mf.manifest
        if m.version != version:
            raise CorruptFileError(f"manifest file for version {version} holds version {m.version}",
                                   path=where)
        refs = manifest_refs(m, mf.index_section, store.root_path, where, memo=memo, bodies=bodies)
        out.append(VersionInfo(m.version, m.timestamp_nanos, rel, refs))
    return out


# manifests read at once (object stores: in flight together, and as many fetched ahead)
MANIFESTS_IN_FLIGHT = 32


def manifest_paths(store: ObjectStore) -> tuple[tuple[int, str], ...]:
    """(version, relative path) of every manifest, oldest first; NotFoundError when none."""
    _scheme, names = scan_versions(store.list(VERSIONS_DIR), store.uri(VERSIONS_DIR))
    if not names:
        raise NotFoundError("no Lance dataset here: _versions/ holds no manifest", path=store.uri(""))
    return tuple((v, f"{VERSIONS_DIR}/{n}") for v, n in sorted(names.items()))


def listing_prefixes(store: ObjectStore) -> list[str]:
    """The prefixes a vacuum lists (one listing each; ``_indices`` split by index directory)."""
    return [DATA_DIR, DELETIONS_DIR, TRANSACTIONS_DIR, VERSIONS_DIR, *top_entries(store, INDICES_DIR)]


def top_entries(store: ObjectStore, prefix: str) -> list[str]:
    """``prefix/<name>`` for each entry directly under ``prefix`` (split of a listing)."""
    return [posixpath.join(prefix, name) for name in store.list(prefix)]


def ref_files(store: ObjectStore, prefix: str) -> dict[str, tuple[bytes, str]]:
    """``{name: (content, uri)}`` of the ``*.json`` ref files under ``prefix`` (names may hold
    '/'): one listing (absent: none, no existence request first), then their reads."""
    listed = [f for f in list_files(store, prefix) if f.path.endswith(".json")]
    return {f.path[len(prefix) + 1 : -len(".json")]: (store.read(f.path), store.uri(f.path)) for f in listed}


def read_refs(store: ObjectStore, prefix: str, parse: Callable[[bytes, str], int | None]) -> dict[str, int]:
    """``{name: version}`` of the ``*.json`` ref files under ``prefix`` that ``parse`` names one."""
    out = {}
    for name, (data, where) in ref_files(store, prefix).items():
        v = parse(data, where)
        if v is not None:
            out[name] = v
    return out


def branch_files(store: ObjectStore, branches: list[str]) -> dict[str, FileRefs]:
    """Per branch, the files under our root that any of its manifests references."""
    out = {}
    for name in branches:
        refs = out[name] = FileRefs()
        vdir = f"{BRANCH_TREE}/{name}/{VERSIONS_DIR}"
        for entry in store.list(vdir):
            if entry.endswith(".manifest"):
                rel = f"{vdir}/{entry}"
                mf = parse_manifest_file(store.read(rel), store.uri(rel))
                refs.update(manifest_refs(mf.manifest, mf.index_section, store.root_path, store.uri(rel),
                                          own_base=False))
    return out


def read_all_refs(store: ObjectStore) -> tuple[dict[str, int], set[int], FileRefs]:
    """(tag -> version, versions branches protect, files branches reference under our root)."""
    tags = read_refs(store, TAGS_DIR, tag_version)
    branches = ref_files(store, BRANCHES_DIR)  # one listing for both uses
    parents = {name: v for name, (data, where) in branches.items()
               if (v := branch_parent_version(data, where)) is not None}
    per_branch = branch_files(store, sorted(branches))
    branch_refs = FileRefs()
    for refs in per_branch.values():
        branch_refs.update(refs)
    # as pylance 14: a branch protects its parent version only when it uses files of this root
    protected = {v for name, v in parents.items() if not per_branch[name].empty()}
    return tags, protected, branch_refs


def cleanup_policy(versions: list[VersionInfo], older_than: timedelta | None, retain_versions: int | None,
                   delete_unverified: bool, unverified_older_than: timedelta,
                   error_if_tagged: bool) -> Policy:
    """The plan's thresholds from a vacuum's options (neither age nor count: 14 days, as pylance)."""
    if older_than is None and retain_versions is None:
        older_than = DEFAULT_OLDER_THAN
    now = time.time()
    if older_than is not None and older_than < timedelta(0):
        raise InvalidInputError(f"older_than must not be negative, got {older_than}")
    before_ts = None if older_than is None else int((now - older_than.total_seconds()) * 1e9)
    before_v = None if retain_versions is None else retain_before_version([v.version for v in versions],
                                                                            retain_versions)
    return Policy(before_ts, before_v, delete_unverified, now - unverified_older_than.total_seconds(),
                  error_if_tagged)


@dataclass
class CleanupFigures:
    """What a vacuum keeping ``older_than`` would find, from one read of the manifests and one
    listing (in this process; no Spark job): versions, the old ones and the bytes only they
    use (``old_bytes``: data, deletion, index and transaction files plus their manifests), the
    bytes of files no version references whatever their age (``unreferenced_bytes``), and the
    commit time of every version (epoch seconds)."""

    versions: int
    old_versions: int
    old_bytes: int
    unreferenced_bytes: int
    version_times: list[float]


def cleanup_figures(uri: str, *, older_than: timedelta,
                    storage_options: dict[str, Any] | None = None) -> CleanupFigures:
    """``CleanupFigures`` of ``uri`` (the health figures of ``fleet.health``), in this process."""
    store = ObjectStore(uri, storage_options or {})
    versions = read_versions(store, manifest_paths(store))
    latest = max(v.version for v in versions)
    tags, protected, branch_refs = read_all_refs(store)
    listing = [f for prefix in listing_prefixes(store) for f in list_files(store, prefix)]
    sizes = {f.path: f.size for f in listing}
    out = []
    for unverified in (False, True):
        policy = cleanup_policy(versions, older_than, None, unverified, timedelta(days=7), False)
        plan = plan_cleanup(versions, latest, tags, protected, branch_refs, listing, policy)
        out.append((len(plan.old_versions),
                    sum(sizes.get(r.path, r.size) for r in [*plan.files, *plan.manifests])))
    (old, old_bytes), (_, every) = out
    return CleanupFigures(len(versions), old, old_bytes, max(0, every - old_bytes),
                          sorted(v.timestamp_nanos / 1e9 for v in versions))
