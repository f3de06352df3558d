"""Index builds and index maintenance on Spark: ``create_index`` and ``optimize_indices``
(issues #27, #28), with pylance 14's semantics.

The driver validates (column, type, parameters, name clash) before any Spark work, plans
segments, hands each to its type's builder (``spark.indices.index_registry``; the builders run the
heavy work in executor tasks) and commits one CreateIndex. What pylance 14.0.2 was seen to do
(``tests/index/test_indexing_driver.py`` pins it):

* ``create_index``: one segment over every fragment, ``dataset_version`` the version read,
  ``created_at`` in ms; an existing index of that name is an error unless ``replace``
  (pylance's default: True for scalar types, False for vector types), which removes all its
  segments.
* ``optimize_indices``: per index name, segments in manifest order (newest last); unindexed
  fragments are those no segment covers. ``num_indices_to_merge`` (scalar default 1) newest segments
  (with stable row ids, scalar types: also older ones covering fragments with deleted rows)
  are merged with the unindexed fragments into one new segment whose ``dataset_version`` is
  the smallest of the merged ones (the version read when none are) and whose fragment bitmap
  is the unindexed fragments plus the merged segments' coverage still in the dataset; 0 adds
  a delta segment over the unindexed fragments. A vector index without
  ``num_indices_to_merge`` (pylance 14's builder): a delta, unless the rows per partition (new
  and every segment's) put one over 4 x the target partition size (split: k-means over a
  sample of its rows, ``ceil(rows / target)`` ways) or under 25 % of it (join: smallest first,
  each row to the nearest kept partition with room below the split threshold among the joined
  partition's 64 nearest, ``index.vector.ivf_join``); then every segment is merged with the new
  partitions. ``retrain``: vector indices are trained
  afresh from every fragment, all segments removed; scalar indices have their newest
  segment rebuilt from the data of its fragments and the unindexed ones (older segments
  stay). Nothing to index and at most one segment to merge: nothing is
  committed for that index. One commit lists every index's new segment with the segments
  kept (a CreateIndex replaces every segment of the names it lists) and removes the merged.
* ``merge_policy="tiered"`` (not pylance's): rounds that merge segments of similar size in
  groups of ``tier_fanout``, a round's groups built together (a builder's ``build_many``:
  one Spark job per phase for all of them; others on threads), one commit per round, until
  one segment (or ``max_rounds``) is left; 1 000 deltas are one segment after three rounds.

A failed job deletes the segment directories it wrote, except after ``CommitStateUnknown``.
"""

from __future__ import annotations

import time
import uuid as uuidlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

import numpy as np
import pyarrow as pa
from pyroaring import BitMap

from lance_spark_ops._pb import table_pb2
from lance_spark_ops.concurrency import map_concurrently
from lance_spark_ops.errors import (
    CommitStateUnknown,
    InvalidInputError,
    LanceError,
    NotFoundError,
    SchemaError,
    UnsupportedError,
)
from lance_spark_ops.index.actions import effective_bitmap
from lance_spark_ops.index.kinds import index_kind, uuid_str
from lance_spark_ops.index.params import IndexParams
from lance_spark_ops.index.vector.vector_params import VectorParams
from lance_spark_ops.namespace.target import with_table_target
from lance_spark_ops.spark.indices.index_registry import SCALAR_TYPES, builder_for, index_type_name
from lance_spark_ops.spark.indices.index_segment import BuiltSegment, SegmentRequest
from lance_spark_ops.spark.indices.vector_drift import measure_drift
from lance_spark_ops.spark.runtime.job import Job, logger
from lance_spark_ops.spark.runtime.tuning import Tuning
from lance_spark_ops.table.commit.commit import commit_transaction
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.format.transaction import CreateIndex
from lance_spark_ops.table.index_entries import index_entries, reuse_versions

MAX_INDEX_RETRIES = 3
MERGE_POLICIES = ("pylance", "tiered")
DEFAULT_TIER_FANOUT = 10
INDICES_DIR = "_indices"


@dataclass
class IndexMetrics:
    """Metrics of ``create_index`` / ``optimize_indices``. ``indices``: per index name, its type,
    ``segments_before`` / ``segments_after``, ``segments_built``, ``rows_indexed`` (rows of
    the fragments read from the data; merged segments' rows are not counted again),
    ``fragments_indexed``, ``bytes_written``; ``rounds`` counts tiered merge rounds."""

    uri: str
    read_version: int = 0
    new_version: int | None = None
    commits: int = 0
    rounds: int = 0
    indices: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    job_tag: str = ""


@dataclass(frozen=True)
class SegmentPlan:
    """One segment to build and what it replaces (no I/O): ``request`` for the builder,
    ``removed`` the entries it replaces, ``kept`` the entries of its name that stay, and the
    entry's ``dataset_version`` and fragment bitmap."""

    request: SegmentRequest
    removed: tuple[Any, ...]
    kept: tuple[Any, ...]
    dataset_version: int
    fragment_bitmap: tuple[int, ...]
    # ``request.fold_if_adjusted``: the fragment bitmap of the delta the builder may make instead
    delta_bitmap: tuple[int, ...] | None = None


def settle(plan: SegmentPlan, built: BuiltSegment) -> SegmentPlan:
    """The plan as built: a ``fold_if_adjusted`` request its builder turned into a delta keeps
    every segment and covers the unindexed fragments only."""
    if plan.delta_bitmap is None or built.folded:
        return plan
    return SegmentPlan(plan.request, (), tuple(plan.kept) + tuple(plan.removed),
                       plan.request.read_version, plan.delta_bitmap)


# -- planning (no Spark) ------------------------------------------------------------------------
def resolve_column(ds: Dataset, column: str) -> tuple[int, pa.Field]:
    """The field id and Arrow field of ``column`` (a dotted path for nested fields)."""
    if not isinstance(column, str) or not column:
        raise InvalidInputError(f"column must be a column name, got {column!r}", path=ds.uri)
    nodes = ds.lance_schema.fields
    node = None
    for part in column.split("."):
        node = next((n for n in nodes if n.name == part), None)
        if node is None:
            raise InvalidInputError(f"column {column!r} does not exist (columns: "
                                    f"{', '.join(f.name for f in ds.lance_schema.fields)})", path=ds.uri)
        nodes = node.children
    assert node is not None
    try:
        return node.id, node.to_arrow()
    except SchemaError as e:
        raise InvalidInputError(f"column {column!r} cannot be indexed: {e}", path=ds.uri) from e


def column_of(ds: Dataset, index: Any) -> str:
    """The dotted path of an index entry's first field."""
    if not index.fields:
        raise InvalidInputError(f"index {index.name!r} names no field", path=ds.uri)
    want = index.fields[0]

    def find(nodes: Sequence[Any], prefix: str) -> str | None:
        for n in nodes:
            path = f"{prefix}{n.name}"
            if n.id == want:
                return path
            found = find(n.children, path + ".")
            if found is not None:
                return found
        return None

    path = find(ds.lance_schema.fields, "")
    if path is None:
        raise InvalidInputError(f"index {index.name!r}: its field {want} is not in the schema", path=ds.uri)
    return path


def user_segments(ds: Dataset) -> dict[str, list[Any]]:
    """Index entries by name, in manifest order (newest last), system indices left out."""
    out: dict[str, list[Any]] = {}
    for idx in index_entries(ds):
        if not idx.name.startswith("__lance_"):
            out.setdefault(idx.name, []).append(idx)
    return out


def covered_fragments(ds: Dataset, segments: Sequence[Any], versions: Sequence[Any] | None = None) -> BitMap:
    """Fragments the segments cover as pylance sees them (through the fragment reuse index;
    ``versions``: its versions when the caller has them already, ``reuse_versions(ds)``)."""
    versions = reuse_versions(ds) if versions is None else versions
    out = BitMap()
    for s in segments:
        bm = effective_bitmap(s, versions)
        if bm is not None:
            out |= bm
    return out


def file_version(ds: Dataset) -> str:
    """The version index files are written in: the dataset's (legacy datasets: 2.0)."""
    v = ds.data_storage_version
    return "2.0" if v in ("0.1", "legacy", "0.3") else v


def _request(ds: Dataset, kind: str, column: str, field_id: int, name: str, params: IndexParams,
             fragment_ids: Sequence[int], merge_with: Sequence[Any] = (), model_from: Any = None,
             storage_options: Mapping[str, Any] | None = None) -> SegmentRequest:
    return SegmentRequest(
        uri=ds.uri, read_version=ds.version, kind=kind, column=column, field_id=field_id, name=name,
        params=params, new_uuid=uuidlib.uuid4().bytes, fragment_ids=tuple(sorted(fragment_ids)),
        merge_with=tuple(bytes(m.SerializeToString()) for m in merge_with),
        model_from=None if model_from is None else model_from.SerializeToString(),
        row_ids=ds.uses_stable_row_ids, file_version=file_version(ds),
        storage_options=dict(storage_options or {}))


def plan_optimize(ds: Dataset, segments: Sequence[Any], params: IndexParams, *,
                  num_indices_to_merge: int | None, retrain: bool,
                  storage_options: Mapping[str, Any] | None = None) -> SegmentPlan | None:
    """pylance's optimize of one index (``segments``: its entries, newest last); None when
    there is nothing to do."""
    newest = segments[-1]
    kind = index_kind(newest)
    column = column_of(ds, newest)
    present = BitMap(f.id for f in ds.fragments)
    if retrain and kind not in SCALAR_TYPES:
        # vector indices: train afresh over the whole column, every segment replaced
        frags = sorted(present)
        req = _request(ds, kind, column, newest.fields[0], newest.name, params, frags,
                       storage_options=storage_options)
        return SegmentPlan(req, tuple(segments), (), ds.version, tuple(frags))
    if num_indices_to_merge is None and kind not in SCALAR_TYPES:
        return _plan_default_vector(ds, segments, params, kind, column, storage_options)
    n = 1 if num_indices_to_merge is None or retrain else num_indices_to_merge
    if n < 0:
        raise InvalidInputError(f"num_indices_to_merge must not be negative, got {n}")
    merged = _segments_to_merge(ds, segments, n, kind)
    kept = [s for s in segments if not any(s is m for m in merged)]
    unindexed = present - covered_fragments(ds, segments)
    if not unindexed and len(merged) <= 1 and not retrain:
        return None
    coverage = (covered_fragments(ds, merged) & present) | unindexed
    version = min((int(s.dataset_version) for s in merged), default=ds.version)
    if retrain:
        # scalar indices (pylance 14): the newest segment is rebuilt from the data of its
        # fragments and the unindexed ones; older segments stay
        # model_from: the builder takes the exact settings from the newest segment (INVERTED's
        # custom stop words live in its files, not its details) and still reads every row
        req = _request(ds, kind, column, newest.fields[0], newest.name, params, sorted(coverage),
                       model_from=newest, storage_options=storage_options)
        return SegmentPlan(req, tuple(merged), tuple(kept), version, tuple(sorted(coverage)))
    folded = list(merged)
    if kind in SCALAR_TYPES:
        # pylance 14: a merged scalar segment none of whose fragments is left (a compaction left
        # it naming the old ones: RTREE, ZONEMAP) is replaced without folding its data in, and
        # the new segment is as fresh as a build (seen for RTREE and ZONEMAP)
        folded = [s for s in merged if covered_fragments(ds, [s]) & present]
        version = min((int(s.dataset_version) for s in folded), default=ds.version)
    req = _request(ds, kind, column, newest.fields[0], newest.name, params, sorted(unindexed), folded,
                   model_from=newest, storage_options=storage_options)
    return SegmentPlan(req, tuple(merged), tuple(kept), version, tuple(sorted(coverage)))


def _plan_default_vector(ds: Dataset, segments: Sequence[Any], params: IndexParams, kind: str,
                         column: str, storage_options: Mapping[str, Any] | None) -> SegmentPlan | None:
    """pylance 14's optimize of a vector index without ``num_indices_to_merge``: a delta over
    the unindexed fragments, unless the rows per partition (new rows and every segment's)
    call for a split or join; then every segment is merged (pylance also splits / joins the
    partitions; this library keeps them). The new rows' partitions are known only once they
    are encoded, so the builder decides; without new rows the driver does, from the segments'
    partition lengths (and leaves a lone segment as it is)."""
    newest = segments[-1]
    present = BitMap(f.id for f in ds.fragments)
    unindexed = present - covered_fragments(ds, segments)
    coverage = tuple(sorted((covered_fragments(ds, segments) & present) | unindexed))
    version = min(int(s.dataset_version) for s in segments)
    if not unindexed:
        if len(segments) < 2 or not _adjustment_due(ds, segments, cast(VectorParams, params), kind):
            return None
    req = _request(ds, kind, column, newest.fields[0], newest.name, params, sorted(unindexed), segments,
                   model_from=newest, storage_options=storage_options)
    req = replace(req, fold_if_adjusted=True)
    return SegmentPlan(req, tuple(segments), (), version, coverage, tuple(sorted(unindexed)))


def _adjustment_due(ds: Dataset, segments: Sequence[Any], params: VectorParams, kind: str) -> bool:
    """The segments' rows per partition call for a split or join (pylance 14's thresholds)."""
    from lance_spark_ops.index.vector.ivf_params import target_size
    from lance_spark_ops.spark.indices.vector_models import adjustment_due

    splits, joins, _ = adjustment_due(ds, kind, segments, None, target_size(kind, params))
    return bool(splits or joins)


def _segments_to_merge(ds: Dataset, segments: Sequence[Any], n: int, kind: str) -> list[Any]:
    """The ``n`` newest segments; with stable row ids (scalar types, ``n`` > 0) also every older
    segment covering a fragment with deleted rows, as pylance 14 selects them: an update
    deletes a row's old copy and writes it again under the same row id, so the old segment's
    stale entry goes only when that segment is rewritten."""
    tail = len(segments) - min(n, len(segments))
    if n == 0 or not ds.uses_stable_row_ids or kind not in SCALAR_TYPES:
        return list(segments[tail:])
    deleted = BitMap(f.id for f in ds.fragments if f.deletion_file is not None)
    return [s for i, s in enumerate(segments)
            if i >= tail or bool(covered_fragments(ds, [s]) & deleted)]


def segment_rows(ds: Dataset, segments: Sequence[Any], versions: Sequence[Any] | None = None) -> list[int]:
    """Rows each segment covers (physical rows of its fragments still in the dataset): their
    sizes for the tiered policy. The reuse index and the fragments' rows are read once for
    all segments (a round over 1 000 deltas would otherwise read them 1 000 times)."""
    versions = reuse_versions(ds) if versions is None else versions
    frags = ds.fragments
    ids = np.fromiter((f.id for f in frags), np.int64, len(frags))
    rows = np.fromiter((int(f.physical_rows or 0) for f in frags), np.int64, len(frags))
    out = []
    for s in segments:
        bm = covered_fragments(ds, [s], versions)
        out.append(int(rows[np.isin(ids, np.fromiter(iter(bm), np.int64, len(bm)))].sum()))
    return out


def tier_groups(sizes: Sequence[int], fanout: int) -> list[list[int]]:
    """Indices of segments to merge in one round: segments sorted by size, cut into runs of
    ``fanout`` neighbours (the last run joins its predecessor when shorter than two), so
    each merge combines segments of similar size and a round shrinks the count ~fanout-fold."""
    if fanout < 2:
        raise InvalidInputError(f"tier_fanout must be at least 2, got {fanout}")
    order = sorted(range(len(sizes)), key=lambda i: (sizes[i], i))
    groups = [order[i:i + fanout] for i in range(0, len(order), fanout)]
    if len(groups) > 1 and len(groups[-1]) < 2:
        groups[-2].extend(groups.pop())
    return [sorted(g) for g in groups if len(g) >= 2]


def plan_tiered_round(ds: Dataset, segments: Sequence[Any], params: IndexParams, fanout: int,
                      storage_options: Mapping[str, Any] | None = None) -> list[SegmentPlan]:
    """One round of the tiered policy for one index: the unindexed fragments join the smallest
    group (or become a segment of their own when there is one segment only)."""
    newest = segments[-1]
    kind, column = index_kind(newest), column_of(ds, newest)
    present = BitMap(f.id for f in ds.fragments)
    versions = reuse_versions(ds)
    unindexed = present - covered_fragments(ds, segments, versions)
    groups = tier_groups(segment_rows(ds, segments, versions), fanout)
    if not groups:
        if not unindexed:
            return []
        groups = [[len(segments) - 1]]
    plans = []
    in_groups = {i for g in groups for i in g}
    for k, g in enumerate(groups):
        merged = [segments[i] for i in g]
        new = sorted(unindexed) if k == 0 else []
        coverage = (covered_fragments(ds, merged, versions) & present) | BitMap(new)
        version = min(int(s.dataset_version) for s in merged)
        req = _request(ds, kind, column, newest.fields[0], newest.name, params, new, merged,
                       model_from=merged[-1], storage_options=storage_options)
        plans.append(SegmentPlan(req, tuple(merged), (), version, tuple(sorted(coverage))))
    kept = tuple(s for i, s in enumerate(segments) if i not in in_groups)
    return [SegmentPlan(p.request, p.removed, kept if i == 0 else (), p.dataset_version, p.fragment_bitmap)
            for i, p in enumerate(plans)]


def _bitmap_bytes(ids: Sequence[int]) -> bytes:
    """A fragment bitmap as Lance writes it into the manifest (run containers where shorter)."""
    bm = BitMap(ids)
    bm.run_optimize()
    return bm.serialize()


def new_entry(plan: SegmentPlan, built: BuiltSegment) -> Any:
    """The manifest entry of a built segment."""
    req = plan.request
    entry = table_pb2.IndexMetadata(name=req.name, dataset_version=plan.dataset_version,
                                    fragment_bitmap=_bitmap_bytes(plan.fragment_bitmap),
                                    index_version=built.index_version,
                                    created_at=int(time.time() * 1000))
    entry.uuid.uuid = req.new_uuid
    entry.fields.append(req.field_id)
    entry.index_details.ParseFromString(built.details)
    entry.files.extend(table_pb2.IndexFile(path=p, size_bytes=n) for p, n in built.files)
    return entry


def commit_plans(ds: Dataset, plans: Sequence[SegmentPlan], built: Sequence[BuiltSegment]) -> Any:
    """One CreateIndex: per name the kept segments, then the new ones; merged ones removed.
    The version the job planned on is taken as the latest (``expected_latest``): the commit puts
    the next version without listing ``_versions/`` first (a round trip less on an object store;
    when another writer took it meanwhile, the put fails and the commit lists and checks as usual)."""
    new, removed, kept_seen = [], [], set()
    for plan, b in zip(plans, built, strict=True):
        for k in plan.kept:
            key = bytes(k.uuid.uuid)
            if key not in kept_seen:
                kept_seen.add(key)
                new.append(k)
        new.append(new_entry(plan, b))
        removed.extend(plan.removed)
    return commit_transaction(ds.store, CreateIndex(new, removed), ds.version,
                              known_manifests={ds.version: ds.manifest_file},  # parsed already
                              expected_latest=ds.version)


def _delete_segments(ds: Dataset, plans: Sequence[SegmentPlan]) -> None:
    for p in plans:
        rel = f"{INDICES_DIR}/{uuid_str(p.request.new_uuid)}"
        try:
            ds.store.delete_tree(rel)
        except Exception:  # noqa: BLE001 - keep the job's own error; the directory is unreferenced
            logger.warning("could not delete %s", rel, exc_info=True)


def _build_all(job: Job, plans: Sequence[SegmentPlan], concurrent: bool,
               batched: bool = False) -> list[BuiltSegment]:
    """Each plan's builder; several at once on threads (Spark runs their jobs side by side).
    ``batched`` (a tiered round): the plans of a ``batches`` builder go to its ``build_many`` together
    (it shares Spark jobs between them), the others as before."""
    def one(p: SegmentPlan) -> BuiltSegment:
        return builder_for(p.request.kind).build(job, p.request)

    out: list[BuiltSegment | None] = [None] * len(plans)
    rest = list(range(len(plans)))
    if batched:
        by_builder: dict[int, list[int]] = {}
        for i, p in enumerate(plans):
            b = builder_for(p.request.kind)
            if b.batches:
                by_builder.setdefault(id(b), []).append(i)
        for idx in by_builder.values():
            many = builder_for(plans[idx[0]].request.kind).build_many(job, [plans[i].request for i in idx])
            for i, b in zip(idx, many, strict=True):
                out[i] = b
        rest = [i for i in rest if out[i] is None]
    todo = [plans[i] for i in rest]
    built = map_concurrently(one, todo, 8 if concurrent else 1)
    for i, b in zip(rest, built, strict=True):
        out[i] = b
    return out  # type: ignore[return-value]


def _record(metrics: IndexMetrics, plans: Sequence[SegmentPlan], built: Sequence[BuiltSegment],
            ds: Dataset) -> None:
    rows = {f.id: int(f.physical_rows or 0) for f in ds.fragments}
    for p, b in zip(plans, built, strict=True):
        m = metrics.indices.setdefault(p.request.name, {"type": p.request.kind})
        m["segments_built"] = m.get("segments_built", 0) + 1
        m["rows_indexed"] = m.get("rows_indexed", 0) + (b.rows_indexed if b.rows_indexed >= 0 else
                                                        sum(rows.get(i, 0) for i in p.request.fragment_ids))
        m["fragments_indexed"] = m.get("fragments_indexed", 0) + len(p.request.fragment_ids)
        m["bytes_written"] = m.get("bytes_written", 0) + b.bytes_written


def _run_plans(job: Job, ds: Dataset, metrics: IndexMetrics, plans: list[SegmentPlan],
               concurrent: bool = False, batched: bool = False) -> Dataset:
    """Build and commit ``plans`` in one CreateIndex; on any failure but an unknown commit
    state, delete the segment directories written."""
    try:
        with job.phase("build", detail=f"{len(plans)} segment(s)") as ph:  # segments, not tasks
            built = _build_all(job, plans, concurrent, batched)
            settled = [settle(p, b) for p, b in zip(plans, built, strict=True)]
            # a split the builder could not make (rows too alike) and nothing new: no segment
            empty = [p for p, s in zip(plans, settled, strict=True) if s is not p and not s.fragment_bitmap]
            _delete_segments(ds, empty)
            built = [b for p, s, b in zip(plans, settled, built, strict=True) if p not in empty]
            plans = [s for p, s in zip(plans, settled, strict=True) if p not in empty]
            if not plans:
                return ds
            ph.add(rows=sum(max(b.rows_indexed, 0) for b in built), bytes=sum(b.bytes_written for b in built))
        with job.phase("commit"):
            job.before_commit(0)
            result = commit_plans(ds, plans, built)
    except CommitStateUnknown:
        raise
    except BaseException:
        _delete_segments(ds, plans)
        raise
    _record(metrics, plans, built, ds)
    metrics.commits += 1
    new = Dataset.from_commit(result)
    metrics.new_version = new.version
    return new


def _open(uri: str, storage_options: Mapping[str, Any] | None, job: Job | None = None) -> Dataset:
    ds = Dataset.open(uri, storage_options=dict(storage_options or {}))
    ds.check_writable()
    ds.check_consistent("index build")
    return job.opened(ds) if job is not None else ds


# -- create_index -------------------------------------------------------------------------------
@dataclass(frozen=True)
class CreateRequest:
    """A checked ``create_index`` call (no I/O): what ``check_create_index`` returns."""

    kind: str
    column: str
    field_id: int
    name: str
    replace: bool
    params: IndexParams  # the index family's typed parameters, parsed once here


def check_create_index(ds: Dataset, column: str, index_type: str, name: str | None = None,
                       replace: bool | None = None, params: Mapping[str, Any] | None = None) -> CreateRequest:
    """Every check ``create_index`` makes before Spark work: type, column, parameters, name
    clash. Raises ``InvalidInputError`` (the job exits 2) or ``UnsupportedError``."""
    kind = index_type_name(index_type)
    field_id, arrow_field = resolve_column(ds, column)
    # the type and parameters first: IVF_PQ on an int column is a type problem, whatever the name
    checked = builder_for(kind).check_params(kind, arrow_field, dict(params or {}))
    name = f"{column}_idx" if name is None else name
    if not isinstance(name, str) or not name or name.startswith("__lance_"):
        raise InvalidInputError(f"index name {name!r} is not allowed", path=ds.uri)
    if replace is None:
        replace = kind in SCALAR_TYPES  # pylance: create_scalar_index replaces, create_index does not
    existing = user_segments(ds).get(name, [])
    if existing and not replace:
        raise InvalidInputError(f"an index named {name!r} already exists; pass replace=True (--replace) to "
                                "replace it", path=ds.uri)
    for other_name, segs in user_segments(ds).items():
        if other_name != name and any(field_id in s.fields for s in segs) and \
                index_kind(segs[-1]) == kind:
            raise InvalidInputError(f"column {column!r} already has a {kind} index named {other_name!r}",
                                    path=ds.uri)
    return CreateRequest(kind, column, field_id, name, bool(replace), checked)


@with_table_target
def create_index(spark: Any, uri: str, column: str, index_type: str, *, name: str | None = None,
                 replace: bool | None = None, storage_options: dict[str, Any] | None = None,
                 tuning: Tuning | None = None,
                 max_retries: int = MAX_INDEX_RETRIES, **params: Any) -> IndexMetrics:
    """Build an index of ``index_type`` on ``column`` over every fragment on executors and
    commit it (one CreateIndex), as pylance's ``create_scalar_index`` / ``create_index``;
    ``params`` take pylance's names. An index of that name is replaced only with ``replace``
    (default: True for scalar types, False for vector types, as pylance)."""
    metrics = IndexMetrics(uri)
    with Job(spark, "create_index", uri, metrics, tuning) as job:

        def attempt() -> None:
            with job.phase("plan"):
                ds = _open(uri, storage_options, job)
                req = check_create_index(ds, column, index_type, name, replace, params)
                metrics.read_version = ds.version
                existing = user_segments(ds).get(req.name, [])
                frags = [f.id for f in ds.fragments]
                plan = SegmentPlan(
                    _request(ds, req.kind, req.column, req.field_id, req.name, req.params, frags,
                             storage_options=storage_options),
                    tuple(existing), (), ds.version, tuple(frags))
            metrics.indices[req.name] = {"type": req.kind, "segments_before": len(existing)}
            new = _run_plans(job, ds, metrics, [plan])
            metrics.indices[req.name]["segments_after"] = len(user_segments(new).get(req.name, []))

        job.retrying(lambda _n: attempt(), retries=max_retries, what="index commit")
    return metrics


# -- optimize_indices ---------------------------------------------------------------------------
def check_optimize(ds: Dataset, index_names: Sequence[str] | None, num_indices_to_merge: int | None,
                   merge_policy: str, tier_fanout: int) -> dict[str, list[Any]]:
    """The indices to optimize (by name, segments newest last); raises ``InvalidInputError``
    for an unknown name or option, and ``UnsupportedError`` for a named index of a type this
    library cannot build, before Spark work. Without names, such indices are left out."""
    if merge_policy not in MERGE_POLICIES:
        raise InvalidInputError(f"merge_policy must be one of {', '.join(MERGE_POLICIES)}, "
                                f"got {merge_policy!r}")
    if num_indices_to_merge is not None and num_indices_to_merge < 0:
        raise InvalidInputError(f"num_indices_to_merge must not be negative, got {num_indices_to_merge}")
    if tier_fanout < 2:
        raise InvalidInputError(f"tier_fanout must be at least 2, got {tier_fanout}")
    segs = user_segments(ds)
    if index_names is not None:
        names = [index_names] if isinstance(index_names, str) else list(index_names)
        missing = [n for n in names if n not in segs]
        if missing:
            raise InvalidInputError(f"no index named {', '.join(map(repr, missing))} (indices: "
                                    f"{', '.join(sorted(segs)) or 'none'})", path=ds.uri)
        segs = {n: segs[n] for n in names}
        for s in segs.values():
            builder_for(index_kind(s[-1]))  # a named index this library cannot build: refused now
        return segs
    return {n: s for n, s in segs.items() if unsupported(s) is None}


def unsupported(segments: Sequence[Any]) -> str | None:
    """Why this library cannot optimize an index (None: it can)."""
    try:
        builder_for(index_kind(segments[-1]))
    except UnsupportedError as e:
        return e.message
    return None


@with_table_target
def optimize_indices(spark: Any, uri: str, *, index_names: Sequence[str] | None = None,
                     num_indices_to_merge: int | None = None, retrain: bool = False,
                     merge_policy: str = "pylance", tier_fanout: int = DEFAULT_TIER_FANOUT,
                     max_rounds: int = 16, storage_options: dict[str, Any] | None = None,
                     tuning: Tuning | None = None,
                     max_retries: int = MAX_INDEX_RETRIES,
                     retrain_if_drift: float | None = None) -> IndexMetrics:
    """Bring indices up to date on executors, as pylance's ``optimize_indices``: unindexed
    fragments indexed, ``num_indices_to_merge`` newest segments merged (0: a delta segment),
    or ``retrain`` from the whole column; one commit. ``merge_policy="tiered"`` merges
    similar-size segments in parallel rounds instead (see the module doc).
    ``retrain_if_drift``: a vector index whose new rows' drift (``vector_drift``: their mean
    distance to the nearest centroid over the indexed rows') is at least this is retrained
    instead (metrics: ``drift``, ``retrained``)."""
    if retrain_if_drift is not None and not retrain_if_drift > 0:
        raise InvalidInputError(f"retrain_if_drift must be positive, got {retrain_if_drift}")
    metrics = IndexMetrics(uri)
    with Job(spark, "optimize_indices", uri, metrics, tuning) as job:
        with job.phase("plan"):
            ds = _open(uri, storage_options, job)
            metrics.read_version = ds.version
            for name, s in check_optimize(ds, index_names, num_indices_to_merge, merge_policy,
                                          tier_fanout).items():
                metrics.indices[name] = {"type": index_kind(s[-1]), "segments_before": len(s),
                                         **_partitions(ds, s, "partitions_before")}
            if index_names is None:  # all indices: those this library cannot build are left alone
                for name, s in user_segments(ds).items():
                    why = unsupported(s)
                    if why is not None:
                        metrics.indices[name] = {"type": index_kind(s[-1]), "skipped": why}
                        logger.warning("optimize_indices: index %r left as it is: %s", name, why)

        tiered = merge_policy == "tiered" and not retrain
        # the latest version known: the plan's open, then each commit's; the next attempt plans on
        # it, and an attempt after a conflict opens the latest again (an open is a LIST and a
        # manifest read: three opens per job were two of them too many)
        known: dict[str, Dataset] = {"next": ds, "last": ds}

        def attempt() -> Dataset | None:
            """Plan on the latest version (pylance's optimize, or one tiered round), build, commit."""
            with job.phase("plan"):
                ds = known.pop("next", None) or _open(uri, storage_options, job)
                known["last"] = ds
                segs = check_optimize(ds, index_names, num_indices_to_merge, merge_policy, tier_fanout)
                plans: list[SegmentPlan] = []
                for name, s in segs.items():
                    kind = index_kind(s[-1])
                    params = builder_for(kind).params_of(kind, s[-1])
                    if tiered:
                        plans.extend(plan_tiered_round(ds, s, params, tier_fanout, storage_options))
                        continue
                    again = retrain
                    if retrain_if_drift is not None and not retrain and kind not in SCALAR_TYPES:
                        drift = _drift(job, ds, s, params, storage_options)
                        again = drift is not None and drift >= retrain_if_drift
                        metrics.indices.setdefault(name, {}).update(
                            drift=None if drift is None else round(drift, 4), retrained=again)
                    plan = plan_optimize(ds, s, params, num_indices_to_merge=num_indices_to_merge,
                                         retrain=again, storage_options=storage_options)
                    if plan is not None:
                        plans.append(plan)
            if not plans:
                return None
            new = _run_plans(job, ds, metrics, plans, concurrent=True, batched=tiered)
            known["next"] = known["last"] = new
            return new

        if tiered:
            while metrics.rounds < max_rounds:
                if job.retrying(lambda _n: attempt(), retries=max_retries, what="index commit") is None:
                    break
                metrics.rounds += 1
        else:
            job.retrying(lambda _n: attempt(), retries=max_retries, what="index commit")
        final = known["last"]  # what this job read or committed last
        after = user_segments(final)
        for name, m in metrics.indices.items():
            if "skipped" not in m:
                m["segments_after"] = len(after.get(name, []))
                if "partitions_before" in m and after.get(name):
                    m.update(_partitions(final, after[name], "partitions_after"))
    return metrics


def _partitions(ds: Dataset, segments: Sequence[Any], key: str) -> dict[str, int]:
    """``{key: IVF partitions of the newest segment}`` of a vector index (the model its next
    segment follows; a split or join changes it); ``{}`` for other kinds or a model this library
    cannot read."""
    kind = index_kind(segments[-1])
    if kind in SCALAR_TYPES:
        return {}
    from lance_spark_ops.spark.indices.vector_models import read_model

    try:
        return {key: int(read_model(ds, kind, segments[-1]).num_partitions)}
    except LanceError:
        return {}


def _drift(job: Job, ds: Dataset, segments: Sequence[Any], params: IndexParams,
           storage_options: Mapping[str, Any] | None) -> float | None:
    """``vector_drift.measure_drift`` of one vector index (None: no new or no indexed rows)."""
    newest = segments[-1]
    present = BitMap(f.id for f in ds.fragments)
    covered = covered_fragments(ds, segments) & present
    req = _request(ds, index_kind(newest), column_of(ds, newest), newest.fields[0], newest.name, params, [],
                   storage_options=storage_options)
    with job.phase("drift"):
        return measure_drift(job, ds, req, newest, sorted(covered), sorted(present - covered))


def unindexed_rows(ds: Dataset, name: str) -> int:
    """Live rows no segment of index ``name`` covers (pylance's ``num_unindexed_rows``)."""
    segs = user_segments(ds).get(name)
    if not segs:
        raise NotFoundError(f"no index named {name!r}", path=ds.uri)
    covered = covered_fragments(ds, segs)
    return sum(ds.live_rows(f) for f in ds.fragments if f.id not in covered)
