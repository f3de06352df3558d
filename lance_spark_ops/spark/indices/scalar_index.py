"""Segment builder for the scalar index kinds (issue #27): BTREE, BITMAP, LABEL_LIST, NGRAM,
ZONEMAP and BLOOMFILTER, behind the ``index_segment`` contract.

The driver side only plans: fragments (in manifest order) are grouped into part tasks of at
most ``Tuning.part_rows`` physical rows (MINHASHLSH: ``minhash_part_rows``), as many as fill
the slots in whole waves (``spark.indices.scalar_index_tasks.run_part``; RTREE / MINHASHLSH parts
are row ranges of equal size, cutting fragments), then one merge task writes the segment's files
and deletes the parts (``run_merge``); a segment of one part indexes and merges in one task (on an
object store, up to ``Tuning.driver_index_rows`` rows, in the driver: no Spark stage). BTREE
runs of ``Tuning.range_merge_rows`` or more numeric / temporal rows are merged by value range in
parallel tasks instead (``spark.indices.btree_merge_tasks``). What pylance 14.0.2 writes, per kind
(the formats: ``index.scalar.btree``, ``index.scalar.bitmap``, ``index.scalar.ngram``,
``index.scalar.zonemap``,
``index.scalar.bloomfilter``):

* details ``/lance.table.{BTree,Bitmap,LabelList,NGram,ZoneMap}IndexDetails``,
  ``/lance.index.pb.BloomFilterIndexDetails`` (empty but ZONEMAP's); ``index_version`` 0 but
  LABEL_LIST 1 and BTREE on stable-row-id datasets 1 (its ids stay row addresses).
* BITMAP, LABEL_LIST and NGRAM name rows by stable row id on stable-row-id datasets (the
  request's ``row_ids``), by row address otherwise; ZONEMAP / BLOOMFILTER zones and null
  bitmaps use addresses. Deleted rows are not indexed.
* A merge (``merge_with``): BTREE, BITMAP, LABEL_LIST and NGRAM keep an old segment's rows of
  fragments still in the dataset (by row address: every row of those fragments, deleted ones
  too; by stable row id: their live rows only), then add the new fragments' rows; ZONEMAP and
  BLOOMFILTER keep every old zone (of removed fragments too) and append the new fragments'.

Parameters: pylance's names - BTREE ``zone_size`` (rows per page, 4096), ZONEMAP
``rows_per_zone`` (8192), BLOOMFILTER ``number_of_items`` (8192) and ``probability``
(0.00057); an unknown one is refused (pylance ignores it silently). RTREE ``page_size``,
MINHASHLSH ``num_hashes``, ``num_bands``, ``shingle_size`` and ``tokenizer`` as pylance's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, cast

import pyarrow as pa
from google.protobuf import any_pb2

from lance_spark_ops._pb import table_pb2
from lance_spark_ops.errors import CorruptFileError, InvalidInputError, UnsupportedError
from lance_spark_ops.index.params import IndexParams
from lance_spark_ops.index.scalar import bloomfilter as bf
from lance_spark_ops.index.scalar import btree as bt
from lance_spark_ops.index.scalar import minhash as mh
from lance_spark_ops.index.scalar import params as sp
from lance_spark_ops.index.scalar import rtree as rt
from lance_spark_ops.index.scalar import zonemap as zm
from lance_spark_ops.spark.indices import btree_merge_tasks as bm
from lance_spark_ops.spark.indices.index_segment import BuiltSegment, SegmentBuilder, SegmentRequest
from lance_spark_ops.spark.indices.scalar_index_tasks import (
    MergeSpec,
    Part,
    PartSpec,
    run_merge,
    run_part,
    run_part_and_merge,
)
from lance_spark_ops.spark.runtime.job import Job
from lance_spark_ops.spark.runtime.runner import TaskContext
from lance_spark_ops.spark.runtime.scan_tasks import keep_open
from lance_spark_ops.spark.runtime.session import default_parallelism
from lance_spark_ops.table.dataset import Dataset

# kinds whose parts are row ranges of equal size (fragments cut where needed): their merges take
# the parts' rows in order, so the parts' sizes are free
RANGED = frozenset(("RTREE", "MINHASHLSH"))

DETAILS = {
    "BTREE": "/lance.table.BTreeIndexDetails",
    "BITMAP": "/lance.table.BitmapIndexDetails",
    "LABEL_LIST": "/lance.table.LabelListIndexDetails",
    "NGRAM": "/lance.table.NGramIndexDetails",
    "ZONEMAP": zm.TYPE_URL,
    "BLOOMFILTER": bf.TYPE_URL,
    "RTREE": rt.TYPE_URL,
    "MINHASHLSH": mh.TYPE_URL,
}
INDEX_VERSION = {"BTREE": 0, "BITMAP": 0, "LABEL_LIST": 1, "NGRAM": 0, "ZONEMAP": 0, "BLOOMFILTER": 0,
                 "RTREE": rt.INDEX_VERSION, "MINHASHLSH": mh.INDEX_VERSION}
REFUSED: set[str] = set()


def _plain(t: pa.DataType) -> pa.DataType:
    return t.storage_type if isinstance(t, pa.ExtensionType) else t


def _sortable(t: pa.DataType) -> bool:
    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
            or pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t) or pa.types.is_temporal(t) or pa.types.is_decimal(t)
            or pa.types.is_fixed_size_binary(t))


def check_column(kind: str, field: pa.Field) -> None:
    """pylance's column type rules per kind; InvalidInputError naming the column."""
    t = _plain(field.type)
    if kind in ("BTREE", "BITMAP") and not _sortable(t):
        raise InvalidInputError(f"{kind} index column {field.name!r} must be an integer, float, bool, "
                                f"string, binary, decimal, fixed-size-binary or temporal column, not {t}")
    if kind == "BLOOMFILTER" and not bf.supported(t):
        raise InvalidInputError(f"BLOOMFILTER index column {field.name!r} must be an integer, float, string, "
                                f"binary, date, time or timestamp column, not {t}")
    if kind == "NGRAM" and not (pa.types.is_string(t) or pa.types.is_large_string(t)):
        raise InvalidInputError(f"NGRAM index column {field.name!r} must be a string column, not {t}")
    if kind == "RTREE":
        rt.check_field(field)
    if kind == "MINHASHLSH" and not (pa.types.is_string(t) or pa.types.is_large_string(t)):
        raise InvalidInputError(f"MINHASHLSH index column {field.name!r} must be a string column, not {t}")
    if kind == "LABEL_LIST" and not (pa.types.is_list(t) or pa.types.is_large_list(t)):
        raise InvalidInputError(f"LABEL_LIST index column {field.name!r} must be a list or large list, "
                                f"not {t}")


class ScalarBuilder(SegmentBuilder):
    """``SegmentBuilder`` for the scalar kinds."""

    kinds = frozenset(DETAILS)

    def check_params(self, kind: str, field: pa.Field, params: Mapping[str, Any]) -> IndexParams:
        if kind in REFUSED:
            raise UnsupportedError(f"{kind} indices cannot be built by this library yet")
        if kind not in self.kinds:
            raise InvalidInputError(f"{kind!r} is not a scalar index type this builder knows "
                                    f"({', '.join(sorted(self.kinds))})")
        check_column(kind, field)
        return sp.parse(kind, params)

    def params_of(self, kind: str, index: Any) -> IndexParams:
        """BTREE: ``zone_size`` is not in the details; pylance's update uses its default.
        ZONEMAP: ``rows_per_zone`` from the details."""
        if kind == "MINHASHLSH" and index.HasField("index_details"):
            return mh.parse_details(bytes(index.index_details.value))
        if kind == "ZONEMAP" and index.HasField("index_details"):
            rows = zm.details_rows_per_zone(bytes(index.index_details.value))
            if rows:
                return sp.ZoneMapParams(rows)
        return sp.PARAM_TYPES[kind]()

    def build(self, job: Job, req: SegmentRequest) -> BuiltSegment:
        if req.kind not in self.kinds:
            raise UnsupportedError(f"building {req.kind} index segments is not supported")
        ds = job.dataset(req.uri, req.read_version, req.storage_options)
        if req.column not in ds.schema.names:
            if "." in req.column:
                raise UnsupportedError(f"index column {req.column!r}: scalar indices on nested fields "
                                       "cannot be built yet", path=req.uri)
            raise InvalidInputError(f"no column {req.column!r} in version {ds.version}", path=req.uri)
        field = ds.schema.field(req.column)
        check_column(req.kind, field)
        value_type = _plain(field.type)
        if req.kind == "LABEL_LIST":
            value_type = value_type.value_type
        frags = ds.fragments_with_ids(req.fragment_ids)
        missing = sorted(set(req.fragment_ids) - set(frags))
        if missing:
            raise InvalidInputError(f"no fragment(s) {missing} in version {ds.version}", path=req.uri)
        position = {f.id: i for i, f in enumerate(ds.fragments)}
        ids = sorted(set(req.fragment_ids), key=position.__getitem__)  # zones follow the manifest's order
        params = req.params
        slots = default_parallelism(job.spark)
        part_rows = job.tuning.minhash_part_rows if req.kind == "MINHASHLSH" else job.tuning.part_rows
        sizes = [(i, frags[i].physical_rows) for i in ids]
        if req.kind in RANGED and all(n is not None for _, n in sizes):  # parts of equal rows
            ranges = _ranges([(i, int(n)) for i, n in sizes], slots, part_rows)
        else:
            ranges = [tuple((i, 0, None) for i in g) for g in _groups([(i, int(n or 0)) for i, n in sizes],
                                                                      slots, part_rows)]
        parts = [PartSpec(req.uri, req.read_version, req.kind, req.column, req.new_uuid,
                          tuple(dict.fromkeys(f for f, _, _ in r)), req.row_ids, req.file_version, params,
                          bool(req.merge_with), req.storage_options, ds.timestamp,
                          job.tuning.btree_sample_rows, r)
                 for r in ranges]
        merge = MergeSpec(req.uri, req.read_version, req.kind, req.column, req.new_uuid, (), (),
                          tuple(req.merge_with), params, value_type, req.file_version, req.storage_options,
                          ds.timestamp)
        if len(parts) == 1 and (req.kind != "BTREE" or not req.merge_with):
            # one task indexes and merges (a stage less; one BTREE run has nothing to range-merge)
            if _on_driver(job, ds, [n for _, n in sizes]):
                keep_open(ds, req.uri, req.storage_options)
                fused = run_part_and_merge((parts[0], merge), TaskContext(job.job_id, 0, "driver"))
            else:
                (fused,) = job.run_tasks([(parts[0], merge)], run_part_and_merge)
            done, written = [fused[0]], fused[1]
        else:
            done = job.run_tasks(parts, run_part) if parts else []
            written = _range_merge(job, req, ds, done, value_type, slots) if req.kind == "BTREE" else None
            if written is None:
                merge = replace(merge, parts=tuple(p.file for p in done if p.file is not None),
                                payloads=tuple(p.payload for p in done if p.payload is not None))
                (written,) = job.run_tasks([merge], run_merge)
        version = INDEX_VERSION[req.kind]
        if req.kind == "BTREE" and ds.uses_stable_row_ids:
            version = 1
        value = b""
        if req.kind == "ZONEMAP":
            value = zm.details_value(cast(sp.ZoneMapParams, req.params).rows_per_zone, value_type)
        if req.kind == "MINHASHLSH":
            value = mh.details(cast(mh.MinHashParams, req.params))
        details = any_pb2.Any(type_url=DETAILS[req.kind], value=value)
        return BuiltSegment(tuple(written), details.SerializeToString(), version, sum(p.rows for p in done))


def _on_driver(job: Job, ds: Dataset, rows: list[int | None]) -> bool:
    """A small one-task segment on an object store is built here, in the driver: a Spark stage
    costs more than its work (its launch, then in a fresh worker the S3 client and the manifest
    read again; ~0.6-1 s at 20 ms a request against ~1 s for the whole build of 800 000 rows)."""
    return (job.spark is not None and not ds.store.is_local and None not in rows
            and sum(cast(list[int], rows)) <= job.tuning.driver_index_rows)


def _range_merge(job: Job, req: SegmentRequest, ds: Dataset, done: list[Part], value_type: pa.DataType,
                 slots: int) -> tuple[tuple[str, int], ...] | None:
    """BTREE runs of at least ``job.tuning.range_merge_rows`` rows in all merged by value range (tasks
    of at most ``range_rows`` rows, a multiple of the slots), then a finish task
    (``spark.indices.btree_merge_tasks``); None when the single merge task must do it (one run, few
    rows, a type or old segment it cannot take)."""
    if not bt.range_mergeable(value_type):
        return None
    runs = []
    for p in done:
        if p.file is not None:
            if p.samples is None:
                return None
            runs.append(bm.Run(p.file, None, p.rows, *p.samples))
    for raw in req.merge_with:
        run = bm.old_run(ds, table_pb2.IndexMetadata.FromString(raw), value_type)
        if run is None:
            return None
        runs.append(run)
    total = sum(r.rows for r in runs)
    if len(runs) < 2 or total < job.tuning.range_merge_rows:
        return None
    batch_size = cast(sp.BTreeParams, req.params).zone_size
    plans = bm.plan_ranges(runs, _task_count(total, job.tuning.range_rows, slots))
    sources = tuple((r.part, r.old) for r in runs)
    specs = [bm.RangeSpec(req.uri, req.read_version, req.new_uuid, sources, windows, lo, hi, value_type,
                          batch_size, req.file_version, req.storage_options, ds.timestamp)
             for lo, hi, windows in plans]
    outs = job.run_tasks(specs, bm.run_range, costs=[sum(c - a for a, c in s.windows) for s in specs])
    if sum(o.rows for o in outs) != total:
        raise CorruptFileError(f"BTREE range merge: {sum(o.rows for o in outs)} rows out of {total} in runs",
                               path=req.uri)
    finish = bm.FinishSpec(req.uri, req.read_version, req.new_uuid, sources, tuple(outs),
                           tuple(p.file for p in done if p.file is not None), value_type, req.file_version,
                           req.storage_options, ds.timestamp)
    (written,) = job.run_tasks([finish], bm.run_finish)
    return written


def _task_count(rows: int, per_task: int, slots: int) -> int:
    """Tasks of at most ``per_task`` rows: one if that is enough, else as few as fill the
    slots in whole waves (each task costs a start-up, dear on a loaded scheduler)."""
    n = -(-max(1, rows) // per_task)
    slots = max(1, slots)
    return n if n == 1 else slots * -(-n // slots)


def _groups(sizes: list[tuple[int, int]], slots: int, part_rows: int) -> list[list[int]]:
    """Consecutive fragments in ``_task_count`` groups of about equal rows (a fragment goes
    to the group its middle row falls in)."""
    total = sum(n for _, n in sizes)
    count = _task_count(total, part_rows, slots)
    out: dict[int, list[int]] = {}
    at = 0
    for fid, n in sizes:
        out.setdefault(min(count - 1, (at + n // 2) * count // max(1, total)), []).append(fid)
        at += n
    return list(out.values())


def _ranges(sizes: list[tuple[int, int]], slots: int, part_rows: int
            ) -> list[tuple[tuple[int, int, int], ...]]:
    """The fragments' physical rows (in order) cut into ``_task_count`` parts of equal rows, each
    a run of (fragment, first, stop) row ranges; a part may end or start inside a fragment."""
    total = sum(n for _, n in sizes)
    count = _task_count(total, part_rows, slots)
    out: list[list[tuple[int, int, int]]] = [[] for _ in range(count)]
    at, j = 0, 0
    for fid, n in sizes:
        first = 0
        while first < n:
            cut = total * (j + 1) // count - at  # where part j ends, in this fragment's rows
            stop = min(n, max(cut, first))
            if stop > first:
                out[j].append((fid, first, stop))
                first = stop
            if first < n:
                j += 1
        at += n
    return [tuple(r) for r in out if r]


SCALAR_BUILDER = ScalarBuilder()
