"""Executor tasks of a split in place (``spark.vector_index``): pylance 14 moves only the rows
of the partitions a split affects - the split ones and each one's ``REASSIGN_RANGE`` nearest
(old centroids) - taking them from the data again and assigning each to its nearest partition
among all centroids after the split; every other partition keeps its stored rows. A task here
finds its share of the affected partitions' rows (old segments read once each, then the new
runs), takes them in one take and encodes them under the new model: one run."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lance_spark_ops.index.ivf_model import Model, assign_metric, prepare
from lance_spark_ops.index.kmeans import assign
from lance_spark_ops.spark.runner import TaskContext
from lance_spark_ops.spark.tasks.vector_index import Run, Source, read_run_rows, take_vectors
from lance_spark_ops.spark.tasks.vector_join import encode_run
from lance_spark_ops.spark.tasks.vector_merge import old_partition_ids, present_rows


@dataclass(frozen=True)
class SplitMoveSpec:
    """Partitions ``parts`` (old numbering) of ``old`` (the stored rows' model: old segments
    ``olds`` and new runs ``runs``): their rows encoded again under ``new``."""

    source: Source
    field_id: int
    olds: tuple[bytes, ...]
    runs: tuple[Run, ...]
    parts: tuple[int, ...]
    old: Model
    new: Model
    work_dir: str


def run_split_move(spec: SplitMoveSpec, ctx: TaskContext) -> Run:
    ds = spec.source.dataset()
    store = spec.source.store()
    found: list[np.ndarray] = []
    if spec.olds:
        present = present_rows(ds, spec.source.row_ids)
        for old in spec.olds:
            found.extend(old_partition_ids(ds, old, spec.parts, spec.old, present))
    for run in spec.runs:
        if run.file is None:
            continue
        starts = np.concatenate([[0], np.cumsum(run.counts)])
        for p in spec.parts:
            if run.counts[p]:
                found.append(read_run_rows(store, run, int(starts[p]), int(starts[p + 1]), spec.old)[0])
    k = spec.new.num_partitions
    addrs = np.unique(np.concatenate(found)) if found else np.zeros(0, np.uint64)
    taken, x, valid = take_vectors(ds, spec.source.column, spec.field_id, addrs)
    if not taken.size:
        return Run(None, 0, np.zeros(k, np.int64))
    kept, v = prepare(x, valid, spec.new.metric)
    taken = taken[kept]
    if not taken.size:
        return Run(None, 0, np.zeros(k, np.int64))
    # the nearest of every centroid after the split, as an encode task assigns a new row
    dest, _ = assign(v, spec.new.centroids, assign_metric(spec.new.metric))
    return encode_run(spec.source, taken, v, dest, spec.new, f"{spec.work_dir}/{ctx.file_prefix}-split.bin")
