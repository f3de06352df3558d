"""Compaction on Spark: plan on the driver, rewrite task groups on executors, commit one
Rewrite per commit batch on the driver.

Phases (``spark.runtime.job``: timed, tagged, shown as the Spark job description): ``plan`` ->
``rewrite`` -> ``commit`` (the last two once per commit batch). Files written by attempts that
do not land (failed commits, retried or speculative task attempts) are deleted at once: every
file is named with the job id, so one listing of ``data/`` finds them (lance#7207 reports
tables tripling from such orphans).

Indices (issue #11): fragments covered by an index are compacted like any other (never a group
mixing fragments covered by different sets of indices); what happens to each index is decided
and prepared in ``spark.indices.index_remap`` (rewritten under a new uuid, covered by the fragment
reuse index, or uncovered as pylance does) and lands in the same Rewrite commit. Left alone
(``indexed_fragments_skipped``, planned as excluded): fragments the user excluded, fragments
covered by an index recording no fragment bitmap, and, without stable row ids, fragments with
deleted rows covered by an IVF_HNSW_* index whose files this library does not know (pylance 14
cannot read HNSW through the fragment reuse index then). Known IVF_HNSW_* indices are remapped
by rebuilding their graphs (``index.vector.hnsw``), with ``defer_index_remap`` too when the rewritten
fragments had deleted rows.

When the version read has indices (or ``defer_index_remap`` writes a fragment reuse index),
new fragment ids are reserved (a ReserveFragments commit, as pylance does) before the Rewrite
commit, so an index remap can address rows of the new fragments before the Rewrite lands; such
a compaction moves the version by two (``read_version`` 25 -> ``new_version`` 27, ``commits``
1, ``reservation_versions`` [26]). Without indices the Rewrite alone numbers its new fragments
as it commits (Lance's manifest builder does so for fragments of id 0): one version and two
requests fewer than pylance, which reserves always. Should they turn out to need ids before -
rows deleted meanwhile to carry onto them as deletion files named with their ids, or an index
created meanwhile - they are reserved then, on top of the latest version, and the Rewrite
retried (``index_remap.commit_rewrite``).

Both commits work on the manifest's fragment bytes (``table.format.fragment_run``): the
reservation writes the previous fragments back as they were read, the Rewrite drops the old
ones by position and appends the new ones, and its transaction lists the old fragments as
slices of those bytes - no object per fragment (100 000 fragments: ~0.1 s for both).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from lance_spark_ops.errors import UnsupportedError
from lance_spark_ops.namespace.target import with_table_target
from lance_spark_ops.spark.files.compaction_options import CompactionOptions
from lance_spark_ops.spark.files.compaction_plan import (
    CompactionTask,
    FragmentStats,
    FragmentTable,
    plan_compaction,
    rows_per_file,
)
from lance_spark_ops.spark.files.rewrite_tasks import RewriteResult, RewriteSpec, open_in_driver, run_rewrite
from lance_spark_ops.spark.indices.index_remap import (
    IndexChanges,
    check_defer_allowed,
    commit_rewrite,
    covering_columns,
    make_remapper,
)
from lance_spark_ops.spark.runtime.job import Job, referenced_data_files
from lance_spark_ops.spark.runtime.tuning import Tuning
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.format.fragment import DataFragment
from lance_spark_ops.table.format.fragment_columns import FragmentColumns
from lance_spark_ops.table.format.fragment_run import RunFragments, fragment_ids
from lance_spark_ops.table.format.transaction import ReserveFragments, RewriteGroup


@dataclass
class CompactionMetrics:
    """What a compaction did. ``commits`` counts the Rewrite commits; before one that adds
    fragments to a dataset with indices a ReserveFragments commit takes their ids (as pylance's
    compaction does always) - its version is in ``reservation_versions``. So one Rewrite goes
    from ``read_version`` 25 to ``new_version`` 27 with ``commits`` 1 and
    ``reservation_versions`` [26], or, without indices, to 26 with none (with no concurrent
    writer: new_version - read_version == commits + len(reservation_versions))."""

    uri: str
    read_version: int
    new_version: int | None = None
    dry_run: bool = False
    tasks: int = 0
    commits: int = 0
    reservation_versions: list[int] = field(default_factory=list)  # the ReserveFragments commits
    fragments_removed: int = 0
    fragments_added: int = 0
    files_removed: int = 0
    files_added: int = 0
    rows_read: int = 0
    rows_written: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    indexed_fragments_skipped: int = 0
    # per index type (BTREE, BITMAP, VECTOR, ...): rewritten through the address map, covered
    # by a new fragment reuse index version, no longer covering the rewritten fragments
    # (ZONEMAP / BLOOMFILTER), bitmap recalculated (stable row ids)
    indices_remapped: dict[str, int] = field(default_factory=dict)
    indices_frag_reuse: dict[str, int] = field(default_factory=dict)
    indices_dropped: dict[str, int] = field(default_factory=dict)
    indices_recalculated: dict[str, int] = field(default_factory=dict)
    orphan_files_deleted: int = 0
    fragments_binary_copied: int = 0
    pages_binary_copied: int = 0
    pages_reencoded_for_deletions: int = 0
    worker_peak_rss_bytes: int = 0  # the driver's, for tasks run there
    tasks_in_driver: int = 0  # rewrite tasks run in the driver's process (Tuning.driver_rewrite_bytes)
    seconds: dict[str, float] = field(default_factory=dict)
    plan: list[list[int]] = field(default_factory=list)
    job_tag: str = ""  # the Spark tag of the job's Spark jobs (``spark.interruptTag``)


def fragment_stats(ds: Dataset, excluded: frozenset[int] = frozenset()) -> tuple[FragmentTable, int]:
    """Planning inputs, as arrays; returns (stats, number of indexed fragments withheld: those
    the user excluded and those covered by an index without a fragment bitmap)."""
    cols = ds.manifest.fragment_columns()  # no fragment object built or decoded
    physical, deleted = _known_counts(ds, cols)
    cover, covers, blocked = covering_columns(ds)
    covered = np.array([bool(c) for c in covers])[cover]
    withheld = blocked.copy()
    if excluded:
        withheld |= covered & np.isin(cols.id, np.fromiter(excluded, np.int64))
    # a blocked fragment acts as a boundary (planned as excluded): no deletions, no bytes
    stats = FragmentTable(cols.id, physical, np.where(blocked, 0, deleted),
                          np.where(blocked, 0, cols.data_bytes), cover, covers, blocked)
    return stats, int(withheld.sum())


def _known_counts(ds: Dataset, cols: Any) -> tuple[np.ndarray, np.ndarray]:
    """Physical and deleted rows per fragment; those a manifest of pylance <= 0.7 does not
    record (0 in the columns), or all when it records no writer version (its counts may be
    wrong: the commit counts them again), read from the fragment's files."""
    missing = np.flatnonzero((cols.physical_rows == 0) | (cols.has_deletion & (cols.deleted_rows == 0))
                             | (ds.manifest.writer_version is None))
    if not len(missing):
        return cols.physical_rows, cols.deleted_rows
    physical, deleted = cols.physical_rows.copy(), cols.deleted_rows.copy()
    frags = ds.fragments
    for k in missing.tolist():
        physical[k] = ds.physical_rows(replace(frags[k], physical_rows=None))
        if frags[k].deletion_file is not None:
            deleted[k] = len(ds.deleted_offsets(frags[k]))
    return physical, deleted


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def _target_version(ds: Dataset, opts: CompactionOptions) -> str:
    wanted = opts.data_storage_version or ds.data_storage_version
    aliases = {"stable": "2.2", "legacy": "0.1"}
    version = aliases.get(wanted, wanted)
    if version not in ("0.1", "2.0", "2.1", "2.2"):
        raise UnsupportedError(f"cannot write data storage version {wanted!r} (supported: 0.1, 2.0, 2.1, "
                               "2.2)")
    if version != ds.data_storage_version and opts.migrate_legacy and version != "0.1" \
            and _version_key(version) > _version_key(ds.data_storage_version):
        return version  # 0.1 -> 2.x or an older 2.x -> a newer one: every fragment, one commit
    if version != ds.data_storage_version:
        # pylance 14 refuses to open a dataset whose data files differ from the manifest's
        # data storage version ("mixed data-file-version capability is not enabled")
        raise UnsupportedError(f"dataset stores {ds.data_storage_version} files; compaction writes the "
                               f"dataset's own file version (asked for {version}): pylance cannot read "
                               "a dataset that mixes file versions"
                               + (" (migrate_legacy=True rewrites every fragment in one commit)"
                                  if _version_key(version) > _version_key(ds.data_storage_version) else ""))
    return version


def _migration_tasks(ds: Dataset, stats: FragmentTable, indexed: int,
                     opts: CompactionOptions) -> list[CompactionTask]:
    """Every fragment, in consecutive groups of about ``target_rows_per_fragment`` live rows
    covered by the same indices (a group never mixes fragments of different indices, as any
    compaction's): moving a dataset to a newer file version must rewrite all of them in one
    commit."""
    if indexed:
        raise UnsupportedError(f"{indexed} fragment(s) are excluded or covered by an index that cannot be "
                               "remapped (no fragment bitmap); a migration must rewrite every fragment",
                               path=ds.uri)
    tasks: list[CompactionTask] = []
    group: list[FragmentStats] = []
    rows = 0  # live rows of ``group``

    def close() -> None:
        if group:
            tasks.append(CompactionTask(len(tasks), tuple(s.id for s in group), rows,
                                        sum(s.bytes for s in group)))
            group.clear()

    for s in stats:
        if group and (rows + s.live_rows > opts.target_rows_per_fragment or s.indices != group[0].indices):
            close()
            rows = 0
        group.append(s)
        rows += s.live_rows
    close()
    return tasks


@with_table_target
def compact(spark: Any, uri: str, options: CompactionOptions | Mapping[str, Any] | None = None, *,
            storage_options: dict[str, Any] | None = None,
            tuning: Tuning | None = None, **overrides: Any) -> CompactionMetrics:
    """Compact the dataset at ``uri``. ``options``: a ``CompactionOptions`` or a mapping of its
    fields (pylance's ``CompactionOptions`` plus ``dry_run`` and ``commit_every``); keyword
    ``overrides`` apply on top. ``spark=None`` runs the tasks in this process."""
    opts = CompactionOptions.resolve(options, overrides)
    metrics = CompactionMetrics(uri=uri, read_version=0, dry_run=opts.dry_run)
    with Job(spark, "compact", uri, metrics, tuning) as job:
        with job.phase("plan"):
            ds, file_version, stats, skipped = _open_for_rewrite(uri, storage_options, opts)
            migrate = file_version != ds.data_storage_version
            if migrate:  # legacy -> 2.x: every fragment, one commit
                tasks = _migration_tasks(ds, stats, skipped, opts)
            else:
                # never rewritten here: planned as excluded fragments
                excluded = (*opts.excluded_fragment_ids, *stats.blocked_ids())
                tasks = plan_compaction(stats, replace(opts, excluded_fragment_ids=excluded))
            _planned(metrics, ds, tasks, skipped)
        if opts.dry_run or not tasks:
            return metrics
        per_commit = len(tasks) if migrate else opts.commit_every or len(tasks)
        _rewrite_batches(job, ds, [tasks[i:i + per_commit] for i in range(0, len(tasks), per_commit)], opts,
                         file_version, metrics, new_storage_version=file_version if migrate else None)
    return metrics


@with_table_target
def materialize_deletions(spark: Any, uri: str, threshold: float = 0.0, *,
                          storage_options: dict[str, Any] | None = None, tuning: Tuning | None = None,
                          data_storage_version: str | None = None,
                          defer_index_remap: bool = False, dry_run: bool = False) -> CompactionMetrics:
    """Rewrite every fragment whose deleted fraction is above ``threshold``, one fragment in
    and one out (no merging), so no deletion file remains on them. Row ids are preserved
    under stable row ids; commit and conflict rules as ``compact``. ``dry_run``: plan only
    (``metrics.plan`` lists the fragments; ``spark`` may be None)."""
    metrics = CompactionMetrics(uri=uri, read_version=0, dry_run=dry_run)
    opts = CompactionOptions(data_storage_version=data_storage_version, target_rows_per_fragment=2**62,
                             defer_index_remap=defer_index_remap)
    with Job(spark, "materialize_deletions", uri, metrics, tuning) as job:
        with job.phase("plan"):
            ds, file_version, stats, skipped = _open_for_rewrite(uri, storage_options, opts)
            pick = np.flatnonzero((stats.deleted_rows != 0) & (stats.deleted_fraction() > threshold))
            ids, live, size = (a[pick].tolist() for a in (stats.id, stats.live_rows, stats.bytes))
            tasks = [CompactionTask(i, (f,), r, b)
                     for i, (f, r, b) in enumerate(zip(ids, live, size, strict=True))]
            _planned(metrics, ds, tasks, skipped)
        if tasks and not dry_run:
            _rewrite_batches(job, ds, [tasks], opts, file_version, metrics)
    return metrics


def _open_for_rewrite(uri: str, storage_options: dict[str, Any] | None, opts: CompactionOptions
                      ) -> tuple[Dataset, str, FragmentTable, int]:
    """The latest version, the file version to write, planning inputs, indexed fragments withheld."""
    ds = Dataset.open(uri, storage_options=storage_options)
    ds.check_writable()
    ds.check_consistent("compaction")
    file_version = _target_version(ds, opts)
    check_defer_allowed(ds, opts.defer_index_remap)
    stats, skipped = fragment_stats(ds, frozenset(opts.excluded_fragment_ids))
    return ds, file_version, stats, skipped


def _planned(metrics: CompactionMetrics, ds: Dataset, tasks: list[CompactionTask], skipped: int) -> None:
    metrics.read_version = ds.version
    metrics.tasks = len(tasks)
    metrics.indexed_fragments_skipped = skipped
    metrics.plan = [list(t.fragment_ids) for t in tasks]


def _rewrite_batches(job: Job, ds: Dataset, batches: list[list[CompactionTask]], opts: CompactionOptions,
                     file_version: str, metrics: CompactionMetrics,
                     new_storage_version: str | None = None) -> Dataset:
    """Rewrite and commit batch after batch. A failed job (a task that failed all its
    attempts, a refused binary copy, an incompatible commit) deletes every file it wrote that
    no version it committed holds (the job's cleanup contract); then the orphans of retried or
    speculative attempts."""
    with job.cleanup_on_failure(ds.store):
        for b, batch in enumerate(batches):
            ds = _rewrite_and_commit(job, ds, batch, opts, file_version, metrics,
                                     f"batch {b + 1}/{len(batches)}", new_storage_version)
    metrics.new_version = ds.version
    metrics.orphan_files_deleted += job.delete_other_attempts(ds.store, referenced_data_files(ds))
    return ds


def _rewrite_and_commit(job: Job, ds: Dataset, batch: list[CompactionTask], opts: CompactionOptions,
                        file_version: str, metrics: CompactionMetrics, detail: str,
                        new_storage_version: str | None = None) -> Dataset:
    tuning = job.tuning
    # one small task: in this process (no Spark job, this process's S3 client; Tuning.driver_rewrite_bytes)
    in_driver = len(batch) == 1 and batch[0].bytes <= job.tuning.driver_rewrite_limit()
    # tasks elsewhere get their share of the manifest's bytes with them while the job's share lasts
    inline_left = 0 if in_driver or job.spark is None else tuning.slice_inline_job_bytes
    specs = []
    for t in batch:
        slc = ds.fragment_slice(t.fragment_ids, tuning.fragment_chunk,
                                min(tuning.slice_inline_bytes, inline_left))
        inline_left -= slc.inline_bytes() if slc is not None else 0
        specs.append(RewriteSpec(ds.uri, ds.version, t.fragment_ids, file_version,
                                 rows_per_file(t.live_rows, opts.target_rows_per_fragment),
                                 opts.max_bytes_per_file, storage_options=dict(ds.store.storage_options),
                                 mode=opts.compaction_mode, manifest_slice=slc,
                                 fragment_chunk=tuning.fragment_chunk, run_fragments=tuning.run_fragments,
                                 paths_kept=tuning.paths_kept, file_tuning=tuning.file))
    if in_driver or job.spark is None:  # the tasks read the version this process opened
        for spec in specs:
            open_in_driver(spec, job.job_id, ds)
    with job.phase("rewrite", tasks=len(specs), detail=detail) as ph:
        results: list[RewriteResult] = job.run_tasks(specs, run_rewrite, costs=[t.bytes for t in batch],
                                                     in_driver=in_driver)
        metrics.tasks_in_driver += len(specs) if in_driver and job.spark is not None else 0
        ph.add(rows=sum(r.rows_written for r in results), bytes=sum(r.bytes_written for r in results))
    cols = ds.manifest.fragment_columns()  # from the manifest's bytes: no fragment object built
    with job.phase("commit"):
        job.before_commit(metrics.commits + 1)
        new = [f for r in results for f in r.new_fragments]
        # ids reserved first only when an index change needs them (see ``_needs_reserved_ids``);
        # else the Rewrite's commit numbers its new fragments, as Lance's manifest builder does
        latest = _reserve_ids(ds, new) if _needs_reserved_ids(ds, opts) else ds
        if latest is not ds:
            metrics.reservation_versions.append(latest.version)
        groups = [RewriteGroup(old, r.new_fragments)
                  for old, r in zip(_old_fragments(ds, results), results, strict=True)]
        # a migration (new_storage_version) commits every fragment at once in the new version;
        # its indices are remapped as any compaction's
        extra = {} if new_storage_version is None else {"data_storage_version": new_storage_version}
        # the version opened, or our reservation a moment old: the Rewrite goes on top unlisted
        # (taken meanwhile: one failed put, then listed and checked as usual)
        extra["expected_latest"] = latest.version
        new_ds, changes = commit_rewrite(ds, groups, opts.defer_index_remap, latest.version,
                                         make_remapper(job), known=(latest,),
                                         inline_limit=job.tuning.reuse_inline_bytes,
                                         reserve=lambda base: _reserve_late(base, new, metrics), **extra)
    metrics.commits += 1
    _count(metrics, cols, groups, results)
    if changes is not None:
        _count_indices(metrics, changes)
    return new_ds


def _old_fragments(ds: Dataset, results: list[RewriteResult]) -> list[Sequence[DataFragment]]:
    """Each task's old fragments. While the manifest keeps its fragments as wire bytes, slices
    of them (``RunFragments``: ids and bytes, no object per fragment; the commits carry the
    other fragments over as bytes too); else fragment objects."""
    run = ds.manifest.fragment_run()
    if run is not None and len(run):
        ids = run.columns.id
        order = np.argsort(ids, kind="stable")
        out: list[Sequence[DataFragment]] = []
        for r in results:
            want = np.asarray(r.fragment_ids, np.int64)
            at = order[np.minimum(np.searchsorted(ids, want, sorter=order), len(ids) - 1)]
            if not bool((ids[at] == want).all()):
                break
            out.append(RunFragments(run.take(at)))
        else:
            return out
    by_id = ds.manifest.fragments_with_ids(i for r in results for i in r.fragment_ids)
    return [[by_id[i] for i in r.fragment_ids] for r in results]


def _count(metrics: CompactionMetrics, cols: FragmentColumns, groups: list[RewriteGroup],
           results: list[RewriteResult]) -> None:
    old_ids = np.concatenate([fragment_ids(g.old_fragments) for g in groups])
    metrics.files_removed += int(cols.num_files[np.isin(cols.id, old_ids)].sum())  # no fragment decoded
    for g, r in zip(groups, results, strict=True):
        metrics.fragments_removed += len(g.old_fragments)
        metrics.fragments_added += len(g.new_fragments)
        metrics.files_added += len(r.files)
        metrics.rows_read += r.rows_read
        metrics.rows_written += r.rows_written
        metrics.fragments_binary_copied += r.fragments_copied
        metrics.pages_binary_copied += r.pages_copied
        metrics.pages_reencoded_for_deletions += r.pages_reencoded
        metrics.bytes_read += r.bytes_read
        metrics.bytes_written += r.bytes_written
        metrics.worker_peak_rss_bytes = max(metrics.worker_peak_rss_bytes, r.peak_rss_bytes)


def _needs_reserved_ids(ds: Dataset, opts: CompactionOptions) -> bool:
    """Whether the new fragments need their final ids before the Rewrite: when the version
    read has indices (their remapped bitmaps name the new fragments) or a fragment reuse
    index is to be written (``defer_index_remap``). pylance reserves always, a version and
    two requests more; without indices the Rewrite numbers them on commit as Lance's builder
    does for fragments of id 0. An index created meanwhile makes ``commit_rewrite`` reserve
    them on its retry."""
    return opts.defer_index_remap or ds.manifest_file.index_section is not None


def _reserve_late(base: Dataset, new_fragments: list, metrics: CompactionMetrics) -> Dataset:
    """``_reserve_ids`` on a retry's base (an index was created meanwhile), counted."""
    reserved = _reserve_ids(base, new_fragments)
    metrics.reservation_versions.append(reserved.version)
    return reserved


def _reserve_ids(ds: Dataset, new_fragments: list) -> Dataset:
    """Give the new fragments final ids by committing a ReserveFragments first (as pylance's
    compaction does); the Rewrite then keeps them. Returns the latest version known."""
    if not new_fragments:
        return ds
    # put on top of the version the job opened without listing first (taken meanwhile: one
    # failed put, then listed and checked as usual)
    reserved = ds.commit(ReserveFragments(len(new_fragments)), ds.version, expected_latest=ds.version)
    top = reserved.manifest.max_fragment_id
    for i, frag in enumerate(new_fragments):
        frag.id = top - len(new_fragments) + 1 + i
    return reserved


def _count_indices(metrics: CompactionMetrics, changes: IndexChanges) -> None:
    counts = changes.actions.counts()
    for action, target in (("remap", metrics.indices_remapped), ("reuse", metrics.indices_frag_reuse),
                           ("uncover", metrics.indices_dropped), ("recalc", metrics.indices_recalculated)):
        for kind, n in counts.get(action, {}).items():
            target[kind] = target.get(kind, 0) + n
