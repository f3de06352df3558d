"""Executor tasks of a join in place (``spark.indices.vector_index``): the rows of the partitions a
default optimize joins away are taken from the data again and ranked against their joined
partition's window (``run_join_rank``), the driver decides where each goes as pylance does
(``index.vector.ivf_join``), and the rows are encoded there (``run_join_encode``). When no partition
can fill up (``ivf_join.never_full``) a row's place is its window's nearest, and the rank task
encodes it there itself: one round. Otherwise it encodes it there too, and keeps the rows: a
second round re-encodes only the tasks some of whose rows the driver placed elsewhere.

Between the two rounds the taken rows wait in one file per rank task under ``_build/``:
n uint64 row addresses then n prepared float32 vectors."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from lance_spark_ops.errors import CorruptFileError
from lance_spark_ops.index.vector.ivf_join import ranking
from lance_spark_ops.index.vector.ivf_model import Model, encode_in, prepare_for
from lance_spark_ops.spark.indices.vector_index_tasks import Run, Source, _save, read_run_rows, take_vectors
from lance_spark_ops.spark.indices.vector_merge_tasks import member, old_partition_ids, present_rows
from lance_spark_ops.spark.runtime.runner import TaskContext
from lance_spark_ops.table.dataset import Dataset


@dataclass(frozen=True)
class JoinRankSpec:
    """Joined partitions ``joins`` (ascending) of ``model``: their rows in the old segments
    (``olds``) and the new runs, ranked per partition against its ``windows`` entry."""

    source: Source
    field_id: int
    olds: tuple[bytes, ...]
    runs: tuple[Run, ...]
    joins: tuple[int, ...]
    windows: tuple[np.ndarray, ...]
    model: Model
    work_dir: str
    nearest: bool = False  # no partition can fill up (``ivf_join.never_full``): encode in place


@dataclass(frozen=True)
class JoinRanked:
    """A rank task's rows (in ``file``): ``counts[i]`` of them from ``joins[i]``, in pylance's
    order (ascending address), ``ranks`` per row its window's positions nearest first."""

    file: str | None
    joins: tuple[int, ...]
    counts: tuple[int, ...]
    ranks: np.ndarray
    run: Run | None = None  # the rows encoded in their window's nearest (no rows: None)


def partition_addresses(ds: Dataset, source: Source, olds: Sequence[bytes], runs: Sequence[Run],
                        parts: Sequence[int], model: Model) -> list[np.ndarray]:
    """Per partition of ``parts`` (of ``model``, the stored rows' model): the sorted unique
    addresses of its rows in the old segments (each read once, ids only) and the new runs."""
    store = source.store()
    present = present_rows(ds, source.row_ids) if olds else None
    found: list[list[np.ndarray]] = [[] for _ in parts]
    for old in olds:
        for f, ids in zip(found, old_partition_ids(ds, old, parts, model, present), strict=True):
            f.append(ids)
    for run in runs:
        if run.file is None:
            continue
        starts = np.concatenate([[0], np.cumsum(run.counts)])
        for f, p in zip(found, parts, strict=True):
            if run.counts[p]:
                f.append(read_run_rows(store, run, int(starts[p]), int(starts[p + 1]), model)[0])
    return [np.unique(np.concatenate(f)) if f else np.zeros(0, np.uint64) for f in found]


def run_join_rank(spec: JoinRankSpec, ctx: TaskContext) -> JoinRanked:
    ds = spec.source.dataset()
    store = spec.source.store()
    model = spec.model
    per_part = partition_addresses(ds, spec.source, spec.olds, spec.runs, spec.joins, model)
    # one take for all of them: a take per partition re-read most of every fragment each time
    every = np.unique(np.concatenate(per_part)) if per_part else np.zeros(0, np.uint64)
    taken, x, valid = take_vectors(ds, spec.source.column, spec.field_id, every)
    if taken.size:
        kept, v_taken = prepare_for(model, x, valid)
        taken = taken[kept]
    else:
        v_taken = np.zeros((0, model.dim), np.float32)
    ids_all, v_all, ranks, counts = [], [], [], []
    for addrs, win in zip(per_part, spec.windows, strict=True):
        mine = np.flatnonzero(member(taken, addrs))  # taken is sorted: pylance's order kept
        v = v_taken[mine]
        # positions in the window (at most REASSIGN_RANGE: a byte each), nearest first
        ranks.append(ranking(v, model.centroids[win], np.arange(win.size), model.metric).astype(np.uint8))
        ids_all.append(taken[mine])
        v_all.append(v)
        counts.append(int(mine.size))
    n = sum(counts)
    if not n:
        return JoinRanked(None, spec.joins, tuple(counts), np.concatenate(ranks))
    # each row encoded in its window's nearest: its place unless a partition fills up - always
    # with ``nearest``, else the driver checks and re-encodes only a task whose rows moved
    ids, v = np.concatenate(ids_all), np.concatenate(v_all)
    dest = np.concatenate([w[r[:, 0]] for w, r in zip(spec.windows, ranks, strict=True)])
    run = encode_run(spec.source, ids, v, dest, model, f"{spec.work_dir}/{ctx.file_prefix}-join.bin")
    if spec.nearest:
        return JoinRanked(None, spec.joins, tuple(counts), np.zeros((0, 1), np.uint8), run)
    rel = f"{spec.work_dir}/{ctx.file_prefix}-join-rows.bin"
    _save(store, rel, [ids, v])
    return JoinRanked(rel, spec.joins, tuple(counts), np.concatenate(ranks), run)


def _load(spec_source: Source, file: str, rows: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    raw = spec_source.store().read(file)
    if len(raw) != rows * (8 + 4 * dim):
        raise CorruptFileError(f"join rows {file}: {len(raw)} bytes, expected {rows} rows of dim {dim}")
    ids = np.frombuffer(raw, np.uint64, rows)
    v = np.frombuffer(raw, np.float32, rows * dim, rows * 8).reshape(rows, dim)
    return ids, v


@dataclass(frozen=True)
class JoinWideSpec:
    """Rows ``rows`` (positions in a rank task's ``file`` of ``total`` rows) ranked over every
    kept partition: pylance's fallback for a row whose window is full."""

    source: Source
    file: str
    total: int
    rows: np.ndarray
    kept: np.ndarray
    model: Model


def run_join_wide(spec: JoinWideSpec, ctx: TaskContext) -> np.ndarray:
    _, v = _load(spec.source, spec.file, spec.total, spec.model.dim)
    return ranking(v[spec.rows], spec.model.centroids, spec.kept, spec.model.metric).astype(np.int32)


@dataclass(frozen=True)
class JoinEncodeSpec:
    """A rank task's rows encoded in partitions ``dest`` (old numbering): one run."""

    source: Source
    file: str
    dest: np.ndarray
    model: Model
    work_dir: str


def run_join_encode(spec: JoinEncodeSpec, ctx: TaskContext) -> Run:
    ids, v = _load(spec.source, spec.file, spec.dest.size, spec.model.dim)
    # not the rank task's name: outside Spark both rounds' prefixes are "local"
    rel = f"{spec.work_dir}/{ctx.file_prefix}-joined.bin"
    return encode_run(spec.source, ids, v, spec.dest, spec.model, rel)


def encode_run(
    source: Source, ids: np.ndarray, v: np.ndarray, dest: np.ndarray, model: Model, rel: str
) -> Run:
    """Rows ``v`` encoded in partitions ``dest`` (old numbering), saved as one run at ``rel``."""
    dest = dest.astype(np.int64)
    rows = encode_in(model, v, dest)
    order = np.argsort(dest, kind="stable")
    _save(source.store(), rel, [ids[order], rows[order].astype(model.storage_dtype, copy=False)])
    return Run(rel, int(ids.size), np.bincount(dest, minlength=model.num_partitions).astype(np.int64))
