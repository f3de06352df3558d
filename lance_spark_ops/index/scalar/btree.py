"""BTREE index files and their remap (no I/O).

``page_data.lance``: columns ``values`` (the indexed column's type) and ``ids`` (``row_ids``
in files of pylance <= 0.2x; uint64 not null, row addresses; row ids under stable row ids at
index_version 0), sorted by value;
``page_lookup.lance``: one row per page of ``batch_size`` rows of page_data (``min``, ``max``
over the page's non-null values, ``null_count`` uint32, ``page_idx`` uint32), schema metadata
``batch_size`` and ``range_partitioned``. pylance 14 reads page i as rows
``[i * batch_size, (i + 1) * batch_size)``; its remap drops deleted rows, rewrites addresses and
cuts the pages again (observed: 10000 rows, 10% deleted -> 9000 rows, lookup mins 0 / 4551 / 9102).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_spark_ops.errors import CorruptFileError, UnsupportedError
from lance_spark_ops.index.address_map import RowAddressMap

PAGE_DATA = "page_data.lance"
PAGE_LOOKUP = "page_lookup.lance"
DEFAULT_BATCH_SIZE = 4096


def batch_size_of(lookup_schema: pa.Schema) -> int:
    meta = lookup_schema.metadata or {}
    raw = meta.get(b"batch_size")
    try:
        return int(raw) if raw is not None else DEFAULT_BATCH_SIZE
    except ValueError as e:
        raise CorruptFileError(f"{PAGE_LOOKUP}: batch_size {raw!r} is not an integer") from e


def check_not_range_partitioned(lookup_schema: pa.Schema, path: str) -> None:
    """Refuse a range-partitioned BTREE (``range_partitioned: true``, pages split over
    per-range files with ``page_num_per_range_partition``): pylance 14's Python API never
    writes one, so its remap could not be checked against the oracle. The job fails typed and
    the dataset stays as it was."""
    meta = lookup_schema.metadata or {}
    if meta.get(b"range_partitioned", b"false").lower() not in (b"false", b""):
        raise UnsupportedError(f"{path}: range-partitioned BTREE indices cannot be remapped")


def remap_page_data(page_data: pa.Table, amap: RowAddressMap) -> pa.Table:
    """Rows of moved rows get their new address, deleted rows go; order is kept."""
    if page_data.schema.names[:2] not in (["values", "ids"], ["values", "row_ids"]):
        raise CorruptFileError(f"{PAGE_DATA}: columns {page_data.schema.names}, expected values, ids")
    # pylance <= 0.2x named the second column row_ids; Lance reads both by position and its
    # remap keeps the names the file has
    ids = page_data.column(1).to_numpy()
    keep, new_ids = amap.apply(ids)
    kept = page_data.filter(pa.array(keep)) if not keep.all() else page_data
    return kept.set_column(1, page_data.schema.field(1), pa.array(new_ids, pa.uint64()))


def page_lookup(page_data: pa.Table, batch_size: int, lookup_schema: pa.Schema) -> pa.Table:
    """The lookup of ``page_data`` cut into pages of ``batch_size`` rows: as pylance 14 writes
    it, ``min`` / ``max`` are a page's first and last value in index order (nulls sort first,
    NaN last: a page starting with a null has a null ``min``, one ending with NaN a NaN ``max``)."""
    cutter = PageCutter(batch_size, lookup_schema)
    cutter.add(page_data.column("values"))
    return cutter.finish()


class PageCutter:
    """``page_lookup`` computed while ``page_data`` streams past in chunks (remapped pages
    written as they come, memory bounded by a chunk), whatever the chunk sizes."""

    def __init__(self, batch_size: int, lookup_schema: pa.Schema) -> None:
        self.batch_size, self.schema = batch_size, lookup_schema
        self.pos = 0
        self.mins: list[pa.Array] = []
        self.maxs: list[pa.Array] = []
        self.nulls = np.zeros(0, np.int64)
        self.last: pa.Array | None = None

    def add(self, values: pa.ChunkedArray | pa.Array) -> None:
        values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
        n, bs, pos = len(values), self.batch_size, self.pos
        if not n:
            return
        vt = self.schema.field("min").type
        first_start = -(-pos // bs) * bs
        starts = np.arange(first_start, pos + n, bs, dtype=np.int64) - pos
        first_end = -(-(pos + 1) // bs) * bs - 1
        ends = np.arange(first_end, pos + n, bs, dtype=np.int64) - pos
        self.mins.append(values.take(pa.array(starts)).cast(vt))
        self.maxs.append(values.take(pa.array(ends)).cast(vt))
        nulls = np.asarray(values.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        pages = (pos + np.flatnonzero(nulls)) // bs
        top = (pos + n - 1) // bs + 1
        if self.nulls.size < top:
            self.nulls = np.concatenate([self.nulls, np.zeros(top - self.nulls.size, np.int64)])
        np.add.at(self.nulls, pages, 1)
        self.last = values.take(pa.array([n - 1])).cast(vt)  # not a slice: pickled small
        self.pos += n

    @classmethod
    def starting_at(cls, batch_size: int, lookup_schema: pa.Schema, pos: int) -> PageCutter:
        """A cutter for rows from global row ``pos`` on (one range of a range-parallel merge):
        it keeps the pages starting and ending in its rows; ``joined`` puts ranges together."""
        cutter = cls(batch_size, lookup_schema)
        cutter.pos = pos
        return cutter

    @classmethod
    def joined(cls, cutters: list[PageCutter]) -> PageCutter:
        """The cutter of consecutive ranges' rows (``cutters`` in row order, none empty)."""
        first = cutters[0]
        out = cls(first.batch_size, first.schema)
        for c in cutters:
            out.mins.extend(c.mins)
            out.maxs.extend(c.maxs)
            if out.nulls.size < c.nulls.size:
                out.nulls = np.concatenate([out.nulls, np.zeros(c.nulls.size - out.nulls.size, np.int64)])
            out.nulls[:c.nulls.size] += c.nulls
            out.last, out.pos = c.last, c.pos
        return out

    def finish(self) -> pa.Table:
        maxs = list(self.maxs)
        if self.pos % self.batch_size and self.last is not None:  # the short last page ends here
            maxs.append(self.last)
        vt = self.schema.field("min").type
        mins = pa.concat_arrays(self.mins) if self.mins else pa.array([], vt)
        maxs_a = pa.concat_arrays(maxs) if maxs else pa.array([], vt)
        pages = len(mins)
        cols = [mins, maxs_a, pa.array(self.nulls[:pages].astype(np.uint32), pa.uint32()),
                pa.array(np.arange(pages, dtype=np.uint32), pa.uint32())]
        return pa.Table.from_arrays(cols, schema=self.schema)


# -- building (issue #27) ----------------------------------------------------------------------
# pylance 14 sorts (value ascending, nulls first, NaN after every number) and breaks ties by
# row id (observed: equal values keep ascending ids), cuts pages of ``batch_size`` rows and
# writes page i's first and last value as the lookup's min / max.

def page_data_schema(value_type: pa.DataType) -> pa.Schema:
    return pa.schema([pa.field("values", value_type, True), pa.field("ids", pa.uint64(), False)])


def lookup_schema(value_type: pa.DataType, batch_size: int = DEFAULT_BATCH_SIZE) -> pa.Schema:
    """``page_lookup.lance``'s schema with pylance's metadata."""
    fields = [pa.field("min", value_type, True), pa.field("max", value_type, True),
              pa.field("null_count", pa.uint32(), False), pa.field("page_idx", pa.uint32(), False)]
    return pa.schema(fields, metadata={"range_partitioned": "false", "batch_size": str(batch_size)})


def sort_run(values: pa.Array | pa.ChunkedArray, ids: np.ndarray) -> pa.Table:
    """One sorted run of page_data rows: by value (nulls first, NaN last), then id."""
    t = pa.table({"values": values, "ids": pa.array(ids, pa.uint64())}).combine_chunks()
    order = _unique_order(t) if t.num_rows > 1 else None
    out = t.take(order if order is not None else index_order(t))
    return out.cast(page_data_schema(out.schema.field("values").type))


def _unique_order(t: pa.Table) -> pa.Array | None:
    """The index order of a numeric column without nulls, NaN or equal values under
    ascending ids, by numpy's unstable sort (~3x faster than the stable one); None when the
    shortcut does not apply (then ties need the stable sort)."""
    values, ids = t.column("values"), t.column("ids").to_numpy()
    plain = _numpy_sortable(values.type)
    if plain is None or values.null_count or pa.types.is_boolean(plain):
        return None
    if not bool(np.all(ids[1:] > ids[:-1])):
        return None
    v = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    v = (v.cast(plain) if plain != v.type else v).to_numpy()
    order = np.argsort(v)
    s = v[order]
    if bool(np.any(s[1:] == s[:-1])) or (s.dtype.kind == "f" and bool(np.isnan(s[-1]))):
        return None  # ties (-0.0 == 0.0 too) or NaN (sorted last by numpy): the general path
    return pa.array(order)


def value_rank(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """0 for nulls, 1 for values, 2 for NaN: the index order's groups (Arrow's own sort puts
    NaN next to the nulls wherever ``null_placement`` puts them)."""
    rank = pc.if_else(pc.is_valid(values), 1, 0).cast(pa.int8())
    if pa.types.is_floating(values.type):
        rank = pc.if_else(pc.fill_null(pc.is_nan(values), False), 2, rank).cast(pa.int8())
    return rank


def index_order(t: pa.Table, ids: str | None = "ids") -> pa.Array:
    """Row order of ``t`` by ``values`` as pylance's index keeps them (nulls, ascending, NaN),
    ties by ``ids`` (when given). Both sorts used are stable, so ids already ascending need
    no sort key; numbers and times sort in numpy (several times faster than Arrow's
    multi-key sort)."""
    values = t.column("values")
    rank = value_rank(values)
    tie = None
    if ids is not None:
        id_np = t.column(ids).to_numpy()
        if id_np.size > 1 and not bool(np.all(id_np[1:] > id_np[:-1])):
            tie = id_np
    plain = _numpy_sortable(values.type)
    if plain is not None:
        if len(values) and not isinstance(values, pa.Array):
            values = values.combine_chunks()
        v = pc.fill_null(values, pa.scalar(0, values.type) if not pa.types.is_boolean(values.type) else False)
        v = v.cast(plain) if plain != values.type else v
        rank_np = rank.to_numpy()
        if tie is None and bool(np.all(rank_np == 1)):  # no null, no NaN: one stable sort
            return pa.array(np.argsort(v.to_numpy(), kind="stable"))
        keys = [v.to_numpy(), rank_np]
        if tie is not None:
            keys.insert(0, tie)
        return pa.array(np.lexsort(keys))
    keyed = t.append_column("_rank", rank)
    keys = [("_rank", "ascending"), ("values", "ascending")]
    if tie is not None:
        keys.append((ids, "ascending"))
    return pc.sort_indices(keyed, sort_keys=keys)


def _numpy_sortable(t: pa.DataType) -> pa.DataType | None:
    """The type whose numpy values sort as ``t`` does, or None (Arrow sorts it)."""
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return t
    if pa.types.is_floating(t) and not pa.types.is_float16(t):
        return t
    if pa.types.is_timestamp(t) or pa.types.is_date64(t) or pa.types.is_time64(t) or pa.types.is_duration(t):
        return pa.int64()
    if pa.types.is_date32(t) or pa.types.is_time32(t):
        return pa.int32()
    return None


def merge_runs(runs: list[Iterator[pa.Table]]) -> Iterator[pa.Table]:
    """k-way merge of sorted runs (each an iterator of sorted chunks, in the order of
    ``sort_run``), streamed: at most one chunk per run is held. Every round finds the
    frontier, the smallest of the held chunks' last rows (nothing unread sorts before it: ids
    are unique, so the order is total), cuts each held chunk at it and sorts only the rows cut
    off, so the sorting work is proportional to the rows, not to rows times runs."""
    held: dict[int, pa.Table] = {}
    for r, it in enumerate(runs):
        chunk = _next_nonempty(it)
        if chunk is not None:
            held[r] = chunk.select(["values", "ids"])
    if len(held) == 1:  # one run: already in order
        (r, chunk), = held.items()
        yield chunk
        for chunk in runs[r]:
            yield chunk.select(["values", "ids"])
        return
    while held:
        order = list(held)
        lasts = pa.concat_tables([held[r].slice(held[r].num_rows - 1) for r in order])
        first = int(index_order(lasts).to_numpy()[0])
        stop = order[first]
        f_values, f_id = lasts.column("values").slice(first, 1), int(lasts.column("ids")[first].as_py())
        out = []
        for r in order:
            chunk = held[r]
            cut = chunk.num_rows if r == stop else _rows_up_to(chunk, f_values, f_id)
            if cut:
                out.append(chunk.slice(0, cut))
            if cut < chunk.num_rows:
                held[r] = chunk.slice(cut)
            else:
                nxt = _next_nonempty(runs[r])
                if nxt is None:
                    del held[r]
                else:
                    held[r] = nxt.select(["values", "ids"])
        if len(out) == 1:
            yield out[0]
            continue
        out.sort(key=lambda c: int(c.column("ids")[0].as_py()))
        yield _merge_sorted(pa.concat_tables(out).combine_chunks())


def _merge_sorted(block: pa.Table) -> pa.Table:
    """Sort a concatenation of sorted pieces (ordered by their first id): a stable sort by
    value alone (adaptive to the pieces' runs) is right unless equal values of two pieces
    then stand in descending id order (pieces whose ids interleave), which is checked, and
    only then are ids sorted on too."""
    merged = block.take(index_order(block, ids=None))
    values, ids = merged.column("values"), merged.column("ids").to_numpy()
    if merged.num_rows < 2:
        return merged
    rank = value_rank(values).to_numpy()
    head, tail = values.slice(0, merged.num_rows - 1), values.slice(1)
    tie = (rank[1:] == rank[:-1]) & (_mask(pc.equal(head, tail)) | (rank[1:] != 1))
    if bool(np.any(tie & (ids[1:] < ids[:-1]))):
        return block.take(index_order(block))
    return merged


def _rows_up_to(chunk: pa.Table, f_value: pa.Array, f_id: int) -> int:
    """How many leading rows of a sorted chunk sort at or before the frontier row."""
    values, ids = chunk.column("values"), chunk.column("ids").to_numpy()
    rank = value_rank(values).to_numpy()
    f_rank = int(value_rank(f_value).to_numpy()[0])
    before = rank < f_rank
    same = rank == f_rank
    if f_rank == 1:  # numbers / strings: by value, ties by id
        fv = f_value[0]
        less, equal = (_mask(op(values, fv)) for op in (pc.less, pc.equal))
        at = same & (less | (equal & (ids <= np.uint64(f_id))))
    else:  # nulls or NaN: ties by id only
        at = same & (ids <= np.uint64(f_id))
    return int(np.count_nonzero(before | at))


def _mask(a: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return np.asarray(pc.fill_null(a, False).to_numpy(zero_copy_only=False), dtype=bool)


def _next_nonempty(it: Iterator[pa.Table]) -> pa.Table | None:
    for chunk in it:
        if chunk.num_rows:
            return chunk
    return None


# -- range-parallel merge (issue #27) ----------------------------------------------------------
# Sorted runs are merged in value ranges, a task per range: keys (rank, value) sampled every
# ``stride`` rows of each run place every range boundary between two samples of each run, so a
# range task reads one window per run, cuts it exactly and knows its first global row (the rows
# of all runs at or before its lower boundary), hence its pages. Boundaries are whole keys, so
# equal values never straddle two ranges.

Key = tuple[int, Any]


def range_mergeable(t: pa.DataType) -> bool:
    """Types whose order numpy keys reproduce (numbers, times; not booleans)."""
    return _numpy_sortable(t) is not None and not pa.types.is_boolean(t)


def sort_keys(values: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(rank, value) per row, lexicographic in index order: rank 0 null, 1 value, 2 NaN;
    value 0 where the rank is not 1."""
    plain = _numpy_sortable(values.type)
    if plain is None:
        raise UnsupportedError(f"no numpy sort keys for {values.type}")
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    rank = value_rank(values).to_numpy(zero_copy_only=False).astype(np.int8)
    v = pc.fill_null(values, pa.scalar(0, values.type)) if values.null_count else values
    v = (v.cast(plain) if plain != v.type else v).to_numpy(zero_copy_only=False)
    if rank.size and not bool(np.all(rank == 1)):
        v = np.where(rank == 1, v, np.zeros(1, v.dtype))
    return rank, v


def sample(values: pa.Array | pa.ChunkedArray, every: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(positions, rank, value) of every ``every``-th row of a sorted run's values."""
    positions = np.arange(0, len(values), every, dtype=np.int64)
    rank, v = sort_keys(values.take(pa.array(positions)))
    return positions, rank, v


def keys_le(rank: np.ndarray, v: np.ndarray, key: Key) -> np.ndarray:
    """Rows whose key sorts at or before ``key``."""
    r, x = key
    return (rank < r) | ((rank == r) & (v <= x))


def pick_bounds(samples: list[tuple[np.ndarray, np.ndarray, int]], n_ranges: int) -> list[Key]:
    """Up to ``n_ranges - 1`` distinct boundary keys cutting the sampled rows (each sample
    standing for ``stride`` rows) into ranges of about equal weight, ascending."""
    if n_ranges < 2 or not samples:
        return []
    rank = np.concatenate([s[0] for s in samples])
    v = np.concatenate([s[1] for s in samples])
    w = np.concatenate([np.full(len(s[0]), s[2], np.int64) for s in samples])
    if not rank.size:
        return []
    order = np.lexsort((v, rank))
    cw = np.cumsum(w[order])
    picks = np.searchsorted(cw, cw[-1] * np.arange(1, n_ranges) / n_ranges)
    out: list[Key] = []
    for p in np.minimum(picks, len(order) - 1):
        key = (int(rank[order[p]]), v[order[p]].item())
        if not out or key != out[-1]:
            out.append(key)
    return out


def window(positions: np.ndarray, rank: np.ndarray, v: np.ndarray, rows: int, lo: Key | None,
           hi: Key | None) -> tuple[int, int]:
    """Rows ``[a, c)`` of a run (sampled at ``positions``) holding every row with
    ``lo < key <= hi``; the rows before ``a`` all sort at or before ``lo``."""
    a, c = 0, rows
    if lo is not None:
        n = int(np.count_nonzero(keys_le(rank, v, lo)))
        a = int(positions[n - 1]) if n else 0
    if hi is not None:
        n = int(np.count_nonzero(keys_le(rank, v, hi)))
        c = int(positions[n]) if n < len(positions) else rows
    return a, max(a, c)


def merge_pieces(pieces: list[pa.Table]) -> pa.Table:
    """One sorted table of sorted pieces (values, ids) whose ids may interleave."""
    pieces = [p for p in pieces if p.num_rows]
    if not pieces:
        raise ValueError("no rows to merge")
    if len(pieces) == 1:
        return pieces[0]
    pieces.sort(key=lambda c: int(c.column("ids")[0].as_py()))
    return _merge_sorted(pa.concat_tables(pieces).combine_chunks())
