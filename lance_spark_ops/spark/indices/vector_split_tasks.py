"""Executor tasks of a split in place (``spark.indices.vector_index``): pylance 14 moves only the rows
of the partitions a split affects - the split ones and each one's ``REASSIGN_RANGE`` nearest
(old centroids) - taking them from the data again and assigning each to its nearest partition
among all centroids after the split; every other partition keeps its stored rows. A task here
finds its share of the affected partitions' rows (old segments read once each, then the new
runs), takes them in one take and encodes them under the new model: one run. A row that stays
in its partition while that partition's centroid is unchanged (a neighbour of a split) keeps
its stored row: every quantizer's code is a function of the vector, the centroid and the
model's codebook / bounds / rotation, all unchanged, so it is the row encoding would give
(the split partitions' rows and the rows that move are encoded)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lance_spark_ops.index.vector.ivf_model import Model, assign_metric, encode_in, prepare_for
from lance_spark_ops.index.vector.kmeans import assign
from lance_spark_ops.spark.indices.vector_index_tasks import Run, Source, _save, read_run_rows, take_vectors
from lance_spark_ops.spark.indices.vector_merge_tasks import old_partitions, present_rows
from lance_spark_ops.spark.runtime.runner import TaskContext
from lance_spark_ops.table.dataset import Dataset


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


def partition_rows(ds: Dataset, source: Source, olds: tuple[bytes, ...], runs: tuple[Run, ...],
                   parts: tuple[int, ...], model: Model) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per partition of ``parts`` (of ``model``, the stored rows' model): the (ids, storage
    rows) of its rows in the old segments (rows of deleted fragments dropped) and the runs."""
    store = source.store()
    present = present_rows(ds, source.row_ids) if olds else None
    found: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in parts]
    for old in olds:
        for f, p in zip(found, parts, strict=True):
            f.extend(old_partitions(ds, old, p, p + 1, model, present))
    for run in runs:
        if run.file is None:
            continue
        starts = np.concatenate([[0], np.cumsum(run.counts)])
        for f, p in zip(found, parts, strict=True):
            if run.counts[p]:
                f.append(read_run_rows(store, run, int(starts[p]), int(starts[p + 1]), model))
    out = []
    for f in found:
        if not f:
            out.append((np.zeros(0, np.uint64), np.zeros((0, model.width), model.storage_dtype)))
            continue
        ids = np.concatenate([i for i, _ in f]).astype(np.uint64)
        rows = np.concatenate([r for _, r in f])
        ids, first = np.unique(ids, return_index=True)  # sorted, each row once
        out.append((ids, rows[first]))
    return out


def run_split_move(spec: SplitMoveSpec, ctx: TaskContext) -> Run:
    ds = spec.source.dataset()
    old, new = spec.old, spec.new
    k = new.num_partitions
    stored = partition_rows(ds, spec.source, spec.olds, spec.runs, spec.parts, old)
    addrs = np.unique(np.concatenate([i for i, _ in stored])) if stored else np.zeros(0, np.uint64)
    taken, x, valid = take_vectors(ds, spec.source.column, spec.field_id, addrs)
    if not taken.size:
        return Run(None, 0, np.zeros(k, np.int64))
    kept, v = prepare_for(new, x, valid)
    taken = taken[kept]
    if not taken.size:
        return Run(None, 0, np.zeros(k, np.int64))
    # the nearest of every centroid after the split, as an encode task assigns a new row
    dest, _ = assign(v, new.centroids, assign_metric(new.metric))
    dest = dest.astype(np.int64)
    rows = np.empty((taken.size, new.width), new.storage_dtype)
    fresh = np.ones(taken.size, bool)
    for p, (ids, prow) in zip(spec.parts, stored, strict=True):
        if not ids.size or old.centroids[p].tobytes() != new.centroids[p].tobytes():  # p was split
            continue
        pos = np.minimum(np.searchsorted(taken, ids), taken.size - 1)
        hit = (taken[pos] == ids) & (dest[pos] == p)  # taken (live, valid) and staying in p
        rows[pos[hit]] = prow[hit]
        fresh[pos[hit]] = False
    if fresh.any():
        rows[fresh] = encode_in(new, v[fresh], dest[fresh])
    order = np.argsort(dest, kind="stable")
    rel = f"{spec.work_dir}/{ctx.file_prefix}-split.bin"
    _save(spec.source.store(), rel, [taken[order], rows[order]])
    return Run(rel, int(taken.size), np.bincount(dest, minlength=k).astype(np.int64))
