"""Executor side of a vacuum: list one prefix, read a batch of manifests, delete a batch of files.

Each function takes a small picklable descriptor and returns a small result, for
``spark.runtime.runner.run_tasks``. Listings never follow symbolic links (a linked directory is not
entered; a linked file is reported as the link itself, whose deletion removes only the link),
and every path is checked to lie under the dataset root before it is returned or deleted.
"""

from __future__ import annotations

import os
import posixpath
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from lance_spark_ops.errors import CorruptFileError, LanceError
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.spark.runtime.runner import TaskContext
from lance_spark_ops.table.cleanup import ListedFile, VersionInfo, guard_path, manifest_refs
from lance_spark_ops.table.format.manifest import parse_manifest_file
from lance_spark_ops.table.paths import safe_relative

_LOCAL = ("file", "local")


@dataclass(frozen=True)
class ListTask:
    uri: str
    storage_options: dict[str, Any] = field(repr=False)  # secrets: not in reprs
    prefix: str  # relative, e.g. "data" or "_indices/<uuid>"


@dataclass(frozen=True)
class ReadManifestsTask:
    uri: str
    storage_options: dict[str, Any] = field(repr=False)  # secrets: not in reprs
    manifests: tuple[tuple[int, str], ...]  # (version, relative path)


@dataclass(frozen=True)
class DeleteTask:
    uri: str
    storage_options: dict[str, Any] = field(repr=False)  # secrets: not in reprs
    paths: tuple[str, ...]
    sizes: tuple[int, ...]
    max_per_second: float | None


@dataclass(frozen=True)
class DeleteResult:
    deleted: tuple[str, ...]
    bytes_removed: int
    failed: tuple[tuple[str, str], ...]  # (path, error)


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
            st = os.lstat(full)
            out.append(ListedFile(os.path.relpath(full, root).replace(os.sep, "/"), st.st_size, st.st_mtime))
    return out


def list_prefix(task: ListTask, ctx: TaskContext | None = None) -> list[ListedFile]:
    """Every object under ``task.prefix`` (recursively), paths relative to the dataset root."""
    store = ObjectStore(task.uri, task.storage_options)
    if store.protocol in _LOCAL:
        files = _walk_local(store.root_path, task.prefix)
    else:
        base = store.full_path(task.prefix)
        try:
            found = store.fs.find(base, detail=True, withdirs=False)
        except FileNotFoundError:
            found = {}
        root = store.root_path.rstrip("/") + "/"
        files = []
        for path, info in found.items():
            p = str(path)
            p = p if p.startswith("/") or not root.startswith("/") else "/" + p
            if not p.startswith(root):
                raise CorruptFileError(f"listing returned {p!r}, outside the dataset root",
                                       path=store.uri(""))
            files.append(ListedFile(p[len(root):], int(info.get("size") or 0), _mtime(info)))
    for f in files:
        safe_relative(f.path, "listed", store.uri(task.prefix))
        if f.path != task.prefix and not f.path.startswith(task.prefix.rstrip("/") + "/"):
            raise CorruptFileError(f"listing returned {f.path!r}, outside {task.prefix!r}",
                                   path=store.uri(""))
    return files


def read_manifests(task: ReadManifestsTask, ctx: TaskContext | None = None) -> list[VersionInfo]:
    """Parse each manifest and keep only what a vacuum needs (version, time, references)."""
    store = ObjectStore(task.uri, task.storage_options)
    out = []
    for version, rel in task.manifests:
        where = store.uri(rel)
        mf = parse_manifest_file(store.read(rel), where)
        m = mf.manifest
        if m.version != version:
            raise CorruptFileError(f"manifest file for version {version} holds version {m.version}",
                                   path=where)
        refs = manifest_refs(m, mf.index_section, store.root_path, where)
        out.append(VersionInfo(m.version, m.timestamp_nanos, rel, refs))
    return out


def _inside_root(store: ObjectStore, rel: str) -> bool:
    """Local files: the file's directory really lies under the root (no linked directory)."""
    if store.protocol not in _LOCAL:
        return True
    real_root = os.path.realpath(store.root_path)
    real_dir = os.path.realpath(os.path.dirname(store.full_path(rel)))
    return real_dir == real_root or real_dir.startswith(real_root + os.sep)


def delete_files(task: DeleteTask, ctx: TaskContext | None = None) -> DeleteResult:
    """Delete each path (missing ones count as deleted), at most ``max_per_second``."""
    store = ObjectStore(task.uri, task.storage_options)
    deleted, failed, removed_bytes = [], [], 0
    start = time.monotonic()
    for i, (rel, size) in enumerate(zip(task.paths, task.sizes, strict=True)):
        if task.max_per_second:  # delete i may start once i deletes' worth of time has passed
            wait = start + i / task.max_per_second - time.monotonic()
            if wait > 0:
                time.sleep(wait)
        try:
            guard_path(rel)
            if not _inside_root(store, rel):
                raise CorruptFileError("directory is a link leading outside the dataset root",
                                       path=store.uri(rel))
            store.delete(rel)
        except (OSError, LanceError) as e:
            failed.append((rel, f"{type(e).__name__}: {e}"))
            continue
        deleted.append(rel)
        removed_bytes += size
    if task.max_per_second:  # the next batch may start once this one's time slot is used up
        wait = start + len(task.paths) / task.max_per_second - time.monotonic()
        if wait > 0:
            time.sleep(wait)
    return DeleteResult(tuple(deleted), removed_bytes, tuple(failed))


def top_entries(store: ObjectStore, prefix: str) -> list[str]:
    """``prefix/<name>`` for each entry directly under ``prefix`` (split of a listing)."""
    return [posixpath.join(prefix, name) for name in store.list(prefix)]
