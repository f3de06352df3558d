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
from lance_spark_ops.spark.indices.vector_merge_tasks import old_partition_ids, old_partitions, present_rows
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
                   parts: tuple[int, ...], model: Model, keep: np.ndarray
                   ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per partition of ``parts`` (of ``model``, the stored rows' model): the (ids, storage
    rows) of its rows in the old segments (rows of deleted fragments dropped) and the runs;
    where ``keep`` is False the ids only (no rows: every row there is encoded again)."""
    store = source.store()
    present = present_rows(ds, source.row_ids) if olds else None
    found: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in parts]
    none = np.zeros((0, model.width), model.storage_dtype)
    for old in olds:
        ids_only = [p for p, k in zip(parts, keep, strict=True) if not k]
        bare = dict(zip(ids_only, old_partition_ids(ds, old, ids_only, model, present), strict=True))
        for f, p, k in zip(found, parts, keep, strict=True):
            f.extend(old_partitions(ds, old, p, p + 1, model, present) if k else [(bare[p], none)])
    for run in runs:
        if run.file is None:
            continue
        starts = np.concatenate([[0], np.cumsum(run.counts)])
        for f, p, k in zip(found, parts, keep, strict=True):
            if run.counts[p]:
                got = read_run_rows(store, run, int(starts[p]), int(starts[p + 1]), model)
                f.append(got if k else (got[0], none))
    out = []
    for f in found:
        if not f:
            out.append((np.zeros(0, np.uint64), np.zeros((0, model.width), model.storage_dtype)))
            continue
        ids = np.concatenate([i for i, _ in f]).astype(np.uint64)
        rows = np.concatenate([r for _, r in f])
        ids, first = np.unique(ids, return_index=True)  # sorted, each row once
        out.append((ids, rows[first] if rows.shape[0] else none))  # kept: a row per id
    return out


def run_split_move(spec: SplitMoveSpec, ctx: TaskContext) -> Run:
    ds = spec.source.dataset()
    old, new = spec.old, spec.new
    k = new.num_partitions
    # partitions whose centroid the split left as it was: their staying rows keep their codes
    same = np.array([old.centroids[p].tobytes() == new.centroids[p].tobytes() for p in spec.parts], bool)
    stored = partition_rows(ds, spec.source, spec.olds, spec.runs, spec.parts, old, same)
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
    for p, unchanged, (ids, prow) in zip(spec.parts, same, stored, strict=True):
        if not ids.size or not unchanged:  # p was split: all its rows encoded again
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
