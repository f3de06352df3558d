"""Vacuum: remove old versions of a Lance dataset and the files only they referenced.

Semantics are pylance 14's ``cleanup_old_versions`` (see ``table.cleanup``). The driver reads
the refs and manifests (spread over tasks when there are many), listing runs as one task per
prefix (``data/``, ``_deletions/``, ``_transactions/``, ``_versions/``, each
``_indices/<uuid>/``), and deletes run in batches on executors, rate-limited. Unreferenced
files go first and old manifests last, so an interrupted vacuum leaves every old manifest
whose files may be gone still listed as old, and a rerun finishes the job; an old manifest
naming a file that failed to delete is kept for the same reason.

Runs on the job scaffold (``spark.runtime.job``): phases ``read`` (manifests and refs) -> ``list`` ->
``plan`` -> ``delete`` (unreferenced files, then old manifests), timed into
``VacuumMetrics.seconds``. A vacuum writes no files, so it has nothing of its own to clean up.
"""

from __future__ import annotations

import concurrent.futures
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import timedelta
from typing import Any

from lance_spark_ops.concurrency import map_concurrently
from lance_spark_ops.errors import InvalidInputError
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.namespace.target import with_table_target
from lance_spark_ops.spark.files.vacuuming_tasks import (
    DeleteResult,
    DeleteTask,
    ListTask,
    ReadManifestsTask,
    delete_files,
    list_prefix,
    read_manifests,
)
from lance_spark_ops.spark.runtime.job import Job
from lance_spark_ops.spark.runtime.tuning import Tuning
from lance_spark_ops.table.cleanup import (
    CleanupPlan,
    FileRefs,
    ListedFile,
    Removal,
    VersionInfo,
    classify_versions,
    plan_cleanup,
)
from lance_spark_ops.table.cleanup_scan import cleanup_policy, listing_prefixes, manifest_paths, read_all_refs
from lance_spark_ops.table.commit.handler import handler_for
from lance_spark_ops.table.paths import INDICES_DIR

_KIND_FIELD = {"data": "data_files_removed", "transaction": "transaction_files_removed",
               "index": "index_files_removed", "deletion": "deletion_files_removed"}

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")


def parse_duration(text: str) -> timedelta:
    """``"14d"`` -> 14 days; InvalidInputError naming the text for anything else."""
    m = _DURATION.match(text)
    if m is None:
        raise InvalidInputError(f"duration {text!r} is not a number followed by s, m, h, d or w (e.g. 14d)")
    return timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2)])


def as_duration(value: Any, name: str) -> timedelta | None:
    """A ``timedelta`` or one of the CLI's duration strings (``"0s"``, ``"7d"``) as a
    ``timedelta`` (None stays None); InvalidInputError naming ``name`` for anything else or a
    negative duration."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = parse_duration(value)
        except InvalidInputError as e:
            raise InvalidInputError(f"{name}: {e.message}") from None
    if not isinstance(value, timedelta):
        raise InvalidInputError(f"{name} must be a datetime.timedelta or a duration string such as '14d' or "
                                f"'0s', got {type(value).__name__} {value!r}")
    if value < timedelta(0):
        raise InvalidInputError(f"{name} must not be negative, got {value}")
    return value


REPR_PATHS = 20  # paths a VacuumMetrics repr shows before it counts the rest


@dataclass(repr=False)
class VacuumMetrics:
    """pylance's ``CleanupStats`` plus wall time; counts are what was (dry run: would be) removed.

    ``removed_paths`` lists those files (relative to the dataset root) - in a dry run the files
    that would go, as ``jobs/vacuum.py --dry-run`` prints them; ``failures`` the deletes that
    failed, ``(path, error)``. Both show in the repr (at most ``REPR_PATHS`` paths, then a count).
    """

    bytes_removed: int = 0
    old_versions: int = 0
    data_files_removed: int = 0
    transaction_files_removed: int = 0
    index_files_removed: int = 0
    deletion_files_removed: int = 0
    failed_deletes: int = 0
    seconds: dict[str, float] = field(default_factory=dict)  # per phase and "total"
    dry_run: bool = False
    files_listed: int = 0
    removed_paths: list[str] = field(default_factory=list)
    failures: list[tuple[str, str]] = field(default_factory=list)
    job_tag: str = ""  # the Spark tag of the job's Spark jobs (``spark.interruptTag``)

    def __repr__(self) -> str:
        def short(items: list[Any]) -> str:
            more = f", ... {len(items) - REPR_PATHS} more" if len(items) > REPR_PATHS else ""
            return "[" + ", ".join(map(repr, items[:REPR_PATHS])) + more + "]"

        shown = {f.name: getattr(self, f.name) for f in fields(self)}
        shown["removed_paths"], shown["failures"] = short(self.removed_paths), short(self.failures)
        return "VacuumMetrics(" + ", ".join(
            f"{k}={v if k in ('removed_paths', 'failures') else repr(v)}" for k, v in shown.items()) + ")"


def _versions(store: ObjectStore, job: Job, items: tuple[tuple[int, str], ...]) -> list[VersionInfo]:
    """Every manifest read: on the driver (in flight together) up to ``tuning.driver_manifests``,
    a Spark stage of tasks beyond (a stage costs more than a few rounds of requests)."""
    if len(items) <= job.tuning.driver_manifests:
        return read_manifests(ReadManifestsTask(store.root, store.storage_options, items))
    per = job.tuning.manifests_per_task
    chunks = [items[i : i + per] for i in range(0, len(items), per)]
    tasks = [ReadManifestsTask(store.root, store.storage_options, c) for c in chunks]
    job.plan_more(len(tasks))
    return [v for part in job.run_tasks(tasks, read_manifests) for v in part]


def _listing(store: ObjectStore, job: Job) -> list[ListedFile]:
    """Every file under the vacuum's prefixes: up to ``tuning.driver_prefixes`` prefixes listed on
    the driver side by side (a listing is a chain of pages wherever it runs), tasks beyond."""
    tasks = [ListTask(store.root, store.storage_options, p) for p in listing_prefixes(store)]
    if len(tasks) <= job.tuning.driver_prefixes:
        parts = map_concurrently(list_prefix, tasks, max_workers=max(1, job.tuning.driver_prefixes))
    else:
        job.plan_more(len(tasks))  # the progress line's planned total ("tasks 4/4", not 4/0)
        parts = job.run_tasks(tasks, list_prefix)
    return [f for part in parts for f in part]


def _delete(store: ObjectStore, removals: list[Removal], run: Callable, max_per_second: float | None,
            parallel: int, per_task: int, on_driver: int) -> list[DeleteResult]:
    batches = [removals[i : i + per_task] for i in range(0, len(removals), per_task)]
    # the rate is for the whole job: tasks that may run at once share it
    rate = None if not max_per_second else max_per_second / max(1, min(parallel, len(batches)))
    tasks = [DeleteTask(store.root, store.storage_options, tuple(r.path for r in b), tuple(r.size for r in b),
                        rate) for b in batches]
    if not tasks:
        return []
    if rate is None and len(removals) <= on_driver and not store.is_local:
        # an object store's batched deletes (DeleteObjects calls in flight together) on the driver
        return [delete_files(DeleteTask(store.root, store.storage_options, tuple(r.path for r in removals),
                                        tuple(r.size for r in removals), None))]
    return run(tasks, delete_files)


def _spare_new_commits(store: ObjectStore, plan: CleanupPlan, latest: int) -> CleanupPlan:
    """Drop from the plan every file a version committed since planning references (a restore
    may point at old files again); pylance does not look, this narrows the race to the deletes.
    The versions after ``latest`` come from one short listing (the newest first)."""
    names = handler_for(None, store).recent_versions(store, latest).paths
    new = tuple((v, rel) for v, rel in sorted(names.items()) if v > latest)
    if not new:
        return plan
    refs = FileRefs()
    for info in read_manifests(ReadManifestsTask(store.root, store.storage_options, new)):
        refs.update(info.refs)
    keep = refs.data | refs.deletions | refs.transactions
    files = [r for r in plan.files
             if r.path not in keep and not (r.kind == "index" and r.path.split("/")[1] in refs.index_uuids)]
    return CleanupPlan(plan.old_versions, plan.kept_versions + [v for v, _ in new], files)


def _manifests_to_delete(plan: CleanupPlan, failed: set[str]) -> list[Removal]:
    """Old manifests, except those naming a file whose delete failed: they keep it verified, so
    a rerun deletes it instead of waiting for it to age as an unreferenced file."""
    failed_uuids = {p.split("/")[1] for p in failed if p.startswith(f"{INDICES_DIR}/")}
    out = []
    for v, removal in zip(plan.old_versions, plan.manifests, strict=True):
        r = v.refs
        if failed & (r.data | r.deletions | r.transactions) or failed_uuids & r.index_uuids:
            continue
        out.append(removal)
    return out


def _count(m: VacuumMetrics, plan: CleanupPlan, sizes: dict[str, int], results: list[DeleteResult] | None
           ) -> None:
    """Fill ``m`` with what was (``results`` None: would be) removed."""
    m.dry_run, m.files_listed = results is None, len(sizes)
    gone = None if results is None else {p for r in results for p in r.deleted}
    for r in [*plan.files, *plan.manifests]:
        if gone is not None and r.path not in gone:
            continue
        m.removed_paths.append(r.path)
        m.bytes_removed += sizes.get(r.path, r.size)
        if r.kind == "manifest":
            m.old_versions += 1
        elif r.kind in _KIND_FIELD:
            setattr(m, _KIND_FIELD[r.kind], getattr(m, _KIND_FIELD[r.kind]) + 1)
    if results is not None:
        m.failures = [f for r in results for f in r.failed]
        m.failed_deletes = len(m.failures)


@with_table_target
def vacuum(spark: Any, uri: str, *, older_than: timedelta | str | None = None,
           retain_versions: int | None = None,
           delete_unverified: bool = False, unverified_older_than: timedelta | str = timedelta(days=7),
           error_if_tagged_old_versions: bool = True, dry_run: bool = False,
           storage_options: dict[str, Any] | None = None,
           tuning: Tuning | None = None, max_deletes_per_second: float | None = None,
           parallelism: int = 8) -> VacuumMetrics:
    """Remove old versions and unreferenced files (pylance's ``cleanup_old_versions``).

    ``older_than`` None and ``retain_versions`` None mean 14 days, as in pylance; with
    ``retain_versions`` alone only the version count decides; durations are ``timedelta`` or
    the CLI's strings (``"0s"``, ``"14d"``). ``spark=None`` runs every task
    in this process. ``dry_run`` lists and decides but deletes nothing.
    """
    older_than = as_duration(older_than, "older_than")
    unverified_older_than = as_duration(unverified_older_than, "unverified_older_than")
    store = ObjectStore(uri, storage_options or {})
    metrics = VacuumMetrics(dry_run=dry_run)
    with Job(spark, "vacuum", uri, metrics, tuning) as job:
        with job.phase("read"):
            # the refs and the manifests are independent: read side by side
            refs = concurrent.futures.ThreadPoolExecutor(1)
            try:
                refs_read = refs.submit(read_all_refs, store)
                versions = _versions(store, job, manifest_paths(store))
                tags, protected, branch_refs = refs_read.result()
            finally:
                refs.shutdown(wait=True)
            latest = max(v.version for v in versions)
            policy = cleanup_policy(versions, older_than, retain_versions, delete_unverified,
                                    unverified_older_than, error_if_tagged_old_versions)
            classify_versions(versions, latest, tags, protected, policy)  # refuse before listing
        with job.phase("list"):
            listing = _listing(store, job)
        with job.phase("plan"):
            plan = plan_cleanup(versions, latest, tags, protected, branch_refs, listing, policy)
            if not dry_run:
                plan = _spare_new_commits(store, plan, latest)
        sizes = {f.path: f.size for f in listing}
        results = None if dry_run else _delete_all(job, store, plan, max_deletes_per_second, parallelism)
        _count(metrics, plan, sizes, results)
    return metrics


def _delete_all(job: Job, store: ObjectStore, plan: CleanupPlan, max_per_second: float | None,
                parallel: int) -> list[DeleteResult]:
    """Unreferenced files first, then the old manifests whose files all went."""
    per = job.tuning.deletes_per_task
    with job.phase("delete", tasks=-(-len(plan.files) // per), detail="files") as ph:
        results = _delete(store, plan.files, job.run_tasks, max_per_second, parallel, per,
                          job.tuning.driver_deletes)
        ph.add(bytes=sum(r.bytes_removed for r in results))
    failed = {p for r in results for p, _ in r.failed}
    manifests = _manifests_to_delete(plan, failed)
    with job.phase("delete", tasks=-(-len(manifests) // per), detail="manifests") as ph:
        more = _delete(store, manifests, job.run_tasks, max_per_second, parallel, per,
                       job.tuning.driver_deletes)
        ph.add(bytes=sum(r.bytes_removed for r in more))
    return results + more
