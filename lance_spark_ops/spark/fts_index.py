"""The INVERTED (full-text search) ``SegmentBuilder`` (issue #27): ``FTS_BUILDER``.

A segment is one partition per task (``part_<i>_*.lance``, at most ``ROWS_PER_PART`` live
rows each, whole fragments or row ranges of a big one) plus ``metadata.lance`` listing them.
pylance reads multi-partition indices as its own: BM25 statistics (document count, average
length, document frequency) are summed over the partitions, so scores equal a one-partition
build's. Rows are named by row address, or by stable row id when the dataset has them (what
pylance stores). A merge (``merge_with``) keeps the old segments' partitions of this
library's layout verbatim (copied under new partition ids) when all their fragments are still
in the dataset, and indexes the new fragments into new partitions; anything else is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from google.protobuf import any_pb2

from lance_spark_ops._pb import table_pb2
from lance_spark_ops.errors import InvalidInputError, UnsupportedError
from lance_spark_ops.index.fts.layout import params_from_metadata
from lance_spark_ops.index.fts.tokenizer import DEFAULT_PARAMS
from lance_spark_ops.index.fts.tokenizer import check_params as check_tokenizer_params
from lance_spark_ops.index.kinds import uuid_str
from lance_spark_ops.spark.index_segment import BuiltSegment, SegmentRequest

INDEX_VERSION = 2           # pylance 14's index_version for INVERTED entries
ROWS_PER_PART = 1 << 20     # live rows per partition task (memory bound)
DETAILS_TYPE_URL = "/lance.table.InvertedIndexDetails"


def details_of(params: Mapping[str, Any]) -> bytes:
    """The entry's serialized ``Any(InvertedIndexDetails)`` as pylance fills it (language as
    a JSON string)."""
    d = table_pb2.InvertedIndexDetails(
        base_tokenizer=params["base_tokenizer"], language=f'"{params["language"]}"',
        with_position=params["with_position"], lower_case=params["lower_case"], stem=params["stem"],
        remove_stop_words=params["remove_stop_words"], ascii_folding=params["ascii_folding"],
        min_ngram_length=params["min_ngram_length"], max_ngram_length=params["max_ngram_length"],
        prefix_only=params["prefix_only"], block_size=params["block_size"])
    if params["max_token_length"] is not None:
        d.max_token_length = params["max_token_length"]
    a = any_pb2.Any(type_url=DETAILS_TYPE_URL, value=d.SerializeToString())
    return a.SerializeToString()


def _is_string(t: pa.DataType) -> bool:
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return True
    return False


class FtsBuilder:
    kinds = frozenset({"INVERTED"})

    def check_params(self, kind: str, field: pa.Field, params: Mapping[str, Any]) -> dict[str, Any]:
        if kind not in self.kinds:
            raise InvalidInputError(f"FTS builder: index type {kind!r} is not INVERTED")
        if not _is_string(field.type):
            raise InvalidInputError(f"INVERTED index: column {field.name!r} has type {field.type}; "
                                    "this library indexes string / large_string columns")
        return check_tokenizer_params(params)

    def params_of(self, kind: str, index: Any) -> dict[str, Any]:
        raise UnsupportedError("params_of needs the index files; use params_of_segment(ds, index)")

    def build(self, job: Any, req: SegmentRequest) -> BuiltSegment:
        from lance_spark_ops.spark.tasks.fts_index import PartitionSpec, build_partition_task, write_metadata
        from lance_spark_ops.table.dataset import Dataset

        params = check_tokenizer_params(req.params)
        ds = Dataset.open(req.uri, version=req.read_version, storage_options=req.storage_options)
        dst = f"_indices/{uuid_str(req.new_uuid)}"
        files: list[tuple[str, int]] = []
        part_ids: list[int] = []
        next_id = 0
        if req.merge_with:
            copied, next_id = _copy_old_partitions(ds, req, dst)
            for pid, fs in copied:
                part_ids.append(pid)
                files.extend(fs)
        by_id = ds.fragments_with_ids(req.fragment_ids)
        specs = []
        for ranges in _plan(ds, [by_id[i] for i in req.fragment_ids]):
            specs.append(PartitionSpec(req.uri, req.read_version, req.column, params, req.row_ids, dst,
                                       next_id, tuple(ranges), req.file_version, dict(req.storage_options)))
            next_id += 1
        results = job.run_tasks(specs, build_partition_task) if specs else []
        from lance_spark_ops.spark.runner import TaskFailed

        rows = 0
        for r in results:
            if isinstance(r, TaskFailed):
                raise r.error
            part_ids.append(r.part_id)
            files.extend(r.files)
            rows += r.docs
        files.append(("metadata.lance", write_metadata(ds, dst, part_ids, params, req.file_version)))
        return BuiltSegment(tuple(files), details_of(params), INDEX_VERSION, rows)


def _plan(ds: Any, frags: list[Any]) -> list[list[tuple[int, int | None, int | None]]]:
    """Partitions of at most ``ROWS_PER_PART`` rows: consecutive whole fragments, or row
    ranges of one fragment bigger than that."""
    out: list[list[tuple[int, int | None, int | None]]] = []
    cur: list[tuple[int, int | None, int | None]] = []
    n = 0
    for f in frags:
        phys = int(f.physical_rows or 0)
        live = phys - int(f.num_deleted_rows or 0)
        if phys > ROWS_PER_PART:
            if cur:
                out.append(cur)
                cur, n = [], 0
            for s in range(0, phys, ROWS_PER_PART):
                out.append([(f.id, s, min(phys, s + ROWS_PER_PART))])
            continue
        if cur and n + live > ROWS_PER_PART:
            out.append(cur)
            cur, n = [], 0
        cur.append((f.id, None, None))
        n += live
    if cur:
        out.append(cur)
    return out


def _copy_old_partitions(ds: Any, req: SegmentRequest, dst: str) -> tuple[list[tuple[int, list]], int]:
    """The old segments' partitions copied under ``dst`` with new ids (``merge_with``)."""
    from lance_spark_ops.spark.tasks.fts_index import read_segment_metadata

    live = {f.id for f in ds.fragments}
    out: list[tuple[int, list]] = []
    next_id = 0
    for raw in req.merge_with:
        old = table_pb2.IndexMetadata.FromString(raw)
        from pyroaring import BitMap

        covered = set(BitMap.deserialize(old.fragment_bitmap)) if old.HasField("fragment_bitmap") else set()
        if covered - live:
            raise UnsupportedError(f"INVERTED merge: segment {uuid_str(old.uuid.uuid)} covers fragments "
                                   f"{sorted(covered - live)} no longer in the dataset; retrain instead")
        src = f"_indices/{uuid_str(old.uuid.uuid)}"
        meta, _ = read_segment_metadata(ds, src)
        if meta.get("token_set_format") != "arrow" or "format_version" in meta:
            raise UnsupportedError(f"INVERTED merge: segment {src} is in pylance's own layout "
                                   f"(token_set_format {meta.get('token_set_format')!r}); retrain instead")
        import json

        for pid in json.loads(meta["partitions"]):
            fs = []
            for kind in ("invert", "tokens", "docs"):
                name = f"part_{next_id}_{kind}.lance"
                data = ds.store.read(f"{src}/part_{pid}_{kind}.lance")
                ds.store.write(f"{dst}/{name}", data)
                fs.append((name, len(data)))
            out.append((next_id, fs))
            next_id += 1
    return out, next_id


def params_of_segment(ds: Any, index: Any) -> dict[str, Any]:
    """The parameters a segment was built with, from its ``metadata.lance`` params (what
    pylance reads back; the entry's details lack custom stop words)."""
    from lance_spark_ops.spark.tasks.fts_index import read_segment_metadata

    meta, where = read_segment_metadata(ds, f"_indices/{uuid_str(index.uuid.uuid)}")
    stored = params_from_metadata(meta, where)
    return check_tokenizer_params({k: v for k, v in stored.items() if k in DEFAULT_PARAMS})


FTS_BUILDER = FtsBuilder()
