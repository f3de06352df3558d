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

from lance_spark_ops.index.vector import rabitq, rabitq_storage
from lance_spark_ops.index.vector.ivf_model import Model, encode_in, prepare, prepare_for
from lance_spark_ops.index.vector.ivf_split import out_of_reach, sample_ids, split_destinations
from lance_spark_ops.spark.indices.vector_index_tasks import (
    Run,
    Source,
    _save,
    live_addresses,
    read_run_rows,
    take_vectors,
)
from lance_spark_ops.spark.indices.vector_merge_tasks import old_partition_ids, old_spans, present_rows
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
    kept = [p for p, k in zip(parts, keep, strict=True) if k]
    spans = _spans(kept)
    for old in olds:
        ids_only = [p for p, k in zip(parts, keep, strict=True) if not k]
        bare = dict(zip(ids_only, old_partition_ids(ds, old, ids_only, model, present), strict=True))
        # the kept partitions' rows, consecutive ones in one read, the segment opened once
        rows = dict(zip(kept, old_spans(ds, old, spans, model, present), strict=True))
        for f, p, k in zip(found, parts, keep, strict=True):
            f.append(rows[p] if k else (bare[p], none))
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


def _spans(parts: list[int]) -> list[tuple[int, int]]:
    """Ascending partitions as maximal runs of consecutive ones ``(lo, hi)``."""
    out: list[tuple[int, int]] = []
    for p in parts:
        if out and out[-1][1] == p:
            out[-1] = (out[-1][0], p + 1)
        else:
            out.append((p, p + 1))
    return out


@dataclass(frozen=True)
class SplitPickSpec:
    """The split sample of partitions ``parts`` (``ways`` each) of ``model``, as pylance 14
    draws it: from the partitions' row ids in the old segments ``olds`` and the new rows'
    ``runs`` (``ivf_split.sample_ids``), those rows' vectors taken from the data."""

    source: Source
    field_id: int
    olds: tuple[bytes, ...]
    runs: tuple[Run, ...]
    parts: tuple[int, ...]
    ways: tuple[int, ...]
    model: Model


def partition_ids(ds: Dataset, olds: tuple[bytes, ...], runs: tuple[Run, ...], parts: tuple[int, ...],
                  model: Model, present: np.ndarray | None, source: Source) -> list[np.ndarray]:
    """Per partition of ``parts``: the row ids of its rows in the old segments (fragments not in
    ``present`` dropped; None: all) and the runs, unsorted (ids only: no storage row read)."""
    store = source.store()
    found: list[list[np.ndarray]] = [[] for _ in parts]
    for old in olds:
        for f, ids in zip(found, old_partition_ids(ds, old, parts, model, present), strict=True):
            f.append(ids)
    for run in runs:
        if run.file is None:
            continue
        starts = np.concatenate([[0], np.cumsum(run.counts)])
        spans = [(int(starts[p]) * 8, int(run.counts[p]) * 8) for p in parts if run.counts[p]]
        got = iter(store.read_ranges(run.file, spans)) if spans else iter(())
        for f, p in zip(found, parts, strict=True):
            if run.counts[p]:
                f.append(np.frombuffer(next(got), dtype=np.uint64))
    return [np.concatenate(f).astype(np.uint64) if f else np.zeros(0, np.uint64) for f in found]


def run_split_pick(spec: SplitPickSpec, ctx: TaskContext) -> list[np.ndarray]:
    """Per partition of ``spec.parts``: its sampled rows' vectors (prepared), in row id order.
    No scan: only the sampled rows are read (pylance's split reads no other vector)."""
    ds = spec.source.dataset()
    model = spec.model
    ids = partition_ids(ds, spec.olds, spec.runs, spec.parts, model, None, spec.source)
    picks = [sample_ids(i, w) for i, w in zip(ids, spec.ways, strict=True)]
    want = np.unique(np.concatenate(picks)) if picks else np.zeros(0, np.uint64)
    taken, x, valid = take_vectors(ds, spec.source.column, spec.field_id, want)
    none = np.zeros((0, model.dim), np.float32)
    if not taken.size:
        return [none for _ in picks]
    kept, v = prepare(x, valid, model.metric)
    taken = taken[kept]
    out = []
    for pick in picks:
        pos = np.minimum(np.searchsorted(taken, pick), max(taken.size - 1, 0))
        hit = taken[pos] == pick if taken.size else np.zeros(pick.size, bool)
        out.append(v[pos[hit]] if hit.any() else none)
    return out


def _homes(parts: tuple[int, ...], same: np.ndarray, stored: list[tuple[np.ndarray, np.ndarray]],
           taken: np.ndarray) -> np.ndarray:
    """Per taken row, the partition it is stored in when that partition's centroid is
    unchanged, else -1 (a split partition's row, or also found in one)."""
    home = np.full(taken.size, -1, np.int64)
    for flag in (True, False):  # unchanged partitions first, split ones override
        for p, unchanged, (ids, _) in zip(parts, same, stored, strict=True):
            if bool(unchanged) == flag and ids.size:
                pos = np.minimum(np.searchsorted(taken, ids), taken.size - 1)
                home[pos[taken[pos] == ids]] = p if flag else -1
    return home


def run_split_move(spec: SplitMoveSpec, ctx: TaskContext) -> Run:
    ds = spec.source.dataset()
    old, new = spec.old, spec.new
    k = new.num_partitions
    # partitions whose centroid the split left as it was: their staying rows keep their codes
    same = np.array([old.centroids[p].tobytes() == new.centroids[p].tobytes() for p in spec.parts], bool)
    stored = partition_rows(ds, spec.source, spec.olds, spec.runs, spec.parts, old, same)
    # rows of unchanged partitions no new centroid can reach stay as stored, unread
    stay = _out_of_reach(old, new, spec.parts, same, stored)
    ask = [ids if m is None else ids[~m] for (ids, _), m in zip(stored, stay, strict=True)]
    addrs = np.unique(np.concatenate(ask)) if ask else np.zeros(0, np.uint64)
    kept_ids, kept_rows, kept_dest = _stay_rows(ds, spec.parts, stored, stay, addrs, new)
    taken, x, valid = take_vectors(ds, spec.source.column, spec.field_id, addrs)
    kept, v = prepare_for(new, x, valid) if taken.size else (np.zeros(0, np.int64), x)
    taken = taken[kept]
    dest = split_destinations(old, new, v, _homes(spec.parts, same, stored, taken))
    rows = np.empty((taken.size, new.width), new.storage_dtype)
    fresh = np.ones(taken.size, bool)
    for p, unchanged, (ids, prow) in zip(spec.parts, same, stored, strict=True):
        if not ids.size or not unchanged or not taken.size:  # p was split: all its rows encoded again
            continue
        pos = np.minimum(np.searchsorted(taken, ids), taken.size - 1)
        hit = (taken[pos] == ids) & (dest[pos] == p)  # taken (live, valid) and staying in p
        rows[pos[hit]] = prow[hit]
        fresh[pos[hit]] = False
    if fresh.any():
        rows[fresh] = encode_in(new, v[fresh], dest[fresh])
    ids, rows, dest = (np.concatenate([taken, kept_ids]), np.concatenate([rows, kept_rows]),
                       np.concatenate([dest, kept_dest]))
    if not ids.size:
        return Run(None, 0, np.zeros(k, np.int64))
    order = np.lexsort((ids, dest))  # by partition, then row address
    rel = f"{spec.work_dir}/{ctx.file_prefix}-split.bin"
    _save(spec.source.store(), rel, [ids[order], rows[order]])
    return Run(rel, int(ids.size), np.bincount(dest, minlength=k).astype(np.int64))


def _out_of_reach(old: Model, new: Model, parts: tuple[int, ...], same: np.ndarray,
                  stored: list[tuple[np.ndarray, np.ndarray]]) -> list[np.ndarray | None]:
    """Per partition of ``parts``: which of its stored rows no new centroid can reach
    (``ivf_split.out_of_reach``), None where unknown - a split partition, or a quantizer
    whose rows do not tell their distance to the centroid (only IVF_RQ's l2 / cosine
    factors do here)."""
    out: list[np.ndarray | None] = [None] * len(parts)
    if new.quantizer != "RQ" or new.metric == "dot" or new.rabit is None:
        return out
    idx = [i for i, (u, (ids, _)) in enumerate(zip(same, stored, strict=True)) if u and ids.size]
    if not idx:
        return out
    rot = rabitq.rotate(new.rabit, old.centroids[[parts[i] for i in idx]])
    for j, i in enumerate(idx):
        dist_sq, err = rabitq_storage.residual_norm_squares(new.rabit, stored[i][1], rot[j])
        out[i] = out_of_reach(old, new, parts[i], dist_sq + err)
    return out


def _stay_rows(ds: Dataset, parts: tuple[int, ...], stored: list[tuple[np.ndarray, np.ndarray]],
               stay: list[np.ndarray | None], asked: np.ndarray, new: Model
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids, stored rows, partition) of the rows that stay unread: live ones only (a take
    drops the deleted rows of the others), none also taken for another partition."""
    got = [(ids[m], prow[m], np.full(int(m.sum()), p, np.int64))
           for p, (ids, prow), m in zip(parts, stored, stay, strict=True) if m is not None and m.any()]
    if not got:
        return np.zeros(0, np.uint64), np.zeros((0, new.width), new.storage_dtype), np.zeros(0, np.int64)
    ids, rows, dest = (np.concatenate(a) for a in zip(*got, strict=True))
    keep = live_addresses(ds, ids) & ~np.isin(ids, asked)
    return ids[keep], rows[keep], dest[keep]
