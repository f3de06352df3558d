"""The INVERTED (full-text search) ``SegmentBuilder`` (issue #27): ``FTS_BUILDER``.

A segment is one partition per task (``part_<i>_*.lance``, at most ``Tuning.fts_rows_per_part``
live rows each and from ``SPLIT_ROWS`` rows on at least one per slot, whole fragments or row ranges
of a big one) plus ``metadata.lance`` listing them.
pylance reads multi-partition indices as its own: BM25 statistics (document count, average
length, document frequency) are summed over the partitions, so scores equal a one-partition
build's. Rows are named by row address, or by stable row id when the dataset has them (what
pylance stores). A merge (``merge_with``) ends with the documents pylance 14's optimize
keeps: with stable row ids the live rows of the old segments' fragments (re-tokenized); with
row addresses every row the old segments hold, deleted ones included, on fragments still in
the dataset - their partitions copied verbatim when this library wrote them, else those rows
re-tokenized (pylance's own token files are FSTs this library does not read).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

import pyarrow as pa
from google.protobuf import any_pb2
from pyroaring import BitMap

from lance_spark_ops._pb import table_pb2
from lance_spark_ops.concurrency import beside
from lance_spark_ops.errors import InvalidInputError, UnsupportedError
from lance_spark_ops.index.fts.layout import params_from_metadata, remappable_fts_layout
from lance_spark_ops.index.fts.tokenizer import DEFAULT_PARAMS, TokenizerParams
from lance_spark_ops.index.fts.tokenizer import check_params as check_tokenizer_params
from lance_spark_ops.index.kinds import uuid_str
from lance_spark_ops.spark.indices.index_segment import BuiltSegment, SegmentBuilder, SegmentRequest
from lance_spark_ops.spark.runtime.job import Job
from lance_spark_ops.spark.runtime.session import default_parallelism

INDEX_VERSION = 2           # pylance 14's index_version for INVERTED entries
# per partition task (its memory: ~40 bytes per token occurrence, plus one scan batch)
BYTES_PER_PART = 128 << 20  # bytes of the fragments' data files
SPLIT_ROWS = 1 << 17        # fewer rows are one partition whatever the slots
DETAILS_TYPE_URL = "/lance.table.InvertedIndexDetails"


def details_of(params: TokenizerParams) -> bytes:
    """The entry's serialized ``Any(InvertedIndexDetails)`` as pylance fills it (language as
    a JSON string)."""
    d = table_pb2.InvertedIndexDetails(
        base_tokenizer=params.base_tokenizer, language=f'"{params.language}"',
        with_position=params.with_position, lower_case=params.lower_case, stem=params.stem,
        remove_stop_words=params.remove_stop_words, ascii_folding=params.ascii_folding,
        min_ngram_length=params.min_ngram_length, max_ngram_length=params.max_ngram_length,
        prefix_only=params.prefix_only, block_size=params.block_size)
    if params.max_token_length is not None:
        d.max_token_length = params.max_token_length
    a = any_pb2.Any(type_url=DETAILS_TYPE_URL, value=d.SerializeToString())
    return a.SerializeToString()


def _is_string(t: pa.DataType) -> bool:
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return True
    return False


class FtsBuilder(SegmentBuilder):
    kinds = frozenset({"INVERTED"})

    def check_params(self, kind: str, field: pa.Field, params: Mapping[str, Any]) -> TokenizerParams:
        if kind not in self.kinds:
            raise InvalidInputError(f"FTS builder: index type {kind!r} is not INVERTED")
        t = field.type
        if (pa.types.is_list(t) or pa.types.is_large_list(t)) and _is_string(t.value_type):
            raise UnsupportedError(f"INVERTED index: column {field.name!r} is a list of strings (one "
                                   "document per item in pylance); this library indexes string columns")
        if not _is_string(field.type):
            raise InvalidInputError(f"INVERTED index: column {field.name!r} has type {field.type}; "
                                    "this library indexes string / large_string columns")
        return check_tokenizer_params(params)

    def params_of(self, kind: str, index: Any) -> TokenizerParams:
        """From the entry's ``InvertedIndexDetails`` (what pylance's and our entries carry).
        Custom stop words are not in the details: ``build`` reads the exact parameters from
        ``model_from``'s ``metadata.lance`` when the driver passes it."""
        d = table_pb2.InvertedIndexDetails()
        if index.HasField("index_details"):
            d.ParseFromString(index.index_details.value)
        if not d.HasField("base_tokenizer"):    # blank details of old indices: the defaults
            return check_tokenizer_params({})
        lang = d.language
        lang = json.loads(lang) if lang.startswith('"') else (lang or "English")
        return check_tokenizer_params({
            "base_tokenizer": d.base_tokenizer, "language": lang, "with_position": d.with_position,
            "max_token_length": d.max_token_length if d.HasField("max_token_length") else None,
            "lower_case": d.lower_case, "stem": d.stem, "remove_stop_words": d.remove_stop_words,
            "ascii_folding": d.ascii_folding, "min_ngram_length": d.min_ngram_length or 3,
            "max_ngram_length": d.max_ngram_length or 3, "prefix_only": d.prefix_only,
            "block_size": d.block_size if d.HasField("block_size") else 128})

    def build(self, job: Job, req: SegmentRequest) -> BuiltSegment:
        from lance_spark_ops.spark.indices.fts_index_tasks import (
            PartitionSpec,
            build_partition_task,
            read_segment_metadata,
            write_metadata,
        )
        ds = job.dataset(req.uri, req.read_version, req.storage_options)  # the plan's open
        if req.model_from is not None:  # a delta / merge tokenizes as the model segment did
            params = params_of_segment(ds, table_pb2.IndexMetadata.FromString(req.model_from))
        else:
            params = cast(TokenizerParams, req.params)  # this builder's check_params made them
        dst = f"_indices/{uuid_str(req.new_uuid)}"
        files: list[tuple[str, int]] = []
        part_ids: list[int] = []
        next_id = 0
        live = {f.id for f in ds.fragments}
        # (fragment ids, docs files whose rows to keep or None for the live rows) to tokenize
        groups: list[tuple[list[int], tuple[str, ...] | None]] = [(list(req.fragment_ids), None)]
        for raw in req.merge_with:
            old = table_pb2.IndexMetadata.FromString(raw)
            covered = sorted(BitMap.deserialize(old.fragment_bitmap)) if old.fragment_bitmap else []
            kept = [i for i in covered if i in live]
            if len(kept) != len(covered) and not req.row_ids and _has_frag_reuse(ds):
                # rows moved by a compaction whose remap was deferred: their new addresses are
                # only known through the fragment reuse index
                raise UnsupportedError(f"INVERTED merge: segment {uuid_str(old.uuid.uuid)} covers compacted "
                                       "fragments not yet remapped; run remap_indices first")
            src = f"_indices/{uuid_str(old.uuid.uuid)}"
            meta, _ = read_segment_metadata(ds, src)
            old_parts = json.loads(meta.get("partitions", "[]"))
            if req.row_ids:
                # stable row ids: pylance's merge drops the deleted rows -> the live rows again
                groups.append((kept, None))
            elif len(kept) == len(covered) and remappable_fts_layout(meta):
                for pid in old_parts:               # kept verbatim, deleted rows included
                    fs = _copy_partition(ds, src, pid, dst, next_id)
                    part_ids.append(next_id)
                    files.extend(fs)
                    next_id += 1
            else:
                # row addresses: pylance keeps every row the old segment holds (deleted ones
                # too) on fragments still in the dataset -> re-tokenize exactly those rows
                groups.append((kept, tuple(f"{src}/part_{pid}_docs.lance" for pid in old_parts)))
        specs = []
        slots = default_parallelism(job.spark)
        for frag_ids, only in groups:
            by_id = ds.fragments_with_ids(frag_ids)
            for ranges in _plan(ds, [by_id[i] for i in frag_ids], slots,
                                job.tuning.fts_rows_per_part):
                specs.append(PartitionSpec(req.uri, req.read_version, req.column, params, req.row_ids, dst,
                                           next_id, tuple(ranges), req.file_version,
                                           dict(req.storage_options), only, ds.timestamp))
                next_id += 1
        part_ids += [s.part_id for s in specs]
        # metadata.lance names the partitions and the params, known now: it is written while the
        # tasks run (the block's end waits for it, so a failed build's cleanup comes after it)
        with beside(write_metadata, ds, dst, part_ids, params, req.file_version,
                    name="fts-metadata") as metadata:
            results = job.run_tasks(specs, build_partition_task) if specs else []
            metadata_bytes = metadata.result()
        from lance_spark_ops.spark.runtime.runner import TaskFailed

        rows = 0
        for r in results:
            if isinstance(r, TaskFailed):
                raise r.error
            files.extend(r.files)
            rows += r.docs
        files.append(("metadata.lance", metadata_bytes))
        return BuiltSegment(tuple(files), details_of(params), INDEX_VERSION, rows)


def _plan(ds: Any, frags: list[Any], slots: int, rows_per_part: int
          ) -> list[list[tuple[int, int | None, int | None]]]:
    """Partitions of at most ``rows_per_part`` rows and ``BYTES_PER_PART`` bytes of data files
    (the whole row's: an upper bound of the column's compressed text): consecutive whole
    fragments, or row ranges of one fragment bigger than that. With ``slots`` and at least
    ``SPLIT_ROWS`` rows, at least one partition per slot (a task each), give or take 10%."""
    live_rows = sum(int(f.physical_rows or 0) - int(f.num_deleted_rows or 0) for f in frags)
    cap = float(rows_per_part)
    if slots > 1 and live_rows >= SPLIT_ROWS:
        waves = -(-live_rows // (rows_per_part * slots))
        cap = min(cap, 1.1 * live_rows / (slots * waves))
    out: list[list[tuple[int, int | None, int | None]]] = []
    cur: list[tuple[int, int | None, int | None]] = []
    load = 0.0
    for f in frags:
        phys = int(f.physical_rows or 0)
        live = phys - int(f.num_deleted_rows or 0)
        size = sum(int(d.file_size_bytes or 0) for d in f.files)
        share = max(live / cap, size / BYTES_PER_PART)
        if share > 1 and phys > 1:
            if cur:
                out.append(cur)
                cur, load = [], 0.0
            step = max(1, int(phys / share))
            for s in range(0, phys, step):
                out.append([(f.id, s, min(phys, s + step))])
            continue
        if cur and load + share > 1:
            out.append(cur)
            cur, load = [], 0.0
        cur.append((f.id, None, None))
        load += share
    if cur:
        out.append(cur)
    return out


def _has_frag_reuse(ds: Any) -> bool:
    from lance_spark_ops.index.kinds import FRAG_REUSE_INDEX_NAME

    section = ds.manifest_file.index_section
    return section is not None and any(i.name == FRAG_REUSE_INDEX_NAME for i in section.indices)


def _copy_partition(ds: Any, src: str, pid: int, dst: str, new_id: int) -> list[tuple[str, int]]:
    out = []
    for kind in ("invert", "tokens", "docs"):
        name = f"part_{new_id}_{kind}.lance"
        data = ds.store.read(f"{src}/part_{pid}_{kind}.lance")
        ds.store.write(f"{dst}/{name}", data)
        out.append((name, len(data)))
    return out


def params_of_segment(ds: Any, index: Any) -> TokenizerParams:
    """The parameters a segment was built with, from its ``metadata.lance`` params (what
    pylance reads back; the entry's details lack custom stop words)."""
    from lance_spark_ops.spark.indices.fts_index_tasks import read_segment_metadata

    meta, where = read_segment_metadata(ds, f"_indices/{uuid_str(index.uuid.uuid)}")
    stored = params_from_metadata(meta, where)
    return check_tokenizer_params({k: v for k, v in stored.items() if k in DEFAULT_PARAMS})


FTS_BUILDER = FtsBuilder()
