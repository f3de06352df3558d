"""Row-id index rebuild on Spark: compact every fragment's row-id sequence, commit, and write
the persisted row id -> row address lookup for the committed version.

Phases (``spark.runtime.job``: timed, tagged, shown as the Spark job description): ``sequences`` ->
``commit`` -> ``index``.

1. *sequences* - fragments are grouped into tasks; each task re-encodes its fragments' row-id
   sequences (``spark.files.row_id_index_tasks.run_sequence_rebuild``: live ids unchanged, ids at
   deleted positions chosen to encode smallest; inline, the only placement pylance 14 reads
   without the opt-in spilled-column feature - see that module).
2. *commit* - only when some sequence changed: a ``Merge`` with every fragment (changed ones
   carrying their new ``row_id_meta``) and the unchanged schema. Lance has no operation for
   "same fragments, new metadata"; ``Merge`` is the one that replaces the fragment list as
   given and that pylance both writes (``add_columns``) and reads back. Like any Merge it
   conflicts with every concurrent data change, so a lost race re-runs phase 1 on the new
   version (``max_attempts``); phase 1 writes no files, so nothing is left behind.
3. *index* - live ``(row_id, row_addr)`` pairs are emitted per fragment, range-partitioned by
   row id (``repartitionByRange``), sorted within partitions and written as Lance files with
   a JSON manifest (layout: ``lance_spark_ops.row_id_index``), tied to the committed version.

Without stable row ids the row id of a row *is* its address: nothing is rewritten or written,
and the metrics say so.

Indices of older versions stay until deleted by hand under ``_lance_spark_ops/row_id_index/``
(Lance's ``cleanup_old_versions`` does not know them and leaves them alone).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from lance_spark_ops.errors import CorruptFileError
from lance_spark_ops.namespace.target import with_table_target
from lance_spark_ops.row_id_index import MANIFEST_NAME, IndexManifest, IndexPartition, index_dir
from lance_spark_ops.spark.files.row_id_index_tasks import (
    PAIRS_SCHEMA,
    PART_RESULT_SCHEMA,
    FragmentSequence,
    SequenceSpec,
    make_pairs_mapper,
    make_part_writer,
    run_sequence_rebuild,
)
from lance_spark_ops.spark.runtime.job import Job
from lance_spark_ops.spark.runtime.runner import typed_worker_error
from lance_spark_ops.spark.runtime.scan_tasks import group_fragments, ship
from lance_spark_ops.spark.runtime.session import default_parallelism
from lance_spark_ops.spark.runtime.tuning import Tuning
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.format.transaction import Merge

__all__ = ["RowIdIndexMetrics", "rebuild_row_id_index"]

NOT_STABLE = ("the dataset does not use stable row ids: a row id is the row address "
              "(fragment id << 32 | offset), so there is nothing to rebuild and no index was written")


@dataclass
class RowIdIndexMetrics:
    uri: str
    read_version: int
    stable_row_ids: bool = True
    message: str = ""
    new_version: int | None = None  # the version committed (None: sequences were already compact)
    index_version: int | None = None  # the version the index describes
    fragments: int = 0
    fragments_rewritten: int = 0
    sequence_bytes_before: int = 0
    sequence_bytes_after: int = 0
    segments_before: int = 0
    segments_after: int = 0
    index_rows: int = 0
    index_partitions: int = 0
    index_bytes: int = 0
    index_path: str | None = None
    attempts: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    job_tag: str = ""  # the Spark tag of the job's Spark jobs (``spark.interruptTag``)


def _task_groups(ds: Dataset, fragments_per_task: int | None, spark: Any) -> list[tuple[int, ...]]:
    ids = [f.id for f in ds.fragments]
    if fragments_per_task is None:
        slots = 2 * default_parallelism(spark)
        fragments_per_task = max(1, math.ceil(len(ids) / max(1, slots)))
    return [tuple(ids[i:i + fragments_per_task]) for i in range(0, len(ids), fragments_per_task)]


def _rebuild_sequences(job: Job, ds: Dataset, fragments_per_task: int | None) -> list[FragmentSequence]:
    specs = [SequenceSpec(ds.uri, ds.version, g, dict(ds.store.storage_options), ds.timestamp)
             for g in _task_groups(ds, fragments_per_task, job.spark)]
    with job.phase("sequences", tasks=len(specs), detail=f"of {len(ds.fragments)} fragments") as ph:
        out = [r for rs in job.run_tasks(specs, run_sequence_rebuild) for r in rs]
        ph.add(rows=sum(int(f.physical_rows or 0) for f in ds.fragments),
               bytes=sum(r.bytes_after for r in out))
    return out


def _commit(ds: Dataset, results: list[FragmentSequence]) -> Dataset:
    """Commit the new fragment metadata as a Merge read from ``ds.version``."""
    new_meta = {r.fragment_id: r.meta for r in results if r.changed}
    fragments = [replace(f, row_id_meta=new_meta[f.id]) if f.id in new_meta else f for f in ds.fragments]
    # put on top of the version read without listing first (taken meanwhile: listed and checked)
    return ds.commit(Merge(fragments, ds.lance_schema), ds.version, expected_latest=ds.version)


def _sequences_and_commit(job: Job, ds: Dataset, metrics: RowIdIndexMetrics, fragments_per_task: int | None,
                          max_attempts: int) -> Dataset:
    current = [ds]  # the version the next attempt reads

    def attempt(n: int) -> Dataset:
        ds = current[-1]
        metrics.attempts = n
        frags = _rebuild_sequences(job, ds, fragments_per_task)
        metrics.read_version = ds.version
        metrics.fragments = len(frags)
        metrics.fragments_rewritten = sum(r.changed for r in frags)
        metrics.sequence_bytes_before = sum(r.bytes_before for r in frags)
        metrics.sequence_bytes_after = sum(r.bytes_after for r in frags)
        metrics.segments_before = sum(r.segments_before for r in frags)
        metrics.segments_after = sum(r.segments_after for r in frags)
        if not metrics.fragments_rewritten:
            return ds
        job.before_commit(n)
        with job.phase("commit"):
            new_ds = _commit(ds, frags)
        metrics.new_version = new_ds.version
        return new_ds

    def on_conflict(_n: int, _error: Exception) -> None:
        current.append(job.opened(Dataset.open(current[-1].store)))

    return job.retrying(attempt, retries=max_attempts - 1, what="row-id sequence commit",
                        on_conflict=on_conflict)


def build_index(job: Job, ds: Dataset, rows_per_partition: int = 1 << 20,
                file_version: str = "2.1") -> IndexManifest:
    """Write the row id -> address index of ``ds`` (its version) and its manifest, last."""
    spark = job.spark
    live = ds.count_rows()
    k = max(1, math.ceil(live / max(1, rows_per_partition)))
    so = dict(ds.store.storage_options)
    groups = group_fragments([(f.id, int(f.physical_rows or 0)) for f in ds.fragments], rows_per_partition)
    parts = []
    with job.phase("index", tasks=k, detail=f"of version {ds.version} ({k} partitions)") as ph:
        if groups:
            with job.cleanup_on_failure(ds.store, referenced=set, directory=index_dir(ds.version)):
                ids = spark.range(0, len(groups), 1, len(groups))  # row i alone in partition i
                pairs = ids.mapInArrow(make_pairs_mapper(ds.uri, ds.version, so, groups, ds.timestamp,
                                                         ship(ds)), PAIRS_SCHEMA)
                ranged = pairs.repartitionByRange(k, "row_id").sortWithinPartitions("row_id")
                writer = make_part_writer(ds.uri, ds.version, job.job_id, file_version, so)
                try:
                    parts = ranged.mapInArrow(writer, PART_RESULT_SCHEMA).collect()
                except Exception as e:  # noqa: BLE001 - a worker's LanceError comes back as Spark's
                    typed = typed_worker_error(e)
                    if typed is None:
                        raise
                    raise typed from e
        ph.add(tasks=k, rows=sum(int(r["rows"]) for r in parts), bytes=sum(int(r["size"]) for r in parts))
    partitions = sorted((IndexPartition(r["path"], int(r["min_row_id"]), int(r["max_row_id"]), int(r["rows"]),
                                        int(r["size"])) for r in parts), key=lambda p: p.min_row_id)
    manifest = IndexManifest(ds.version, sum(p.rows for p in partitions), file_version, partitions)
    where = ds.store.uri(index_dir(ds.version))
    manifest.validate(where)
    if manifest.rows != live:
        raise CorruptFileError(f"index holds {manifest.rows} live rows, the dataset has {live}", path=where)
    ds.store.write(f"{index_dir(ds.version)}/{MANIFEST_NAME}", manifest.to_json())
    # parts of retried task attempts, and of an earlier build of this version's index
    keep = {p.path for p in partitions}
    stale = [n for n in ds.store.list(index_dir(ds.version)) if n.startswith("part-") and n not in keep]
    ds.store.delete_many(f"{index_dir(ds.version)}/{n}" for n in stale)
    return manifest


@with_table_target
def rebuild_row_id_index(spark: Any, uri: str, *, storage_options: dict[str, Any] | None = None,
                         tuning: Tuning | None = None,
                         rows_per_partition: int = 1 << 20,
                         fragments_per_task: int | None = None, write_index: bool = True,
                         index_file_version: str = "2.1", max_attempts: int = 3) -> RowIdIndexMetrics:
    """Compact the row-id sequences of ``uri`` and write its row-id index (see module doc).

    ``spark=None`` runs the sequence phase in this process and skips the index (it needs
    Spark's range partitioning)."""
    metrics = RowIdIndexMetrics(uri=uri, read_version=0)
    with Job(spark, "rebuild_row_id_index", uri, metrics, tuning) as job:
        ds = job.opened(Dataset.open(uri, storage_options=storage_options))  # shipped to the tasks
        ds.check_consistent("rebuild_row_id_index")
        metrics.read_version, metrics.fragments = ds.version, len(ds.fragments)
        if not ds.uses_stable_row_ids:
            metrics.stable_row_ids = False
            metrics.message = NOT_STABLE
            return metrics
        ds.check_writable()
        ds = _sequences_and_commit(job, ds, metrics, fragments_per_task, max_attempts)
        if write_index and spark is not None:
            manifest = build_index(job, ds, rows_per_partition, index_file_version)
            metrics.index_version = manifest.dataset_version
            metrics.index_rows = manifest.rows
            metrics.index_partitions = len(manifest.partitions)
            metrics.index_bytes = sum(p.size for p in manifest.partitions)
            metrics.index_path = ds.store.uri(index_dir(ds.version))
        index = f"index of version {metrics.index_version}" if metrics.index_version else "no index"
        metrics.message = (f"sequences {metrics.sequence_bytes_before} -> {metrics.sequence_bytes_after} "
                           f"bytes; {index}")
    return metrics
