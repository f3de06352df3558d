"""The tuning values a job runs with (issue #38): the task shapes its planners choose, the cache
budget its tasks get and a hook before each commit. A frozen value carried by the ``Job``
(``job.tuning``) and passed to a job function as ``tuning=``; the defaults are what every
production run uses. Tests pass small values (several tasks out of a few thousand rows) and the
hook (a concurrent writer) here instead of patching module globals."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from lance_spark_ops.errors import InvalidInputError
from lance_spark_ops.file.tuning import DEFAULT_FILE_TUNING, FileTuning
from lance_spark_ops.index.frag_reuse import INLINE_LIMIT
from lance_spark_ops.table.paths import PATHS_KEPT

TASK_INLINE_BYTES = 8 << 20

__all__ = ["DEFAULT_TUNING", "Tuning"]


@dataclass(frozen=True)
class Tuning:
    """Task shapes (rows / bytes a task takes at most or at least) and test hooks of a job."""

    # scalar index builds (``spark.indices.scalar_index``)
    part_rows: int = 1 << 22          # physical rows a part task reads at most (one sorted run)
    minhash_part_rows: int = 1 << 18  # MINHASHLSH rows a part signs (~0.3 s CPU / 100 K short docs)
    range_merge_rows: int = 1 << 20   # BTREE runs of fewer rows in all are merged by one task
    range_rows: int = 1 << 22         # rows a BTREE range task merges at most
    # a segment of one part with at most this many rows, on an object store, is built on the
    # driver (a Spark stage, a fresh worker's S3 client and its manifest read cost more than it)
    driver_index_rows: int = 1 << 20
    # FTS builds (``spark.indices.fts_index``): live rows of one partition at most
    fts_rows_per_part: int = 1 << 20
    # vector builds (``spark.indices.vector_index``)
    vector_rows_per_task: int | None = None  # a row cap instead of ``vector_index.TASK_BYTES``
    vector_piece_rows: int | None = None     # rows a range task holds at most (partitions in pieces)
    # IVF samples up to this many values (rows x dim, 64 MiB of float32) train in one task; larger
    # ones in rounds of tasks, one per sample file (a Spark job per round)
    local_kmeans_values: int = 1 << 24
    btree_sample_rows: int = 4096     # a BTREE part samples its run's key every this many rows
    # index remap (``spark.indices.index_remap``): vectors whose HNSW graphs one task rebuilds, at
    # least; BTREE page_data rows a remap task streams at a time
    graph_task_min_rows: int = 50_000
    btree_stream_rows: int = 1 << 20
    # a fragment reuse index's details over this many bytes go to their own file (pylance's limit)
    reuse_inline_bytes: int = INLINE_LIMIT
    # vacuum (``spark.files.vacuuming``): manifests a read task parses, files a delete task removes
    manifests_per_task: int = 64
    deletes_per_task: int = 1000
    # rewrites (``spark.files.rewrite_tasks``): fragments a task takes up at once (objects, live
    # masks, row ids, version sequences: a task over 100 000 tiny fragments held all of theirs,
    # ~2.5 KB each, for its whole run) and small fragments read together at most (each holds an
    # open reader and its file's bytes); checked file paths a task's dataset remembers
    # (``table.paths.BaseResolver``); its writers' buffer / window sizes
    fragment_chunk: int = 1024
    run_fragments: int = 1024
    # the manifest bytes a rewrite task needs (the manifest but its fragments, and its own
    # fragments' entries) shipped in its descriptor when at most this many, and at most
    # ``slice_inline_job_bytes`` for all of a job's tasks: the task then reads nothing of the
    # manifest (a round trip per task on an object store); beyond, it reads its ranges. The
    # job's bound is small because every task's closure holds all descriptors (``run_tasks``;
    # PySpark broadcasts a closure past 1 MiB). The job's bound also caps the manifest files
    # other jobs ship to their tasks (``Job.run_tasks``, ``scan_tasks.ship``)
    slice_inline_bytes: int = 64 * 1024
    slice_inline_job_bytes: int = 1 << 20
    # the pickled task descriptors one Spark job's closure carries at most; a job's beyond run as
    # consecutive Spark jobs (``runner.run_tasks``): every task unpickles its job's closure whole
    # (a vacuum deleting a million files in tasks of 1 000: ~100 MB each), and a Connect plan
    # carries it (gRPC's limit, 128 MiB by default)
    task_inline_bytes: int = TASK_INLINE_BYTES
    paths_kept: int = PATHS_KEPT
    file: FileTuning = DEFAULT_FILE_TUNING
    # small vacuum work stays on the driver (a Spark stage costs more than a few rounds of requests)
    driver_manifests: int = 2048   # manifests read on the driver, in flight together; more: tasks
    driver_prefixes: int = 16      # prefixes listed on the driver side by side; more: a task each
    driver_deletes: int = 20_000   # an object store's deletes on the driver (DeleteObjects calls)
    # compaction / materialize_deletions: a plan of ONE rewrite task reading at most this many
    # bytes (the manifest's data file sizes) runs in the driver's process instead of as a Spark
    # job (a one-task Spark job costs ~0.4 s and a worker's first S3 client; no Spark call is
    # made, so Spark Connect works alike; a failed attempt is retried there as Spark would).
    # 0 turns it off; None: ``LSO_DRIVER_REWRITE_BYTES`` in the driver's environment (read by
    # each job), else 128 MiB. The driver then holds up to ``LSO_IO_MAX_BYTES`` of prefetched
    # data, as a worker would
    driver_rewrite_bytes: int | None = None
    # the byte budget of the one cache (``lance_spark_ops.cache``) in every process the job's tasks
    # run in (None: the process's own, ``LSO_CACHE_BYTES`` or ``cache.DEFAULT_BUDGET``)
    cache_bytes: int | None = None
    # run right before each commit attempt of the job: ``before_commit(job_kind, attempt)``
    before_commit: Callable[[str, int], None] | None = field(default=None, repr=False, compare=False)

    def driver_rewrite_limit(self) -> int:
        """``driver_rewrite_bytes``, or the environment's / default value when it is None."""
        if self.driver_rewrite_bytes is not None:
            return max(0, self.driver_rewrite_bytes)
        return _env_bytes("LSO_DRIVER_REWRITE_BYTES", DRIVER_REWRITE_BYTES)


DRIVER_REWRITE_BYTES = 128 << 20


def _env_bytes(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        return max(0, int(value))
    except ValueError:
        raise InvalidInputError(f"{name} must be a number of bytes (0: off), got {value!r}") from None


DEFAULT_TUNING = Tuning()
