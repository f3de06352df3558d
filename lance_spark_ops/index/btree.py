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

import numpy as np
import pyarrow as pa

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
        self.last = values.slice(n - 1, 1).cast(vt)
        self.pos += n

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
