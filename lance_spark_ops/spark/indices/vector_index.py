"""Vector index segments (IVF_FLAT, IVF_PQ, IVF_SQ, IVF_RQ, IVF_HNSW_{FLAT,PQ,SQ}) built on executors:
the ``SegmentBuilder`` of the vector kinds (``spark.indices.index_segment``), ``VECTOR_BUILDER``.

A build (``spark.indices.vector_index_tasks`` for the tasks; the decisions - parameters,
training sizes, task shapes, splits and joins - are ``index.vector``'s ``ivf_params``,
``ivf_train``, ``ivf_plan``, ``ivf_split`` and ``ivf_join``, pure and tested without Spark):

1. the model (``spark.indices.vector_training``): the segment's ``model_from`` files (a delta
   or merge), the user's ``ivf_centroids`` / ``pq_codebook``, or trained: sample tasks draw ``sample_rate`` x
   partitions vectors (PQ / SQ: also 2^bits x ``sample_rate``) spread over the fragments by
   live rows; IVF k-means in one task when the sample has at most ``local_kmeans_values``
   (``Tuning``) values (each round's assignment on as many threads as the job has slots), else
   in rounds (one task per sample file returns per-centroid sums and counts; the driver
   averages); PQ codebooks with the sub-vectors split over the task slots (each task
   on the whole PQ sample, at most 65 536 rows); SQ bounds from the sample tasks' min / max;
2. encode tasks (fragments grouped up to ``TASK_BYTES`` of vectors; a fragment bigger than a
   slot's share cut into row ranges, ``encode_spans``) assign and encode every live row and
   write a run sorted by partition;
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

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, cast

import numpy as np
import pyarrow as pa

from lance_spark_ops._pb import table_pb2
from lance_spark_ops.concurrency import map_concurrently
from lance_spark_ops.index.kinds import VECTOR_KINDS, is_hnsw, uuid_str
from lance_spark_ops.index.vector import ivf_params
from lance_spark_ops.index.vector.hnsw import Params
from lance_spark_ops.index.vector.ivf_build import details
from lance_spark_ops.index.vector.ivf_join import (
    destinations,
    join_order,
    join_room,
    never_full,
    task_destinations,
    window,
)
from lance_spark_ops.index.vector.ivf_model import Model
from lance_spark_ops.index.vector.ivf_params import hnsw_params, target_size
from lance_spark_ops.index.vector.ivf_plan import (
    encode_spans,
    fragment_groups,
    move_tasks,
    partition_ranges,
    partition_shares,
    range_tasks,
    rows_per_task,
    segment_shares,
    storage_row_bytes,
    whole_segment,
)
from lance_spark_ops.index.vector.ivf_split import (
    MAX_PARTITION_SIZE_FACTOR,
    InPlaceSplit,
    affected,
    split_centroids,
    split_steps,
)
from lance_spark_ops.index.vector.vector_params import VectorParams
from lance_spark_ops.spark.indices.index_segment import BuiltSegment, SegmentBuilder, SegmentRequest
from lance_spark_ops.spark.indices.vector_index_tasks import (
    AssembleSpec,
    EncodeSpec,
    RangeSpec,
    SegmentSpec,
    Source,
    SplitSampleSpec,
    run_assemble,
    run_encode,
    run_range,
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
    adjustment_due,
    foldable,
    read_model,
    same_model,
    segment_lengths,
)
from lance_spark_ops.spark.indices.vector_split_tasks import (
    SplitMoveSpec,
    SplitPickSpec,
    run_split_move,
    run_split_pick,
)
from lance_spark_ops.spark.indices.vector_training import train_model
from lance_spark_ops.spark.runtime.job import Job
from lance_spark_ops.spark.runtime.session import default_parallelism
from lance_spark_ops.spark.runtime.tuning import Tuning
from lance_spark_ops.table.dataset import Dataset

# vector bytes an encode task reads, and storage bytes a range task gathers, about at most
# (a single fragment or partition larger than that still goes to one task whole)
TASK_BYTES = 128 << 20
# a split partition's row costs a take, a ranking and an encode in a split-move task, an
# unchanged affected partition's row mostly a read of its stored row: their work's ratio about
SPLIT_ROW_WORK = 8.0


@dataclass
class _Adjusted:
    """A build's state after an optimize's split or join: the ranges' model and the segment's
    (``final``: without the partitions joined away in place, ``drop``), the runs and old
    segments gathered, the rows per partition when known, the split in place, and whether the
    old segments' rows are in the new segment (``folded``)."""

    model: Model
    final: Model
    runs: list[Any]
    olds: list[bytes]
    drop: tuple[int, ...] = ()
    counts: np.ndarray | None = None
    split: InPlaceSplit = field(default_factory=InPlaceSplit)
    folded: bool = True


class VectorSegmentBuilder(SegmentBuilder):
    """``SegmentBuilder`` for the IVF kinds: plans the tasks, ships them, assembles the segment."""

    kinds = frozenset(VECTOR_KINDS)
    batches = True  # build_many: a tiered round's merges share their encode jobs

    def check_params(self, kind: str, field: pa.Field, params: Mapping[str, Any]) -> VectorParams:
        return ivf_params.check_params(kind, field, params)

    def params_of(self, kind: str, index: Any) -> VectorParams:
        return ivf_params.params_of(index)

    # -- build ---------------------------------------------------------------------------------
    def build(self, job: Job, req: SegmentRequest) -> BuiltSegment:
        ds = job.dataset(req.uri, req.read_version, req.storage_options)
        p = _params(req)
        live = {fid: ds.live_rows(f) for fid, f in ds.fragments_with_ids(req.fragment_ids).items()}
        seg_dir = f"_indices/{uuid_str(req.new_uuid)}"
        work_dir = f"{seg_dir}/_build"
        src = Source(req.uri, req.read_version, req.column, req.row_ids, dict(req.storage_options),
                     ds.timestamp)
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
                fan = (slots, _rows_per_task(job, 4 * dim))
                model = train_model(job, req.kind, p, src, live, work_dir, fan,
                                    job.tuning.local_kmeans_values)

            def encode(rows: dict[int, int], model: Model) -> list[Any]:
                with job.phase("encode"):
                    specs, costs = _encode_specs(ds, src, rows, model, work_dir, slots,
                                                 _rows_per_task(job, model.dim * 4))
                    return job.run_tasks(specs, run_encode, costs=costs)

            # segments of another model: their fragments are encoded again from the data
            got = _Adjusted(model, model, encode({**live, **_refit_rows(ds, refit, live)}, model), olds)
            if req.fold_if_adjusted:
                got = self._adjust(job, ds, req, src, got, encode, work_dir, slots)
            with job.phase("partitions"):
                counts = got.counts if got.counts is not None else _counts(ds, got.model, got.runs, got.olds)
                parts = self._ranges(job, req, src, got.model, hnsw_params(req.kind, p), got.runs, got.olds,
                                     got.drop or got.split.gone, counts, work_dir, slots, got.split.moved,
                                     got.split.stored)
            with job.phase("assemble"):
                spec = AssembleSpec(req.uri, seg_dir, got.final, tuple(parts), req.file_version,
                                    dict(req.storage_options), got.drop)
                (files,) = job.run_tasks([spec], run_assemble)
        finally:
            ds.store.delete_tree(work_dir)
        rows = int(sum(sum(part.lengths) for part in parts))
        return BuiltSegment(tuple(files), details(req.kind, got.model.metric, p), _version(req.kind), rows,
                            got.folded)

    def _adjust(self, job: Job, ds: Dataset, req: SegmentRequest, src: Source, got: _Adjusted,
                encode: Callable[[dict[int, int], Model], list[Any]], work_dir: str, slots: int) -> _Adjusted:
        """pylance 14's default optimize: the partitions it splits or joins (``ivf_split``), in
        place when the stored rows allow (only the affected or joined partitions' rows move),
        else every row encoded afresh under the new centroids. pylance joins only when no
        partition splits."""
        model, runs = got.model, got.runs
        splits, joins, sizes = self._adjustment(ds, req, model, runs)
        every = {f.id: ds.live_rows(f) for f in ds.fragments}
        centroids, out = None, replace(got, folded=False)
        split_done = False
        if splits:
            olds, refit = foldable(ds, req.kind, model, req.merge_with)
            # the sample from the partitions' row ids when every row is named by address in
            # segments of this model (pylance's way), else from a scan assigning every row
            by_ids = (olds, runs) if self._by_address(ds, req, refit) else None
            made = self._split(job, src, req.field_id, model, splits, sizes, every, slots, by_ids)
            centroids, applied = made if made is not None else (None, [])
            split_done = centroids is not None
            if split_done:
                out.olds = []
                if self._join_in_place(ds, req, refit):
                    # only the affected partitions' rows move (taken again, each to its nearest
                    # centroid after the split); the others keep their stored rows, valid as
                    # their centroids are unchanged
                    new = replace(model, centroids=centroids)
                    hit = affected(model, applied, new.num_partitions)
                    with job.phase("split_move"):
                        moved = self._move(job, src, req.field_id, olds, runs, model, new, hit, sizes,
                                           work_dir, slots)
                    split = InPlaceSplit(tuple(moved), model.num_partitions,
                                         tuple(p for p in hit if p < model.num_partitions))
                    out = replace(out, model=new, final=new, olds=olds, split=split,
                                  counts=split.counts(_counts(ds, model, runs, olds), new.num_partitions))
                    centroids = None
        if not split_done and joins:
            # pylance joins: the joined partitions' centroids go, their rows move to a kept
            # partition (ivf_join: a nearby one with room below the split threshold)
            centroids = np.delete(model.centroids, joins, axis=0)
            olds, refit = foldable(ds, req.kind, model, req.merge_with)
            out.olds = []
            if self._join_in_place(ds, req, refit):
                # the kept partitions' rows stay as they are (old segments, new runs), the
                # joined ones' are taken from the data again and placed as pylance places them
                split_at = MAX_PARTITION_SIZE_FACTOR * self._target(req)
                with job.phase("join"):
                    moved = self._join(job, src, req.field_id, olds, runs, model, joins, sizes, split_at,
                                       work_dir, slots)
                out = replace(out, runs=runs + moved, olds=olds, drop=tuple(joins),
                              final=replace(model, centroids=centroids))
                centroids = None
        out.folded = centroids is not None or bool(out.drop) or bool(out.split.gone)
        if centroids is not None:
            # a split or join not done in place (HNSW, stable row ids, other models): all
            # rows encoded afresh under the new centroids, each in its nearest partition.
            # pylance's split moves only the affected partitions' rows (the same when rows
            # sit in their nearest partition and there are at most 65); its join sends a
            # joined row to the nearest kept partition of its window with room (ivf_join),
            # here to its nearest kept one
            new = replace(model, centroids=centroids)
            out = replace(out, model=new, final=new, runs=encode(every, new))
        return out

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
        """The range tasks of one segment (``ivf_plan.range_tasks``), each gathered from the old
        segments and the runs (and its graphs built); ``moved`` / ``stored``: a split in
        place's (``RangeSpec``)."""
        row_bytes = storage_row_bytes(model.width, model.storage_dtype.itemsize)
        ranges = range_tasks(counts, row_bytes, slots, hnsw is not None, TASK_BYTES,
                             job.tuning.vector_piece_rows)
        return job.run_tasks(
            [
                RangeSpec(req.uri, tuple(runs), lo, hi, model, hnsw, work_dir, req.file_version,
                          storage_options=dict(req.storage_options), olds=tuple(olds), source=src,
                          rows=rows, drop=drop, moved=moved, stored=stored)
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
                    for g in fragment_groups(st.rows, slots, _rows_per_task(job, st.model.dim * 4)):
                        specs.append(EncodeSpec(st.src, g, st.model, st.work_dir))
                        owner.append(k)
                        costs.append(sum(st.rows[f] for f in g))
                for k, run in zip(owner, job.run_tasks(specs, run_encode, costs=costs) if specs else [],
                                  strict=True):
                    states[k].runs.append(run)
            for st in states:
                st.counts = _counts(st.ds, st.model, st.runs, st.olds)
            whole = [k for k, st in enumerate(states) if st.whole(job.tuning)]
            with job.phase("segments"):
                shares = segment_shares([float(states[k].counts.sum()) for k in whole],
                                        [states[k].storage_bytes() for k in whole], slots, TASK_BYTES)
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
            # several at once on threads (Spark runs their jobs side by side)
            for (i, _), b in zip(tail, map_concurrently(lambda f: f(), [f for _, f in tail]), strict=True):
                out[i] = b
        finally:
            for st in states:
                st.ds.store.delete_tree(st.work_dir)
        assert all(b is not None for b in out)
        return out  # type: ignore[return-value]

    # -- an optimize's splits and joins ------------------------------------------------------------
    @staticmethod
    def _join_in_place(ds: Dataset, req: SegmentRequest, refit: set[int]) -> bool:
        """A join can keep the other partitions' rows as stored: every segment of one model,
        rows named by address, no graphs to rebuild, the vectors takeable by address."""
        return not is_hnsw(req.kind) and VectorSegmentBuilder._by_address(ds, req, refit)

    @staticmethod
    def _by_address(ds: Dataset, req: SegmentRequest, refit: set[int]) -> bool:
        """Every segment of one model, rows named by address, the vectors takeable by address:
        a partition's rows can be found from the segments and taken from the data."""
        return not refit and not req.row_ids and takeable(ds, req.column, req.field_id)

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
        return target_size(req.kind, _params(req))

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
        shares, load = partition_shares(joins, sizes, min(slots, len(joins)))
        windows = {p: window(model.centroids, p, joins, model.metric) for p in joins}
        room = join_room(sizes, joins, split_at)
        # usually no partition can fill up: one round, each row encoded in its window's nearest
        nearest = never_full([windows[p] for p in joins], [int(sizes[p]) for p in joins], room)
        ranked: list[JoinRanked] = job.run_tasks(
            [
                JoinRankSpec(src, field_id, tuple(olds), tuple(runs), tuple(g), tuple(windows[p] for p in g),
                             model, work_dir, nearest)
                for g in shares
            ],
            run_join_rank,
            costs=[float(n) for n in load],
        )
        if nearest:
            return [r.run for r in ranked if r.run is not None]
        pref, task_of, local = join_order([(r.joins, r.counts, r.ranks) for r in ranked], windows, joins)
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
            d, unmoved = task_destinations(r.ranks.shape[0], task_of == t, local, dest, pref)
            if unmoved and r.run is not None:
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
        field_id: int,
        model: Model,
        splits: list[tuple[int, int]],
        sizes: np.ndarray,
        live: dict[int, int],
        slots: int,
        by_ids: tuple[list[bytes], list[Any]] | None = None,
    ) -> tuple[np.ndarray, list[int]] | None:
        """pylance 14's split (``ivf_split.split_centroids``) on rows sampled at a stride from
        each splitting partition: with ``by_ids`` (the old segments and new runs) from the
        partitions' row ids, only the sampled rows read, as pylance (tasks of about equal
        rows); else tasks scan every row and keep those the model puts there. Returns the
        centroids and the partitions split, None when none splits."""
        parts = tuple(p for p, _ in splits)
        with job.phase("split"):
            if by_ids is not None:
                olds, runs = by_ids
                ways = dict(splits)
                shares, load = partition_shares(list(parts), sizes, min(slots, len(parts)))
                got = job.run_tasks(
                    [SplitPickSpec(src, field_id, tuple(olds), tuple(runs), tuple(g),
                                   tuple(ways[p] for p in g), model) for g in shares],
                    run_split_pick,
                    costs=[float(n) for n in load],
                )
                picked = {p: rows for g, rows in zip(shares, got, strict=True)
                          for p, rows in zip(g, rows, strict=True)}
                samples = [picked[p] for p in parts]
            else:
                groups = fragment_groups(live, slots, _rows_per_task(job, model.dim * 4))
                got = job.run_tasks(
                    [SplitSampleSpec(src, g, model, parts, split_steps(splits, sizes)) for g in groups],
                    run_split_sample,
                )
                samples = [np.concatenate([g[i] for g in got]) for i in range(len(splits))]
        return split_centroids(model, splits, samples)

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
        tasks = move_tasks(parts, sizes, slots, _rows_per_task(job, old.dim * 4))
        # runs of consecutive partitions (a task reads its old-segment rows in few reads) of
        # about equal work: a split partition's rows are all taken and encoded again, most of
        # an unchanged one's stay as stored unread
        changed = {p for p in parts if not np.array_equal(old.centroids[p], new.centroids[p])}
        weight = np.array([float(sizes[p]) * (SPLIT_ROW_WORK if p in changed else 1.0) for p in parts])
        shares = [parts[a:b] for a, b in partition_ranges(weight, tasks)]
        load = [float(sum(sizes[p] for p in g)) for g in shares]
        got = job.run_tasks(
            [SplitMoveSpec(src, field_id, tuple(olds), tuple(runs), tuple(g), old, new, work_dir)
             for g in shares],
            run_split_move,
            costs=[float(x) for x in load],
        )
        return [r for r in got if r.file is not None]


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
        live = {fid: ds.live_rows(f) for fid, f in ds.fragments_with_ids(req.fragment_ids).items()}
        src = Source(req.uri, req.read_version, req.column, req.row_ids, dict(req.storage_options),
                     ds.timestamp)
        return cls(req, ds, src, model, olds, {**live, **_refit_rows(ds, refit, live)})

    @property
    def seg_dir(self) -> str:
        return f"_indices/{uuid_str(self.req.new_uuid)}"

    @property
    def work_dir(self) -> str:
        return f"{self.seg_dir}/_build"

    @property
    def hnsw(self) -> Params | None:
        return hnsw_params(self.req.kind, _params(self.req))

    @property
    def row_bytes(self) -> int:
        return storage_row_bytes(self.model.width, self.model.storage_dtype.itemsize)

    def storage_bytes(self) -> int:
        assert self.counts is not None
        return int(self.counts.sum()) * self.row_bytes

    def whole(self, tuning: Tuning) -> bool:
        """Gathered and written by one task: no graphs to build, at most ``TASK_BYTES`` of rows."""
        assert self.counts is not None
        return whole_segment(int(self.counts.sum()), self.row_bytes, self.hnsw is not None, TASK_BYTES,
                             tuning.vector_piece_rows)

    def assemble_spec(self, parts: tuple[Any, ...]) -> AssembleSpec:
        r = self.req
        return AssembleSpec(r.uri, self.seg_dir, self.model, parts, r.file_version, dict(r.storage_options))

    def segment_spec(self) -> SegmentSpec:
        r = self.req
        whole = RangeSpec(r.uri, tuple(self.runs), 0, self.model.num_partitions, self.model, None,
                          self.work_dir, r.file_version, storage_options=dict(r.storage_options),
                          olds=tuple(self.olds), source=self.src)
        return SegmentSpec(whole, self.assemble_spec(()))

    def built(self, files: Any, rows: int) -> BuiltSegment:
        return BuiltSegment(tuple(files), details(self.req.kind, self.model.metric, _params(self.req)),
                            _version(self.req.kind), int(rows), True)


def _params(req: SegmentRequest) -> VectorParams:
    """The request's parameters (this builder's ``check_params`` / ``params_of`` made them)."""
    return cast(VectorParams, req.params)


def _version(kind: str) -> int:
    """The entry's ``index_version`` as pylance 14 writes it (IVF_RQ 2, the others 1)."""
    return 2 if kind == "IVF_RQ" else 1


def _refit_rows(ds: Dataset, refit: set[int], live: dict[int, int]) -> dict[int, int]:
    return {f.id: ds.live_rows(f) for f in ds.fragments if f.id in refit and f.id not in live}


def _rows_per_task(job: Job, row_bytes: int) -> int:
    return rows_per_task(row_bytes, TASK_BYTES, job.tuning.vector_rows_per_task)


def _counts(ds: Dataset, model: Model, runs: list[Any], olds: list[bytes]) -> np.ndarray:
    """Rows per partition of the new segment: the runs' and the old segments' folded in."""
    counts = np.zeros(model.num_partitions, dtype=np.int64)
    for r in runs:
        counts += r.counts
    for old in olds:  # old rows too, so the ranges hold about equal rows
        counts += segment_lengths(ds, table_pb2.IndexMetadata.FromString(old), model.num_partitions)
    return counts


VECTOR_BUILDER = VectorSegmentBuilder()


def _encode_specs(ds: Dataset, src: Source, rows: dict[int, int], model: Model, work_dir: str, slots: int,
                  per_task: int) -> tuple[list[EncodeSpec], list[int]]:
    """The encode tasks of fragments with ``rows`` live rows (a big fragment in row ranges,
    ``encode_spans``) and their costs (live rows, a range's share of its fragment's)."""
    phys = {f: int(fr.physical_rows or 0) for f, fr in ds.fragments_with_ids(sorted(rows)).items()}
    specs, costs = [], []
    for g in encode_spans(rows, phys, slots, per_task):
        specs.append(EncodeSpec(src, tuple(f for f, _, _ in g), model, work_dir,
                                tuple(None if stop is None else (start, stop) for _, start, stop in g)))
        costs.append(sum(rows[f] if stop is None else rows[f] * (stop - start) // max(phys[f], 1)
                         for f, start, stop in g))
    return specs, costs

