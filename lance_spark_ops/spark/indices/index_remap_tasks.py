"""Index remap task: rewrite one index's files through a compaction's old -> new row-address
map into ``_indices/<new uuid>/`` and describe the result as a ``RewrittenIndex``.

Per type: BTREE page data streamed; BITMAP / LABEL_LIST / NGRAM posting bitmaps mapped; IVF
storage rewritten (HNSW graphs rebuilt by further tasks); INVERTED partition by partition -
this library's FTS layout remapped (``index.fts.remap``: what pylance 14's remap writes),
pylance's own layout (FST token set) re-tokenized from the rows its documents list.

The address map travels as the rewrite groups' fragment ids and new row counts only: the
task rebuilds it from the old fragments' deletion vectors at the read version (live rows in
fragment then offset order fill the new fragments in order). FRI versions the index is
behind (``remap_indices``) are applied first. Attempts write the same paths (the new uuid is
chosen by the driver), so a retried or speculative attempt leaves no orphan.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from lance_spark_ops._pb import index_pb2, table_pb2, transaction_pb2
from lance_spark_ops.errors import CorruptFileError, UnsupportedError
from lance_spark_ops.file.reader import LanceFileReader
from lance_spark_ops.file.writer import LanceFileWriter, write_table
from lance_spark_ops.index.actions import IVF_KINDS
from lance_spark_ops.index.address_map import RowAddressMap, new_addresses, surviving_addresses
from lance_spark_ops.index.frag_reuse import version_map
from lance_spark_ops.index.fts.layout import (
    METADATA_FILE,
    doc_file,
    fts_metadata,
    invert_file,
    metadata_schema,
    params_from_metadata,
    remappable_fts_layout,
    retokenizable_fts,
    token_file,
)
from lance_spark_ops.index.fts.remap import remap_partition
from lance_spark_ops.index.fts.tokenizer import check_params as check_tokenizer_params
from lance_spark_ops.index.kinds import index_kind, is_hnsw, uuid_str
from lance_spark_ops.index.scalar.bitmap import BITMAP_FILE, null_list_buffer, remap_bitmaps, remap_tree_map
from lance_spark_ops.index.scalar.btree import (
    PAGE_DATA,
    PAGE_LOOKUP,
    PageCutter,
    batch_size_of,
    check_not_range_partitioned,
    remap_page_data,
)
from lance_spark_ops.index.scalar.ngram import POSTINGS_FILE as NGRAM_FILE
from lance_spark_ops.index.scalar.ngram import remap_postings
from lance_spark_ops.index.vector.ivf import (
    AUX_FILE,
    INDEX_FILE,
    ivf_buffer,
    pq_transposed,
    remap_storage,
    without_partition_ids,
)
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.spark.indices.fts_index_tasks import tokenize_rows, write_partition
from lance_spark_ops.spark.runtime.runner import TaskContext
from lance_spark_ops.spark.runtime.scan_tasks import open_dataset
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.fragment_batch import FragmentBatch

Group = tuple[tuple[int, ...], tuple[tuple[int, int], ...]]  # old fragment ids, new (id, rows)


@dataclass(frozen=True)
class IndexRemapSpec:
    """Picklable: one index to rewrite (its metadata as protobuf bytes)."""

    uri: str
    read_version: int
    index: bytes  # table_pb2.IndexMetadata
    new_uuid: bytes
    groups: tuple[Group, ...] = ()
    reuse_versions: tuple[bytes, ...] = ()  # FragmentReuseIndexDetails.Version to apply first
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)
    kind: str = ""  # the type read from the index's files when its details do not say (pylance <= 5)
    stream_rows: int = 1 << 20  # BTREE page_data rows remapped and written at a time (``Tuning``)
    timestamp: Any = None  # the version's commit time, as the driver opened it (``open_dataset``)


@dataclass(frozen=True)
class GraphWork:
    """What an IVF_HNSW_* remap left to graph tasks: per partition, whether it lost no row
    (its graph is kept) and its row count in the remapped storage."""

    kept: tuple[bool, ...]
    lengths: tuple[int, ...]


@dataclass(frozen=True)
class GraphSpec:
    """Picklable: partitions of one remapped IVF_HNSW_* index whose graphs one task rebuilds
    on the remapped storage already written under the new uuid."""

    uri: str
    read_version: int
    index: bytes  # table_pb2.IndexMetadata (the old index)
    new_uuid: bytes
    partitions: tuple[int, ...]
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class GraphPart:
    """A graph task's output: its file under the new index directory and, per partition in
    file order, (partition, rows, its ``lance:hnsw`` entry)."""

    file: str
    partitions: tuple[tuple[int, int, str], ...]


@dataclass(frozen=True)
class AssembleSpec:
    """Picklable: one index's ``index.idx`` to assemble from the old graphs and graph parts."""

    uri: str
    read_version: int
    index: bytes
    new_uuid: bytes
    kept: tuple[bool, ...]
    parts: tuple[GraphPart, ...]
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)


def address_map(ds: Dataset, groups: tuple[Group, ...]) -> RowAddressMap:
    """The old -> new map of a rewrite of ``groups`` read at ``ds``: every group's pairs sorted
    once together (the groups' old fragments are disjoint; sorting per group and again in
    ``RowAddressMap.concat`` cost ~2x on a 5M-row map)."""
    by_id = ds.fragments_with_ids(i for old_ids, _ in groups for i in old_ids)
    olds, news, all_ids = [], [], []
    # object stores: the old fragments' deletion files in flight together, not one round trip each
    with FragmentBatch(ds, [by_id[i] for old_ids, _ in groups for i in old_ids]).fetched_ahead(data=False):
        for old_ids, new in groups:
            masks = []
            for i in old_ids:
                keep = ds.live_mask(by_id[i])
                masks.append(keep if keep is not None else np.ones(ds.physical_rows(by_id[i]), dtype=bool))
            olds.append(surviving_addresses(old_ids, masks))
            news.append(new_addresses(new))
            if olds[-1].size != news[-1].size:  # per group, as from_pairs checks the whole
                raise ValueError(f"{olds[-1].size} surviving old rows but {news[-1].size} new rows")
            all_ids.extend(old_ids)
    if not olds:
        return RowAddressMap.concat([])
    return RowAddressMap.from_pairs(np.concatenate(olds), np.concatenate(news), all_ids)


def _read(store: ObjectStore, rel: str) -> tuple[pa.Table, str]:
    r = LanceFileReader(rel, store=store)
    return r.read(), r.version


def _out_version(version: str) -> str:
    """The file version a remapped index file is written in: the source's, except that index
    files of pylance <= 0.2x in the legacy v1 container are written as 2.0 (pylance 14 reads
    index files of any version; this library writes no v1 index file)."""
    return "2.0" if version == "0.1" else version


def _write(ds: Dataset, rel: str, table: pa.Table, version: str, extra: list[bytes] | None = None) -> int:
    return write_table(rel, table, _out_version(version), ds.store, extra or ())


def _extra_buffers(reader: LanceFileReader) -> list[bytes]:
    """Global buffers 1.. of a file, raw."""
    gb = reader.metadata.global_buffers.tolist()[1:]
    return [bytes(b) for b in reader.read_raw_ranges([(int(p), int(n)) for p, n in gb])] if gb else []


def _remap_btree(ds: Dataset, src_store: ObjectStore, src: str, dst: str,
                 maps: list[RowAddressMap], stream_rows: int) -> list[tuple[str, int]]:
    """page_data.lance streamed through the maps in chunks of ``stream_rows`` rows
    (memory bounded by a chunk, whatever the index's size), the lookup cut as it passes."""
    lookup_reader = LanceFileReader(f"{src}/{PAGE_LOOKUP}", store=src_store)
    check_not_range_partitioned(lookup_reader.schema, lookup_reader.path)
    reader = LanceFileReader(f"{src}/{PAGE_DATA}", store=src_store)
    cutter = PageCutter(batch_size_of(lookup_reader.schema), lookup_reader.schema)
    w = LanceFileWriter(f"{dst}/{PAGE_DATA}", reader.schema, version=_out_version(reader.version),
                        store=ds.store)
    try:
        for batch in reader.iter_batches(batch_rows=stream_rows):
            data = pa.Table.from_batches([batch])
            for m in maps:
                data = remap_page_data(data, m)
            if data.num_rows:
                w.write(data)
                cutter.add(data.column("values"))
        size = w.close()[1]
    except BaseException:
        w.abort()
        raise
    lookup_size = _write(ds, f"{dst}/{PAGE_LOOKUP}", cutter.finish(), lookup_reader.version)
    return [(PAGE_DATA, size), (PAGE_LOOKUP, lookup_size)]


def _remap_ivf(ds: Dataset, src_store: ObjectStore, src: str, dst: str, maps: list[RowAddressMap],
               hnsw: bool) -> tuple[list[tuple[str, int]], GraphWork | None]:
    """IVF_FLAT / IVF_PQ / IVF_SQ: auxiliary.idx rewritten, index.idx copied. IVF_HNSW_*: only
    auxiliary.idx here; the graphs are rebuilt on it by graph tasks (``run_graph_build``, as
    Lance rebuilds them) and index.idx assembled after (``run_graph_assemble``): the work
    left is returned."""
    reader = LanceFileReader(f"{src}/{AUX_FILE}", store=src_store)
    table, extra = reader.read(), _extra_buffers(reader)
    slot = ivf_buffer(reader.schema) - 1
    if slot >= len(extra):
        raise CorruptFileError(f"{AUX_FILE}: no global buffer {slot + 1}", path=reader.path)
    ivf = index_pb2.IVF.FromString(extra[slot])
    table = without_partition_ids(table, ivf)
    old_lengths = list(ivf.lengths)
    transposed = pq_transposed(reader.schema)
    for m in maps:
        table, ivf = remap_storage(table, ivf, m, transposed)
    extra[slot] = ivf.SerializeToString()
    if hnsw:
        from lance_spark_ops.index.vector.vector_space import rebuilt_storage_schema

        table = table.replace_schema_metadata(rebuilt_storage_schema(table.schema).metadata)
    size = _write(ds, f"{dst}/{AUX_FILE}", table, reader.version, extra)
    if hnsw:  # a remap only drops rows: a partition of unchanged length lost none
        kept = tuple(a == b for a, b in zip(ivf.lengths, old_lengths, strict=True))
        return [(AUX_FILE, size)], GraphWork(kept, tuple(int(n) for n in ivf.lengths))
    body = src_store.read(f"{src}/{INDEX_FILE}")
    ds.store.write(f"{dst}/{INDEX_FILE}", body)
    return [(AUX_FILE, size), (INDEX_FILE, len(body))], None


def _remap_fts(ds: Dataset, src_store: ObjectStore, src: str, dst: str, index: Any,
               maps: list[RowAddressMap], n_reuse: int) -> list[tuple[str, int]]:
    """An INVERTED index, partition by partition (memory bounded by one partition), under the
    same partition ids and params: this library's layout remapped (``remap_partition``);
    pylance's own (FST token set, format 2) re-tokenized from the rows its docs list, as the
    FTS builder's merge does (``retokenizable_fts`` says when; the first ``n_reuse`` maps are
    the fragment reuse index's, leading to the rows of the read version)."""
    meta_reader = LanceFileReader(f"{src}/{METADATA_FILE}", store=src_store)
    meta = fts_metadata(meta_reader.schema.metadata)
    ours = remappable_fts_layout(meta)
    stored = params_from_metadata(meta, meta_reader.path)
    try:
        part_ids = [int(p) for p in json.loads(meta.get("partitions", "[]"))]
    except (ValueError, TypeError) as e:
        raise CorruptFileError(f"{meta_reader.path}: 'partitions' is not a JSON list of ids: {e}") from None
    column = None
    if not ours:
        why = retokenizable_fts(meta, _deleted_fragments(meta_reader) if "deleted_fragments" in
                                meta_reader.schema.names else b"")
        if why:
            raise UnsupportedError(f"{meta_reader.path}: {why}")
        params = check_tokenizer_params(stored)
        column = _column_of(ds, index)
    out = []
    for pid in part_ids:
        if ours:
            readers = {n: LanceFileReader(f"{src}/{n}", store=src_store)
                       for n in (doc_file(pid), token_file(pid), invert_file(pid))}
            tables = remap_partition(*(r.read() for r in readers.values()), maps, where=f"{src}/part_{pid}")
            for (name, r), table in zip(readers.items(), tables, strict=True):
                out.append((name, _write(ds, f"{dst}/{name}", table, r.version)))
            continue
        docs = LanceFileReader(f"{src}/{doc_file(pid)}", store=src_store)
        addrs = docs.read().column("_rowid").to_numpy().astype(np.uint64)
        for m in maps[:n_reuse]:
            addrs = m.apply(addrs)[1]
        frags = np.unique(addrs >> np.uint64(32)).astype(np.int64)
        missing = sorted(set(frags.tolist()) - {f.id for f in ds.fragments})
        if missing:
            raise UnsupportedError(f"{docs.path}: rows of fragments {missing[:5]} no longer in the dataset "
                                   "cannot be re-tokenized")
        tk = tokenize_rows(ds, column, params, False, [(int(f), None, None) for f in frags], np.sort(addrs))
        for m in maps[n_reuse:]:
            keep, new = m.apply(tk.row_ids)
            tk = tk.only_docs(keep, new)
        out.extend(write_partition(ds, dst, pid, tk, params.with_position, docs.version))
    w = LanceFileWriter(f"{dst}/{METADATA_FILE}", metadata_schema(part_ids, meta["params"]),
                        version=meta_reader.version, store=ds.store)
    try:
        out.append((METADATA_FILE, w.close()[1]))
    except BaseException:
        w.abort()
        raise
    return out


def _deleted_fragments(reader: LanceFileReader) -> bytes:
    """pylance's ``deleted_fragments`` (a serialized roaring bitmap) of an FTS metadata file."""
    col = reader.read().column("deleted_fragments").to_pylist()
    return b"".join(bytes(v or b"") for v in col[:1])


def _remap_minhash(ds: Dataset, src_store: ObjectStore, src: str, dst: str, index: Any,
                   maps: list[RowAddressMap]) -> list[tuple[str, int]]:
    """MINHASHLSH as pylance 14 remaps it: the signatures of the surviving rows, in their order,
    under their new addresses; doc ids renumbered and the bands written again."""
    from lance_spark_ops.index.scalar import minhash as mh
    from lance_spark_ops.spark.indices.scalar_index_tasks import write_minhash

    params = mh.parse_details(bytes(index.index_details.value))
    reader = LanceFileReader(f"{src}/{mh.SIGNATURES}", store=src_store)
    table = reader.read()
    ids = table.column("_rowid").to_numpy().astype(np.uint64)
    sigs = mh.signature_matrix(table.column("signature"), params.num_hashes)
    for m in maps:
        keep, ids = m.apply(ids)
        sigs = sigs[keep]
    return write_minhash(ds.store, dst, ids, sigs, params, _out_version(reader.version))


def _column_of(ds: Dataset, index: Any) -> str:
    fid = index.fields[0] if index.fields else None
    name = next((f.name for f in ds.lance_schema.fields if f.id == fid), None)
    if name is None:
        raise UnsupportedError(f"index {index.name!r}: field id {fid} is not a top-level column")
    return name


def run_index_remap(spec: IndexRemapSpec, ctx: TaskContext) -> bytes | tuple[bytes, GraphWork]:
    """Executor entry point; returns a serialized ``Transaction.Rewrite.RewrittenIndex`` (for an
    IVF_HNSW_* index: and the graph work left, ``index.idx`` not yet listed)."""
    ds = open_dataset(spec.uri, spec.read_version, spec.storage_options, spec.timestamp)
    index = table_pb2.IndexMetadata.FromString(spec.index)
    version_pb = table_pb2.FragmentReuseIndexDetails.Version
    maps = [version_map(version_pb.FromString(v)) for v in spec.reuse_versions]
    if spec.groups:
        maps.append(address_map(ds, spec.groups))
    src_store, src = _old_index_dir(ds, index)
    dst = f"_indices/{uuid_str(spec.new_uuid)}"
    kind = spec.kind or index_kind(index)
    files: list[tuple[str, int]] = []
    work = None
    if kind == "BTREE":
        files.extend(_remap_btree(ds, src_store, src, dst, maps, spec.stream_rows))
    elif kind in ("BITMAP", "LABEL_LIST"):
        reader = LanceFileReader(f"{src}/{BITMAP_FILE}", store=src_store)
        table, extra = reader.read(), _extra_buffers(reader)
        nulls = null_list_buffer(reader.schema)
        for m in maps:
            table = remap_bitmaps(table, m)
            if nulls is not None:
                extra[nulls - 1] = remap_tree_map(extra[nulls - 1], m)
        files.append((BITMAP_FILE, _write(ds, f"{dst}/{BITMAP_FILE}", table, reader.version, extra)))
    elif kind == "INVERTED":
        files.extend(_remap_fts(ds, src_store, src, dst, index, maps, len(spec.reuse_versions)))
    elif kind == "NGRAM":
        reader = LanceFileReader(f"{src}/{NGRAM_FILE}", store=src_store)
        table = reader.read()
        for m in maps:
            table = remap_postings(table, m)
        size = _write(ds, f"{dst}/{NGRAM_FILE}", table.cast(reader.schema), reader.version)
        files.append((NGRAM_FILE, size))
    elif kind == "MINHASHLSH":
        files.extend(_remap_minhash(ds, src_store, src, dst, index, maps))
    elif kind in IVF_KINDS:
        ivf_files, work = _remap_ivf(ds, src_store, src, dst, maps, is_hnsw(kind))
        files.extend(ivf_files)
    else:
        raise UnsupportedError(f"index {index.name!r}: remapping {kind} index files is not supported")
    out = transaction_pb2.Transaction.Rewrite.RewrittenIndex(new_index_version=index.index_version)
    out.old_id.uuid = index.uuid.uuid
    out.new_id.uuid = spec.new_uuid
    if index.HasField("index_details"):
        out.new_index_details.CopyFrom(index.index_details)
    out.new_index_files.extend(table_pb2.IndexFile(path=p, size_bytes=n) for p, n in files)
    return out.SerializeToString() if work is None else (out.SerializeToString(), work)


def _old_index_dir(ds: Dataset, index: Any) -> tuple[ObjectStore, str]:
    """Where ``index``'s files are: a shallow clone's index lives under the source dataset
    (its base), the remapped one under ours."""
    base = index.base_id if index.HasField("base_id") else None
    return ds.base_resolver.index_dir(uuid_str(index.uuid.uuid), base)


def run_graph_build(spec: GraphSpec, ctx: TaskContext) -> GraphPart:
    """Executor entry point: rebuild the HNSW graphs of ``spec.partitions`` on the remapped
    storage and write their rows, in partition order, to one part file of the new index."""
    from lance_spark_ops.index.vector import hnsw_file
    from lance_spark_ops.index.vector.vector_space import partition_spaces

    ds = Dataset.open(spec.uri, spec.read_version, storage_options=spec.storage_options)
    index = table_pb2.IndexMetadata.FromString(spec.index)
    src_store, src = _old_index_dir(ds, index)
    dst = f"_indices/{uuid_str(spec.new_uuid)}"
    reader = LanceFileReader(f"{dst}/{AUX_FILE}", store=ds.store)
    table, extra = reader.read(), _extra_buffers(reader)
    ivf = index_pb2.IVF.FromString(extra[ivf_buffer(reader.schema) - 1])
    ireader = LanceFileReader(f"{src}/{INDEX_FILE}", store=src_store)
    params = hnsw_file.partition_params(ireader.schema)
    spaces = partition_spaces(table, np.asarray(ivf.lengths, np.int64), table.schema, extra,
                              pq_transposed(reader.schema))
    pieces, done = [], []
    for p in spec.partitions:
        rows, entry = hnsw_file.rebuild_partition(spaces(p), params, p, ireader.schema)
        pieces.append(rows)
        done.append((p, rows.num_rows, entry))
    name = f"_graphs_{spec.partitions[0]}.lance"
    fields = pa.schema([ireader.schema.field(i) for i in range(3)])
    _write(ds, f"{dst}/{name}", pa.concat_tables(pieces).cast(fields), ireader.version)
    return GraphPart(name, tuple(done))


def run_graph_assemble(spec: AssembleSpec, ctx: TaskContext) -> int:
    """Executor entry point: write the new ``index.idx`` from the old graphs of the kept
    partitions and the graph parts, then delete the parts; returns its size."""
    from lance_spark_ops.index.vector import hnsw_file

    ds = Dataset.open(spec.uri, spec.read_version, storage_options=spec.storage_options)
    index = table_pb2.IndexMetadata.FromString(spec.index)
    src_store, src = _old_index_dir(ds, index)
    dst = f"_indices/{uuid_str(spec.new_uuid)}"
    ireader = LanceFileReader(f"{src}/{INDEX_FILE}", store=src_store)
    iextra = _extra_buffers(ireader)
    islot = ivf_buffer(ireader.schema) - 1
    if islot >= len(iextra):
        raise CorruptFileError(f"{INDEX_FILE}: no global buffer {islot + 1}", path=ireader.path)
    old = ireader.read()
    ivf = index_pb2.IVF.FromString(iextra[islot])
    hnsw_file.checked_params(old.schema, spec.kept, ivf)
    built: dict[int, tuple[pa.Table, str]] = {}
    for part in spec.parts:
        rows, at = _read(ds.store, f"{dst}/{part.file}")[0], 0
        for p, n, entry in part.partitions:
            built[p] = (rows.slice(at, n), entry)
            at += n
    graphs, iivf = hnsw_file.assemble(old, ivf, spec.kept, built)
    iextra[islot] = iivf.SerializeToString()
    size = _write(ds, f"{dst}/{INDEX_FILE}", graphs, ireader.version, iextra)
    ds.store.delete_many(f"{dst}/{part.file}" for part in spec.parts)
    return size
