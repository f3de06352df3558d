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

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import timedelta
from typing import Any

from lance_spark_ops.errors import InvalidInputError, NotFoundError
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
    top_entries,
)
from lance_spark_ops.spark.runtime.job import Job
from lance_spark_ops.table.cleanup import (
    BRANCH_TREE,
    BRANCHES_DIR,
    TAGS_DIR,
    CleanupPlan,
    FileRefs,
    ListedFile,
    Policy,
    Removal,
    VersionInfo,
    branch_parent_version,
    classify_versions,
    manifest_refs,
    plan_cleanup,
    retain_before_version,
    tag_version,
)
from lance_spark_ops.table.format.manifest import parse_manifest_file
from lance_spark_ops.table.paths import (
    DATA_DIR,
    DELETIONS_DIR,
    INDICES_DIR,
    TRANSACTIONS_DIR,
    VERSIONS_DIR,
    scan_versions,
)

DEFAULT_OLDER_THAN = timedelta(days=14)
MANIFESTS_PER_TASK = 64
DELETES_PER_TASK = 1000
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


def _read_refs(store: ObjectStore, prefix: str, parse: Callable[[bytes, str], int | None]) -> dict[str, int]:
    """``{name: version}`` of the ``*.json`` ref files under ``prefix`` (names may hold '/')."""
    listed = list_prefix(ListTask(store.root, store.storage_options, prefix)) if store.exists(prefix) else []
    out = {}
    for f in listed:
        if f.path.endswith(".json"):
            v = parse(store.read(f.path), store.uri(f.path))
            if v is not None:
                out[f.path[len(prefix) + 1 : -len(".json")]] = v
    return out


def _branch_refs(store: ObjectStore, branches: list[str]) -> dict[str, FileRefs]:
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


def _versions(store: ObjectStore, job: Job) -> list[VersionInfo]:
    scheme, names = scan_versions(store.list(VERSIONS_DIR), store.uri(VERSIONS_DIR))
    if not names:
        raise NotFoundError("no Lance dataset here: _versions/ holds no manifest", path=store.uri(""))
    items = tuple((v, f"{VERSIONS_DIR}/{n}") for v, n in sorted(names.items()))
    chunks = [items[i : i + MANIFESTS_PER_TASK] for i in range(0, len(items), MANIFESTS_PER_TASK)]
    tasks = [ReadManifestsTask(store.root, store.storage_options, c) for c in chunks]
    if len(tasks) == 1:
        return read_manifests(tasks[0])
    job.plan_more(len(tasks))
    return [v for part in job.run_tasks(tasks, read_manifests) for v in part]


def _policy(versions: list[VersionInfo], older_than: timedelta | None, retain_versions: int | None,
            delete_unverified: bool, unverified_older_than: timedelta, error_if_tagged: bool) -> Policy:
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


def _listing(store: ObjectStore, job: Job) -> list[ListedFile]:
    prefixes = [DATA_DIR, DELETIONS_DIR, TRANSACTIONS_DIR, VERSIONS_DIR, *top_entries(store, INDICES_DIR)]
    tasks = [ListTask(store.root, store.storage_options, p) for p in prefixes]
    job.plan_more(len(tasks))  # the progress line's planned total ("tasks 4/4", not 4/0)
    return [f for part in job.run_tasks(tasks, list_prefix) for f in part]


def _delete(store: ObjectStore, removals: list[Removal], run: Callable, max_per_second: float | None,
            parallel: int) -> list[DeleteResult]:
    batches = [removals[i : i + DELETES_PER_TASK] for i in range(0, len(removals), DELETES_PER_TASK)]
    # the rate is for the whole job: tasks that may run at once share it
    rate = None if not max_per_second else max_per_second / max(1, min(parallel, len(batches)))
    tasks = [DeleteTask(store.root, store.storage_options, tuple(r.path for r in b), tuple(r.size for r in b),
                        rate) for b in batches]
    return run(tasks, delete_files) if tasks else []


def _spare_new_commits(store: ObjectStore, plan: CleanupPlan, latest: int) -> CleanupPlan:
    """Drop from the plan every file a version committed since planning references (a restore
    may point at old files again); pylance does not look, this narrows the race to the deletes."""
    _scheme, names = scan_versions(store.list(VERSIONS_DIR), store.uri(VERSIONS_DIR))
    new = tuple((v, f"{VERSIONS_DIR}/{n}") for v, n in sorted(names.items()) if v > latest)
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
           storage_options: dict[str, Any] | None = None, max_deletes_per_second: float | None = None,
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
    with Job(spark, "vacuum", uri, metrics) as job:
        with job.phase("read"):
            versions = _versions(store, job)
            latest = max(v.version for v in versions)
            tags, protected, branch_refs = _refs(store)
            policy = _policy(versions, older_than, retain_versions, delete_unverified, unverified_older_than,
                             error_if_tagged_old_versions)
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


def _refs(store: ObjectStore) -> tuple[dict[str, int], set[int], FileRefs]:
    """(tag -> version, versions branches protect, files branches reference under our root)."""
    tags = _read_refs(store, TAGS_DIR, tag_version)
    parents = _read_refs(store, BRANCHES_DIR, branch_parent_version)
    per_branch = _branch_refs(store, sorted(_read_refs(store, BRANCHES_DIR, lambda _d, _w: 0)))
    branch_refs = FileRefs()
    for refs in per_branch.values():
        branch_refs.update(refs)
    # as pylance 14: a branch protects its parent version only when it uses files of this root
    protected = {v for name, v in parents.items() if not per_branch[name].empty()}
    return tags, protected, branch_refs


def _delete_all(job: Job, store: ObjectStore, plan: CleanupPlan, max_per_second: float | None,
                parallel: int) -> list[DeleteResult]:
    """Unreferenced files first, then the old manifests whose files all went."""
    with job.phase("delete", tasks=-(-len(plan.files) // DELETES_PER_TASK), detail="files") as ph:
        results = _delete(store, plan.files, job.run_tasks, max_per_second, parallel)
        ph.add(bytes=sum(r.bytes_removed for r in results))
    failed = {p for r in results for p, _ in r.failed}
    manifests = _manifests_to_delete(plan, failed)
    with job.phase("delete", tasks=-(-len(manifests) // DELETES_PER_TASK), detail="manifests") as ph:
        more = _delete(store, manifests, job.run_tasks, max_per_second, parallel)
        ph.add(bytes=sum(r.bytes_removed for r in more))
    return results + more


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


class _InProcess:
    """What ``_versions`` / ``_listing`` ask of a job, run in this process (health figures)."""

    def plan_more(self, tasks: int) -> None:
        pass

    def run_tasks(self, tasks: list[Any], fn: Callable[..., Any]) -> list[Any]:
        return [fn(t) for t in tasks]


def cleanup_figures(uri: str, *, older_than: timedelta,
                    storage_options: dict[str, Any] | None = None) -> CleanupFigures:
    """``CleanupFigures`` of ``uri`` (the health figures of ``fleet.health``)."""
    store = ObjectStore(uri, storage_options or {})
    here = _InProcess()
    versions = _versions(store, here)
    latest = max(v.version for v in versions)
    tags, protected, branch_refs = _refs(store)
    listing = _listing(store, here)
    sizes = {f.path: f.size for f in listing}
    out = []
    for unverified in (False, True):
        policy = _policy(versions, older_than, None, unverified, timedelta(days=7), False)
        plan = plan_cleanup(versions, latest, tags, protected, branch_refs, listing, policy)
        out.append((len(plan.old_versions),
                    sum(sizes.get(r.path, r.size) for r in [*plan.files, *plan.manifests])))
    (old, old_bytes), (_, every) = out
    return CleanupFigures(len(versions), old, old_bytes, max(0, every - old_bytes),
                          sorted(v.timestamp_nanos / 1e9 for v in versions))
