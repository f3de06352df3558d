"""Scalar index segment tasks (issue #27): part tasks read a group of fragments and write a
partial index under the segment's directory (a sorted run for BTREE, per-key bitmaps for
BITMAP / LABEL_LIST, per-trigram postings for NGRAM, zones with their bloom filters for
BLOOMFILTER) or return it inline (ZONEMAP zones, a row per 8192 rows); one merge task folds
the parts and the old segments being merged into the final files in pylance's layout and
deletes the parts.

Part files carry ``TaskContext.file_prefix`` in their names, so a retried attempt leaves
only files named by its job id (cleaned up with the job's other files); the final files have
fixed names, so every attempt of the merge writes the same paths.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, cast

import numpy as np
import pyarrow as pa
from pyroaring import BitMap

from lance_spark_ops._pb import table_pb2
from lance_spark_ops.concurrency import read_ahead
from lance_spark_ops.errors import CorruptFileError, UnsupportedError
from lance_spark_ops.file.metadata import WHOLE_FILE_READ
from lance_spark_ops.file.reader import LanceFileReader
from lance_spark_ops.file.writer import LanceFileWriter, write_table
from lance_spark_ops.index.fts.tokenizer import Analyzer
from lance_spark_ops.index.kinds import uuid_str
from lance_spark_ops.index.params import IndexParams, NoParams
from lance_spark_ops.index.scalar import bitmap as bm
from lance_spark_ops.index.scalar import bloomfilter as bf
from lance_spark_ops.index.scalar import btree as bt
from lance_spark_ops.index.scalar import minhash as mh
from lance_spark_ops.index.scalar import ngram as ng
from lance_spark_ops.index.scalar import params as sp
from lance_spark_ops.index.scalar import rtree as rt
from lance_spark_ops.index.scalar import zoned
from lance_spark_ops.index.scalar import zonemap as zm
from lance_spark_ops.io.budget import IOBudget
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.spark.runtime.runner import TaskContext
from lance_spark_ops.spark.runtime.scan_tasks import open_dataset
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.format.fragment import DataFragment
from lance_spark_ops.table.fragment_batch import FragmentBatch

ZONED = ("ZONEMAP", "BLOOMFILTER")
SCAN_ROWS = 1 << 16          # rows decoded at a time by a part task
MERGE_CHUNK_ROWS = 1 << 16   # fewest rows per run held by the BTREE merge
MERGE_BUDGET_ROWS = 1 << 23  # rows the BTREE merge holds over all runs (bounds its memory)


@dataclass(frozen=True)
class PartSpec:
    """Picklable: one group of fragments whose live rows a part task indexes."""

    uri: str
    read_version: int
    kind: str
    column: str
    new_uuid: bytes
    fragment_ids: tuple[int, ...]
    row_ids: bool                 # name rows by stable row id (else by row address)
    file_version: str
    params: IndexParams = field(default_factory=NoParams)
    merging: bool = False          # the segment folds old ones in (``merge_with``)
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)
    # the read version's commit time: a reused worker's cached dataset of an older dataset
    # written again at the same URI (same version number) is not taken for this one
    timestamp: Any = None
    sample_rows: int = 4096  # BTREE: the run's key sampled every this many rows (``Tuning``)
    # (fragment, first, stop) physical row ranges to read, in order (stop None: to the end);
    # empty: every row of ``fragment_ids``
    row_ranges: tuple[tuple[int, int, int | None], ...] = ()


@dataclass(frozen=True)
class Part:
    """A part task's output: its file under the segment directory (None: no rows) and the
    rows it read."""

    file: str | None
    rows: int
    payload: bytes | None = None  # ZONEMAP / BLOOMFILTER: the zones themselves (Arrow IPC)
    samples: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # BTREE: ``btree.sample``


@dataclass(frozen=True)
class MergeSpec:
    """Picklable: the parts and old segments one merge task folds into the final files."""

    uri: str
    read_version: int
    kind: str
    column: str
    new_uuid: bytes
    parts: tuple[str, ...]
    payloads: tuple[bytes, ...]    # ZONEMAP / BLOOMFILTER parts, in fragment order
    merge_with: tuple[bytes, ...]  # table_pb2.IndexMetadata of old segments
    params: IndexParams
    value_type: Any                # pa.DataType of the keys / values
    file_version: str
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)
    timestamp: Any = None  # the version's commit time, as the driver opened it (``open_dataset``)


def segment_dir(new_uuid: bytes) -> str:
    return f"_indices/{uuid_str(new_uuid)}"


def _write(store: ObjectStore, rel: str, table: pa.Table, version: str,
           extra: list[bytes] | None = None) -> int:
    return write_table(rel, table, version, store, extra or ())


# data files up to this size are fetched whole ahead of a column scan on an object store (a footer
# read takes such a file whole anyway); larger ones are read as their footer, then the column's pages
SMALL_FILE_PREFETCH = WHOLE_FILE_READ
# fragments whose column a scan reads ahead on an object store (threads: each fragment is a footer
# and then a page read, in turn; several at once keep the store's request budget busy): at least
# SCAN_AHEAD, up to the budget's requests in flight while their columns' values (~16 bytes a row
# with the row address) fit its bytes
SCAN_AHEAD = 16
SCAN_BYTES_PER_ROW = 16


def scan_window(budget: IOBudget, fragments: list[DataFragment]) -> int:
    """Fragments a column scan reads ahead (see ``SCAN_AHEAD``). A BTREE of 48 fragments of
    20 000 rows at 20 ms (``bench/btree_timeline.py``, two runs each): 0.78 / 1.07 s with 16
    ahead, 0.76 / 0.88 s with 32, 0.73 / 0.76 s with 48 (pylance 0.85-1.03 s)."""
    rows = max(1, max((f.physical_rows or 0 for f in fragments), default=1))
    return max(SCAN_AHEAD, min(budget.max_requests, budget.max_bytes // (SCAN_BYTES_PER_ROW * rows)))


def _scan(ds: Dataset, spec: PartSpec, by_address: bool) -> Iterator[tuple[pa.Array, np.ndarray]]:
    """(values, ids) of the live rows of the spec's fragments, batch by batch."""
    id_col = "_rowaddr" if by_address else "_rowid"

    def read(r: tuple[int, int, int | None]) -> Iterator[tuple[pa.Array, np.ndarray]]:
        fid, first, stop = r
        for batch in ds.scan_fragment(int(fid), [spec.column], with_row_id=not by_address,
                                      with_row_address=by_address, batch_rows=SCAN_ROWS,
                                      row_range=(int(first), stop)):
            if batch.num_rows:
                ids = batch.column(id_col).to_numpy(zero_copy_only=False).astype(np.uint64, copy=False)
                yield batch.column(0), ids

    # object stores: deletion files and small data files fetched ahead, many in flight
    frags = ds._select_fragments([int(f) for f in spec.fragment_ids])  # noqa: SLF001
    FragmentBatch(ds, frags).prefetch(data_max_bytes=SMALL_FILE_PREFETCH)
    ranges = spec.row_ranges or tuple((f, 0, None) for f in spec.fragment_ids)
    try:
        if ds.store.is_local:
            for r in ranges:
                yield from read(r)
        else:  # a fragment's column (not the whole file) held per fragment read ahead
            for pieces in read_ahead(lambda r: list(read(r)), ranges, scan_window(ds.store.budget, frags)):
                yield from pieces
    finally:
        ds.stop_prefetch()


def run_part(spec: PartSpec, ctx: TaskContext) -> Part:
    """Executor entry point: index one group of fragments into a part file."""
    ds = open_dataset(spec.uri, spec.read_version, spec.storage_options, spec.timestamp)
    rel = f"{segment_dir(spec.new_uuid)}/{ctx.file_prefix}_part.lance"
    if spec.kind == "BTREE":  # BTREE always names rows by address (index_version 1 says so)
        pieces = list(_scan(ds, spec, by_address=True))
        if not pieces:
            return Part(None, 0)
        values = pa.chunked_array([p[0] for p in pieces])
        run = bt.sort_run(values, np.concatenate([p[1] for p in pieces]))
        _write(ds.store, rel, run, spec.file_version)
        samples = None
        if bt.range_mergeable(run.schema.field("values").type):  # for the range-parallel merge
            samples = bt.sample(run.column("values"), spec.sample_rows)
        return Part(rel.rsplit("/", 1)[1], run.num_rows, samples=samples)
    if spec.kind in ZONED:
        return _zoned_part(ds, spec, spec.params, ctx)
    by_address = not spec.row_ids
    if spec.kind == "RTREE":
        return _rtree_part(ds, spec, rel, by_address)
    if spec.kind == "MINHASHLSH":
        return _minhash_part(ds, spec, rel, by_address)
    if spec.kind == "NGRAM":
        rows, tokens, token_ids = 0, [], []
        for col, row_ids in _scan(ds, spec, by_address):
            rows += len(row_ids)
            t, i = ng.token_pairs(col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col, row_ids)
            tokens.append(t)
            token_ids.append(i)
        if not rows:
            return Part(None, 0)
        uniq, groups = ng.group_postings(np.concatenate(tokens), np.concatenate(token_ids))
        _write(ds.store, rel, ng.postings_table(uniq, groups), spec.file_version)
        return Part(rel.rsplit("/", 1)[1], rows)
    rows, values, ids, nulls = 0, [], [], []
    for col, row_ids in _scan(ds, spec, by_address):
        rows += len(row_ids)
        if spec.kind == "LABEL_LIST":
            items, item_ids, null_ids = bm.flatten_labels(col, row_ids)
            values.append(items)
            ids.append(item_ids)
            nulls.append(null_ids)
        else:
            values.append(col)
            ids.append(row_ids)
    if not rows:
        return Part(None, 0)
    keys, groups = bm.key_groups(pa.chunked_array(values), np.concatenate(ids))
    schema = bm.bitmap_schema(keys.type)
    table = bm.bitmap_table(keys, groups, schema)
    extra = [bm.encode_tree_map(np.sort(np.concatenate(nulls)))] if spec.kind == "LABEL_LIST" else []
    _write(ds.store, rel, table, spec.file_version, extra)
    return Part(rel.rsplit("/", 1)[1], rows)


def keep_filter(ds: Dataset, index: Any, row_ids: bool) -> Any:
    """What of an old segment a merge keeps (pylance 14's ``OldIndexDataFilter``), as a mask
    function of ids: by row address, every row of the segment's fragments still in the
    dataset (deleted rows too); by stable row id, the live rows of those fragments only
    (observed: pylance drops the ids of rows deleted since)."""
    covered = BitMap.deserialize(bytes(index.fragment_bitmap)) if index.fragment_bitmap else BitMap()
    present = {f.id for f in ds.fragments}
    retained = sorted(i for i in covered if i in present)
    if not row_ids:
        keep_ids = np.array(retained, dtype=np.uint64)
        return lambda ids: np.isin(ids >> np.uint64(32), keep_ids)
    frags = ds.fragments_with_ids(retained)
    allowed = []
    for i in retained:
        ids = ds.row_ids(frags[i])
        live = ds.live_mask(frags[i])
        if ids is not None:
            allowed.append(ids if live is None else ids[live])
    allow = np.unique(np.concatenate(allowed or [np.zeros(0, np.uint64)]).astype(np.uint64))
    return lambda ids: np.isin(ids, allow)


def keep_filter_is_all(ds: Dataset, index: Any) -> bool:
    """A by-address merge keeps every row of the old segment (all its fragments remain)."""
    covered = BitMap.deserialize(bytes(index.fragment_bitmap)) if index.fragment_bitmap else BitMap()
    return covered <= BitMap(f.id for f in ds.fragments)


def _retained_fragments(ds: Dataset, index: Any) -> set[int]:
    """The fragments of an old segment still in the dataset (``keep_filter`` by address)."""
    covered = BitMap.deserialize(bytes(index.fragment_bitmap)) if index.fragment_bitmap else BitMap()
    present = {f.id for f in ds.fragments}
    return {int(i) for i in covered if i in present}


def old_dir(ds: Dataset, index: Any) -> tuple[ObjectStore, str]:
    base = index.base_id if index.HasField("base_id") else None
    return ds.base_resolver.index_dir(uuid_str(index.uuid.uuid), base)


def run_merge(spec: MergeSpec, ctx: TaskContext, inline: tuple = ()) -> tuple[tuple[str, int], ...]:
    """Executor entry point: write the segment's final files; returns (name, size) of each.

    The parts are deleted only once every final file is written, so an attempt that finds a
    part gone (an earlier attempt finished, its result lost) returns the files it left."""
    ds = open_dataset(spec.uri, spec.read_version, spec.storage_options, spec.timestamp)
    dst = segment_dir(spec.new_uuid)
    finals = FINAL_FILES[spec.kind]
    if not all(ds.store.exists(f"{dst}/{p}") for p in spec.parts) and all(
            ds.store.exists(f"{dst}/{f}") for f in finals):
        ds.store.delete_many(f"{dst}/{p}" for p in spec.parts)
        return tuple((f, ds.store.size(f"{dst}/{f}")) for f in finals)
    olds = [table_pb2.IndexMetadata.FromString(b) for b in spec.merge_with]
    params = spec.params
    if spec.kind == "BTREE":
        files = _merge_btree(ds, spec, dst, olds, cast(sp.BTreeParams, params).zone_size)
    elif spec.kind in ("BITMAP", "LABEL_LIST"):
        files = _merge_bitmap(ds, spec, dst, olds)
    elif spec.kind == "NGRAM":
        files = _merge_ngram(ds, spec, dst, olds)
    elif spec.kind in ZONED:
        files = _merge_zoned(ds, spec, dst, olds, params)
    elif spec.kind == "RTREE":
        page_size = cast(sp.RTreeParams, params).page_size
        files = _merge_rtree(ds, spec, dst, olds, page_size, inline)
    elif spec.kind == "MINHASHLSH":
        files = _merge_minhash(ds, spec, dst, olds, cast(mh.MinHashParams, params), inline)
    else:
        raise UnsupportedError(f"building {spec.kind} index segments is not supported")
    ds.store.delete_many(f"{dst}/{p}" for p in spec.parts)
    return tuple(files)


def run_part_and_merge(spec: tuple[PartSpec, MergeSpec], ctx: TaskContext
                       ) -> tuple[Part, tuple[tuple[str, int], ...]]:
    """Executor entry point: one part and its merge in one task (a segment of one part: a
    Spark stage less)."""
    part_spec, merge = spec
    if part_spec.kind == "BTREE" and not merge.merge_with:
        done = _btree_in_one(part_spec, merge)
        if done is not None:
            return done
    if part_spec.kind in ("RTREE", "MINHASHLSH"):  # the part stays in memory: no file round trip
        ds = open_dataset(part_spec.uri, part_spec.read_version, part_spec.storage_options,
                          part_spec.timestamp)
        by_address = not part_spec.row_ids
        if part_spec.kind == "RTREE":
            rows, *data = _rtree_data(ds, part_spec, by_address)
        else:
            rows, *data = _minhash_data(ds, part_spec, by_address)
        return Part(None, rows), run_merge(replace(merge, parts=()), ctx, (tuple(data),) if rows else ())
    part = run_part(part_spec, ctx)
    merge = replace(merge, parts=(part.file,) if part.file is not None else (),
                    payloads=(part.payload,) if part.payload is not None else ())
    return part, run_merge(merge, ctx)


def _btree_in_one(part_spec: PartSpec, merge: MergeSpec) -> tuple[Part, tuple[tuple[str, int], ...]] | None:
    """A new BTREE segment of one part in one task: its sorted run is page_data, written once
    and its pages cut in memory (not a part file written, read back, copied and deleted: on an
    object store ~8 requests one after another). None when it has no rows (the usual path)."""
    ds = open_dataset(part_spec.uri, part_spec.read_version, part_spec.storage_options, part_spec.timestamp)
    pieces = list(_scan(ds, part_spec, by_address=True))
    if not pieces:
        return None
    run = bt.sort_run(pa.chunked_array([p[0] for p in pieces]), np.concatenate([p[1] for p in pieces]))
    batch_size = int(dict(merge.params).get("zone_size") or bt.DEFAULT_BATCH_SIZE)
    cutter = bt.PageCutter(batch_size, bt.lookup_schema(merge.value_type, batch_size))
    cutter.add(run.column("values"))
    dst = segment_dir(merge.new_uuid)
    # the two files at once (on an object store each is a PUT, or a multipart upload, of its own)
    with ThreadPoolExecutor(1, thread_name_prefix="lso-lookup") as pool:
        lookup = pool.submit(lambda: _write(ds.store, f"{dst}/{bt.PAGE_LOOKUP}", cutter.finish(),
                                            merge.file_version))
        size = _write(ds.store, f"{dst}/{bt.PAGE_DATA}", run, part_spec.file_version)
        lookup_size = lookup.result()
    return Part(None, run.num_rows), ((bt.PAGE_DATA, size), (bt.PAGE_LOOKUP, lookup_size))


def _merge_btree(ds: Dataset, spec: MergeSpec, dst: str, olds: list[Any],
                 batch_size: int) -> list[tuple[str, int]]:
    # few runs (the usual case) are read in big chunks, so the merge takes few rounds of one
    # adaptive stable sort each; the budget bounds the rows held whatever the run count
    chunk_rows = max(MERGE_CHUNK_ROWS, MERGE_BUDGET_ROWS // max(1, len(spec.parts) + len(olds)))
    runs: list[Iterator[pa.Table]] = []
    for p in spec.parts:
        runs.append(_read_chunks(LanceFileReader(f"{dst}/{p}", store=ds.store), chunk_rows))
    for old in olds:
        store, src = old_dir(ds, old)
        lookup = LanceFileReader(f"{src}/{bt.PAGE_LOOKUP}", store=store)
        bt.check_not_range_partitioned(lookup.schema, lookup.path)
        keep = keep_filter(ds, old, row_ids=False)  # BTREE ids are addresses
        runs.append(_filtered(_read_chunks(LanceFileReader(f"{src}/{bt.PAGE_DATA}", store=store), chunk_rows),
                              keep))
    schema = bt.page_data_schema(spec.value_type)
    lookup_schema = bt.lookup_schema(spec.value_type, batch_size)
    cutter = bt.PageCutter(batch_size, lookup_schema)
    if len(spec.parts) == 1 and not olds:  # one sorted run is page_data: copy it, cut its pages
        run = LanceFileReader(f"{dst}/{spec.parts[0]}", store=ds.store)
        for batch in run.iter_batches(["values"], batch_rows=chunk_rows):
            cutter.add(batch.column(0))
        ds.store.copy(f"{dst}/{spec.parts[0]}", f"{dst}/{bt.PAGE_DATA}")
        size = run.metadata.size  # a copy's size: no size request
        lookup_size = _write(ds.store, f"{dst}/{bt.PAGE_LOOKUP}", cutter.finish(), spec.file_version)
        return [(bt.PAGE_DATA, size), (bt.PAGE_LOOKUP, lookup_size)]
    w = LanceFileWriter(f"{dst}/{bt.PAGE_DATA}", schema, version=spec.file_version, store=ds.store)
    try:
        for chunk in bt.merge_runs(runs):
            chunk = chunk.cast(schema)
            w.write(chunk)
            cutter.add(chunk.column("values"))
        size = w.close()[1]
    except BaseException:
        w.abort()
        raise
    lookup_size = _write(ds.store, f"{dst}/{bt.PAGE_LOOKUP}", cutter.finish(), spec.file_version)
    return [(bt.PAGE_DATA, size), (bt.PAGE_LOOKUP, lookup_size)]


def _read_chunks(reader: LanceFileReader, chunk_rows: int = MERGE_CHUNK_ROWS) -> Iterator[pa.Table]:
    if reader.schema.names[:2] != ["values", "ids"]:
        raise CorruptFileError(f"columns {reader.schema.names}, expected values, ids", path=reader.path)
    for batch in reader.iter_batches(["values", "ids"], batch_rows=chunk_rows):
        yield pa.Table.from_batches([batch])


def _filtered(chunks: Iterator[pa.Table], keep: Any) -> Iterator[pa.Table]:
    for chunk in chunks:
        mask = keep(chunk.column("ids").to_numpy())
        yield chunk if mask.all() else chunk.filter(pa.array(mask))


def _extra_buffers(reader: LanceFileReader) -> list[bytes]:
    gb = reader.metadata.global_buffers.tolist()[1:]
    return [bytes(b) for b in reader.read_raw_ranges([(int(p), int(n)) for p, n in gb])] if gb else []


def _merge_bitmap(ds: Dataset, spec: MergeSpec, dst: str, olds: list[Any]) -> list[tuple[str, int]]:
    label_list = spec.kind == "LABEL_LIST"
    stable = ds.uses_stable_row_ids
    tables, nulls = [], []
    for p in spec.parts:
        r = LanceFileReader(f"{dst}/{p}", store=ds.store)
        tables.append(r.read())
        if label_list:
            nulls.append(bm.decode_tree_map(_extra_buffers(r)[0]))
    key_groups_in: list[tuple[pa.Table, Any]] = [(t, None) for t in tables]
    for old in olds:
        store, src = old_dir(ds, old)
        r = LanceFileReader(f"{src}/{bm.BITMAP_FILE}", store=store)
        keep = keep_filter(ds, old, stable)
        key_groups_in.append((r.read(), keep))
        slot = bm.null_list_buffer(r.schema)
        if label_list and slot is not None:
            extra = _extra_buffers(r)
            if slot - 1 >= len(extra):
                raise CorruptFileError(f"no global buffer {slot}", path=r.path)
            old_nulls = bm.decode_tree_map(extra[slot - 1])
            nulls.append(old_nulls[keep(old_nulls)])
    if stable and olds:  # stable row ids: an old bitmap loses single rows, decode them
        filtered = [t if keep is None else _filter_bitmaps(t, keep) for t, keep in key_groups_in]
        keys, groups = bm.merge_bitmap_tables(filtered)
        if not groups:
            keys = pa.array([], spec.value_type)
        schema = bm.bitmap_schema(spec.value_type, label_list, len(groups))
        table = bm.bitmap_table(keys, groups, schema)
    else:  # by address: parts and old segments join by fragment entries, nothing decoded
        old_tables = [t for t, _ in key_groups_in[len(tables):]]
        sources = [(t, None) for t in tables]
        sources += [(t, _retained_fragments(ds, o)) for t, o in zip(old_tables, olds, strict=True)]
        keys, blobs = bm.merge_bitmap_blobs(sources)
        if keys is None:
            keys = pa.array([], spec.value_type)
        schema = bm.bitmap_schema(spec.value_type, label_list, len(blobs))
        table = pa.Table.from_arrays([keys.cast(spec.value_type), pa.array(blobs, pa.binary())],
                                     schema=schema)
    extra = []
    if label_list:
        all_nulls = np.unique(np.concatenate(nulls)) if nulls else np.zeros(0, np.uint64)
        extra = [bm.encode_tree_map(all_nulls.astype(np.uint64))]
    size = _write(ds.store, f"{dst}/{bm.BITMAP_FILE}", table, spec.file_version, extra)
    return [(bm.BITMAP_FILE, size)]


def _filter_bitmaps(table: pa.Table, keep: Any) -> pa.Table:
    keys, groups = bm.merge_bitmap_tables([table], keep)
    if not groups:
        return table.slice(0, 0)
    return bm.bitmap_table(keys, groups, bm.bitmap_schema(table.schema.field("keys").type))


def _merge_ngram(ds: Dataset, spec: MergeSpec, dst: str, olds: list[Any]) -> list[tuple[str, int]]:
    """Union of the parts' and the old segments' postings per token (old rows of fragments
    gone from the dataset dropped, as for BITMAP), streamed in token order: a chunk of
    ``NGRAM_CHUNK_TOKENS`` tokens per source is held at a time."""
    sources = [_pair_chunks(LanceFileReader(f"{dst}/{p}", store=ds.store), None) for p in spec.parts]
    for old in olds:
        store, src = old_dir(ds, old)
        sources.append(_pair_chunks(LanceFileReader(f"{src}/{ng.POSTINGS_FILE}", store=store),
                                    keep_filter(ds, old, ds.uses_stable_row_ids)))
    w = LanceFileWriter(f"{dst}/{ng.POSTINGS_FILE}", ng.SCHEMA, version=spec.file_version, store=ds.store)
    try:
        if len(spec.parts) == 1 and not olds:  # one part: its postings are the segment's
            for batch in LanceFileReader(f"{dst}/{spec.parts[0]}", store=ds.store).iter_batches(
                    batch_rows=NGRAM_CHUNK_TOKENS):
                w.write(batch)
        for tokens, groups in ng.merge_pairs(sources if len(spec.parts) != 1 or olds else []):
            if tokens.size:
                w.write(ng.postings_table(tokens, groups))
        size = w.close()[1]
    except BaseException:
        w.abort()
        raise
    return [(ng.POSTINGS_FILE, size)]


NGRAM_CHUNK_TOKENS = 1024


def _pair_chunks(reader: LanceFileReader, keep: Any) -> Iterator[ng.Pairs]:
    for batch in reader.iter_batches(batch_rows=NGRAM_CHUNK_TOKENS):
        yield ng.table_pairs(pa.Table.from_batches([batch]), keep)


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def _from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def _zone_rows(kind: str, values: pa.Array, fid: int, offsets: np.ndarray,
               params: IndexParams) -> list[tuple]:
    rows = []
    if isinstance(params, sp.ZoneMapParams):
        for part, start, length in zoned.zones(values, offsets, params.rows_per_zone):
            rows.append((*zm.zone_stats(part), fid, start, length))
    else:  # BLOOMFILTER: every zone's filter in one pass over the fragment's hashes
        params = cast(sp.BloomFilterParams, params)
        items = params.number_of_items
        cut = list(zoned.zones(values, offsets, items))
        valid = np.asarray(values.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        zone_of = (np.arange(len(values)) // items)[valid]
        blobs = bf.filters(bf.value_hashes(values), zone_of, len(cut),
                           bf.num_bytes(items, params.probability))
        for (part, start, length), blob in zip(cut, blobs, strict=True):
            rows.append((fid, start, length, part.null_count > 0, blob))
    return rows


def _zoned_part(ds: Dataset, spec: PartSpec, params: IndexParams, ctx: TaskContext) -> Part:
    """Zones of each fragment (zones never span fragments, so parts are independent), and
    the addresses of the live null rows; returned inline (a row per ``rows_per_zone`` rows)."""
    field = ds.schema.field(spec.column)
    value_type = field.type.storage_type if isinstance(field.type, pa.ExtensionType) else field.type
    # pylance's update of a ZONEMAP on a variable-width column (its "seeded" path) zones the
    # new fragments' physical rows, deleted ones included (observed)
    everything = spec.merging and spec.kind == "ZONEMAP" and zm.use_seeds(value_type)
    rows, zone_rows, nulls = 0, [], []
    for fid in spec.fragment_ids:
        batches = list(ds.scan_fragment(int(fid), [spec.column], with_row_address=True, batch_rows=SCAN_ROWS,
                                        include_deleted=everything))
        batches = [b for b in batches if b.num_rows]
        if not batches:
            continue
        values = pa.chunked_array([b.column(0) for b in batches], value_type).combine_chunks()
        addrs = np.concatenate([b.column("_rowaddr").to_numpy() for b in batches]).astype(np.uint64)
        rows += len(addrs)
        offsets = addrs & np.uint64(0xFFFFFFFF)
        zone_rows.extend(_zone_rows(spec.kind, values, int(fid), offsets, params))
        nulls.append(zoned.null_addresses(values, addrs))
    table = _zone_table(spec.kind, zone_rows, value_type, params)
    null_ids = np.concatenate(nulls) if nulls else np.zeros(0, np.uint64)
    if spec.kind == "BLOOMFILTER":  # filters are big (32 KiB per zone by default): a part file
        rel = f"{segment_dir(spec.new_uuid)}/{ctx.file_prefix}_part.lance"
        _write(ds.store, rel, table, spec.file_version, [bm.encode_tree_map(np.sort(null_ids))])
        return Part(rel.rsplit("/", 1)[1], rows)
    return Part(None, rows, _pack(table, null_ids))


def _pack(table: pa.Table, null_ids: np.ndarray) -> bytes:
    body = _ipc(table)
    nulls = bm.encode_tree_map(np.sort(null_ids))
    return len(body).to_bytes(8, "little") + body + nulls


def _unpack(data: bytes) -> tuple[pa.Table, np.ndarray]:
    n = int.from_bytes(data[:8], "little")
    return _from_ipc(data[8:8 + n]), bm.decode_tree_map(data[8 + n:])


def _zone_table(kind: str, rows: list[tuple], value_type: pa.DataType, params: IndexParams) -> pa.Table:
    if isinstance(params, sp.ZoneMapParams):
        return zm.table(rows, value_type, params.rows_per_zone)
    if isinstance(params, sp.BloomFilterParams):
        return bf.table(rows, params.number_of_items, params.probability)
    raise UnsupportedError(f"building {kind} index segments is not supported")


def _merge_zoned(ds: Dataset, spec: MergeSpec, dst: str, olds: list[Any], params: IndexParams
                 ) -> list[tuple[str, int]]:
    tables, nulls = [], []
    for old in olds:
        store, src = old_dir(ds, old)
        r = LanceFileReader(f"{src}/{ZONED_FILE[spec.kind]}", store=store)
        tables.append(r.read())  # pylance keeps every old zone, of removed fragments too
        extra = _extra_buffers(r)
        if extra:
            nulls.append(bm.decode_tree_map(extra[0]))
    for payload in spec.payloads:
        t, n = _unpack(payload)
        tables.append(t)
        nulls.append(n)
    for p in spec.parts:
        r = LanceFileReader(f"{dst}/{p}", store=ds.store)
        tables.append(r.read())
        nulls.append(bm.decode_tree_map(_extra_buffers(r)[0]))
    out = _zone_table(spec.kind, [], spec.value_type, params)
    if tables:
        merged = pa.concat_tables([t.cast(out.schema) for t in tables])
        out = merged.replace_schema_metadata(out.schema.metadata)
    all_nulls = np.unique(np.concatenate(nulls)) if nulls else np.zeros(0, np.uint64)
    name = ZONED_FILE[spec.kind]
    size = _write(ds.store, f"{dst}/{name}", out, spec.file_version, [bm.encode_tree_map(all_nulls)])
    return [(name, size)]


ZONED_FILE = {"ZONEMAP": zm.ZONEMAP_FILE, "BLOOMFILTER": bf.BLOOMFILTER_FILE}


def _rtree_part(ds: Dataset, spec: PartSpec, rel: str, by_address: bool) -> Part:
    """Each live row's bounding box (a part file of xmin, ymin, xmax, ymax, id; unsorted) and
    the null rows' ids (global buffer 1); empty geometries are left out, as pylance."""
    rows, box, ids, nulls = _rtree_data(ds, spec, by_address)
    if not rows:
        return Part(None, 0)
    cols = [pa.array(box[:, i], pa.float64()) for i in range(4)]
    cols.append(pa.array(ids, pa.uint64()))
    table = pa.Table.from_arrays(cols, schema=rt.PART_SCHEMA)
    _write(ds.store, rel, table, spec.file_version, [bm.encode_tree_map(np.sort(nulls))])
    return Part(rel.rsplit("/", 1)[1], rows)


def _rtree_data(ds: Dataset, spec: PartSpec, by_address: bool
                ) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """(rows read, item boxes [n, 4], item ids, null ids) of the spec's fragments."""
    geo = rt.check_field(ds.schema.field(spec.column))
    rows, boxes, ids, nulls = 0, [], [], []
    for col, row_ids in _scan(ds, spec, by_address):
        rows += len(row_ids)
        b, valid = rt.bounding_boxes(col, geo)
        b, i, n = rt.split_items(b, valid, row_ids)
        boxes.append(b)
        ids.append(i)
        nulls.append(n)
    return (rows, _cat(boxes, np.zeros((0, 4))), _cat(ids, np.zeros(0, np.uint64)),
            _cat(nulls, np.zeros(0, np.uint64)))


def _cat(pieces: list[np.ndarray], empty: np.ndarray) -> np.ndarray:
    """The pieces as one array (the piece itself when there is one: no copy)."""
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces) if pieces else empty


def _merge_rtree(ds: Dataset, spec: MergeSpec, dst: str, olds: list[Any], page_size: int,
                 inline: tuple = ()) -> list[tuple[str, int]]:
    """pylance 14's RTREE build / update: every old item kept (of deleted rows and removed
    fragments too), the parts' added, all sorted by Hilbert value over the union of the old
    segments' stored ``bbox`` and the new items' box; nulls united."""
    boxes, ids, nulls = [], [], []
    total = rt.total_box(np.zeros((0, 4)))
    for i, old in enumerate(olds):
        store, src = old_dir(ds, old)
        r = LanceFileReader(f"{src}/{rt.PAGE_DATA}", store=store)
        meta = rt.read_meta(r.schema, r.path)
        if i == 0:
            page_size = meta["page_size"]  # pylance's update keeps the old segment's page size
        b, n = rt.leaf_rows(r.read(), meta["num_items"])
        boxes.append(b)
        ids.append(n)
        total = rt.union_box(total, meta["bbox"])
        nr = LanceFileReader(f"{src}/{rt.NULLS}", store=store).read()
        if nr.num_rows:
            nulls.append(bm.decode_tree_map(nr.column(0)[0].as_py()))
    new_boxes = []
    for p in spec.parts:
        r = LanceFileReader(f"{dst}/{p}", store=ds.store)
        t = r.read()
        new_boxes.append(np.column_stack([t.column(n).to_numpy() for n in ("xmin", "ymin", "xmax", "ymax")]))
        ids.append(t.column("id").to_numpy().astype(np.uint64))
        nulls.append(bm.decode_tree_map(_extra_buffers(r)[0]))
    for box, item_ids, null_ids in inline:  # a fused task's part, in memory
        new_boxes.append(box)
        ids.append(item_ids)
        nulls.append(null_ids)
    for box in new_boxes:
        total = rt.union_box(total, rt.total_box(box))
    all_boxes = _cat(boxes + new_boxes, np.zeros((0, 4)))
    all_ids = _cat(ids, np.zeros(0, np.uint64))
    table = rt.build(all_boxes, all_ids, total, page_size)
    size = _write(ds.store, f"{dst}/{rt.PAGE_DATA}", table, spec.file_version)
    all_nulls = np.unique(np.concatenate(nulls)) if nulls else np.zeros(0, np.uint64)
    blob = bm.encode_tree_map(all_nulls.astype(np.uint64))
    nulls_table = pa.Table.from_arrays([pa.array([blob], pa.binary())], schema=rt.NULLS_SCHEMA)
    nulls_size = _write(ds.store, f"{dst}/{rt.NULLS}", nulls_table, spec.file_version)
    return [(rt.PAGE_DATA, size), (rt.NULLS, nulls_size)]


def _minhash_part(ds: Dataset, spec: PartSpec, rel: str, by_address: bool) -> Part:
    """The signatures of the live rows that have tokens, in scan order (a part file of
    ``_rowid`` and ``signature``; the merge task numbers the docs and writes the bands)."""
    rows, ids, sigs = _minhash_data(ds, spec, by_address)
    if not rows:
        return Part(None, 0)
    table = mh.signature_table(ids, sigs, "")
    _write(ds.store, rel, table.replace_schema_metadata(None), spec.file_version)
    return Part(rel.rsplit("/", 1)[1], rows)


def _minhash_data(ds: Dataset, spec: PartSpec, by_address: bool) -> tuple[int, np.ndarray, np.ndarray]:
    """(rows read, ids of the rows with a signature, their signatures) of the spec's fragments."""
    params = cast(mh.MinHashParams, spec.params)
    analyzer = Analyzer(mh.analyzer_params(params))
    gen = mh.Generator.of(params.num_hashes)
    rows, ids, sigs = 0, [], []
    for col, row_ids in _scan(ds, spec, by_address):
        rows += len(row_ids)
        col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        docs, sig = mh.sign(col, analyzer, params.shingle_size, gen)
        ids.append(row_ids[docs])
        sigs.append(sig)
    k = params.num_hashes
    return (rows, np.concatenate(ids) if ids else np.zeros(0, np.uint64),
            np.concatenate(sigs) if sigs else np.zeros((0, k), np.uint16))


def _merge_minhash(ds: Dataset, spec: MergeSpec, dst: str, olds: list[Any], params: mh.MinHashParams,
                   inline: tuple = ()) -> list[tuple[str, int]]:
    """pylance 14's MINHASHLSH build / update: the old segments' signatures it keeps
    (``keep_filter``: by address every row of fragments still there, by stable row id their live
    rows), in their order, then the parts' in fragment order; doc ids are row numbers, the bands
    computed again from the signatures."""
    k = params.num_hashes
    ids, sigs = [], []
    for old in olds:
        store, src = old_dir(ds, old)
        t = LanceFileReader(f"{src}/{mh.SIGNATURES}", store=store).read()
        keep = keep_filter(ds, old, ds.uses_stable_row_ids)
        old_ids = t.column("_rowid").to_numpy().astype(np.uint64)
        mask = keep(old_ids)
        ids.append(old_ids[mask])
        sigs.append(mh.signature_matrix(t.column("signature"), k)[mask])
    for p in spec.parts:
        t = LanceFileReader(f"{dst}/{p}", store=ds.store).read()
        ids.append(t.column("_rowid").to_numpy().astype(np.uint64))
        sigs.append(mh.signature_matrix(t.column("signature"), k))
    for part_ids, part_sigs in inline:  # a fused task's part, in memory
        ids.append(part_ids)
        sigs.append(part_sigs)
    all_ids = np.concatenate(ids) if ids else np.zeros(0, np.uint64)
    all_sigs = np.concatenate(sigs) if sigs else np.zeros((0, k), np.uint16)
    return write_minhash(ds.store, dst, all_ids, all_sigs, params, spec.file_version)


def write_minhash(store: ObjectStore, dst: str, ids: np.ndarray, sigs: np.ndarray, params: mh.MinHashParams,
                  file_version: str) -> list[tuple[str, int]]:
    """``signatures.lance`` and ``bands.lance`` of the docs (row ids, signatures) in order. The
    bands are keyed and sorted in a second thread while the signatures are written (the
    kernels release the GIL; the merge is its stage's only task)."""
    details_hex = mh.details(params).hex()
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(mh.bands_table, sigs, params.num_bands, details_hex)
        size = _write(store, f"{dst}/{mh.SIGNATURES}", mh.signature_table(ids, sigs, details_hex),
                      file_version)
        bands, page_table = pending.result()
    bands_size = _write(store, f"{dst}/{mh.BANDS}", bands, file_version, [page_table])
    return [(mh.SIGNATURES, size), (mh.BANDS, bands_size)]


FINAL_FILES = {"BTREE": (bt.PAGE_DATA, bt.PAGE_LOOKUP), "BITMAP": (bm.BITMAP_FILE,),
               "LABEL_LIST": (bm.BITMAP_FILE,), "NGRAM": (ng.POSTINGS_FILE,),
               "ZONEMAP": (zm.ZONEMAP_FILE,), "BLOOMFILTER": (bf.BLOOMFILTER_FILE,),
               "RTREE": rt.FILES, "MINHASHLSH": mh.FILES}
