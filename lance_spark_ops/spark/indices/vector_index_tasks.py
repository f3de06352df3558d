"""Executor tasks of a vector index build (``spark.indices.vector_index``): sample, k-means rounds,
PQ training, encode, partition ranges, assembly.

Intermediate files live under the segment's ``_build/`` directory, named by the attempt's
``file_prefix`` (the driver uses only the names the successful attempts return and removes
the directory at the end): samples and runs are raw arrays (a run: n uint64 row ids then n
storage rows, rows sorted by partition, so a task reads a partition range with two ranged
reads); graph parts are Lance files. Only model state (centroids, sums, counts, codebooks)
and file names travel through Spark.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa

from lance_spark_ops.cache import region
from lance_spark_ops.concurrency import usable_cpus
from lance_spark_ops.errors import CorruptFileError, InvalidInputError
from lance_spark_ops.file.reader import LanceFileReader
from lance_spark_ops.file.writer import LanceFileWriter
from lance_spark_ops.index.vector import hnsw_file, rabitq_storage
from lance_spark_ops.index.vector.hnsw import Params
from lance_spark_ops.index.vector.ivf import AUX_FILE, INDEX_FILE
from lance_spark_ops.index.vector.ivf_build import (
    GRAPH_FIELDS,
    index_schema,
    ivf_message,
    storage_buffers,
    storage_schema,
    transpose_codes,
)
from lance_spark_ops.index.vector.ivf_model import Model, assign_metric, encode, prepare, prepare_for
from lance_spark_ops.index.vector.kmeans import Partial, assign, fit, partial_sums
from lance_spark_ops.index.vector.quantizers import pq_train_sub, pq_uses_residual, residuals, sq_bounds
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.spark.runtime.runner import TaskContext
from lance_spark_ops.spark.runtime.scan_tasks import open_dataset
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.fragment_batch import FragmentBatch


@dataclass(frozen=True)
class Source:
    """Where the vectors are: the dataset at the build's version and the column."""

    uri: str
    read_version: int
    column: str
    row_ids: bool  # the index names rows by stable row id, else by row address
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)
    timestamp: datetime | None = None  # the version's commit time, as the driver opened it

    def dataset(self) -> Dataset:
        """The version, parsed once per Python worker for all its tasks (``open_dataset``)."""
        return open_dataset(self.uri, self.read_version, self.storage_options, self.timestamp)

    def store(self) -> ObjectStore:
        return ObjectStore(self.uri, self.storage_options)


def fragment_vectors(ds: Dataset, fragment_id: int, src: Source, row_range: tuple[int, int] | None = None
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Live rows of one fragment (``row_range``: of its physical rows ``start..stop`` only):
    (row ids or addresses, vectors (n x dim), validity)."""
    id_col = "_rowid" if src.row_ids else "_rowaddr"
    batches = list(
        ds.scan_fragment(fragment_id, [src.column], with_row_id=src.row_ids, with_row_address=not src.row_ids,
                         row_range=row_range)
    )
    schema = ds.output_schema([src.column], with_row_id=src.row_ids, with_row_address=not src.row_ids)
    t = pa.Table.from_batches(batches, schema=schema)
    col = t.column(src.column).combine_chunks()
    if not pa.types.is_fixed_size_list(col.type):
        raise InvalidInputError(f"column {src.column!r} is {col.type}, not a vector (fixed_size_list)")
    dim = col.type.list_size
    values = col.values.slice(col.offset * dim, len(col) * dim)
    x = values.to_numpy(zero_copy_only=False).astype(np.float32, copy=False).reshape(len(col), dim)
    valid = col.is_valid().to_numpy(zero_copy_only=False) if col.null_count else None
    ids = t.column(id_col).to_numpy().astype(np.uint64)
    return ids, x, valid


def _save(store: ObjectStore, rel: str, arrays: list[np.ndarray]) -> None:
    buf = io.BytesIO()
    for a in arrays:
        buf.write(np.ascontiguousarray(a).tobytes())
    store.write(rel, buf.getvalue())


MAX_KMEANS_THREADS = 8  # the one-task k-means' threads at most (a cluster's slots are not one machine's)
_SAMPLES = region("spark.vector_samples", max_entries=16)  # sample files read, kept for the next round


def load_sample(store: ObjectStore, rel: str, dim: int, take: int) -> np.ndarray:
    x = _SAMPLES.get(rel)
    if x is None:
        x = np.frombuffer(store.read(rel), dtype=np.float32).reshape(-1, dim)
        _SAMPLES.put(rel, x, x.nbytes)
    return x[:take]


# -- sampling ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SampleSpec:
    source: Source
    fragments: tuple[tuple[int, int], ...]  # (fragment id, rows to draw; -1: every row)
    metric: str
    work_dir: str
    seed: int
    candidates: int  # sample rows returned for the k-means initialisation


@dataclass(frozen=True)
class SampleResult:
    file: str | None
    rows: int
    candidates: np.ndarray
    bounds: tuple[float, float]


def run_sample(spec: SampleSpec, ctx: TaskContext) -> SampleResult:
    """Draw rows of each fragment at random (valid, finite, normalised for cosine), write them
    in random order (any prefix is a random sample too)."""
    ds = spec.source.dataset()
    pieces = []
    for fid, want in spec.fragments:
        _, x, valid = fragment_vectors(ds, fid, spec.source)
        _, v = prepare(x, valid, spec.metric)
        if 0 <= want < v.shape[0]:
            rng = np.random.default_rng([spec.seed, fid])
            v = v[np.sort(rng.choice(v.shape[0], size=want, replace=False))]
        pieces.append(v)
    dim = pieces[0].shape[1] if pieces else 0
    x = np.concatenate(pieces) if pieces else np.zeros((0, dim), np.float32)
    x = x[np.random.default_rng([spec.seed, ctx.task_id]).permutation(x.shape[0])]
    if x.shape[0] == 0:
        return SampleResult(None, 0, x, sq_bounds(x))
    rel = f"{spec.work_dir}/{ctx.file_prefix}-sample.f32"
    _save(spec.source.store(), rel, [x])
    return SampleResult(rel, int(x.shape[0]), x[: spec.candidates].copy(), sq_bounds(x))


# -- training ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RoundSpec:
    """One k-means round over one sample file's first ``take`` rows."""

    uri: str
    file: str
    take: int
    centroids: np.ndarray
    metric: str  # l2 or dot
    bias: np.ndarray | None  # balanced k-means: added per centroid when choosing
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)


def run_round(spec: RoundSpec, ctx: TaskContext) -> Partial:
    store = ObjectStore(spec.uri, spec.storage_options)
    x = load_sample(store, spec.file, spec.centroids.shape[1], spec.take)
    return partial_sums(x, spec.centroids, spec.metric, spec.bias)


@dataclass(frozen=True)
class KMeansSpec:
    """The whole IVF k-means in one task, on samples small enough for one (``files``: each
    sample file and the rows of it to use)."""

    uri: str
    files: tuple[tuple[str, int], ...]
    init: np.ndarray
    metric: str  # l2 or dot
    max_iters: int
    seed: int
    balance_factor: float
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)
    threads: int = 1  # the job's task slots: this task runs alone, its rounds use that many threads


def run_kmeans(spec: KMeansSpec, ctx: TaskContext) -> tuple[np.ndarray, float]:
    store = ObjectStore(spec.uri, spec.storage_options)
    dim = spec.init.shape[1]
    x = np.concatenate([load_sample(store, f, dim, n) for f, n in spec.files])
    threads = max(1, min(spec.threads, usable_cpus(), MAX_KMEANS_THREADS))
    return fit(x, spec.init, spec.metric, spec.max_iters, spec.seed, spec.balance_factor, threads)


@dataclass(frozen=True)
class PqTrainSpec:
    """The codebooks of sub-vectors ``subs``, trained on the samples' first rows (their
    residuals against ``centroids`` for l2 / cosine, computed once per task)."""

    uri: str
    files: tuple[tuple[str, int], ...]
    centroids: np.ndarray
    metric: str
    subs: tuple[int, ...]
    m: int
    nbits: int
    max_iters: int
    seed: int
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)


def run_pq_train(spec: PqTrainSpec, ctx: TaskContext) -> list[np.ndarray]:
    from lance_spark_ops.index.vector.ivf_model import assign_metric
    from lance_spark_ops.index.vector.kmeans import assign

    store = ObjectStore(spec.uri, spec.storage_options)
    dim = spec.centroids.shape[1]
    x = np.concatenate([load_sample(store, f, dim, n) for f, n in spec.files])
    if pq_uses_residual(spec.metric):
        parts, _ = assign(x, spec.centroids, assign_metric(spec.metric))
        x = residuals(x, spec.centroids, parts)
    return [pq_train_sub(x, j, spec.m, spec.nbits, spec.max_iters, spec.seed) for j in spec.subs]


# -- encoding ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class EncodeSpec:
    source: Source
    fragments: tuple[int, ...]
    model: Model
    work_dir: str
    ranges: tuple[tuple[int, int] | None, ...] = ()  # per fragment: physical rows start..stop, None all


@dataclass(frozen=True)
class Run:
    """An encode task's output: ``rows`` rows sorted by partition, ``counts`` per partition."""

    file: str | None
    rows: int
    counts: np.ndarray


def run_encode(spec: EncodeSpec, ctx: TaskContext) -> Run:
    """Assign and encode every live row of the fragments; one run file sorted by partition
    (stable: within a partition rows keep fragment then offset order)."""
    ds = spec.source.dataset()
    model = spec.model
    all_ids, all_parts, all_rows = [], [], []
    for i, fid in enumerate(spec.fragments):
        ids, x, valid = fragment_vectors(ds, fid, spec.source, spec.ranges[i] if spec.ranges else None)
        if x.shape[1] != model.dim:
            raise InvalidInputError(
                f"column {spec.source.column!r} has {x.shape[1]} dimensions, the index model {model.dim}"
            )
        kept, v = prepare_for(model, x, valid)
        parts, rows = encode(model, v)
        all_ids.append(ids[kept])
        all_parts.append(parts)
        all_rows.append(rows)
    k = model.num_partitions
    if not all_ids or sum(a.size for a in all_ids) == 0:
        return Run(None, 0, np.zeros(k, np.int64))
    ids, parts, rows = np.concatenate(all_ids), np.concatenate(all_parts), np.concatenate(all_rows)
    order = np.argsort(parts, kind="stable")
    rel = f"{spec.work_dir}/{ctx.file_prefix}-run.bin"
    _save(spec.source.store(), rel, [ids[order], rows[order].astype(model.storage_dtype, copy=False)])
    return Run(rel, int(ids.size), np.bincount(parts, minlength=k).astype(np.int64))


@dataclass(frozen=True)
class SplitSampleSpec:
    """Vectors (prepared) of the rows ``model`` puts in partitions ``parts``, every
    ``steps[i]``-th of partition ``parts[i]`` (pylance samples a split partition's rows at a
    stride before training its new centroids)."""

    source: Source
    fragments: tuple[int, ...]
    model: Model
    parts: tuple[int, ...]
    steps: tuple[int, ...]


def run_split_sample(spec: SplitSampleSpec, ctx: TaskContext) -> list[np.ndarray]:
    ds = spec.source.dataset()
    model = spec.model
    out: list[list[np.ndarray]] = [[] for _ in spec.parts]
    for fid in spec.fragments:
        _, x, valid = fragment_vectors(ds, fid, spec.source)
        _, v = prepare(x, valid, model.metric)
        parts = assign(v, model.centroids, assign_metric(model.metric))[0]
        for i, (p, step) in enumerate(zip(spec.parts, spec.steps, strict=True)):
            out[i].append(v[parts == p][::step])
    dim = model.dim
    return [np.concatenate(o) if o else np.zeros((0, dim), np.float32) for o in out]


def takeable(ds: Dataset, column: str, field_id: int) -> bool:
    """Rows of ``column`` can be taken by address: a top-level column held by one non-legacy
    data file in every fragment (else a join encodes every row afresh)."""
    if "." in column:
        return False
    for f in ds.fragments:
        files = [df for df in f.files if field_id in df.stored_field_ids()]
        if len(files) != 1 or files[0].is_legacy:
            return False
    return True


# a take of at least 1 / DENSE_TAKE of a span of rows reads the span whole instead
DENSE_TAKE = 32
DENSE_BATCH_ROWS = 1 << 14  # rows decoded at a time there (the memory held stays small)


def take_vectors(ds: Dataset, column: str, field_id: int, addrs: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Live rows among row addresses ``addrs`` (sorted): (addresses, vectors, validity), read
    by a take from each fragment's data file (pylance re-reads a joined partition's rows)."""
    fids, starts = np.unique(addrs >> np.uint64(32), return_index=True)  # addrs sorted: one run each
    bounds = dict(zip(fids.tolist(), zip(starts.tolist(), [*starts[1:].tolist(), addrs.size], strict=True),
                      strict=True))
    frags = ds.fragments_with_ids(fids.astype(np.int64).tolist())
    with FragmentBatch(ds, list(frags.values())).fetched_ahead(data=False):  # deletion files together
        return _take_from(ds, column, field_id, addrs, frags, bounds)


def _take_from(ds: Dataset, column: str, field_id: int, addrs: np.ndarray, frags: dict[int, Any],
               bounds: dict[int, tuple[int, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    out_ids, out_x, out_valid = [], [], []
    for fid, frag in frags.items():
        a, b = bounds[fid]
        sel = addrs[a:b]
        offs = (sel & np.uint64(0xFFFFFFFF)).astype(np.int64)
        live = ds.live_mask(frag)
        if live is not None:
            keep = live[offs]
            sel, offs = sel[keep], offs[keep]
        if not offs.size:
            continue
        (df,) = [d for d in frag.files if field_id in d.stored_field_ids()]
        store, rel = ds.base_resolver.data_file(df, f"fragment {fid}")
        reader = LanceFileReader(rel, store=store)
        lo, hi = int(offs[0]), int(offs[-1]) + 1
        if offs.size * DENSE_TAKE >= hi - lo:
            # dense: the span read whole and the rows picked from it (a take's coalesced
            # reads fetch about the same bytes, and its costs per row dominate)
            at = lo
            for b in reader.iter_batches([column], batch_rows=DENSE_BATCH_ROWS, start=lo, stop=hi):
                x, valid = _fsl_rows([b.column(0)])
                i, j = np.searchsorted(offs, [at, at + len(x)])
                out_x.append(x[offs[i:j] - at])
                out_valid.append(valid[offs[i:j] - at])
                at += len(x)
        else:
            x, valid = _fsl_rows([reader.take(offs, columns=[column]).column(0)])
            out_x.append(x)
            out_valid.append(valid)
        out_ids.append(sel)
    if not out_ids:
        return np.zeros(0, np.uint64), np.zeros((0, 0), np.float32), None
    return np.concatenate(out_ids), np.concatenate(out_x), np.concatenate(out_valid)


def live_addresses(ds: Dataset, addrs: np.ndarray) -> np.ndarray:
    """Which row addresses name a live row (fragment present, not deleted)."""
    out = np.zeros(addrs.size, bool)
    fids = addrs >> np.uint64(32)
    frags = ds.fragments_with_ids(np.unique(fids).astype(np.int64).tolist())
    with FragmentBatch(ds, list(frags.values())).fetched_ahead(data=False):  # deletion files together
        for fid, frag in frags.items():
            at = np.flatnonzero(fids == np.uint64(fid))
            live = ds.live_mask(frag)
            out[at] = True if live is None else live[(addrs[at] & np.uint64(0xFFFFFFFF)).astype(np.int64)]
    return out


def _fsl_rows(chunks: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Fixed-size-list arrays (or chunked ones) as (n x dim float32 rows, validity): views of
    the values where they allow, one copy at most."""
    xs, valid = [], []
    for ch in chunks:
        for col in ch.chunks if isinstance(ch, pa.ChunkedArray) else [ch]:
            dim = col.type.list_size
            values = col.values.slice(col.offset * dim, len(col) * dim)
            xs.append(values.to_numpy(zero_copy_only=False).astype(np.float32, copy=False).reshape(-1, dim))
            valid.append(col.is_valid().to_numpy(zero_copy_only=False) if col.null_count
                         else np.ones(len(col), bool))
    if len(xs) == 1:
        return xs[0], valid[0]
    return np.concatenate(xs), np.concatenate(valid)


def read_run_rows(
    store: ObjectStore, run: Run, start: int, stop: int, model: Model
) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``start..stop`` of a run: (ids, storage rows)."""
    n, w, item = run.rows, model.width, model.storage_dtype.itemsize
    got = store.read_ranges(
        run.file, [(start * 8, (stop - start) * 8), (n * 8 + start * w * item, (stop - start) * w * item)]
    )
    ids = np.frombuffer(got[0], dtype=np.uint64)
    rows = np.frombuffer(got[1], dtype=model.storage_dtype).reshape(-1, w)
    if ids.size != stop - start or rows.shape[0] != stop - start:
        raise CorruptFileError(f"run {run.file}: rows {start}..{stop} are not all there")
    return ids, rows


# -- partition ranges ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RangeSpec:
    """Partitions ``lo..hi`` gathered from the old segments folded in (``olds``, serialized
    ``IndexMetadata``; their rows first) and every run (in run order), their HNSW graphs
    built."""

    uri: str
    runs: tuple[Run, ...]
    lo: int
    hi: int
    model: Model
    hnsw: Params | None
    work_dir: str
    file_version: str
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)
    olds: tuple[bytes, ...] = ()
    source: Source | None = None  # to read the old segments and the live rows
    # a piece of partition ``lo`` (``hi == lo + 1``): its rows ``start..stop`` counted over the
    # old segments' rows (deleted ones too) then the runs'; None: the whole range
    rows: tuple[int, int] | None = None
    drop: tuple[int, ...] = ()  # partitions joined away (or split in place): stored rows left out
    # a split in place: the moved rows (after the stored ones; never dropped), and the
    # partitions of the old segments and runs when fewer than the model's (appended ones
    # come only from ``moved``)
    moved: tuple[Run, ...] = ()
    stored: int = 0


@dataclass(frozen=True)
class RangePart:
    """A range task's output: its storage rows (raw, partition-major, PQ codes transposed per
    partition), per partition its storage rows; HNSW: its graph file, per partition graph
    rows and ``lance:hnsw`` entries."""

    lo: int
    hi: int
    file: str | None
    lengths: tuple[int, ...]
    graph_file: str | None = None
    graph_lengths: tuple[int, ...] = ()
    entries: tuple[str, ...] = ()
    piece: bool = False  # a piece of partition lo; consecutive pieces of lo make the partition


def gather(
    store: ObjectStore, spec: RangeSpec, ds: Dataset | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids, storage rows, lengths) of partitions lo..hi, partition-major, runs in order
    (``ds``: the source's dataset when the caller has it open)."""
    if spec.rows is not None:
        return _gather_piece(store, spec)
    model = spec.model
    per_part: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(spec.hi - spec.lo)]
    old_model, top = _stored(spec)
    # the stored rows (old segments, runs) of the partitions kept, read span by span: a
    # partition joined away or split in place is not read at all
    spans = kept_spans(spec.lo, min(spec.hi, top), spec.drop)
    if spec.olds and spans:
        from lance_spark_ops.spark.indices.vector_merge_tasks import old_spans, present_rows

        ds = spec.source.dataset() if ds is None else ds
        present = present_rows(ds, spec.source.row_ids)
        at = [p - spec.lo for a, b in spans for p in range(a, b)]
        for old in spec.olds:
            for i, piece in zip(at, old_spans(ds, old, spans, old_model, present), strict=True):
                if piece[0].size:
                    per_part[i].append(piece)
    for a, b in spans:
        _gather_runs(store, spec.runs, a, b, model, per_part[a - spec.lo : b - spec.lo])
    _gather_runs(store, spec.moved, spec.lo, spec.hi, model, per_part)
    lengths = np.array([sum(i.size for i, _ in pieces) for pieces in per_part], dtype=np.int64)
    flat = [piece for pieces in per_part for piece in pieces]
    if not flat:
        return np.zeros(0, np.uint64), np.zeros((0, model.width), model.storage_dtype), lengths
    return np.concatenate([i for i, _ in flat]), np.concatenate([r for _, r in flat]), lengths


def kept_spans(lo: int, hi: int, drop: tuple[int, ...]) -> list[tuple[int, int]]:
    """Partitions ``lo..hi`` without those in ``drop``, as maximal spans ``(a, b)``."""
    gone = sorted({p for p in drop if lo <= p < hi})
    out, a = [], lo
    for p in [*gone, hi]:
        if p > a:
            out.append((a, p))
        a = p + 1
    return out


def _gather_piece(store: ObjectStore, spec: RangeSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows ``spec.rows`` of partition ``lo``: the slice of (old segments' rows, then every
    run's) that falls in it, in that order - the order of the whole partition."""
    model, p = spec.model, spec.lo
    start, stop = spec.rows
    pieces: list[tuple[np.ndarray, np.ndarray]] = []
    old_model, top = _stored(spec)
    stored = p not in spec.drop and p < top  # the partition's stored rows are kept
    at = 0  # where the current source's rows begin in the partition
    if spec.olds and stored:
        from lance_spark_ops.spark.indices.vector_merge_tasks import old_length, old_slice, present_rows

        ds = spec.source.dataset()
        present = present_rows(ds, spec.source.row_ids)
        for old in spec.olds:
            n = old_length(ds, old, p, old_model)
            s, e = max(start - at, 0), min(stop - at, n)
            if e > s:
                pieces.append(old_slice(ds, old, p, s, e, old_model, present))
            at += n
    for run in (spec.runs if stored else ()) + spec.moved:
        n = int(run.counts[p]) if run.file is not None else 0
        s, e = max(start - at, 0), min(stop - at, n)
        if e > s:
            first = int(run.counts[:p].sum())
            pieces.append(read_run_rows(store, run, first + s, first + e, model))
        at += n
    pieces = [pc for pc in pieces if pc[0].size]
    if not pieces:
        return np.zeros(0, np.uint64), np.zeros((0, model.width), model.storage_dtype), np.zeros(1, np.int64)
    ids = np.concatenate([i for i, _ in pieces])
    return ids, np.concatenate([r for _, r in pieces]), np.array([ids.size], np.int64)


def _stored(spec: RangeSpec) -> tuple[Model, int]:
    """The model the old segments were written with (their partition count) and that count."""
    if not spec.stored or spec.stored == spec.model.num_partitions:
        return spec.model, spec.model.num_partitions
    return replace(spec.model, centroids=spec.model.centroids[: spec.stored]), spec.stored


def _gather_runs(store: ObjectStore, runs: tuple[Run, ...], lo: int, hi: int, model: Model,
                 per_part: list[list[tuple[np.ndarray, np.ndarray]]]) -> None:
    """The rows of partitions ``lo..hi`` of ``runs`` (in run order) appended to ``per_part``
    (its first entry: partition ``lo``)."""
    for run in runs:
        if run.file is None or hi <= lo:
            continue
        starts = np.concatenate([[0], np.cumsum(run.counts)])
        a, b = int(starts[lo]), int(starts[hi])
        if a == b:
            continue
        ids, rows = read_run_rows(store, run, a, b, model)
        for p in range(lo, hi):
            s, e = int(starts[p]) - a, int(starts[p + 1]) - a
            if e > s:
                per_part[p - lo].append((ids[s:e], rows[s:e]))


def run_range(spec: RangeSpec, ctx: TaskContext, ds: Dataset | None = None) -> RangePart:
    store = ObjectStore(spec.uri, spec.storage_options)
    model = spec.model
    ids, rows, lengths = gather(store, spec, ds)
    graph_file, graph_lengths, entries = None, (), ()
    if spec.hnsw is not None:
        graph_file, graph_lengths, entries = _graphs(store, spec, rows, lengths, ctx)
    stored = transpose_codes(rows, lengths.tolist()) if model.quantizer == "PQ" else rows
    rel = None
    if ids.size:
        rel = f"{spec.work_dir}/{ctx.file_prefix}-part.bin"
        _save(store, rel, [ids, stored])
    return RangePart(
        spec.lo,
        spec.hi,
        rel,
        tuple(int(n) for n in lengths),
        graph_file,
        graph_lengths,
        entries,
        spec.rows is not None,
    )


def _graphs(
    store: ObjectStore, spec: RangeSpec, rows: np.ndarray, lengths: np.ndarray, ctx: TaskContext
) -> tuple[str, tuple[int, ...], tuple[str, ...]]:
    """Each partition's HNSW graph on what its storage holds (``vector_space``)."""
    from lance_spark_ops.index.vector.vector_space import partition_spaces

    model = spec.model
    schema = storage_schema(model.kind, model.metric, model.dim, model.storage_meta())
    col = schema.field(1)
    table = pa.Table.from_arrays(
        [
            pa.array(np.zeros(rows.shape[0], np.uint64)),
            pa.FixedSizeListArray.from_arrays(pa.array(rows.reshape(-1)), col.type.list_size),
        ],
        schema=pa.schema([schema.field(0), pa.field(col.name, col.type)]),
    )
    spaces = partition_spaces(
        table, lengths, schema, storage_buffers(lengths.tolist(), model.storage_meta()), transposed=False
    )
    ischema = index_schema(model.kind, model.metric, model.num_partitions)
    params = [spec.hnsw] * spec.hi
    pieces, glens, entries = [], [], []
    for i, p in enumerate(range(spec.lo, spec.hi)):
        if lengths[i] == 0:
            glens.append(0)
            entries.append("")
            continue
        g_rows, entry = hnsw_file.rebuild_partition(spaces(i), params, p, ischema)
        pieces.append(g_rows)
        glens.append(g_rows.num_rows)
        entries.append(entry)
    rel = f"{spec.work_dir}/{ctx.file_prefix}-graphs.lance"
    graph_schema = pa.schema(list(GRAPH_FIELDS))
    table = pa.concat_tables([t.cast(graph_schema) for t in pieces]) if pieces else graph_schema.empty_table()
    _write_lance(store, rel, table, spec.file_version)
    return rel, tuple(glens), tuple(entries)


def _write_lance(
    store: ObjectStore, rel: str, table: pa.Table, version: str, extra: list[bytes] | None = None
) -> int:
    w = LanceFileWriter(rel, table.schema, version=version, store=store)
    w.extra_global_buffers = list(extra or [])
    try:
        if table.num_rows:
            w.write(table)
        return w.close()[1]
    except BaseException:
        w.abort()
        raise


# -- assembly ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class AssembleSpec:
    uri: str
    seg_dir: str
    model: Model
    parts: tuple[RangePart, ...]  # in partition order
    file_version: str
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)
    drop: tuple[int, ...] = ()  # partitions of the parts joined away (empty), left out


def run_assemble(spec: AssembleSpec, ctx: TaskContext) -> tuple[tuple[str, int], ...]:
    """Write ``auxiliary.idx`` (the parts' storage in order) and ``index.idx``; returns the
    files with their sizes."""
    store = ObjectStore(spec.uri, spec.storage_options)
    model = spec.model
    groups = _partition_groups(spec.parts)
    lengths = [
        n for g in groups for n in (g[0].lengths if not g[0].piece else [sum(p.lengths[0] for p in g)])
    ]
    if spec.drop:
        gone = set(spec.drop)
        if any(lengths[p] for p in gone):
            raise CorruptFileError("a joined partition still holds rows")
        lengths = [n for p, n in enumerate(lengths) if p not in gone]
    schema = storage_schema(model.kind, model.metric, model.dim, model.storage_meta())
    w = LanceFileWriter(f"{spec.seg_dir}/{AUX_FILE}", schema, version=spec.file_version, store=store)
    w.extra_global_buffers = storage_buffers(lengths, model.storage_meta())
    try:
        for g in groups:
            if model.quantizer == "RQ":
                _write_rq(store, w, g, model, schema)
                continue
            if g[0].piece and model.quantizer == "PQ" and len(g) > 1:
                _write_transposed(store, w, g, model, schema)
                continue
            for part in g:
                if part.file is not None:
                    raw = store.read(part.file)
                    n = sum(part.lengths)
                    _write_rows(w, schema, np.frombuffer(raw, dtype=np.uint64, count=n),
                                np.frombuffer(raw, dtype=model.storage_dtype, offset=n * 8))
        aux_size = w.close()[1]
    except BaseException:
        w.abort()
        raise
    if spec.parts and spec.parts[0].graph_file is not None:
        index_size = _assemble_graphs(store, spec)
    else:
        ischema = index_schema(model.kind, model.metric, model.num_partitions)
        extra = [ivf_message([0] * model.num_partitions, model.centroids, model.loss).SerializeToString()]
        index_size = _write_lance(
            store, f"{spec.seg_dir}/{INDEX_FILE}", ischema.empty_table(), spec.file_version, extra
        )
    return ((AUX_FILE, aux_size), (INDEX_FILE, index_size))


def _partition_groups(parts: tuple[RangePart, ...]) -> list[list[RangePart]]:
    """The parts in order, the consecutive pieces of one partition grouped."""
    out: list[list[RangePart]] = []
    for part in parts:
        if part.piece and out and out[-1][0].piece and out[-1][0].lo == part.lo:
            out[-1].append(part)
        else:
            out.append([part])
    return out


def _write_rows(w: LanceFileWriter, schema: pa.Schema, ids: np.ndarray, vals: np.ndarray) -> None:
    col_type = schema.field(1).type
    w.write(
        pa.Table.from_arrays(
            [
                pa.array(ids, pa.uint64()),
                pa.FixedSizeListArray.from_arrays(pa.array(vals), col_type.list_size).cast(col_type),
            ],
            schema=schema,
        )
    )


def _write_rq(store: ObjectStore, w: LanceFileWriter, group: list[RangePart], model: Model,
              schema: pa.Schema) -> None:
    """A part's partitions, or one partition's pieces together, as RaBitQ columns (each
    partition's codes packed over the whole partition)."""
    ids, rows, lengths = [], [], []
    for part in group:
        n = sum(part.lengths)
        if part.file is not None and n:
            raw = store.read(part.file)
            ids.append(np.frombuffer(raw, dtype=np.uint64, count=n))
            rows.append(np.frombuffer(raw, dtype=np.uint8, offset=n * 8).reshape(n, model.width))
        lengths.extend(part.lengths)
    if not ids:
        return
    if group[0].piece:
        lengths = [sum(lengths)]
    w.write(rabitq_storage.storage_table(model.rabit, schema, np.concatenate(ids), np.concatenate(rows),
                                 np.asarray(lengths, np.int64)))


def _write_transposed(store: ObjectStore, w: LanceFileWriter, pieces: list[RangePart], model: Model,
                      schema: pa.Schema) -> None:
    """One partition written in pieces: its row ids in piece order, its PQ codes transposed
    over the whole partition (sub-vector j of every piece, then j + 1), streamed in chunks of
    at most a piece's size, one ranged read per piece and sub-vector."""
    width = model.width
    lens = [p.lengths[0] if p.file is not None else 0 for p in pieces]
    live = [(p, n) for p, n in zip(pieces, lens, strict=True) if n]
    chunk = max(max(lens), 1)  # rows per write
    ids_left = iter(live)
    ids_buf: list[np.ndarray] = []
    ids_have = 0
    codes_buf: list[np.ndarray] = []
    codes_have = 0

    def flush(rows: int) -> None:
        nonlocal ids_have, codes_have, ids_buf, codes_buf
        while ids_have < rows:
            p, n = next(ids_left)
            ids_buf.append(np.frombuffer(store.read_ranges(p.file, [(0, n * 8)])[0], dtype=np.uint64))
            ids_have += n
        ids, codes = np.concatenate(ids_buf), np.concatenate(codes_buf)
        _write_rows(w, schema, ids[:rows], codes[: rows * width])
        ids_buf, codes_buf = [ids[rows:]], [codes[rows * width :]]
        ids_have, codes_have = ids_have - rows, codes_have - rows * width

    for j in range(width):
        for p, n in live:
            (seg,) = store.read_ranges(p.file, [(n * 8 + j * n, n)])
            codes_buf.append(np.frombuffer(seg, dtype=np.uint8))
            codes_have += n
            if codes_have >= chunk * width:
                flush(codes_have // width)
    if codes_have:
        flush(codes_have // width)


def _assemble_graphs(store: ObjectStore, spec: AssembleSpec) -> int:
    model = spec.model
    entries = [e for part in spec.parts for e in part.entries]
    glens = [n for part in spec.parts for n in part.graph_lengths]
    ischema = index_schema(model.kind, model.metric, model.num_partitions, entries)
    extra = [ivf_message(glens, model.centroids, model.loss).SerializeToString()]
    w = LanceFileWriter(f"{spec.seg_dir}/{INDEX_FILE}", ischema, version=spec.file_version, store=store)
    w.extra_global_buffers = extra
    try:
        for part in spec.parts:
            if sum(part.graph_lengths):
                rows = LanceFileReader(part.graph_file, store=store).read()
                w.write(rows.cast(pa.schema(list(GRAPH_FIELDS))).replace_schema_metadata(ischema.metadata))
        return w.close()[1]
    except BaseException:
        w.abort()
        raise


@dataclass(frozen=True)
class SegmentSpec:
    """A whole small segment in one task (``build_many``): ``range`` covers every partition,
    ``assemble`` (its parts left empty) writes the files from what the range gathered."""

    range: RangeSpec
    assemble: AssembleSpec


def run_segments(
    specs: tuple[SegmentSpec, ...], ctx: TaskContext
) -> list[tuple[tuple[tuple[str, int], ...], int]]:
    """``run_range`` then ``run_assemble`` of each segment in turn (one at a time in memory);
    per segment its files with their sizes and its rows."""
    out = []
    opened: dict[tuple[str, int], Dataset] = {}  # the round's segments share one version
    for spec in specs:
        src = spec.range.source
        ds = None
        if src is not None and spec.range.olds:
            key = (src.uri, src.read_version)
            ds = opened[key] = opened[key] if key in opened else src.dataset()
        part = run_range(spec.range, ctx, ds)
        files = run_assemble(replace(spec.assemble, parts=(part,)), ctx)
        out.append((files, int(sum(part.lengths))))
    return out
