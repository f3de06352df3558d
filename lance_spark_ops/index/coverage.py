"""The fragments an index holds rows of, read from its own files (Lance's
``calculate_included_frags``): what replaces a fragment bitmap an old writer left missing or
wrong (``table.commit.migrate``).

Row ids are row addresses here (fragment id in the upper 32 bits): the indices whose bitmaps
need recomputing predate stable row ids (the caller refuses a dataset with stable row ids).
One reader per layout, found from the files in the index's directory:

=========================  ============================================================
``page_data.lance``        BTREE: its row id column (streamed)
``bitmap_page_lookup``     BITMAP / LABEL_LIST: the fragment ids of every ``RowIdTreeMap``
``auxiliary.idx``          IVF_* (pylance >= 0.1x): its ``_rowid`` column
``index.idx`` (v1)         IVF_PQ of pylance <= 0.2x: the protobuf ``Index`` its 16-byte
                           footer points at; each partition stores PQ codes then u64 row ids
``docs.lance``             INVERTED of pylance <= 0.2x: its ``_rowid`` column
``part_<n>_docs.lance``    INVERTED (partitioned layout): their ``_rowid`` columns
``zonemap.lance``          ZONEMAP: its ``fragment_id`` column
=========================  ============================================================

Anything else (an HNSW graph in a v1 file, NGRAM, a layout this library does not know) is
refused with UnsupportedError naming the index; Lance itself cannot recompute most of those
either (``unimplemented!``).
"""

from __future__ import annotations

import re
import struct
from typing import Any

import numpy as np
import pyarrow as pa
from pyroaring import BitMap

from lance_spark_ops._pb import index_pb2
from lance_spark_ops.errors import AccessDeniedError, CorruptFileError, LanceError, UnsupportedError
from lance_spark_ops.io.storage import ObjectStore

BTREE_DATA = "page_data.lance"
BITMAP_DATA = "bitmap_page_lookup.lance"
IVF_STORAGE = "auxiliary.idx"
IVF_FILE = "index.idx"
LEGACY_FTS_DOCS = "docs.lance"
ZONEMAP_DATA = "zonemap.lance"
ZONEMAP_KEY = "fragment_id"
_FTS_DOCS = re.compile(r"part_\d+_docs\.lance")
_STREAM_ROWS = 1 << 20  # row ids per batch read (8 MiB)
_V1_FOOTER = 16  # u64 metadata position, u16 major, u16 minor, "LANC"


def fragments_of(row_addresses: np.ndarray) -> BitMap:
    """The fragment ids of row addresses (upper 32 bits)."""
    frags = np.unique(np.asarray(row_addresses, dtype=np.uint64) >> np.uint64(32))
    return BitMap(frags.astype(np.uint32).tolist())


def covered_fragments(store: ObjectStore, where: str, name: str) -> BitMap:
    """Fragments the index in directory ``where`` (relative to ``store``) holds rows of;
    ``name`` is used in errors."""
    from lance_spark_ops.file.reader import LanceFileReader

    try:
        files = set(store.list(where))
    except AccessDeniedError:  # the store refuses us: not a question of the index's layout
        raise
    except LanceError as e:
        raise UnsupportedError(f"index {name!r}: its directory cannot be listed ({e}); its fragment "
                               "bitmap cannot be recomputed", path=store.uri(where)) from e

    def column(rel: str, col: str | int) -> BitMap:
        reader = LanceFileReader(f"{where}/{rel}", store=store)
        names = reader.schema.names
        key = names[col] if isinstance(col, int) else col
        if key not in names:
            raise CorruptFileError(f"{rel}: no column {key!r} (columns {names})", path=store.uri(where))
        out = BitMap()
        for batch in reader.iter_batches([key], batch_rows=_STREAM_ROWS):
            values = batch.column(0)
            if col == ZONEMAP_KEY:
                out |= BitMap(np.unique(np.asarray(values, dtype=np.int64)).astype(np.uint32).tolist())
            else:
                out |= fragments_of(np.asarray(values.cast(pa.uint64())))
        return out

    if BTREE_DATA in files:
        return column(BTREE_DATA, 1)  # "ids" (pylance >= 0.2x) or "row_ids"
    if BITMAP_DATA in files:
        return _bitmap_fragments(LanceFileReader(f"{where}/{BITMAP_DATA}", store=store))
    if IVF_STORAGE in files:
        return column(IVF_STORAGE, "_rowid")
    if ZONEMAP_DATA in files:
        return column(ZONEMAP_DATA, ZONEMAP_KEY)
    docs = sorted(f for f in files if _FTS_DOCS.fullmatch(f))
    if docs or LEGACY_FTS_DOCS in files:
        out = BitMap()
        for rel in docs or [LEGACY_FTS_DOCS]:
            out |= column(rel, "_rowid")
        return out
    if IVF_FILE in files:
        return _v1_ivf_pq_fragments(store, f"{where}/{IVF_FILE}", name)
    raise UnsupportedError(f"index {name!r}: files {sorted(files)} are of a layout whose rows this library "
                           "cannot list; its fragment bitmap cannot be recomputed", path=store.uri(where))


def _bitmap_fragments(reader: Any) -> BitMap:
    """Fragment ids of every serialized ``RowIdTreeMap`` of a BITMAP / LABEL_LIST file (the
    bitmaps column and a LABEL_LIST's null-list buffer); no bitmap is decoded."""
    from lance_spark_ops.index.scalar.bitmap import null_list_buffer, tree_map_fragments

    out = BitMap()
    for batch in reader.iter_batches(["bitmaps"], batch_rows=1 << 14):
        for blob in batch.column(0).to_pylist():
            out.update(tree_map_fragments(blob))
    nulls = null_list_buffer(reader.schema)
    buffers = reader.metadata.global_buffers.tolist()
    if nulls is not None:
        if nulls >= len(buffers):
            raise CorruptFileError(f"{BITMAP_DATA}: no global buffer {nulls}", path=reader.path)
        pos, n = buffers[nulls]
        out.update(tree_map_fragments(reader.read_raw_ranges([(int(pos), int(n))])[0]))
    return out


def read_v1_index(store: ObjectStore, rel: str) -> tuple[index_pb2.Index, int]:
    """The protobuf ``Index`` of a v1 index file, and the file's size. CorruptFileError when
    the file is not one (no ``LANC`` footer of version 0.1, or a message that does not parse)."""
    size = store.size(rel)
    if size < _V1_FOOTER:
        raise CorruptFileError(f"{size} bytes: too short for a v1 index file", path=store.uri(rel))
    tail = store.read_range(rel, size - _V1_FOOTER, _V1_FOOTER)
    pos, major, minor = struct.unpack_from("<QHH", tail)
    if tail[12:] != b"LANC" or (major, minor) != (0, 1) or pos + 4 > size - _V1_FOOTER:
        raise CorruptFileError("not a v1 index file (footer)", path=store.uri(rel))
    (length,) = struct.unpack("<I", store.read_range(rel, pos, 4))
    if pos + 4 + length > size - _V1_FOOTER:
        raise CorruptFileError(f"index message of {length} bytes at {pos} runs past the footer",
                               path=store.uri(rel))
    msg = index_pb2.Index()
    try:
        msg.ParseFromString(store.read_range(rel, pos + 4, length))
    except Exception as e:  # noqa: BLE001 - protobuf's DecodeError and friends
        raise CorruptFileError(f"index message does not parse ({e})", path=store.uri(rel)) from e
    return msg, size


def _v1_ivf_pq_fragments(store: ObjectStore, rel: str, name: str) -> BitMap:
    """Fragments of a v1 IVF_PQ file: partition ``p`` starts at byte ``ivf.offsets[p]`` with
    ``lengths[p] * num_sub_vectors * num_bits / 8`` bytes of PQ codes, then ``lengths[p]`` u64
    row ids (Lance's ``PQIndex::load``)."""
    try:
        msg, size = read_v1_index(store, rel)
    except CorruptFileError as e:
        raise UnsupportedError(f"index {name!r}: {IVF_FILE} is neither a v1 index file nor next to an "
                               f"{IVF_STORAGE} ({e}); its fragment bitmap cannot be recomputed",
                               path=store.uri(rel)) from e
    stages = msg.vector_index.stages
    kinds = [s.WhichOneof("stage") for s in stages]
    if "ivf" not in kinds or kinds[-1] != "pq" or set(kinds) - {"ivf", "pq", "transform"}:
        raise UnsupportedError(f"index {name!r}: a v1 vector index of stages {kinds} (only IVF_PQ is read); "
                               "its fragment bitmap cannot be recomputed", path=store.uri(rel))
    ivf = stages[kinds.index("ivf")].ivf
    pq = stages[-1].pq
    if len(ivf.offsets) != len(ivf.lengths) or pq.num_bits not in (4, 8) or pq.num_sub_vectors == 0:
        raise CorruptFileError(f"IVF_PQ of {len(ivf.offsets)} offsets, {len(ivf.lengths)} lengths, "
                               f"{pq.num_sub_vectors} sub-vectors of {pq.num_bits} bits", path=store.uri(rel))
    out = BitMap()
    for offset, length in zip(ivf.offsets, ivf.lengths, strict=True):
        if length == 0:
            continue
        start = offset + length * pq.num_sub_vectors * pq.num_bits // 8
        if start + 8 * length > size - _V1_FOOTER:
            raise CorruptFileError(f"a partition's {length} row ids at {start} run past the data",
                                   path=store.uri(rel))
        out |= fragments_of(np.frombuffer(store.read_range(rel, start, 8 * length), dtype="<u8"))
    return out
