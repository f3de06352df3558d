"""Executor tasks of a split in place (``spark.indices.vector_index``): pylance 14 moves only the rows
of the partitions a split affects - the split ones and each one's ``REASSIGN_RANGE`` nearest
(old centroids) - taking them from the data again and assigning each to its nearest partition
among all centroids after the split; every other partition keeps its stored rows. A task here
finds its share of the affected partitions' rows (old segments read once each, then the new
runs), takes them in one take and encodes them under the new model: one run."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lance_spark_ops.index.vector.ivf_model import Model, assign_metric, prepare_for
from lance_spark_ops.index.vector.kmeans import assign
from lance_spark_ops.spark.indices.vector_index_tasks import Run, Source, take_vectors
from lance_spark_ops.spark.indices.vector_join_tasks import encode_run, partition_addresses
from lance_spark_ops.spark.runtime.runner import TaskContext


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
    k = spec.new.num_partitions
    per_part = partition_addresses(ds, spec.source, spec.olds, spec.runs, spec.parts, spec.old)
    addrs = np.unique(np.concatenate(per_part)) if per_part else np.zeros(0, np.uint64)
    taken, x, valid = take_vectors(ds, spec.source.column, spec.field_id, addrs)
    if not taken.size:
        return Run(None, 0, np.zeros(k, np.int64))
    kept, v = prepare_for(spec.new, x, valid)
    taken = taken[kept]
    if not taken.size:
        return Run(None, 0, np.zeros(k, np.int64))
    # the nearest of every centroid after the split, as an encode task assigns a new row
    dest, _ = assign(v, spec.new.centroids, assign_metric(spec.new.metric))
    return encode_run(spec.source, taken, v, dest, spec.new, f"{spec.work_dir}/{ctx.file_prefix}-split.bin")
