"""Vector index segments (IVF_FLAT, IVF_PQ, IVF_SQ, IVF_RQ, IVF_HNSW_{FLAT,PQ,SQ}) built on executors:
the ``SegmentBuilder`` of the vector kinds (``spark.indices.index_segment``), ``VECTOR_BUILDER``.

A build (``spark.indices.vector_index_tasks`` for the tasks):

1. the model: the segment's ``model_from`` files (a delta or merge), the user's
   ``ivf_centroids`` / ``pq_codebook``, or trained: sample tasks draw ``sample_rate`` x
   partitions vectors (PQ / SQ: also 2^bits x ``sample_rate``) spread over the fragments by
   live rows; IVF k-means in one task when the sample has at most ``LOCAL_KMEANS_VALUES``
   values, else in rounds (one task per sample file returns per-centroid sums and counts; the
   driver averages); PQ codebooks with the sub-vectors split over the task slots (each task
   on the whole PQ sample, at most 65 536 rows); SQ bounds from the sample tasks' min / max;
   RQ: the given ``rabitq_model`` or a new random rotation (nothing to train);
2. encode tasks (fragments grouped up to ``TASK_BYTES`` of vectors) assign and encode every
   live row and write a run sorted by partition;
3. range tasks each gather a range of partitions from every run (and build their HNSW
   graphs); without HNSW a task holds at most ``TASK_BYTES`` of storage rows: a partition
   larger than that is gathered in pieces (as pylance's shuffle writes a partition in many
   batches), its PQ codes transposed over the whole partition by the assembly;
4. one assembly task writes ``index.idx`` and ``auxiliary.idx``, streaming the parts.

A tiered round's merges go through ``build_many``: one encode job for all of them, then small
segments gathered and written whole, several per task, in one more job.

Vectors never reach the driver. Defaults and names are pylance 14's ``create_index``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa

from lance_spark_ops._pb import index_pb2, table_pb2
from lance_spark_ops.errors import InvalidInputError, UnsupportedError
from lance_spark_ops.index.kinds import uuid_str
from lance_spark_ops.index.vector import rabitq
from lance_spark_ops.index.vector.hnsw import Params
from lance_spark_ops.index.vector.ivf_build import details, read_details, rq_num_bits
from lance_spark_ops.index.vector.ivf_join import destinations, never_full, window
from lance_spark_ops.index.vector.ivf_model import Model, assign_metric
from lance_spark_ops.index.vector.kmeans import (
    BALANCE_FACTOR,
    Partial,
    Training,
    assign,
    init_centroids,
    train,
)
from lance_spark_ops.index.vector.quantizers import merge_bounds
from lance_spark_ops.spark.indices.index_segment import BuiltSegment, SegmentBuilder, SegmentRequest
from lance_spark_ops.spark.indices.vector_index_tasks import (
    AssembleSpec,
    EncodeSpec,
    KMeansSpec,
    PqTrainSpec,
    RangeSpec,
    RoundSpec,
    SampleSpec,
    SegmentSpec,
    Source,
    SplitSampleSpec,
    run_assemble,
    run_encode,
    run_kmeans,
    run_pq_train,
    run_range,
    run_round,
    run_sample,
    run_segments,
    run_split_sample,
    takeable,
)
from lance_spark_ops.spark.indices.vector_join_tasks import (
    JoinEncodeSpec,
    JoinRanked,
    JoinRankSpec,
    JoinWideSpec,
    run_join_encode,
    run_join_rank,
    run_join_wide,
)
from lance_spark_ops.spark.indices.vector_models import (
    MAX_PARTITION_SIZE_FACTOR,
    adjustment_due,
    foldable,
    read_model,
    same_model,
    segment_lengths,
)
from lance_spark_ops.spark.indices.vector_split_tasks import SplitMoveSpec, run_split_move
from lance_spark_ops.spark.runtime.job import Job
from lance_spark_ops.spark.runtime.session import default_parallelism
from lance_spark_ops.table.dataset import Dataset

VECTOR_KINDS = frozenset(
    {"IVF_FLAT", "IVF_PQ", "IVF_SQ", "IVF_RQ", "IVF_HNSW_FLAT", "IVF_HNSW_PQ", "IVF_HNSW_SQ"}
)
# pylance 14's target rows per partition when num_partitions is not given (IndexType)
TARGET_PARTITION_SIZE = {
    "IVF_FLAT": 4096,
    "IVF_PQ": 8192,
    "IVF_SQ": 8192,
    "IVF_RQ": 4096,
    "IVF_HNSW_FLAT": 1 << 20,
    "IVF_HNSW_PQ": 1 << 20,
    "IVF_HNSW_SQ": 1 << 20,
}
MAX_PARTITIONS = 4096  # recommended_num_partitions' cap
SPLIT_SAMPLE_RATE = 256  # pylance 14's split: vectors sampled per new centroid,
SPLIT_ITERS = 50  # k-means iterations (neighbours its rows may go to: ivf_join.REASSIGN_RANGE)
DEFAULTS = {
    "metric": "l2",
    "num_partitions": None,
    "num_sub_vectors": None,
    "num_bits": 8,
    "ivf_centroids": None,
    "pq_codebook": None,
    "rabitq_model": None,
    "target_partition_size": None,
    "max_iterations": 50,
    "sample_rate": 256,
    "m": 20,
    "ef_construction": 150,
    "max_level": 7,
}
ALIASES = {"max_iters": "max_iterations", "metric_type": "metric"}
# pylance parameters about its own machinery (shuffle buffers, caches): accepted, no effect here
IGNORED = frozenset({"shuffle_partition_batches", "shuffle_partition_concurrency", "index_cache_size"})
# vector bytes an encode task reads, and storage bytes a range task gathers, about at most
# (a single fragment or partition larger than that still goes to one task whole)
TASK_BYTES = 128 << 20
ROWS_PER_TASK = None  # tests: a row cap instead of TASK_BYTES
PIECE_ROWS = None  # tests: the rows a range task holds at most, instead of TASK_BYTES' worth
SEED = 0x49564621  # "IVF!"
# IVF samples up to this many values (rows x dim, 64 MiB of float32) train in one task; larger
# ones in rounds of tasks, one per sample file (a Spark job per round)
LOCAL_KMEANS_VALUES = 1 << 24


def _int(params: Mapping[str, Any], key: str, lo: int = 1) -> int | None:
    v = params.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or int(v) < lo:
        raise InvalidInputError(f"index parameter {key}={v!r}: expected an integer >= {lo}")
    return int(v)


def _matrix(v: Any, key: str) -> np.ndarray:
    if isinstance(v, (pa.FixedSizeListArray, pa.ChunkedArray)):
        v = v.combine_chunks() if isinstance(v, pa.ChunkedArray) else v
        v = np.asarray(v.values.to_numpy(zero_copy_only=False)).reshape(len(v), v.type.list_size)
    try:
        arr = np.asarray(v, dtype=np.float32)
    except (TypeError, ValueError) as e:
        raise InvalidInputError(f"index parameter {key}: not a float array ({e})") from e
    return arr


class VectorSegmentBuilder(SegmentBuilder):
    """``SegmentBuilder`` for the IVF kinds."""

    kinds = VECTOR_KINDS
    batches = True  # build_many: a tiered round's merges share their encode jobs

    # -- parameters --------------------------------------------------------------------------------
    def check_params(self, kind: str, field: pa.Field, params: Mapping[str, Any]) -> dict[str, Any]:
        if kind not in VECTOR_KINDS:
            raise UnsupportedError(f"index type {kind!r} is not a vector index type this library builds")
        t = field.type
        if not pa.types.is_fixed_size_list(t) or not pa.types.is_floating(t.value_type):
            raise InvalidInputError(
                f"column {field.name!r} is {t}: a vector index needs a fixed_size_list of floats"
            )
        if not pa.types.is_float32(t.value_type):
            raise UnsupportedError(
                f"column {field.name!r}: vectors of {t.value_type} are not supported yet (float32 only)"
            )
        dim = t.list_size
        p = {ALIASES.get(k, k): v for k, v in params.items() if k not in IGNORED}
        unknown = sorted(set(p) - set(DEFAULTS))
        if unknown:
            raise InvalidInputError(f"unknown {kind} index parameter(s) {unknown}; known: {sorted(DEFAULTS)}")
        out = {**DEFAULTS, **p}
        metric = str(out["metric"]).lower()
        metric = "l2" if metric == "euclidean" else metric
        if metric == "hamming":
            raise UnsupportedError("metric hamming (uint8 vectors) is not supported")
        if metric not in ("l2", "cosine", "dot"):
            raise InvalidInputError(f"index parameter metric={out['metric']!r}: expected l2, cosine or dot")
        out["metric"] = metric
        for key in (
            "num_partitions",
            "num_sub_vectors",
            "target_partition_size",
            "max_iterations",
            "sample_rate",
            "m",
            "ef_construction",
            "max_level",
        ):
            out[key] = _int(out, key)
        if out["ivf_centroids"] is not None:
            c = _matrix(out["ivf_centroids"], "ivf_centroids")
            if c.ndim != 2 or c.shape[1] != dim or c.shape[0] == 0:
                raise InvalidInputError(f"ivf_centroids of shape {c.shape}: expected (partitions, {dim})")
            if out["num_partitions"] is not None and out["num_partitions"] != c.shape[0]:
                raise InvalidInputError(
                    f"ivf_centroids has {c.shape[0]} clusters, but num_partitions={out['num_partitions']}"
                )
            out["ivf_centroids"], out["num_partitions"] = c, c.shape[0]
        if kind == "IVF_RQ":
            self._check_rq(out, p, dim)
        elif out["rabitq_model"] is not None:
            raise InvalidInputError(f"rabitq_model is given but {kind} is not IVF_RQ")
        if kind.endswith("PQ"):
            self._check_pq(out, dim)
        elif out["pq_codebook"] is not None:
            raise InvalidInputError(f"pq_codebook is given but {kind} has no PQ")
        elif kind.endswith("SQ") and out["num_bits"] != 8:
            raise UnsupportedError(f"SQ with num_bits={out['num_bits']}: only 8 is supported (as pylance)")
        return out

    @staticmethod
    def _check_rq(out: dict[str, Any], given: Mapping[str, Any], dim: int) -> None:
        """num_bits 1..9 (pylance's default 5); a given ``rabitq_model`` (its JSON) must match
        the dimension and width, as pylance checks it."""
        nbits = _int(out, "num_bits") if "num_bits" in given else 5
        rabitq.validate(dim, nbits)
        out["num_bits"] = nbits
        raw = out["rabitq_model"]
        if raw is not None:
            model = raw if isinstance(raw, rabitq.RabitModel) else rabitq.from_metadata(raw)
            if model.num_bits != nbits:
                raise InvalidInputError(
                    f"rabitq_model num_bits={model.num_bits} does not match requested num_bits={nbits}"
                )
            if model.dim != dim:
                raise InvalidInputError(
                    f"rabitq_model dimension={model.dim} does not match vector dimension={dim}"
                )
            out["rabitq_model"] = model

    @staticmethod
    def _check_pq(out: dict[str, Any], dim: int) -> None:
        m = out["num_sub_vectors"]
        if m is None:
            raise InvalidInputError("num_sub_vectors is required for a PQ index (as pylance)")
        if dim % m:
            raise InvalidInputError(f"dimension ({dim}) must be divisible by num_sub_vectors ({m})")
        nbits = _int(out, "num_bits")
        if nbits not in (4, 8):
            raise InvalidInputError(f"num_bits={nbits}: PQ supports 4 or 8")
        if nbits == 4 and m % 2:
            raise InvalidInputError(f"num_sub_vectors ({m}) must be even for num_bits=4")
        out["num_bits"] = nbits
        if out["pq_codebook"] is not None:
            if out["ivf_centroids"] is None:
                raise InvalidInputError("ivf_centroids must be specified when pq_codebook is provided")
            book = _matrix(out["pq_codebook"], "pq_codebook")
            if book.size != (1 << nbits) * dim:
                raise InvalidInputError(
                    f"pq_codebook has {book.size} values, expected {m} x {1 << nbits} x {dim // m}"
                )
            out["pq_codebook"] = book.reshape(m, 1 << nbits, dim // m)

    def params_of(self, kind: str, index: Any) -> dict[str, Any]:
        d = read_details(index.index_details.value)
        metric = {index_pb2.L2: "l2", index_pb2.Cosine: "cosine", index_pb2.Dot: "dot"}.get(d.metric_type)
        if metric is None:
            raise UnsupportedError(f"index {index.name!r}: metric type {d.metric_type} is not supported")
        out = {**DEFAULTS, "metric": metric}
        hints = dict(d.runtime_hints)
        for key, hint in (
            ("max_iterations", "lance.ivf.max_iters"),
            ("sample_rate", "lance.ivf.sample_rate"),
        ):
            if hints.get(hint, "").isdigit():
                out[key] = int(hints[hint])
        if d.target_partition_size:
            out["target_partition_size"] = int(d.target_partition_size)
        if d.HasField("pq"):
            out["num_bits"], out["num_sub_vectors"] = int(d.pq.num_bits), int(d.pq.num_sub_vectors)
        rq_bits = rq_num_bits(index.index_details.value) if kind == "IVF_RQ" else None
        if rq_bits is not None:
            out["num_bits"] = rq_bits
        if d.HasField("hnsw_index_config"):
            h = d.hnsw_index_config
            out["m"], out["ef_construction"], out["max_level"] = (
                int(h.max_connections),
                int(h.construction_ef),
                int(h.max_level),
            )
        return out

    # -- build ---------------------------------------------------------------------------------
    def build(self, job: Job, req: SegmentRequest) -> BuiltSegment:
        ds = Dataset.open(req.uri, req.read_version, storage_options=req.storage_options)
        p = dict(req.params)
        frags = ds.fragments_with_ids(req.fragment_ids)
        live = {fid: _live_rows(ds, f) for fid, f in frags.items()}
        total = sum(live.values())
        seg_dir = f"_indices/{uuid_str(req.new_uuid)}"
        work_dir = f"{seg_dir}/_build"
        src = Source(req.uri, req.read_version, req.column, req.row_ids, dict(req.storage_options))
        slots = max(1, default_parallelism(job.spark))
        try:
            reuse = req.model_from if req.model_from is not None else (req.merge_with or (None,))[-1]
            olds: list[bytes] = []
            refit: set[int] = set()
            if reuse is not None:  # a delta or a merge: the old segment's model
                model = read_model(ds, req.kind, table_pb2.IndexMetadata.FromString(reuse))
                if not req.fold_if_adjusted:
                    olds, refit = foldable(ds, req.kind, model, req.merge_with)
            else:
                dim = ds.schema.field(req.column).type.list_size
                model = self._model(
                    job, req.kind, p, src, live, total, work_dir, (slots, _rows_per_task(4 * dim))
                )

            def encode(rows: dict[int, int]) -> list[Any]:
                with job.phase("encode"):
                    groups = _groups(rows, slots, _rows_per_task(model.dim * 4))
                    return job.run_tasks(
                        [EncodeSpec(src, g, model, work_dir) for g in groups],
                        run_encode,
                        costs=[sum(rows[f] for f in g) for g in groups],
                    )

            # segments of another model: their fragments are encoded again from the data
            runs = encode({**live, **_refit_rows(ds, refit, live)})
            folded = True
            drop: tuple[int, ...] = ()  # partitions joined away in place
            final = model  # the segment's model (the ranges' unless partitions were joined in place)
            counts = None
            split = _InPlaceSplit()
            if req.fold_if_adjusted:
                splits, joins, sizes = self._adjustment(ds, req, model, runs)
                every = {f.id: _live_rows(ds, f) for f in ds.fragments}
                centroids = None
                split_done = False  # pylance joins only when no partition splits
                if splits:
                    got = self._split(job, src, model, splits, sizes, every, slots)
                    centroids, applied = got if got is not None else (None, [])
                    split_done = centroids is not None
                    if split_done:
                        olds, refit = foldable(ds, req.kind, model, req.merge_with)
                        if self._join_in_place(ds, req, refit):
                            # only the affected partitions' rows move (taken again, each to
                            # its nearest centroid after the split); the others keep their
                            # stored rows, valid as their centroids are unchanged
                            new = replace(model, centroids=centroids)
                            affected = _affected(model, applied, new.num_partitions)
                            with job.phase("split_move"):
                                moved = self._move(job, src, req.field_id, olds, runs, model, new,
                                                   affected, sizes, work_dir, slots)
                            counts = _counts(ds, model, runs, olds)
                            split = _InPlaceSplit(tuple(moved), model.num_partitions,
                                                  tuple(p for p in affected if p < model.num_partitions))
                            counts = split.counts(counts, new.num_partitions)
                            model = final = new
                            centroids = None
                        else:
                            olds = []
                if not split_done and joins:
                    # pylance joins: the joined partitions' centroids go, their rows move to a
                    # kept partition (ivf_join: a nearby one with room below the split threshold)
                    centroids = np.delete(model.centroids, joins, axis=0)
                    olds, refit = foldable(ds, req.kind, model, req.merge_with)
                    if self._join_in_place(ds, req, refit):
                        # the kept partitions' rows stay as they are (old segments, new runs),
                        # the joined ones' are taken from the data again and placed as pylance
                        # places them
                        split_at = MAX_PARTITION_SIZE_FACTOR * self._target(req)
                        with job.phase("join"):
                            moved = self._join(job, src, req.field_id, olds, runs, model, joins, sizes,
                                               split_at, work_dir, slots)
                        runs, drop = runs + moved, tuple(joins)
                        final, centroids = replace(model, centroids=centroids), None
                    else:
                        olds = []
                folded = centroids is not None or bool(drop) or bool(split.gone)
                if centroids is not None:
                    # a split or join not done in place (HNSW, stable row ids, other
                    # models): all rows encoded afresh under the new centroids, each in its
                    # nearest partition. pylance's split moves only the affected partitions'
                    # rows (the same when rows sit in their nearest partition and there are at
                    # most 65); its join sends a joined row to the nearest kept partition of
                    # its window with room (ivf_join), here to its nearest kept one
                    model = final = replace(model, centroids=centroids)
                    runs = encode(every)
            hnsw = _hnsw(req.kind, p)
            with job.phase("partitions"):
                if counts is None:
                    counts = _counts(ds, model, runs, olds)
                parts = self._ranges(job, req, src, model, hnsw, runs, olds, drop or split.gone, counts,
                                     work_dir, slots, split.moved, split.stored)
            with job.phase("assemble"):
                (files,) = job.run_tasks(
                    [
                        AssembleSpec(
                            req.uri,
                            seg_dir,
                            final,
                            tuple(parts),
                            req.file_version,
                            dict(req.storage_options),
                            drop,
                        )
                    ],
                    run_assemble,
                )
        finally:
            _remove(ds, work_dir)
        rows = int(sum(sum(part.lengths) for part in parts))
        return BuiltSegment(tuple(files), details(req.kind, model.metric, p), _version(req.kind), rows,
                            folded)

    @staticmethod
    def _ranges(
        job: Job,
        req: SegmentRequest,
        src: Source,
        model: Model,
        hnsw: Params | None,
        runs: list[Any],
        olds: list[bytes],
        drop: tuple[int, ...],
        counts: np.ndarray,
        work_dir: str,
        slots: int,
        moved: tuple[Any, ...] = (),
        stored: int = 0,
    ) -> list[Any]:
        """The range tasks of one segment: partitions cut into about equal ranges (at least one
        per slot), each gathered from the old segments and the runs (and its graphs built);
        ``moved`` / ``stored``: a split in place's (``RangeSpec``)."""
        row_bytes = 8 + model.width * model.storage_dtype.itemsize
        tasks = max(
            slots * (2 if hnsw is not None else 1), math.ceil(counts.sum() * row_bytes / TASK_BYTES)
        )
        # a graph needs its whole partition (as pylance's): HNSW ranges are not cut
        cap = PIECE_ROWS or max(1, TASK_BYTES // row_bytes)
        if hnsw is not None:
            cap = int(counts.sum()) + 1
        ranges = _pieces(_ranges(counts, tasks), counts, cap)
        return job.run_tasks(
            [
                RangeSpec(
                    req.uri,
                    tuple(runs),
                    lo,
                    hi,
                    model,
                    hnsw,
                    work_dir,
                    req.file_version,
                    dict(req.storage_options),
                    tuple(olds),
                    src,
                    rows,
                    drop,
                    moved,
                    stored,
                )
                for lo, hi, rows in ranges
            ],
            run_range,
            costs=[float(counts[lo:hi].sum()) for lo, hi, _ in ranges],
        )

    # -- several merges at once (the tiered policy's round) ------------------------------------------
    def build_many(self, job: Job, reqs: list[SegmentRequest]) -> list[BuiltSegment]:
        """The segments of one tiered round, built together: every merge's new rows encoded in
        one Spark job, then each segment small enough for one task (no HNSW graphs, at most
        ``TASK_BYTES`` of storage rows) gathered and written whole by one task, all of them in
        one more job; larger ones (range tasks, then assembly) and requests of another shape
        (fresh builds, ``fold_if_adjusted``) as ``build`` makes them, on threads. One job per
        phase instead of two or three per segment: a round over 100 tiny groups was 200 Spark
        jobs. Rows, their order and the files' content are ``build``'s."""
        out: list[BuiltSegment | None] = [None] * len(reqs)
        # fresh builds and default optimizes (they may split or join partitions): ``build``
        alone = [i for i, r in enumerate(reqs)
                 if r.fold_if_adjusted or (r.model_from is None and not r.merge_with)]
        merges = [i for i in range(len(reqs)) if i not in set(alone)]
        slots = max(1, default_parallelism(job.spark))
        opened: dict[tuple[str, int], Dataset] = {}
        models: dict[bytes, Model] = {}
        distinct: list[Model] = []
        states: list[_Merge] = []
        try:
            for i in merges:
                states.append(_Merge.prepare(reqs[i], opened, models, distinct))
            with job.phase("encode"):
                specs, owner, costs = [], [], []
                for k, st in enumerate(states):
                    for g in _groups(st.rows, slots, _rows_per_task(st.model.dim * 4)):
                        specs.append(EncodeSpec(st.src, g, st.model, st.work_dir))
                        owner.append(k)
                        costs.append(sum(st.rows[f] for f in g))
                for k, run in zip(owner, job.run_tasks(specs, run_encode, costs=costs) if specs else [],
                                  strict=True):
                    states[k].runs.append(run)
            for st in states:
                st.counts = _counts(st.ds, st.model, st.runs, st.olds)
            whole = [k for k, st in enumerate(states) if st.whole()]
            with job.phase("segments"):
                shares = _shares([float(states[k].counts.sum()) for k in whole],
                                 [states[k].storage_bytes() for k in whole], slots)
                done = job.run_tasks(
                    [tuple(states[whole[j]].segment_spec() for j in g) for g in shares],
                    run_segments,
                    costs=[sum(float(states[whole[j]].counts.sum()) for j in g) for g in shares],
                )
            for g, got in zip(shares, done, strict=True):
                for j, (files, rows) in zip(g, got, strict=True):
                    out[merges[whole[j]]] = states[whole[j]].built(files, rows)

            def rest(k: int) -> BuiltSegment:
                st = states[k]
                with job.phase("partitions"):
                    parts = self._ranges(job, st.req, st.src, st.model, st.hnsw, st.runs, st.olds, (),
                                         st.counts, st.work_dir, slots)
                with job.phase("assemble"):
                    (files,) = job.run_tasks([st.assemble_spec(tuple(parts))], run_assemble)
                return st.built(files, int(sum(sum(part.lengths) for part in parts)))

            tail = [(merges[k], partial(rest, k)) for k in range(len(states)) if k not in set(whole)]
            tail += [(i, partial(self.build, job, reqs[i])) for i in alone]
            for i, b in zip([i for i, _ in tail], _concurrently([f for _, f in tail]), strict=True):
                out[i] = b
        finally:
            for st in states:
                _remove(st.ds, st.work_dir)
        assert all(b is not None for b in out)
        return out  # type: ignore[return-value]

    @staticmethod
    def _join_in_place(ds: Dataset, req: SegmentRequest, refit: set[int]) -> bool:
        """A join can keep the other partitions' rows as stored: every segment of one model,
        rows named by address, no graphs to rebuild, the vectors takeable by address."""
        return (
            not refit
            and not req.row_ids
            and not req.kind.startswith("IVF_HNSW_")
            and takeable(ds, req.column, req.field_id)
        )

    @staticmethod
    def _adjustment(
        ds: Dataset, req: SegmentRequest, model: Model, runs: list[Any]
    ) -> tuple[list[tuple[int, int]], list[int], np.ndarray]:
        """The splits and joins pylance 14 makes from the new rows as encoded plus every
        segment's rows per partition (returned too)."""
        counts = np.zeros(model.num_partitions, dtype=np.int64)
        for r in runs:
            counts += r.counts
        segs = [table_pb2.IndexMetadata.FromString(raw) for raw in req.merge_with]
        return adjustment_due(ds, req.kind, segs, counts, VectorSegmentBuilder._target(req))

    @staticmethod
    def _target(req: SegmentRequest) -> int:
        return int(req.params.get("target_partition_size") or TARGET_PARTITION_SIZE[req.kind])

    @staticmethod
    def _join(
        job: Job,
        src: Source,
        field_id: int,
        olds: list[bytes],
        runs: list[Any],
        model: Model,
        joins: list[int],
        sizes: np.ndarray,
        split_at: int,
        work_dir: str,
        slots: int,
    ) -> list[Any]:
        """pylance 14's join of partitions ``joins``, their rows as new runs: tasks take the
        rows again and rank them against their joined partition's window; the driver decides
        each row's partition (``ivf_join.destinations``: in pylance's order, room below the
        split threshold counted down); tasks encode them there. Tasks of about equal rows,
        joined partitions dealt largest first to the least loaded."""
        shares: list[list[int]] = [[] for _ in range(min(slots, len(joins)))]
        load = [0] * len(shares)
        for j in sorted(joins, key=lambda j: -int(sizes[j])):
            i = load.index(min(load))
            shares[i].append(j)
            load[i] += int(sizes[j])
        windows = {p: window(model.centroids, p, joins, model.metric) for p in joins}
        room = np.maximum(split_at - sizes.astype(np.int64), 0)
        room[joins] = 0
        # usually no partition can fill up: one round, each row encoded in its window's nearest
        nearest = never_full([windows[p] for p in joins], [int(sizes[p]) for p in joins], room)
        ranked: list[JoinRanked] = job.run_tasks(
            [
                JoinRankSpec(src, field_id, tuple(olds), tuple(runs), tuple(sorted(g)),
                             tuple(windows[p] for p in sorted(g)), model, work_dir, nearest)
                for g in shares
            ],
            run_join_rank,
            costs=[float(n) for n in load],
        )
        if nearest:
            return [r.run for r in ranked if r.run is not None]
        # pylance's order: joined partitions ascending, each one's rows by address
        where: dict[int, tuple[int, int, int]] = {}  # partition -> (task, first row, rows)
        for t, r in enumerate(ranked):
            first = 0
            for p, n in zip(r.joins, r.counts, strict=True):
                where[p] = (t, first, n)
                first += n
        order = sorted(joins)
        pref = np.concatenate(
            [windows[p][ranked[where[p][0]].ranks[where[p][1] : where[p][1] + where[p][2]]] for p in order]
        ) if any(where[p][2] for p in order) else np.zeros((0, 1), np.int64)
        task_of = np.concatenate([np.full(where[p][2], where[p][0]) for p in order]).astype(np.int64)
        local = np.concatenate([where[p][1] + np.arange(where[p][2]) for p in order]).astype(np.int64)
        kept = np.setdiff1d(np.arange(model.num_partitions), np.asarray(joins, np.int64))

        def rank_wide(rows: np.ndarray) -> dict[int, np.ndarray]:
            # rows whose window is full: ranked over every kept partition (rare)
            tasks = sorted(set(task_of[rows].tolist()))
            got = job.run_tasks(
                [
                    JoinWideSpec(src, ranked[t].file, ranked[t].ranks.shape[0],
                                 local[rows[task_of[rows] == t]], kept, model)
                    for t in tasks
                ],
                run_join_wide,
            )
            out: dict[int, np.ndarray] = {}
            for t, g in zip(tasks, got, strict=True):
                out.update(zip(rows[task_of[rows] == t].tolist(), g, strict=True))
            return out

        dest = destinations(pref, room, rank_wide)
        done, specs = [], []
        for t, r in enumerate(ranked):
            if r.file is None:  # no rows (all deleted)
                continue
            d, nearest_of = np.zeros(r.ranks.shape[0], np.int64), np.zeros(r.ranks.shape[0], np.int64)
            mine = task_of == t
            d[local[mine]] = dest[mine]
            nearest_of[local[mine]] = pref[mine, 0]
            if np.array_equal(d, nearest_of) and r.run is not None:
                done.append(r.run)  # every row in its window's nearest: encoded there already
            else:
                specs.append(JoinEncodeSpec(src, r.file, d, model, work_dir))
        if specs:
            done += job.run_tasks(specs, run_join_encode, costs=[float(s.dest.size) for s in specs])
        return done

    @staticmethod
    def _split(
        job: Job,
        src: Source,
        model: Model,
        splits: list[tuple[int, int]],
        sizes: np.ndarray,
        live: dict[int, int],
        slots: int,
    ) -> tuple[np.ndarray, list[int]] | None:
        """pylance 14's split: per partition, k-means (50 iterations, seeded by the partition)
        over ``SPLIT_SAMPLE_RATE`` x ways of its rows taken at a stride; the new centroids that
        win a sampled row against the partition's ``REASSIGN_RANGE`` nearest neighbours are
        kept (fewer than two: not split); the first replaces the old centroid, the others are
        appended. Returns the centroids and the partitions split, None when none splits."""
        parts = tuple(p for p, _ in splits)
        steps = tuple(max(1, int(sizes[p]) // (SPLIT_SAMPLE_RATE * w)) for p, w in splits)
        with job.phase("split"):
            groups = _groups(live, slots, _rows_per_task(model.dim * 4))
            got = job.run_tasks(
                [SplitSampleSpec(src, g, model, parts, steps) for g in groups], run_split_sample
            )
        metric = assign_metric(model.metric)
        centroids, appended, applied = model.centroids.copy(), [], []
        for i, (p, ways) in enumerate(splits):
            sample = np.concatenate([g[i] for g in got])[: SPLIT_SAMPLE_RATE * ways]
            ways = min(ways, sample.shape[0])
            if ways < 2:
                continue
            trained, _ = train(sample, ways, metric, SPLIT_ITERS, p)
            win, new_d = assign(sample, trained, metric)
            _, old_d = assign(sample, model.centroids[window(model.centroids, p, (), model.metric)], metric)
            keep = np.unique(win[new_d < old_d])  # an exact tie stays with the old centroid
            if keep.size < 2:
                continue
            centroids[p] = trained[keep[0]]
            appended.extend(trained[keep[1:]])
            applied.append(p)
        if not appended:
            return None
        return np.concatenate([centroids, np.asarray(appended, np.float32)]).astype(np.float32), applied

    @staticmethod
    def _move(
        job: Job,
        src: Source,
        field_id: int,
        olds: list[bytes],
        runs: list[Any],
        old: Model,
        new: Model,
        affected: list[int],
        sizes: np.ndarray,
        work_dir: str,
        slots: int,
    ) -> list[Any]:
        """The rows of the split's affected partitions (old numbering; appended ones hold
        none yet) encoded under ``new`` as runs: tasks of about equal rows (at most
        ``TASK_BYTES`` of vectors each where partitions allow), partitions dealt largest
        first to the least loaded."""
        parts = [p for p in affected if p < old.num_partitions and sizes[p]]
        if not parts:
            return []
        total = int(sum(int(sizes[p]) for p in parts))
        n = min(len(parts), max(slots, math.ceil(total / _rows_per_task(old.dim * 4))))
        shares: list[list[int]] = [[] for _ in range(n)]
        load = [0] * n
        for p in sorted(parts, key=lambda p: -int(sizes[p])):
            i = load.index(min(load))
            shares[i].append(p)
            load[i] += int(sizes[p])
        got = job.run_tasks(
            [SplitMoveSpec(src, field_id, tuple(olds), tuple(runs), tuple(sorted(g)), old, new, work_dir)
             for g in shares],
            run_split_move,
            costs=[float(x) for x in load],
        )
        return [r for r in got if r.file is not None]

    def _model(
        self,
        job: Job,
        kind: str,
        p: dict[str, Any],
        src: Source,
        live: dict[int, int],
        total: int,
        work_dir: str,
        fan: tuple[int, int],  # (task slots, rows an encode or sample task reads at most)
    ) -> Model:
        metric = p["metric"]
        k = p["num_partitions"] or _recommended(
            total, p["target_partition_size"] or TARGET_PARTITION_SIZE[kind]
        )
        if k > total:
            raise InvalidInputError(
                f"{k} partitions for {total} rows: num_partitions must not exceed the rows"
            )
        q = kind.rsplit("_", 1)[-1]
        nbits, m = p["num_bits"], p["num_sub_vectors"] or 0
        if q == "PQ" and p["pq_codebook"] is None and total < (1 << nbits):
            raise InvalidInputError(f"not enough rows to train PQ: {1 << nbits} needed, {total} available")
        given = p["ivf_centroids"]
        need_ivf = given is None
        need_q = (q == "PQ" and p["pq_codebook"] is None) or q == "SQ"
        ivf_rows = k * p["sample_rate"]
        q_rows = (1 << (nbits if q == "PQ" else 8)) * p["sample_rate"] if need_q else 0
        samples = []
        if need_ivf or need_q:
            with job.phase("sample"):
                samples = self._sample(
                    job,
                    src,
                    live,
                    total,
                    max(ivf_rows if need_ivf else 0, q_rows),
                    metric,
                    work_dir,
                    fan,
                    k,
                )
        centroids, loss = (
            (given, None)
            if not need_ivf
            else self._kmeans(job, src, samples, k, ivf_rows, metric, p["max_iterations"])
        )
        model = Model(kind, metric, np.asarray(centroids, np.float32), loss, m=m, nbits=nbits)
        if q == "PQ":
            book = p["pq_codebook"]
            if book is None:
                with job.phase("train_pq"):
                    files = _takes(samples, q_rows)
                    # sub-vectors split over the slots (each task computes the residuals once)
                    shares = [tuple(int(j) for j in g) for g in np.array_split(np.arange(m), min(m, fan[0]))]
                    books = job.run_tasks(
                        [
                            PqTrainSpec(
                                src.uri,
                                files,
                                model.centroids,
                                metric,
                                share,
                                m,
                                nbits,
                                p["max_iterations"],
                                SEED,
                                src.storage_options,
                            )
                            for share in shares
                        ],
                        run_pq_train,
                    )
                    book = np.stack([b for part in books for b in part])
            model = Model(
                kind, metric, model.centroids, loss, codebook=np.asarray(book, np.float32), m=m, nbits=nbits
            )
        elif q == "SQ":
            model = Model(
                kind, metric, model.centroids, loss, bounds=merge_bounds([s.bounds for s in samples])
            )
        elif q == "RQ":  # a random rotation as pylance's, unless given (seeded: builds repeat)
            rb = p["rabitq_model"] or rabitq.new_model(model.dim, nbits, seed=SEED + k)
            model = Model(kind, metric, model.centroids, loss, nbits=nbits, rabit=rb)
        return model

    def _sample(
        self,
        job: Job,
        src: Source,
        live: dict[int, int],
        total: int,
        want: int,
        metric: str,
        work_dir: str,
        fan: tuple[int, int],
        k: int,
    ) -> list[Any]:
        if total > want:
            # per fragment its share of the sample, rounded up
            shares = {f: min(n, math.ceil(want * n / total)) for f, n in live.items() if n}
        else:
            shares = {f: -1 for f, n in live.items() if n}
        groups = _groups({f: (n if shares.get(f, 0) else 0) for f, n in live.items()}, *fan)
        specs = [
            SampleSpec(src, tuple((f, shares[f]) for f in g if f in shares), metric, work_dir, SEED, k)
            for g in groups
        ]
        return [s for s in job.run_tasks(specs, run_sample) if s.rows]

    def _kmeans(
        self, job: Job, src: Source, samples: list[Any], k: int, rows: int, metric: str, max_iters: int
    ) -> tuple[np.ndarray, float]:
        files = _takes(samples, rows)
        n = sum(t for _, t in files)
        if n < k:
            raise InvalidInputError(f"{k} partitions but only {n} valid vectors to train them")
        pool = np.concatenate([s.candidates for s in samples])
        init = init_centroids(pool, k, np.random.default_rng(SEED))
        km_metric = assign_metric(metric)
        with job.phase("kmeans", detail=f"k={k}, {n} vectors"):
            if n * init.shape[1] <= LOCAL_KMEANS_VALUES:
                (out,) = job.run_tasks(
                    [
                        KMeansSpec(
                            src.uri,
                            files,
                            init,
                            km_metric,
                            max_iters,
                            SEED,
                            BALANCE_FACTOR,
                            src.storage_options,
                        )
                    ],
                    run_kmeans,
                )
                return out
            t = Training(init, BALANCE_FACTOR, SEED)
            for _ in range(max_iters):
                out = job.run_tasks(
                    [
                        RoundSpec(src.uri, f, n_rows, t.centroids, km_metric, t.bias(), src.storage_options)
                        for f, n_rows in files
                    ],
                    run_round,
                )
                if t.update(Partial.total(out)):
                    break
        return t.centroids, float(t.loss or 0.0)


@dataclass(frozen=True)
class _InPlaceSplit:
    """A split in place: the moved rows' runs, the stored rows' partition count, the
    partitions whose stored rows are left out (affected, old numbering)."""

    moved: tuple[Any, ...] = ()
    stored: int = 0
    gone: tuple[int, ...] = ()

    def counts(self, stored_counts: np.ndarray, k: int) -> np.ndarray:
        """Rows per partition of the new segment from the stored ones' (old numbering)."""
        out = np.zeros(k, np.int64)
        out[: stored_counts.size] = stored_counts
        out[list(self.gone)] = 0
        for r in self.moved:
            out += r.counts
        return out


def _affected(model: Model, applied: list[int], k: int) -> list[int]:
    """pylance 14's partitions a split touches: the split ones, those appended for them, and
    each split one's ``REASSIGN_RANGE`` nearest by its old centroid (``model``'s)."""
    out = set(applied) | set(range(model.num_partitions, k))
    for p in applied:
        out.update(int(q) for q in window(model.centroids, p, (), model.metric))
    return sorted(out)


def _hnsw(kind: str, p: Mapping[str, Any]) -> Params | None:
    return Params(p["max_level"], p["m"], p["ef_construction"]) if kind.startswith("IVF_HNSW_") else None


def _counts(ds: Dataset, model: Model, runs: list[Any], olds: list[bytes]) -> np.ndarray:
    """Rows per partition of the new segment: the runs' and the old segments' folded in."""
    counts = np.zeros(model.num_partitions, dtype=np.int64)
    for r in runs:
        counts += r.counts
    for old in olds:  # old rows too, so the ranges hold about equal rows
        counts += segment_lengths(ds, table_pb2.IndexMetadata.FromString(old), model.num_partitions)
    return counts


def _shares(costs: list[float], sizes: list[int], slots: int) -> list[list[int]]:
    """Small segments dealt to tasks (costliest first to the least loaded): two per slot, more
    when they hold over ``TASK_BYTES`` of rows between them. Few tasks, each a few segments,
    because a task's start costs more than a tiny segment's work, and every task receives
    the whole job's descriptors."""
    n = min(len(costs), max(2 * slots, math.ceil(sum(sizes) / TASK_BYTES)))
    shares: list[list[int]] = [[] for _ in range(n)]
    load = [0.0] * n
    for j in sorted(range(len(costs)), key=lambda j: -costs[j]):
        i = load.index(min(load))
        shares[i].append(j)
        load[i] += costs[j] + 1.0
    return [sorted(g) for g in shares if g]


def _concurrently(fns: list[Callable[[], BuiltSegment]]) -> list[BuiltSegment]:
    """Each function's result; several at once on threads (Spark runs their jobs side by side)."""
    if len(fns) < 2:
        return [f() for f in fns]
    with ThreadPoolExecutor(max_workers=min(len(fns), 8)) as pool:
        return list(pool.map(lambda f: f(), fns))


@dataclass
class _Merge:
    """One merge of ``build_many`` on the driver: its model, the old segments folded in, the
    rows to encode (``rows``: fragment -> live rows), then its runs and rows per partition."""

    req: SegmentRequest
    ds: Dataset
    src: Source
    model: Model
    olds: list[bytes]
    rows: dict[int, int]
    runs: list[Any] = field(default_factory=list)
    counts: np.ndarray | None = None

    @classmethod
    def prepare(cls, req: SegmentRequest, opened: dict[tuple[str, int], Dataset],
                models: dict[bytes, Model], distinct: list[Model]) -> _Merge:
        """``build``'s first steps for a merge; ``opened`` / ``models`` / ``distinct`` are
        shared by the round's merges (one manifest parse per version, one read per segment's
        model, the distinct models seen)."""
        key = (req.uri, req.read_version)
        if key not in opened:
            opened[key] = Dataset.open(req.uri, req.read_version, storage_options=req.storage_options)
        ds = opened[key]
        reuse = table_pb2.IndexMetadata.FromString(req.model_from if req.model_from is not None
                                                   else req.merge_with[-1])
        model = read_model(ds, req.kind, reuse, models)
        # equal models share their arrays, so a task's specs pickle them once (a PQ model is
        # ~140 KB); each keeps its own loss, which its segment's index.idx records
        twin = next((m for m in distinct if same_model(m, model)), None)
        if twin is None:
            distinct.append(model)
        else:
            model = replace(model, centroids=twin.centroids, codebook=twin.codebook)
        olds, refit = foldable(ds, req.kind, model, req.merge_with, models)
        live = {fid: _live_rows(ds, f) for fid, f in ds.fragments_with_ids(req.fragment_ids).items()}
        src = Source(req.uri, req.read_version, req.column, req.row_ids, dict(req.storage_options))
        return cls(req, ds, src, model, olds, {**live, **_refit_rows(ds, refit, live)})

    @property
    def seg_dir(self) -> str:
        return f"_indices/{uuid_str(self.req.new_uuid)}"

    @property
    def work_dir(self) -> str:
        return f"{self.seg_dir}/_build"

    @property
    def hnsw(self) -> Params | None:
        return _hnsw(self.req.kind, self.req.params)

    def storage_bytes(self) -> int:
        assert self.counts is not None
        return int(self.counts.sum()) * (8 + self.model.width * self.model.storage_dtype.itemsize)

    def whole(self) -> bool:
        """Gathered and written by one task: no graphs to build, at most ``TASK_BYTES`` of rows."""
        assert self.counts is not None
        row_bytes = 8 + self.model.width * self.model.storage_dtype.itemsize
        cap = PIECE_ROWS or max(1, TASK_BYTES // row_bytes)
        return self.hnsw is None and int(self.counts.sum()) <= cap

    def assemble_spec(self, parts: tuple[Any, ...]) -> AssembleSpec:
        r = self.req
        return AssembleSpec(r.uri, self.seg_dir, self.model, parts, r.file_version, dict(r.storage_options))

    def segment_spec(self) -> SegmentSpec:
        r = self.req
        whole = RangeSpec(r.uri, tuple(self.runs), 0, self.model.num_partitions, self.model, None,
                          self.work_dir, r.file_version, dict(r.storage_options), tuple(self.olds),
                          self.src)
        return SegmentSpec(whole, self.assemble_spec(()))

    def built(self, files: Any, rows: int) -> BuiltSegment:
        return BuiltSegment(tuple(files), details(self.req.kind, self.model.metric, dict(self.req.params)),
                            _version(self.req.kind), int(rows), True)


def _version(kind: str) -> int:
    """The entry's ``index_version`` as pylance 14 writes it (IVF_RQ 2, the others 1)."""
    return 2 if kind == "IVF_RQ" else 1


def _refit_rows(ds: Dataset, refit: set[int], live: dict[int, int]) -> dict[int, int]:
    return {f.id: _live_rows(ds, f) for f in ds.fragments if f.id in refit and f.id not in live}


def _live_rows(ds: Dataset, frag: Any) -> int:
    n = frag.num_rows
    if n is None:
        mask = ds.live_mask(frag)
        n = int(mask.sum()) if mask is not None else int(frag.physical_rows or 0)
    return int(n)


def _recommended(rows: int, target: int) -> int:
    return max(1, min(rows // max(target, 1), MAX_PARTITIONS))


def _rows_per_task(row_bytes: int) -> int:
    return ROWS_PER_TASK or max(1, TASK_BYTES // max(row_bytes, 1))


def _groups(live: dict[int, int], slots: int, per_task: int) -> list[tuple[int, ...]]:
    """Fragments (in id order) cut into at least ``min(fragments, slots)`` groups of at most
    ``per_task`` rows where a fragment allows."""
    ids = [f for f in sorted(live) if live[f]]
    if not ids:
        return []
    total = sum(live[f] for f in ids)
    per = max(1, min(per_task, math.ceil(total / min(slots, len(ids)))))
    out, cur, acc = [], [], 0
    for f in ids:
        if cur and acc + live[f] > per:
            out.append(tuple(cur))
            cur, acc = [], 0
        cur.append(f)
        acc += live[f]
    out.append(tuple(cur))
    return out


def _takes(samples: list[Any], rows: int) -> tuple[tuple[str, int], ...]:
    """Each sample file's share of ``rows`` (its first rows; all when the samples hold fewer)."""
    total = sum(s.rows for s in samples)
    if total <= rows:
        return tuple((s.file, s.rows) for s in samples)
    return tuple((s.file, min(s.rows, math.ceil(rows * s.rows / total))) for s in samples)


def _ranges(counts: np.ndarray, tasks: int) -> list[tuple[int, int]]:
    """Partition ranges of about equal rows, at most ``tasks`` of them."""
    k = int(counts.size)
    tasks = max(1, min(tasks, k))
    cum = np.cumsum(counts)
    total = float(cum[-1]) if k else 0.0
    cuts = [0]
    for i in range(1, tasks):
        c = int(np.searchsorted(cum, total * i / tasks, side="right"))
        if c > cuts[-1] and c < k:
            cuts.append(c)
    cuts.append(k)
    return [(a, b) for a, b in zip(cuts, cuts[1:], strict=False) if b > a]


def _pieces(
    ranges: list[tuple[int, int]], counts: np.ndarray, cap: int
) -> list[tuple[int, int, tuple[int, int] | None]]:
    """``ranges`` cut so that no task holds more than ``cap`` rows: a range over the cap into
    runs of whole partitions, a partition over it into pieces of ``cap`` rows (``counts`` are
    the rows before deletions are dropped, so a piece only gets smaller)."""
    out: list[tuple[int, int, tuple[int, int] | None]] = []
    for lo, hi in ranges:
        if counts[lo:hi].sum() <= cap:
            out.append((lo, hi, None))
            continue
        start, acc = lo, 0
        for p in range(lo, hi):
            c = int(counts[p])
            if c > cap:
                if p > start:
                    out.append((start, p, None))
                out.extend((p, p + 1, (a, min(a + cap, c))) for a in range(0, c, cap))
                start, acc = p + 1, 0
            elif acc + c > cap:
                out.append((start, p, None))
                start, acc = p, c
            else:
                acc += c
        if hi > start:
            out.append((start, hi, None))
    return out


def _remove(ds: Dataset, rel: str) -> None:
    path = ds.store.full_path(rel)
    try:
        if ds.store.fs.exists(path):
            ds.store.fs.rm(path, recursive=True)
    except FileNotFoundError:
        pass


VECTOR_BUILDER = VectorSegmentBuilder()
