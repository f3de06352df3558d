"""Executor tasks of a join in place (``spark.vector_index``): the rows of the partitions a
default optimize joins away are taken from the data again and ranked against their joined
partition's window (``run_join_rank``), the driver decides where each goes as pylance does
(``index.ivf_join``), and the rows are encoded there (``run_join_encode``).

Between the two rounds the taken rows wait in one file per rank task under ``_build/``:
n uint64 row addresses then n prepared float32 vectors."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lance_spark_ops.errors import CorruptFileError
from lance_spark_ops.index.ivf_join import ranking
from lance_spark_ops.index.ivf_model import Model, encode_in, prepare
from lance_spark_ops.spark.runner import TaskContext
from lance_spark_ops.spark.tasks.vector_index import Run, Source, _save, read_run_rows, take_vectors
from lance_spark_ops.spark.tasks.vector_merge import old_partitions, present_rows


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


@dataclass(frozen=True)
class JoinRanked:
    """A rank task's rows (in ``file``): ``counts[i]`` of them from ``joins[i]``, in pylance's
    order (ascending address), ``ranks`` per row its window's positions nearest first."""

    file: str | None
    joins: tuple[int, ...]
    counts: tuple[int, ...]
    ranks: np.ndarray


def run_join_rank(spec: JoinRankSpec, ctx: TaskContext) -> JoinRanked:
    ds = spec.source.dataset()
    store = spec.source.store()
    model = spec.model
    metric = model.metric
    present = present_rows(ds, spec.source.row_ids)
    ids_all, v_all, ranks, counts = [], [], [], []
    for p, win in zip(spec.joins, spec.windows, strict=True):
        found = [old_partitions(ds, old, p, p + 1, model, present)[0][0] for old in spec.olds]
        for run in spec.runs:
            if run.file is not None and run.counts[p]:
                first = int(run.counts[:p].sum())
                found.append(read_run_rows(store, run, first, first + int(run.counts[p]), model)[0])
        addrs = np.unique(np.concatenate(found)) if found else np.zeros(0, np.uint64)
        ids, x, valid = take_vectors(ds, spec.source.column, spec.field_id, addrs)
        if ids.size:
            kept, v = prepare(x, valid, model.metric)
            ids = ids[kept]
        else:
            v = np.zeros((0, model.dim), np.float32)
        # positions in the window (at most REASSIGN_RANGE: a byte each), nearest first
        ranks.append(ranking(v, model.centroids[win], np.arange(win.size), metric).astype(np.uint8))
        ids_all.append(ids)
        v_all.append(v)
        counts.append(int(ids.size))
    n = sum(counts)
    if not n:
        return JoinRanked(None, spec.joins, tuple(counts), np.concatenate(ranks))
    rel = f"{spec.work_dir}/{ctx.file_prefix}-join-rows.bin"
    _save(store, rel, [np.concatenate(ids_all), np.concatenate(v_all)])
    return JoinRanked(rel, spec.joins, tuple(counts), np.concatenate(ranks))


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
    model = spec.model
    ids, v = _load(spec.source, spec.file, spec.dest.size, model.dim)
    dest = spec.dest.astype(np.int64)
    rows = encode_in(model, v, dest)
    order = np.argsort(dest, kind="stable")
    rel = f"{spec.work_dir}/{ctx.file_prefix}-join.bin"
    _save(spec.source.store(), rel, [ids[order], rows[order].astype(model.storage_dtype, copy=False)])
    return Run(rel, int(ids.size), np.bincount(dest, minlength=model.num_partitions).astype(np.int64))
