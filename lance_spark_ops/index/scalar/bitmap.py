"""BITMAP / LABEL_LIST index file (``bitmap_page_lookup.lance``) and its remap (no I/O).

Columns ``keys`` (the indexed values, or list items for LABEL_LIST) and ``bitmaps`` (binary:
Lance's ``RowIdTreeMap`` of the row addresses holding the key: u32 count, then per fragment
u32 fragment id, u32 n, n bytes of a portable 32-bit roaring bitmap of offsets, n = 0 meaning
the whole fragment, all little-endian); schema metadata
``lance:index_stats`` = ``{"num_bitmaps": n}``; LABEL_LIST files also carry
``lance:label_list_nulls`` = the index of the global buffer holding the RowIdTreeMap of rows
whose list is null (pylance 14 writes 1). A remap rewrites every bitmap through the address
map (deleted rows leave it) and keeps the keys and their order.
"""

from __future__ import annotations

import struct
from array import array
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from lance_spark_ops.errors import CorruptFileError, UnsupportedError
from lance_spark_ops.index.address_map import RowAddressMap
from lance_spark_ops.index.scalar.btree import index_order

BITMAP_FILE = "bitmap_page_lookup.lance"


def remap_bitmaps(table: pa.Table, amap: RowAddressMap) -> pa.Table:
    if table.schema.names[:2] != ["keys", "bitmaps"]:
        raise CorruptFileError(f"{BITMAP_FILE}: columns {table.schema.names}, expected keys, bitmaps")
    blobs = table.column("bitmaps").to_pylist()
    arrays = [decode_tree_map(b) if b else np.zeros(0, np.uint64) for b in blobs]
    sizes = np.array([a.size for a in arrays], dtype=np.int64)
    flat = np.concatenate(arrays) if arrays else np.zeros(0, np.uint64)
    keep, moved = amap.apply(flat)
    owner = np.repeat(np.arange(len(arrays)), sizes)[keep]
    bounds = np.searchsorted(owner, np.arange(len(arrays) + 1))
    out = [None if blobs[i] is None else encode_tree_map(np.sort(moved[bounds[i]:bounds[i + 1]]))
           for i in range(len(arrays))]
    col = pa.array(out, table.schema.field("bitmaps").type)
    return table.set_column(1, table.schema.field("bitmaps"), col)


NULLS_KEY = b"lance:label_list_nulls"


def null_list_buffer(schema: pa.Schema) -> int | None:
    """Index of the global buffer holding the null-list rows (LABEL_LIST), or None."""
    raw = (schema.metadata or {}).get(NULLS_KEY)
    if raw is None:
        return None
    try:
        index = int(raw)
    except ValueError as e:
        raise CorruptFileError(f"{BITMAP_FILE}: {NULLS_KEY.decode()} = {raw!r} is not an integer") from e
    if index < 1:
        raise CorruptFileError(f"{BITMAP_FILE}: {NULLS_KEY.decode()} names global buffer {index}")
    return index


def remap_tree_map(data: bytes, amap: RowAddressMap) -> bytes:
    _, moved = amap.apply(decode_tree_map(data))
    return encode_tree_map(np.sort(moved))


_U32 = struct.Struct("<I")


def decode_tree_map(data: bytes) -> np.ndarray:
    """Row addresses (uint64, ascending) of a serialized ``RowIdTreeMap``."""
    if not data:
        raise CorruptFileError(f"{BITMAP_FILE}: a bitmap does not parse (it is empty)")
    parts = []
    for frag, body in _entries(data):  # one step per fragment
        if not body:
            raise UnsupportedError(f"{BITMAP_FILE}: a bitmap selects all of fragment {frag}; "
                                   "remapping such a selection is not supported")
        try:
            offsets = np.asarray(BitMap.deserialize(body).to_array(), dtype=np.uint64)
        except ValueError as e:
            raise CorruptFileError(f"{BITMAP_FILE}: a bitmap does not parse ({e})") from e
        parts.append((np.uint64(frag) << np.uint64(32)) | offsets)
    return np.concatenate(parts) if parts else np.zeros(0, np.uint64)


def to_bitmap(values: np.ndarray) -> BitMap:
    """A BitMap of uint32 values, built through ``array('I')`` (pyroaring's fast path, ~5x
    faster than from numpy), without run containers: Lance (roaring-rs) writes none."""
    return BitMap(array("I", np.ascontiguousarray(values, dtype=np.uint32).tobytes()), optimize=False)


def encode_tree_map(addrs: np.ndarray) -> bytes:
    """Serialize ascending row addresses as a ``RowIdTreeMap``."""
    frags = (addrs >> np.uint64(32)).astype(np.uint32)
    keys, starts = np.unique(frags, return_index=True)
    bounds = list(starts) + [addrs.size]
    out = [_U32.pack(len(keys))]
    for i, frag in enumerate(keys.tolist()):  # one step per fragment
        offsets = (addrs[bounds[i]:bounds[i + 1]] & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        body = to_bitmap(offsets).serialize()
        out.append(struct.pack("<II", frag, len(body)) + body)
    return b"".join(out)


# -- building (issue #27) ----------------------------------------------------------------------
# pylance 14 writes one row per distinct key (the null key first, then ascending), each with
# the RowIdTreeMap of its rows (row addresses, or stable row ids on stable-row-id datasets),
# and ``lance:index_stats`` = the row count as compact JSON. LABEL_LIST indexes list items
# (a null item is the null key), its null lists go to global buffer 1.

STATS_KEY = "lance:index_stats"


def bitmap_schema(key_type: pa.DataType, label_list: bool = False, num_bitmaps: int = 0) -> pa.Schema:
    meta = {STATS_KEY: f'{{"num_bitmaps":{num_bitmaps}}}'}
    if label_list:
        meta[NULLS_KEY.decode()] = "1"
    return pa.schema([pa.field("keys", key_type, True), pa.field("bitmaps", pa.binary(), True)],
                     metadata=meta)


def flatten_labels(lists: pa.Array | pa.ChunkedArray,
                   ids: np.ndarray) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """(items, their rows' ids, ids of the rows whose list is null) of a list column."""
    lists = lists.combine_chunks() if isinstance(lists, pa.ChunkedArray) else lists
    items = pc.list_flatten(lists)
    parents = pc.list_parent_indices(lists).to_numpy()
    nulls = np.asarray(lists.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    return items, ids[parents], ids[nulls]


def key_groups(values: pa.Array | pa.ChunkedArray, ids: np.ndarray) -> tuple[pa.Array, list[np.ndarray]]:
    """Distinct keys in index order (null first, then ascending) and each key's ids, sorted."""
    values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    if len(values) == 0:
        return values.slice(0, 0), []
    enc = pc.dictionary_encode(values, null_encoding="encode")
    dictionary = enc.dictionary
    small = np.uint16 if len(dictionary) <= 1 << 16 else np.int64  # numpy radix-sorts 16 bits
    codes = enc.indices.to_numpy(zero_copy_only=False).astype(small)
    if ids.size > 1 and bool(np.all(ids[1:] > ids[:-1])):
        order = np.argsort(codes, kind="stable")  # ids ascending already: a stable sort keeps them
    else:
        order = np.lexsort((ids, codes))
    sorted_codes, sorted_ids = codes[order], ids[order]
    bounds = np.searchsorted(sorted_codes, np.arange(len(dictionary) + 1).astype(sorted_codes.dtype))
    key_order = index_order(pa.table({"values": dictionary}), ids=None).to_numpy()
    groups = [sorted_ids[bounds[k]:bounds[k + 1]] for k in key_order.tolist()]
    return dictionary.take(pa.array(key_order)), groups


def bitmap_table(keys: pa.Array, groups: list[np.ndarray], schema: pa.Schema) -> pa.Table:
    blobs = [encode_tree_map(np.asarray(g, dtype=np.uint64)) for g in groups]  # one step per key
    return pa.Table.from_arrays([keys.cast(schema.field("keys").type), pa.array(blobs, pa.binary())],
                                schema=schema)


def merge_bitmap_tables(tables: list[pa.Table], keep: Any = None) -> tuple[pa.Array, list[np.ndarray]]:
    """Union of several (keys, bitmaps) tables per key, keys in index order; ``keep(ids)``
    (a boolean mask of the ids to keep) filters every bitmap first."""
    keys, ids = [], []
    for t in tables:
        for key, blob in zip(t.column("keys").chunks, t.column("bitmaps").chunks, strict=True):
            arrays = [decode_tree_map(b) if b else np.zeros(0, np.uint64) for b in blob.to_pylist()]
            sizes = np.array([a.size for a in arrays], dtype=np.int64)
            keys.append(key.take(pa.array(np.repeat(np.arange(len(arrays)), sizes))))
            ids.append(np.concatenate(arrays) if arrays else np.zeros(0, np.uint64))
    if not keys:
        return pa.array([]), []
    flat_keys = pa.concat_arrays(keys)
    flat_ids = np.concatenate(ids)
    if keep is not None:
        mask = keep(flat_ids)
        flat_keys, flat_ids = flat_keys.filter(pa.array(mask)), flat_ids[mask]
    return key_groups(flat_keys, flat_ids)


def _entries(blob: bytes | None) -> list[tuple[int, bytes]]:
    """A serialized ``RowIdTreeMap``'s (fragment, serialized bitmap) entries, undecoded."""
    if not blob:
        return []
    try:
        (count,) = _U32.unpack_from(blob, 0)
        pos, out = 4, []
        for _ in range(count):  # one step per fragment
            frag, size = struct.unpack_from("<II", blob, pos)
            pos += 8
            if pos + size > len(blob):
                raise struct.error("a bitmap runs past the end")
            out.append((frag, bytes(blob[pos:pos + size])))
            pos += size
    except struct.error as e:
        raise CorruptFileError(f"{BITMAP_FILE}: a bitmap does not parse ({e})") from e
    return out


def tree_map_fragments(blob: bytes | None) -> list[int]:
    """The fragment ids a serialized ``RowIdTreeMap`` names (nothing decoded)."""
    return [frag for frag, _ in _entries(blob)]


def _join_entries(entries: list[tuple[int, bytes]]) -> bytes:
    """One ``RowIdTreeMap`` of entries of several maps: entries of distinct fragments are
    kept as they are (their bytes are what ``encode_tree_map`` writes); a fragment held by
    several maps gets the union of its bitmaps, encoded again."""
    by_frag: dict[int, list[bytes]] = {}
    for frag, body in entries:
        by_frag.setdefault(frag, []).append(body)
    out = [_U32.pack(len(by_frag))]
    for frag in sorted(by_frag):  # one step per fragment
        bodies = by_frag[frag]
        if len(bodies) > 1:
            union = BitMap.union(*(BitMap.deserialize(b) for b in bodies))
            bodies = [to_bitmap(np.asarray(union.to_array(), dtype=np.uint32)).serialize()]
        out.append(struct.pack("<II", frag, len(bodies[0])) + bodies[0])
    return b"".join(out)


def merge_bitmap_blobs(sources: list[tuple[pa.Table, Any]]) -> tuple[pa.Array | None, list[bytes]]:
    """Union of several (keys, bitmaps) tables per key without decoding a row address: the
    tables' bitmaps are joined fragment entry by fragment entry (parts cover disjoint
    fragments, so the usual join is a concatenation). Sources are (table, fragments to keep):
    a set drops the entries of other fragments (an old segment's retained ones), None keeps
    all. Keys
    in index order, those left without rows dropped; (None, []) when no key is left."""
    keys = [c for t, _ in sources for c in t.column("keys").chunks]
    blobs = [b for t, _ in sources for c in t.column("bitmaps").chunks for b in c.to_pylist()]
    keeps = [k for t, k in sources for _ in range(t.num_rows)]
    if not blobs:
        return None, []
    all_keys = pa.concat_arrays(keys)
    enc = pc.dictionary_encode(all_keys, null_encoding="encode")
    dictionary = enc.dictionary
    codes = enc.indices.to_numpy(zero_copy_only=False)
    key_order = index_order(pa.table({"values": dictionary}), ids=None).to_numpy()
    rank = np.empty(len(key_order), np.int64)
    rank[key_order] = np.arange(len(key_order))
    grouped: list[list[tuple[int, bytes]]] = [[] for _ in range(len(key_order))]
    for r, blob, keep in zip(rank[codes].tolist(), blobs, keeps, strict=True):  # per key and table
        entries = _entries(blob)
        if keep is not None:
            entries = [e for e in entries if e[0] in keep]
        grouped[r].extend(entries)
    kept = [i for i, g in enumerate(grouped) if g]
    if not kept:
        return None, []
    out_keys = dictionary.take(pa.array(key_order[kept]))
    return out_keys, [_join_entries(grouped[i]) for i in kept]
