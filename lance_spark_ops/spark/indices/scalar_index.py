"""Segment builder for the scalar index kinds (issue #27): BTREE, BITMAP, LABEL_LIST, NGRAM,
ZONEMAP and BLOOMFILTER, behind the ``index_segment`` contract.

The driver side only plans: fragments (in manifest order) are grouped into part tasks of at
most ``PART_ROWS`` physical rows, as many as fill the slots in whole waves
(``spark.indices.scalar_index_tasks.run_part``; RTREE / MINHASHLSH parts are row ranges of
equal size, cutting fragments), then one merge task writes the segment's files and
deletes the parts (``run_merge``); a segment of one part indexes and merges in one task. BTREE
runs of ``RANGE_MERGE_ROWS`` or more numeric / temporal rows are merged by value range in
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
from typing import Any

import pyarrow as pa
from google.protobuf import any_pb2

from lance_spark_ops._pb import table_pb2
from lance_spark_ops.errors import CorruptFileError, InvalidInputError, UnsupportedError
from lance_spark_ops.index.scalar import bloomfilter as bf
from lance_spark_ops.index.scalar import btree as bt
from lance_spark_ops.index.scalar import minhash as mh
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
from lance_spark_ops.spark.runtime.session import default_parallelism
from lance_spark_ops.table.dataset import Dataset

PART_ROWS = 1 << 22  # physical rows a part task reads at most (memory: one sorted run of them)
MINHASH_PART_ROWS = 1 << 18  # MINHASHLSH rows a part task signs at most (~0.3 s of CPU per 100 K short docs)
# kinds whose parts are row ranges of equal size (fragments cut where needed): their merges take
# the parts' rows in order, so the parts' sizes are free
RANGED = frozenset(("RTREE", "MINHASHLSH"))
RANGE_MERGE_ROWS = 1 << 20  # BTREE runs of fewer rows in all are merged by one task
RANGE_ROWS = 1 << 22  # rows a BTREE range task merges at most

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
PARAMS: dict[str, dict[str, Any]] = {
    "BTREE": {"zone_size": bt.DEFAULT_BATCH_SIZE},
    "BITMAP": {},
    "LABEL_LIST": {},
    "NGRAM": {},
    "ZONEMAP": {"rows_per_zone": zm.DEFAULT_ROWS_PER_ZONE},
    "BLOOMFILTER": {"number_of_items": bf.DEFAULT_ITEMS, "probability": bf.DEFAULT_PROBABILITY},
    "RTREE": {"page_size": rt.DEFAULT_PAGE_SIZE},
    "MINHASHLSH": {**mh.DEFAULTS, "tokenizer": mh.TOKENIZER_DEFAULTS},
}
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

    def check_params(self, kind: str, field: pa.Field, params: Mapping[str, Any]) -> dict[str, Any]:
        if kind in REFUSED:
            raise UnsupportedError(f"{kind} indices cannot be built by this library yet")
        if kind not in self.kinds:
            raise InvalidInputError(f"{kind!r} is not a scalar index type this builder knows "
                                    f"({', '.join(sorted(self.kinds))})")
        check_column(kind, field)
        if kind == "MINHASHLSH":
            out = mh.check_params(params)
            mh.analyzer_params(out)  # the tokenizer must be one this library reproduces
            return out
        known = PARAMS[kind]
        unknown = sorted(set(params) - set(known))
        if unknown:
            allowed = ", ".join(sorted(known)) or "none"
            raise InvalidInputError(f"{kind} index: unknown parameter(s) {unknown} (accepted: {allowed})")
        out = dict(known)
        out.update(params)
        if kind == "BTREE":
            out["zone_size"] = _positive_int(out["zone_size"], "zone_size")
        if kind == "ZONEMAP":
            out["rows_per_zone"] = _positive_int(out["rows_per_zone"], "rows_per_zone")
        if kind == "RTREE":
            out["page_size"] = _positive_int(out["page_size"], "page_size")
            if out["page_size"] < 2:
                raise InvalidInputError("RTREE index: parameter page_size must be at least 2, got "
                                        f"{out['page_size']}")
        if kind == "BLOOMFILTER":
            out["number_of_items"] = _positive_int(out["number_of_items"], "number_of_items")
            p = out["probability"]
            if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 < float(p) < 1.0:
                raise InvalidInputError("BLOOMFILTER index: parameter probability must be a number in "
                                        f"(0, 1), got {p!r}")
            out["probability"] = float(p)
        return out

    def params_of(self, kind: str, index: Any) -> dict[str, Any]:
        """BTREE: ``zone_size`` is not in the details; pylance's update uses its default.
        ZONEMAP: ``rows_per_zone`` from the details."""
        if kind == "MINHASHLSH" and index.HasField("index_details"):
            return mh.parse_details(bytes(index.index_details.value))
        out = dict(PARAMS[kind])
        if kind == "ZONEMAP" and index.HasField("index_details"):
            rows = zm.details_rows_per_zone(bytes(index.index_details.value))
            if rows:
                out["rows_per_zone"] = rows
        return out

    def build(self, job: Job, req: SegmentRequest) -> BuiltSegment:
        if req.kind not in self.kinds:
            raise UnsupportedError(f"building {req.kind} index segments is not supported")
        ds = Dataset.open(req.uri, req.read_version, storage_options=req.storage_options)
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
        params = tuple(sorted(dict(req.params).items()))
        slots = default_parallelism(job.spark)
        part_rows = MINHASH_PART_ROWS if req.kind == "MINHASHLSH" else PART_ROWS
        sizes = [(i, frags[i].physical_rows) for i in ids]
        if req.kind in RANGED and all(n is not None for _, n in sizes):  # parts of equal rows
            ranges = _ranges([(i, int(n)) for i, n in sizes], slots, part_rows)
        else:
            ranges = [tuple((i, 0, None) for i in g) for g in _groups([(i, int(n or 0)) for i, n in sizes],
                                                                      slots, part_rows)]
        parts = [PartSpec(req.uri, req.read_version, req.kind, req.column, req.new_uuid,
                          tuple(dict.fromkeys(f for f, _, _ in r)), req.row_ids, req.file_version, params,
                          bool(req.merge_with), req.storage_options, ds.timestamp, r)
                 for r in ranges]
        merge = MergeSpec(req.uri, req.read_version, req.kind, req.column, req.new_uuid, (), (),
                          tuple(req.merge_with), params, value_type, req.file_version, req.storage_options)
        if len(parts) == 1 and req.kind != "BTREE":  # one task indexes and merges (a stage less)
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
            value = zm.details_value(int(dict(req.params)["rows_per_zone"]), value_type)
        if req.kind == "MINHASHLSH":
            value = mh.details(dict(req.params))
        details = any_pb2.Any(type_url=DETAILS[req.kind], value=value)
        return BuiltSegment(tuple(written), details.SerializeToString(), version, sum(p.rows for p in done))


def _range_merge(job: Job, req: SegmentRequest, ds: Dataset, done: list[Part], value_type: pa.DataType,
                 slots: int) -> tuple[tuple[str, int], ...] | None:
    """BTREE runs of at least ``RANGE_MERGE_ROWS`` rows in all merged by value range (tasks of
    at most ``RANGE_ROWS`` rows, a multiple of the slots), then a finish task
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
    if len(runs) < 2 or total < RANGE_MERGE_ROWS:
        return None
    batch_size = int(dict(req.params).get("zone_size") or bt.DEFAULT_BATCH_SIZE)
    plans = bm.plan_ranges(runs, _task_count(total, RANGE_ROWS, slots))
    sources = tuple((r.part, r.old) for r in runs)
    specs = [bm.RangeSpec(req.uri, req.read_version, req.new_uuid, sources, windows, lo, hi, value_type,
                          batch_size, req.file_version, req.storage_options) for lo, hi, windows in plans]
    outs = job.run_tasks(specs, bm.run_range, costs=[sum(c - a for a, c in s.windows) for s in specs])
    if sum(o.rows for o in outs) != total:
        raise CorruptFileError(f"BTREE range merge: {sum(o.rows for o in outs)} rows out of {total} in runs",
                               path=req.uri)
    finish = bm.FinishSpec(req.uri, req.read_version, req.new_uuid, sources, tuple(outs),
                           tuple(p.file for p in done if p.file is not None), value_type, req.file_version,
                           req.storage_options)
    (written,) = job.run_tasks([finish], bm.run_finish)
    return written


def _task_count(rows: int, per_task: int, slots: int) -> int:
    """Tasks of at most ``per_task`` rows: one if that is enough, else as few as fill the
    slots in whole waves (each task costs a start-up, dear on a loaded scheduler)."""
    n = -(-max(1, rows) // per_task)
    slots = max(1, slots)
    return n if n == 1 else slots * -(-n // slots)


def _groups(sizes: list[tuple[int, int]], slots: int = 1, part_rows: int | None = None) -> list[list[int]]:
    """Consecutive fragments in ``_task_count`` groups of about equal rows (a fragment goes
    to the group its middle row falls in)."""
    total = sum(n for _, n in sizes)
    count = _task_count(total, PART_ROWS if part_rows is None else part_rows, slots)
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


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        try:
            v = int(value)
        except (TypeError, ValueError):
            v = 0
        if v <= 0 or isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise InvalidInputError(f"parameter {name} must be a positive integer, got {value!r}")
        return v
    return value


SCALAR_BUILDER = ScalarBuilder()
