"""NGRAM index file (``ngram_postings.lance``) and its tokens (no I/O).

What pylance 14 writes: one row per trigram token, ascending (``tokens`` uint32, nullable;
``posting_list`` binary not null, field metadata ``lance-encoding:compression`` = none), each
posting list a serialized ``RoaringTreemap`` of the rows holding the trigram (u64 count of
32-bit high keys, then per key: u32 key and a portable 32-bit roaring bitmap, little-endian).
Rows whose text is null are the posting list of token 0. Rows are named by row address, or by
stable row id on stable-row-id datasets.

Tokens (Lance's ``ngram.rs``): the whole text lower-cased and ASCII-folded (tantivy's
``LowerCaser`` and ``AsciiFoldingFilter``), cut into every character trigram, keeping only
trigrams of ASCII letters and digits; a trigram's token is ``37^2 a + 37 b + c`` with
``0``-``9`` -> 1..10 and ``a``-``z`` -> 11..36. Trigrams are found on the UTF-8 bytes at once:
a window of three ASCII alphanumeric bytes inside one string is exactly such a trigram.
"""

from __future__ import annotations

import struct
import unicodedata
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from lance_spark_ops.errors import CorruptFileError
from lance_spark_ops.index.address_map import RowAddressMap
from lance_spark_ops.index.scalar.bitmap import to_bitmap

POSTINGS_FILE = "ngram_postings.lance"
SPAN = 37
NULL_TOKEN = 0

SCHEMA = pa.schema([
    pa.field("tokens", pa.uint32(), True),
    pa.field("posting_list", pa.binary(), False, metadata={"lance-encoding:compression": "none"}),
])

_CODES = np.zeros(256, np.uint32)
_CODES[ord("0"):ord("9") + 1] = np.arange(1, 11)
_CODES[ord("a"):ord("z") + 1] = np.arange(11, 37)

# letters NFKD does not take apart that tantivy's AsciiFoldingFilter folds (the common ones)
_SPECIAL = str.maketrans({"ß": "ss", "æ": "ae", "œ": "oe", "ø": "o", "đ": "d", "ð": "d", "ł": "l",
                          "þ": "th", "ħ": "h", "ı": "i", "ŀ": "l", "ŉ": "n", "ŧ": "t", "ĸ": "q"})


def fold(text: str) -> str:
    """Lower case, then ASCII folding as tantivy does for Latin letters (NFKD without the
    combining marks, plus the letters in ``_SPECIAL``); other characters stay as they are."""
    text = text.lower().translate(_SPECIAL)
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))


def prepare(values: pa.Array) -> pa.Array:
    """The text the trigrams are cut from: ``utf8_lower``, non-ASCII strings folded (one step
    per non-ASCII string; ASCII strings, the usual case, go through Arrow kernels only)."""
    values = values.cast(pa.large_string()) if not pa.types.is_large_string(values.type) else values
    lower = pc.utf8_lower(values)
    non_ascii = pc.fill_null(pc.invert(pc.string_is_ascii(lower)), False)
    where = np.flatnonzero(np.asarray(non_ascii.to_numpy(zero_copy_only=False), dtype=bool))
    if where.size == 0:
        return lower
    texts = lower.to_pylist()
    for i in where.tolist():
        texts[i] = fold(texts[i])
    return pa.array(texts, pa.large_string())


def token_pairs(values: pa.Array, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(token, id) of every distinct trigram of every row (token 0 for null rows), unsorted."""
    text = prepare(values)
    offsets = np.frombuffer(text.buffers()[1], np.int64, len(text) + 1, text.offset * 8)
    buf = text.buffers()[2]
    data = np.frombuffer(buf, np.uint8) if buf is not None else np.zeros(0, np.uint8)
    start, end = int(offsets[0]), int(offsets[-1])
    codes = _CODES[data[start:end]]
    lengths = np.diff(offsets)
    owner = np.repeat(np.arange(len(text)), lengths)
    tokens = np.zeros(0, np.uint32)
    rows = np.zeros(0, np.int64)
    if codes.size >= 3:
        a, b, c = codes[:-2], codes[1:-1], codes[2:]
        ok = (a > 0) & (b > 0) & (c > 0) & (owner[:-2] == owner[2:])
        tokens = (a * SPAN * SPAN + b * SPAN + c)[ok]
        rows = owner[:-2][ok]
    nulls = np.flatnonzero(np.asarray(text.is_null().to_numpy(zero_copy_only=False), dtype=bool))
    tokens = np.concatenate([tokens, np.full(nulls.size, NULL_TOKEN, np.uint32)])
    rows = np.concatenate([rows, nulls])
    return tokens.astype(np.uint32), ids[rows].astype(np.uint64)


def group_postings(tokens: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Distinct tokens ascending and each one's distinct ids ascending."""
    if tokens.size == 0:
        return np.zeros(0, np.uint32), []
    if ids.size > 1 and bool(np.all(ids[1:] >= ids[:-1])):
        # ids in order already (a scan's pairs): a stable sort of the tokens keeps them so, and
        # every token fits 16 bits (37^3 < 2^16), which numpy radix-sorts
        order = np.argsort(tokens.astype(np.uint16), kind="stable")
    else:
        order = np.lexsort((ids, tokens))
    t, i = tokens[order], ids[order]
    keep = np.ones(t.size, dtype=bool)
    keep[1:] = (t[1:] != t[:-1]) | (i[1:] != i[:-1])
    t, i = t[keep], i[keep]
    uniq, starts = np.unique(t, return_index=True)
    bounds = [*starts.tolist(), t.size]
    return uniq, [i[bounds[k]:bounds[k + 1]] for k in range(uniq.size)]


def encode_treemap(ids: np.ndarray) -> bytes:
    """Serialize ascending u64 ids as a ``RoaringTreemap``."""
    highs = (ids >> np.uint64(32)).astype(np.uint32)
    if highs.size == 0:  # an empty treemap: no blocks
        return struct.pack("<Q", 0)
    if highs[0] == highs[-1]:  # one block (ids ascending): the usual case
        keys, bounds = highs[:1], [0, ids.size]
    else:
        starts = np.concatenate([[0], np.flatnonzero(highs[1:] != highs[:-1]) + 1]).astype(np.int64)
        keys, bounds = highs[starts], [*starts.tolist(), ids.size]
    out = [struct.pack("<Q", len(keys))]
    for k, key in enumerate(keys.tolist()):  # one step per 2^32 block of ids
        low = (ids[bounds[k]:bounds[k + 1]] & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        out.append(struct.pack("<I", key) + to_bitmap(low).serialize())
    return b"".join(out)


def decode_treemap(data: bytes) -> np.ndarray:
    """Ids (uint64, ascending) of a serialized ``RoaringTreemap``."""
    try:
        (count,) = struct.unpack_from("<Q", data, 0)
        pos, parts = 8, []
        view = memoryview(data)
        for _ in range(count):
            (key,) = struct.unpack_from("<I", data, pos)
            pos += 4
            bm = BitMap.deserialize(bytes(view[pos:]))
            pos += len(bm.serialize())  # Lance writes no run containers: the same size
            parts.append((np.uint64(key) << np.uint64(32)) | np.asarray(bm.to_array(), dtype=np.uint64))
    except (struct.error, ValueError) as e:
        raise CorruptFileError(f"{POSTINGS_FILE}: a posting list does not parse ({e})") from e
    return np.concatenate(parts) if parts else np.zeros(0, np.uint64)


def postings_table(tokens: np.ndarray, groups: list[np.ndarray]) -> pa.Table:
    blobs = [encode_treemap(g) for g in groups]  # one step per token
    return pa.Table.from_arrays([pa.array(tokens, pa.uint32()), pa.array(blobs, pa.binary())], schema=SCHEMA)


def table_pairs(table: pa.Table, keep: object = None) -> tuple[np.ndarray, np.ndarray]:
    """(token, id) pairs of a postings table, optionally only the ids ``keep(ids)`` selects."""
    tokens = table.column("tokens").to_numpy(zero_copy_only=False)
    lists = [decode_treemap(b) for b in table.column("posting_list").to_pylist()]
    sizes = np.array([x.size for x in lists], dtype=np.int64)
    t = np.repeat(tokens.astype(np.uint32), sizes)
    i = np.concatenate(lists) if lists else np.zeros(0, np.uint64)
    if keep is not None:
        mask = keep(i)
        t, i = t[mask], i[mask]
    order = np.argsort(t, kind="stable")  # sorted already as files are written; cheap then
    return t[order], i[order]


Pairs = tuple[np.ndarray, np.ndarray]  # (tokens, ids) sorted by token


def merge_pairs(sources: list[Iterator[Pairs]]) -> Iterator[tuple[np.ndarray, list[np.ndarray]]]:
    """Postings of several token-sorted sources merged, streamed: every round emits the
    tokens up to the smallest last token any source still to be read holds (no later chunk
    of any source can hold them: a source's tokens are distinct and ascending)."""
    held: dict[int, Pairs] = {}
    for k, src in enumerate(sources):
        chunk = _next_pairs(src)
        if chunk is not None:
            held[k] = chunk
    while held:
        frontier = min(int(t[-1]) for t, _ in held.values())
        out_t, out_i = [], []
        for k in list(held):
            t, i = held[k]
            cut = int(np.searchsorted(t, frontier, side="right"))
            out_t.append(t[:cut])
            out_i.append(i[:cut])
            if cut < t.size:
                held[k] = (t[cut:], i[cut:])
            else:
                chunk = _next_pairs(sources[k])
                if chunk is None:
                    del held[k]
                else:
                    held[k] = chunk
        yield group_postings(np.concatenate(out_t), np.concatenate(out_i))


def _next_pairs(src: Iterator[Pairs]) -> Pairs | None:
    for t, i in src:
        if t.size:
            return t, i
    return None


def remap_postings(table: pa.Table, amap: RowAddressMap) -> pa.Table:
    """A postings table through an old -> new address map, as pylance 14's remap: every
    posting list rewritten (deleted rows leave it), tokens and their order kept, a list left
    empty kept as an empty treemap."""
    if table.schema.names[:2] != ["tokens", "posting_list"]:
        raise CorruptFileError(f"{POSTINGS_FILE}: columns {table.schema.names}, "
                               "expected tokens, posting_list")
    lists = [decode_treemap(b) for b in table.column("posting_list").to_pylist()]
    sizes = np.array([x.size for x in lists], dtype=np.int64)
    flat = np.concatenate(lists) if lists else np.zeros(0, np.uint64)
    keep, moved = amap.apply(flat)
    owner = np.repeat(np.arange(len(lists)), sizes)[keep]
    bounds = np.searchsorted(owner, np.arange(len(lists) + 1))
    blobs = [encode_treemap(np.sort(moved[bounds[i]:bounds[i + 1]])) for i in range(len(lists))]
    return table.set_column(1, table.schema.field("posting_list"), pa.array(blobs, pa.binary()))
