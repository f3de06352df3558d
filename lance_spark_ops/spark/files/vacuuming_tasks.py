"""Executor side of a vacuum: list one prefix, read a batch of manifests, delete a batch of files.

Each function takes a small picklable descriptor and returns a small result, for
``spark.runtime.runner.run_tasks``; the listing and the manifest reads are ``table.cleanup_scan``'s.
Listings never follow symbolic links (a linked directory is not entered; a linked file is
reported as the link itself, whose deletion removes only the link), and every path is checked
to lie under the dataset root before it is returned or deleted.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from lance_spark_ops.errors import CorruptFileError, LanceError
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.spark.runtime.runner import TaskContext
from lance_spark_ops.table.cleanup import ListedFile, VersionInfo, guard_path
from lance_spark_ops.table.cleanup_scan import LOCAL_PROTOCOLS, list_files, read_versions


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


def list_prefix(task: ListTask, ctx: TaskContext | None = None) -> list[ListedFile]:
    """Every object under ``task.prefix`` (recursively), paths relative to the dataset root."""
    return list_files(ObjectStore(task.uri, task.storage_options), task.prefix)


def read_manifests(task: ReadManifestsTask, ctx: TaskContext | None = None) -> list[VersionInfo]:
    """Parse each manifest and keep only what a vacuum needs (version, time, references)."""
    return read_versions(ObjectStore(task.uri, task.storage_options), task.manifests)


def _inside_root(store: ObjectStore, rel: str) -> bool:
    """Local files: the file's directory really lies under the root (no linked directory)."""
    if store.protocol not in LOCAL_PROTOCOLS:
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

