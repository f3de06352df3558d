"""Compaction on Spark: plan on the driver, rewrite task groups on executors, commit one
Rewrite per commit batch on the driver.

Phases (each shown as the Spark job description): ``plan`` -> ``rewrite group i/n`` ->
``commit``. Files written by attempts that do not land (failed commits, retried or
speculative task attempts) are deleted at once: every file is named with the job id, so one
listing of ``data/`` finds them (lance#7207 reports tables tripling from such orphans).

Indices: fragments covered by an index are left alone and counted in
``indexed_fragments_skipped``. Without stable row ids their rows would move under the index;
with them, pylance 14 still looks rows up through the index's fragment bitmap and loses rows
whose fragment changed unless the index itself is rewritten, which this job does not do.

New fragment ids are reserved (a ReserveFragments commit, as pylance does) before the
Rewrite commit, so a concurrent delete can be carried onto the new fragments as deletion
files named with their final ids.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pyroaring import BitMap

from lance_spark_ops.errors import CommitStateUnknown, UnsupportedError
from lance_spark_ops.spark.options import CompactionOptions
from lance_spark_ops.spark.plan import CompactionTask, FragmentStats, plan_compaction, rows_per_file
from lance_spark_ops.spark.runner import run_tasks, run_tasks_locally
from lance_spark_ops.spark.session import set_job_description
from lance_spark_ops.spark.tasks.rewrite import DATA_DIR, RewriteResult, RewriteSpec, run_rewrite
from lance_spark_ops.table.commit.commit import commit_transaction
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.format.transaction import ReserveFragments, Rewrite, RewriteGroup


@dataclass
class CompactionMetrics:
    uri: str
    read_version: int
    new_version: int | None = None
    dry_run: bool = False
    tasks: int = 0
    commits: int = 0
    fragments_removed: int = 0
    fragments_added: int = 0
    files_removed: int = 0
    files_added: int = 0
    rows_read: int = 0
    rows_written: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    indexed_fragments_skipped: int = 0
    orphan_files_deleted: int = 0
    fragments_binary_copied: int = 0
    pages_binary_copied: int = 0
    pages_reencoded_for_deletions: int = 0
    worker_peak_rss_bytes: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    plan: list[list[int]] = field(default_factory=list)


def fragment_stats(ds: Dataset, skip_indexed: bool) -> tuple[list[FragmentStats], int]:
    """Planning inputs; returns (stats, number of indexed fragments withheld)."""
    bitmaps = _index_bitmaps(ds)
    stats, skipped = [], 0
    for frag in ds.fragments:
        covering = frozenset(i for i, bm in enumerate(bitmaps) if frag.id in bm)
        if skip_indexed and covering:
            skipped += 1
            # An indexed fragment acts as a boundary: planning must not merge across it.
            stats.append(FragmentStats(frag.id, frag.physical_rows or 0, 0, 0, covering))
            continue
        stats.append(FragmentStats(frag.id, frag.physical_rows or 0, frag.num_deleted_rows or 0,
                                   sum(f.file_size_bytes or 0 for f in frag.files), covering))
    return stats, skipped


def _index_bitmaps(ds: Dataset) -> list[BitMap]:
    section = ds.manifest_file.index_section
    if section is None:
        return []
    return [BitMap.deserialize(idx.fragment_bitmap) if idx.fragment_bitmap else BitMap()
            for idx in section.indices]


def _target_version(ds: Dataset, opts: CompactionOptions) -> str:
    wanted = opts.data_storage_version or ds.data_storage_version
    aliases = {"stable": "2.2"}
    version = aliases.get(wanted, wanted)
    if version not in ("2.0", "2.1", "2.2"):
        raise UnsupportedError(f"cannot write data storage version {wanted!r} (supported: 2.0, 2.1, 2.2)")
    if version != ds.data_storage_version:
        # pylance 14 refuses to open a dataset whose data files differ from the manifest's
        # data storage version ("mixed data-file-version capability is not enabled")
        raise UnsupportedError(f"dataset stores {ds.data_storage_version} files; compaction writes the "
                               f"dataset's own file version (asked for {version}): pylance cannot read "
                               "a dataset that mixes file versions")
    return version


def compact(spark: Any, uri: str, storage_options: dict[str, Any] | None = None,
            **options: Any) -> CompactionMetrics:
    """Compact the dataset at ``uri``; options as pylance's ``CompactionOptions`` plus
    ``dry_run`` and ``commit_every``. ``spark=None`` runs the tasks in this process."""
    opts = CompactionOptions.from_kwargs(**options)
    t0 = time.perf_counter()
    ds = Dataset.open(uri, storage_options=storage_options)
    ds.check_writable()
    file_version = _target_version(ds, opts)
    stats, skipped = fragment_stats(ds, skip_indexed=True)
    tasks = plan_compaction(stats, opts)
    indexed = {s.id for s in stats if s.indices}
    tasks = [t for t in tasks if not indexed & set(t.fragment_ids)]
    metrics = CompactionMetrics(uri=uri, read_version=ds.version, dry_run=opts.dry_run, tasks=len(tasks),
                                indexed_fragments_skipped=skipped, plan=[list(t.fragment_ids) for t in tasks])
    metrics.seconds["plan"] = time.perf_counter() - t0
    if opts.dry_run or not tasks:
        metrics.seconds["total"] = time.perf_counter() - t0
        return metrics

    job_id = f"lso-{uuid.uuid4().hex[:12]}"
    per_commit = opts.commit_every or len(tasks)
    batches = [tasks[i:i + per_commit] for i in range(0, len(tasks), per_commit)]
    with _cleanup_on_failure(ds, job_id):
        for b, batch in enumerate(batches):
            ds = _rewrite_and_commit(spark, ds, batch, opts, file_version, job_id,
                                     f"compact {uri}: rewrite batch {b + 1}/{len(batches)}", metrics)
    metrics.new_version = ds.version
    metrics.orphan_files_deleted += _delete_orphans(ds, job_id)
    metrics.seconds["total"] = time.perf_counter() - t0
    return metrics


def materialize_deletions(spark: Any, uri: str, threshold: float = 0.0,
                          storage_options: dict[str, Any] | None = None,
                          data_storage_version: str | None = None) -> CompactionMetrics:
    """Rewrite every fragment whose deleted fraction is above ``threshold``, one fragment in
    and one out (no merging), so no deletion file remains on them. Row ids are preserved
    under stable row ids; commit and conflict rules as ``compact``."""
    t0 = time.perf_counter()
    ds = Dataset.open(uri, storage_options=storage_options)
    ds.check_writable()
    opts = CompactionOptions(data_storage_version=data_storage_version, target_rows_per_fragment=2**62)
    file_version = _target_version(ds, opts)
    stats, skipped = fragment_stats(ds, skip_indexed=True)
    tasks = [CompactionTask(i, (s.id,), s.live_rows, s.bytes) for i, s in enumerate(
        s for s in stats if s.deleted_rows and s.deleted_fraction > threshold and not s.indices)]
    metrics = CompactionMetrics(uri=uri, read_version=ds.version, tasks=len(tasks),
                                indexed_fragments_skipped=skipped, plan=[list(t.fragment_ids) for t in tasks])
    metrics.seconds["plan"] = time.perf_counter() - t0
    if tasks:
        job_id = f"lso-{uuid.uuid4().hex[:12]}"
        with _cleanup_on_failure(ds, job_id):
            ds = _rewrite_and_commit(spark, ds, tasks, opts, file_version, job_id,
                                     f"materialize deletions {uri}", metrics)
        metrics.new_version = ds.version
        metrics.orphan_files_deleted += _delete_orphans(ds, job_id)
    metrics.seconds["total"] = time.perf_counter() - t0
    return metrics


def _rewrite_and_commit(spark: Any, ds: Dataset, batch: list[CompactionTask], opts: CompactionOptions,
                        file_version: str, job_id: str, description: str,
                        metrics: CompactionMetrics) -> Dataset:
    specs = [RewriteSpec(ds.uri, ds.version, t.fragment_ids, file_version,
                         rows_per_file(t.live_rows, opts.target_rows_per_fragment),
                         opts.max_bytes_per_file, storage_options=dict(ds.store.storage_options),
                         mode=opts.compaction_mode)
             for t in batch]
    t1 = time.perf_counter()
    if spark is None:
        out = run_tasks_locally(job_id, specs, run_rewrite)
    else:
        out = run_tasks(spark, job_id, specs, run_rewrite, description=description)
    results: list[RewriteResult] = [out[i][1] for i in range(len(specs))]
    metrics.seconds["rewrite"] = metrics.seconds.get("rewrite", 0.0) + time.perf_counter() - t1
    by_id = {f.id: f for f in ds.fragments}
    written = [f for r in results for f in r.files]
    t2 = time.perf_counter()
    if spark is not None:
        set_job_description(spark, f"{description}: commit")
    try:
        _reserve_ids(ds, [f for r in results for f in r.new_fragments])
        groups = [RewriteGroup([by_id[i] for i in r.fragment_ids], r.new_fragments) for r in results]
        new_ds = commit_transaction(ds.store, Rewrite(groups), ds.version)
    except CommitStateUnknown:
        raise  # it may have landed: delete nothing
    except BaseException:
        ds.store.delete_many(f"{DATA_DIR}/{p}" for p in written)
        raise
    finally:
        if spark is not None:
            set_job_description(spark, None)
    metrics.seconds["commit"] = metrics.seconds.get("commit", 0.0) + time.perf_counter() - t2
    metrics.commits += 1
    for g, r in zip(groups, results, strict=True):
        metrics.fragments_removed += len(g.old_fragments)
        metrics.fragments_added += len(g.new_fragments)
        metrics.files_removed += sum(len(f.files) for f in g.old_fragments)
        metrics.files_added += len(r.files)
        metrics.rows_read += r.rows_read
        metrics.rows_written += r.rows_written
        metrics.fragments_binary_copied += r.fragments_copied
        metrics.pages_binary_copied += r.pages_copied
        metrics.pages_reencoded_for_deletions += r.pages_reencoded
        metrics.bytes_read += r.bytes_read
        metrics.bytes_written += r.bytes_written
        metrics.worker_peak_rss_bytes = max(metrics.worker_peak_rss_bytes, r.peak_rss_bytes)
    return new_ds


def _reserve_ids(ds: Dataset, new_fragments: list) -> None:
    """Give the new fragments final ids by committing a ReserveFragments first (as pylance's
    compaction does); the Rewrite then keeps them."""
    if not new_fragments:
        return
    reserved = commit_transaction(ds.store, ReserveFragments(len(new_fragments)), ds.version)
    top = reserved.manifest.max_fragment_id
    for i, frag in enumerate(new_fragments):
        frag.id = top - len(new_fragments) + 1 + i


@contextmanager
def _cleanup_on_failure(ds: Dataset, job_id: str) -> Iterator[None]:
    """A failed job (a task that failed all its attempts, a refused binary copy, an
    incompatible commit) deletes every file it wrote that no version it committed holds;
    when the last commit's outcome is unknown, nothing is deleted."""
    try:
        yield
    except CommitStateUnknown:
        raise
    except BaseException:
        try:
            _delete_orphans(Dataset.open(ds.store), job_id)
        except Exception:  # noqa: BLE001 - keep the job's own error; orphans are named by job id
            pass
        raise


def _delete_orphans(ds: Dataset, job_id: str) -> int:
    """Delete files this job wrote that the latest version does not reference (retried or
    speculative attempts, failed batches)."""
    referenced = {df.path for frag in ds.fragments for df in frag.files}
    orphans = [n for n in ds.store.list(DATA_DIR) if n.startswith(job_id) and n not in referenced]
    ds.store.delete_many(f"{DATA_DIR}/{n}" for n in orphans)
    return len(orphans)
