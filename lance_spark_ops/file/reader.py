"""``LanceFileReader``: read any Lance 0.1 (legacy) / 2.0 / 2.1 / 2.2 data file into Arrow.

A legacy (v1) file is recognised by its footer and handed to ``file.legacy.LegacyFileReader``
(same methods); ``legacy=True/False`` skips looking at the footer when the caller knows.

Reads go through the storage layer; decoding is delegated to ``encoding`` (2.1+: page
layouts -> rep/def -> Arrow; 2.0: the fenced-off legacy decoders). Full scans decode
whole pages and never load the search cache; consecutive whole mini-block pages of a column
that share a layout are read in one request and decoded as one (``decode_whole_pages``: a
list column's pages are small, ~65 535 levels, and per-page codec costs would dominate).
``take`` loads each touched page's search
cache once (chunk metadata, repetition index, dictionary) and reads only the chunks or
full-zip ranges that hold the requested rows.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from lance_spark_ops.cache import region
from lance_spark_ops.encoding.layout import PageDecoder
from lance_spark_ops.encoding.layout.miniblock import MiniBlockDecoder, decode_whole_pages
from lance_spark_ops.encoding.page import Fetch, PageData
from lance_spark_ops.errors import (
    CorruptFileError,
    InvalidInputError,
    LanceError,
    UnsupportedError,
)
from lance_spark_ops.file.columns import column_ranges, make_page_decoder, page_fetch, page_layout
from lance_spark_ops.file.metadata import TAIL_READ, WHOLE_FILE_READ, FileMetadata, load_metadata
from lance_spark_ops.file.projection import ColumnSelection
from lance_spark_ops.io.storage import ObjectStore, ScratchBuffer

DEFAULT_BATCH_ROWS = 64 * 1024
SEARCH_CACHE_PAGES = 256
# Fresh mini-block decoders by what they are made of (layout bytes, rows, buffer sizes, file
# version): the pages of many small files of one writer share a few; a page read whole starts
# from a copy of the prototype, its layout checks and batch key done once. Prototypes never decode.
_PROTOTYPES = region("file.decoder_prototypes", max_entries=1024)
_PROTOTYPE_BYTES = 2048  # charged per prototype: a decoder's fields, its layout shared


def _tail_if_current(store: ObjectStore, rel: str) -> tuple[int, bytes] | None:
    """The file's tail as ``load_metadata`` reads it (size, bytes), or None when its footer is
    a v1 (legacy) one: a file of unknown kind is then one tail read, not a footer probe and a
    tail read (two round trips on an object store)."""
    from lance_spark_ops.file.legacy import is_legacy_footer

    size, tail = store.read_tail(rel, TAIL_READ, WHOLE_FILE_READ)
    return None if size >= 16 and is_legacy_footer(tail[-16:]) else (size, tail)


_RANGES = region("file.column_ranges", max_entries=256)


def _column_ranges(schema: pa.Schema, version: str) -> list[tuple[int, int]]:
    """``column_ranges``, remembered for the schema objects ``load_metadata`` shares."""
    key = (id(schema), version)
    hit = _RANGES.get(key)
    if hit is not None and hit[0] is schema:
        return hit[1]
    ranges = column_ranges(schema, version)
    _RANGES.put(key, (schema, ranges), 64 + 32 * len(ranges))  # holds the schema: its id stays unique
    return ranges


class LanceFileReader(ColumnSelection):
    """Reader of one Lance data file.

    >>> r = LanceFileReader("data/0001.lance")            # doctest: +SKIP
    >>> r.version, r.num_rows, r.schema                   # doctest: +SKIP
    >>> r.read(columns=["a"]); r.take([5, 1, 5])          # doctest: +SKIP
    """

    def __new__(cls, uri: str, *, storage_options: dict[str, Any] | None = None,
                store: ObjectStore | None = None, legacy: bool | None = None) -> Any:
        read = None
        if cls is LanceFileReader and legacy is not False:
            st, rel = (store, uri) if store is not None else ObjectStore.for_file(uri, storage_options)
            if not legacy:
                read = _tail_if_current(st, rel)
            if legacy or read is None:
                from lance_spark_ops.file.legacy import LegacyFileReader

                return LegacyFileReader(rel, store=st)
        obj = super().__new__(cls)
        obj._tail_read = read  # handed to ``__init__``'s ``load_metadata``
        return obj

    def __init__(self, uri: str, *, storage_options: dict[str, Any] | None = None,
                 store: ObjectStore | None = None, legacy: bool | None = None) -> None:
        if store is None:
            store, rel = ObjectStore.for_file(uri, storage_options)
        else:
            rel = uri
        self._store = store
        self._rel = rel
        read, self._tail_read = getattr(self, "_tail_read", None), None
        self._meta: FileMetadata = load_metadata(store, rel, read)
        self.path = self._meta.path
        self.schema: pa.Schema = self._meta.arrow_schema or self._meta.schema.to_arrow()
        self._ranges = _column_ranges(self.schema, self.version)
        used = sum(n for _, n in self._ranges)
        if used != self._meta.num_columns:
            raise CorruptFileError(
                f"schema needs {used} columns for file version {self.version} but the file has "
                f"{self._meta.num_columns}",
                path=self.path,
            )
        self._page_starts: dict[int, np.ndarray] = {}
        self._search_cache: OrderedDict[tuple[int, int], PageDecoder] = OrderedDict()
        # object stores: the page buffers of the batch being decoded, read in one go (``_warm``)
        self._segments: list[tuple[int, int, memoryview]] = []
        self._segment_starts: list[int] = []

    # -- properties --------------------------------------------------------
    @property
    def num_rows(self) -> int:
        return self._meta.num_rows

    @property
    def version(self) -> str:
        return self._meta.version

    @property
    def metadata(self) -> FileMetadata:
        return self._meta

    # -- public reads ------------------------------------------------------
    def read(self, columns: Sequence[str] | None = None) -> pa.Table:
        """All rows of the given top-level columns (default: all)."""
        fields = self._field_indices(columns)
        if self.num_rows == 0:
            return self._project_schema(fields).empty_table()
        self._warm(fields, 0, self.num_rows)
        arrays = [self._decode_field_range(i, 0, self.num_rows) for i in fields]
        self._segments = []
        return pa.Table.from_arrays(arrays, schema=self._project_schema(fields))

    def iter_batches(self, columns: Sequence[str] | None = None,
                     batch_rows: int = DEFAULT_BATCH_ROWS, start: int = 0,
                     stop: int | None = None, keep_dictionaries: bool = False) -> Iterator[pa.RecordBatch]:
        """Stream record batches of up to ``batch_rows`` rows of rows ``start..stop`` (default
        all); memory is bounded by the pages overlapping one batch, not by the file.
        ``keep_dictionaries`` (2.1+): dictionary-encoded string / binary leaves stay
        dictionary arrays (``structural.build_array_keeping``); the batch schema then says
        so, each such field marked (``carried_dictionary.mark_field``)."""
        if batch_rows <= 0:
            raise InvalidInputError(f"batch_rows must be positive, got {batch_rows}")
        end = self.num_rows if stop is None else stop
        if not 0 <= start <= end <= self.num_rows:
            raise InvalidInputError(f"row range {start}..{end} is outside a file of {self.num_rows} rows",
                                    path=self.path)
        fields = self._field_indices(columns)
        schema = self._project_schema(fields)
        keep = keep_dictionaries and self.version != "2.0"
        if keep:
            from lance_spark_ops.encoding.carried_dictionary import mark_field
        for lo in range(start, end, batch_rows):
            hi = min(lo + batch_rows, end)
            self._warm(fields, lo, hi)
            if not keep:
                arrays = [self._decode_field_range(i, lo, hi) for i in fields]
                yield pa.RecordBatch.from_arrays(arrays, schema=schema)
                continue
            kept = [self._guard(i, lambda i=i, lo=lo, hi=hi: self._decode_keeping(i, lo, hi)) for i in fields]
            out = [f if bitmap is None else mark_field(f, a, bitmap)
                   for (a, bitmap), f in zip(kept, schema, strict=True)]
            yield pa.RecordBatch.from_arrays([a for a, _ in kept],
                                             schema=pa.schema(out, metadata=schema.metadata))
        self._segments = []

    def take(self, indices: Sequence[int] | np.ndarray | pa.Array,
             columns: Sequence[str] | None = None) -> pa.Table:
        """Rows at ``indices`` (any order, repeats allowed), reading only what they need."""
        idx = np.asarray(indices.to_numpy() if isinstance(indices, (pa.Array, pa.ChunkedArray)) else indices)
        if idx.size and not np.issubdtype(idx.dtype, np.integer):
            raise InvalidInputError(f"take indices must be integers, got {idx.dtype}")
        idx = idx.astype(np.int64, copy=False).ravel()
        if idx.size and (idx.min() < 0 or idx.max() >= self.num_rows):
            bad = int(idx[(idx < 0) | (idx >= self.num_rows)][0])
            raise InvalidInputError(f"row index {bad} out of range for a file of {self.num_rows} rows",
                                    path=self.path)
        fields = self._field_indices(columns)
        schema = self._project_schema(fields)
        if idx.size == 0:
            return schema.empty_table()
        uniq, inverse = np.unique(idx, return_inverse=True)
        arrays = []
        for i in fields:
            arr = self._decode_field_rows(i, uniq)
            arrays.append(arr if len(uniq) == len(idx) and (inverse == np.arange(len(idx))).all()
                          else arr.take(pa.array(inverse)))
        return pa.Table.from_arrays(arrays, schema=schema)

    # -- decoding ----------------------------------------------------------
    def _decode_field_range(self, field_index: int, start: int, stop: int) -> pa.Array:
        return self._guard(field_index, lambda: self._decode(field_index, start, stop, None))

    def _decode_field_rows(self, field_index: int, rows: np.ndarray) -> pa.Array:
        return self._guard(field_index, lambda: self._decode(field_index, 0, 0, rows))

    def _guard(self, field_index: int, fn: Any) -> pa.Array:
        """Give every decoding failure the file and field, and a LanceError type."""
        name = self.schema.field(field_index).name
        try:
            return fn()
        except LanceError as e:
            if e.path:
                raise
            raise type(e)(f"field {name!r}: {e}", path=self.path) from e
        except (ValueError, IndexError, TypeError, KeyError, OverflowError, MemoryError,
                pa.ArrowException, ZeroDivisionError) as e:
            raise CorruptFileError(f"field {name!r}: cannot decode ({type(e).__name__}: {e})",
                                   path=self.path) from e

    def _decode(self, field_index: int, start: int, stop: int, rows: np.ndarray | None) -> pa.Array:
        field = self.schema.field(field_index)
        first, count = self._ranges[field_index]
        if self.version == "2.0":
            return self._decode_2_0(field, first, count, start, stop, rows)
        from lance_spark_ops.encoding.structural import build_array

        leaves = [self._leaf_pages(c, start, stop, rows) for c in range(first, first + count)]
        arr = build_array(field, leaves)
        if arr.type != field.type:
            arr = arr.cast(field.type)
        return arr

    def _decode_keeping(self, field_index: int, start: int, stop: int) -> tuple[pa.Array, bool | None]:
        """Rows ``start..stop`` of a field, a dictionary-encoded string leaf kept as a
        dictionary array (``structural.build_array_keeping``), and its twin-bitmap flag."""
        from lance_spark_ops.encoding.carried_dictionary import plain_type
        from lance_spark_ops.encoding.structural import build_array_keeping

        field = self.schema.field(field_index)
        first, count = self._ranges[field_index]
        leaves = [self._leaf_pages(c, start, stop, None) for c in range(first, first + count)]
        arr, bitmap = build_array_keeping(field, leaves)
        if arr.type == field.type:
            return arr, None
        if bitmap is not None and plain_type(arr.type) == field.type:
            return arr, bitmap
        return arr.cast(field.type), None

    def _cached(self, ranges: list[tuple[int, int]]) -> list[memoryview] | None:
        """Views of absolute ranges held in memory (the bytes read with the footer, or the
        batch's pages ``_warm`` read), else None."""
        got = self._meta.cached_ranges(ranges)
        if got is not None or not self._segments:
            return got
        out = []
        segments, firsts = self._segments, self._segment_starts
        for off, size in ranges:
            k = bisect.bisect_right(firsts, off) - 1
            # overlapping page buffers are rare; look back a little for one that holds the range
            for start, end, view in (segments[j] for j in range(k, max(k - 4, -1), -1)):
                if start <= off and off + size <= end:
                    out.append(view[off - start:off - start + size])
                    break
            else:
                return None
        return out

    def _warm(self, fields: Sequence[int], start: int, stop: int) -> None:
        """On an object store, read every page buffer that rows ``start..stop`` of ``fields``
        touch in one ``read_ranges`` call (coalesced, in flight together) before decoding
        them, so a batch of K columns costs one round trip, not K. A file read whole with its
        footer (small) needs none."""
        self._segments = []
        if self._store.is_local or self.version == "2.0" or self._meta.cached_ranges([(0, self._meta.size)]):
            return
        ranges: list[tuple[int, int]] = []
        try:
            for i in fields:
                first, count = self._ranges[i]
                for c in range(first, first + count):
                    starts = self._page_starts_of(c)
                    pages = self._meta.column(c).pages
                    lo = int(np.searchsorted(starts, start, side="right") - 1)
                    hi = int(np.searchsorted(starts, stop, side="left"))
                    for p in range(max(lo, 0), hi):
                        page = pages[p]
                        ranges += [(int(o), int(n)) for o, n in zip(page.buffer_offsets, page.buffer_sizes,
                                                                      strict=True) if n]
        except (LanceError, ValueError, IndexError):
            return  # the decoders' own reads name the file and field
        if len(ranges) < 2 or any(o < 0 or o + n > self._meta.size for o, n in ranges):
            return  # one request anyway, or corrupt: the decoders' own reads name the problem
        views = self._store.read_ranges(self._rel, ranges)
        self._segments = sorted(((o, o + n, v) for (o, n), v in zip(ranges, views, strict=True)),
                                key=lambda t: t[0])
        self._segment_starts = [t[0] for t in self._segments]

    def _page_starts_of(self, column: int) -> np.ndarray:
        starts = self._page_starts.get(column)
        if starts is None:
            acc = [0]  # Python ints: most columns of small files have one or two pages
            for p in self._meta.column(column).pages:
                acc.append(acc[-1] + p.length)
            if acc[-1] != self.num_rows:
                raise CorruptFileError(f"column {column} pages hold {acc[-1]} rows, file has "
                                       f"{self.num_rows}")
            starts = self._page_starts[column] = np.array(acc, dtype=np.int64)
        return starts

    def _leaf_pages(self, column: int, start: int, stop: int, rows: np.ndarray | None) -> list[PageData]:
        """PageData covering rows [start, stop) (or exactly ``rows``) of one leaf column."""
        meta = self._meta.column(column)
        starts = self._page_starts_of(column)
        out: list[PageData] = []
        if rows is None:
            first = int(np.searchsorted(starts, start, side="right") - 1)
            last = int(np.searchsorted(starts, stop, side="left"))
            run: list[tuple[int, MiniBlockDecoder]] = []  # whole mini-block pages sharing a layout
            run_key = None
            for p in range(first, last):
                ps, pe = int(starts[p]), int(starts[p + 1])
                if pe <= ps:
                    continue
                lo, hi = max(start, ps), min(stop, pe)
                if lo == ps and hi == pe:
                    dec = self._page_decoder(column, p, cache=False)
                    key = (dec.batch_key(), dec.has_dictionary) if isinstance(dec, MiniBlockDecoder) else None
                    if key is not None and key == run_key:
                        run.append((p, dec))
                        continue
                    self._flush_run(meta, run, out)
                    run, run_key = [], key
                    if key is not None:
                        run.append((p, dec))
                    else:
                        out.append(dec.decode(self._fetch_page(meta, p), None))
                else:
                    self._flush_run(meta, run, out)
                    run, run_key = [], None
                    out.append(self._decode_page_rows(column, p, np.arange(lo - ps, hi - ps)))
            self._flush_run(meta, run, out)
            return out
        page_of = np.searchsorted(starts, rows, side="right") - 1
        bounds = np.flatnonzero(np.diff(page_of)) + 1
        for group in np.split(np.arange(len(rows)), bounds):
            if group.size == 0:
                continue
            p = int(page_of[group[0]])
            out.append(self._decode_page_rows(column, p, rows[group] - starts[p]))
        return out

    def _fetch_page(self, meta: Any, page: int) -> Fetch:
        return page_fetch(self._store, self._rel, meta.pages[page], self._cached)

    def _flush_run(self, meta: Any, run: list[tuple[int, MiniBlockDecoder]], out: list[PageData]) -> None:
        """Decode a run of whole mini-block pages (one read, one pass through the codecs)."""
        if not run:
            return
        if len(run) == 1:
            p, dec = run[0]
            out.append(dec.decode(self._fetch_page(meta, p), None))
            return
        ranges = []
        wanted = (0, 1) if not run[0][1].has_dictionary else (0, 1, run[0][1].dictionary_buffer)
        for p, _ in run:
            page = meta.pages[p]
            if len(page.buffer_offsets) <= max(wanted):
                raise CorruptFileError(f"mini-block page {p} has {len(page.buffer_offsets)} buffers")
            ranges += [(int(page.buffer_offsets[b]), int(page.buffer_sizes[b])) for b in wanted]
        got = self._absolute_fetch(ranges)
        k = len(wanted)
        out.extend(decode_whole_pages([dec for _, dec in run],
                                      [tuple(got[k * i:k * i + k]) for i in range(len(run))]))

    def _decode_page_rows(self, column: int, page: int, rows: np.ndarray) -> PageData:
        dec = self._page_decoder(column, page, cache=True)
        return dec.decode(page_fetch(self._store, self._rel, self._meta.column(column).pages[page],
                                     self._cached), rows)

    def _page_decoder(self, column: int, page: int, cache: bool) -> PageDecoder:
        key = (column, page)
        dec = self._search_cache.get(key)
        if dec is not None:
            self._search_cache.move_to_end(key)
            return dec
        pmeta = self._meta.column(column).pages[page]
        key = None
        if not cache:
            key = (pmeta.encoding.SerializeToString(), int(pmeta.length), tuple(pmeta.buffer_sizes),
                   self.version)
            hit = _PROTOTYPES.get(key)
            if hit is not None:
                dec = object.__new__(MiniBlockDecoder)
                dec.__dict__.update(hit.__dict__)
                return dec
        where = f"column {column} page {page}"
        layout = page_layout(pmeta, self.path, where)
        dec = make_page_decoder(layout, int(pmeta.length), list(pmeta.buffer_sizes), self.version,
                                self.path, where)
        if key is not None and type(dec) is MiniBlockDecoder and len(key[0]) <= 1024:
            dec.batch_key()
            proto = object.__new__(MiniBlockDecoder)
            proto.__dict__.update(dec.__dict__)
            _PROTOTYPES.put(key, proto, _PROTOTYPE_BYTES + len(key[0]))
        if cache:
            dec.load_search_cache(page_fetch(self._store, self._rel, pmeta, self._cached))
            self._search_cache[key] = dec
            while len(self._search_cache) > SEARCH_CACHE_PAGES:
                self._search_cache.popitem(last=False)
        return dec

    def _decode_2_0(self, field: pa.Field, first: int, count: int, start: int, stop: int,
                    rows: np.ndarray | None) -> pa.Array:
        from lance_spark_ops.encoding.v2_0 import ColumnPages, decode_field_2_0

        cols = [ColumnPages(self._meta.column(c), self._absolute_fetch) for c in range(first, first + count)]
        if rows is None:
            return decode_field_2_0(field, cols, (start, stop))
        # Read the smallest row span per cluster of nearby indices.
        pieces = []
        breaks = np.flatnonzero(np.diff(rows) > 1024) + 1
        for cluster in np.split(rows, breaks):
            lo, hi = int(cluster[0]), int(cluster[-1]) + 1
            span = decode_field_2_0(field, cols, (lo, hi))
            pieces.append(span.take(pa.array(cluster - lo)))
        return pa.concat_arrays(pieces) if len(pieces) > 1 else pieces[0]

    def blob_descriptions(self, column: str, start: int, stop: int) -> tuple[np.ndarray, np.ndarray,
                                                                          np.ndarray]:
        """(position, size, valid) of rows [start, stop) of a blob v1 column (``large_binary``
        with ``lance-encoding:blob``), without reading the payloads."""
        i = self._field_indices([column])[0]
        first, count = self._ranges[i]
        if count != 1:
            raise UnsupportedError(f"column {column!r} is not a blob column", path=self.path)
        if self.version == "2.0":
            from lance_spark_ops.encoding.v2_0 import ColumnPages
            from lance_spark_ops.encoding.v2_0.blob import decode_blob

            desc = pa.field(column, pa.struct([("position", pa.uint64()), ("size", pa.uint64())]))
            col = ColumnPages(self._meta.column(first), self._absolute_fetch)
            if col.column_encoding().WhichOneof("column_encoding") != "blob":
                raise UnsupportedError(f"column {column!r} is not a blob column", path=self.path)
            arr = self._guard(i, lambda: decode_blob(desc, col, start, stop))
            pos = arr.field(0).to_numpy(zero_copy_only=False)
            size = arr.field(1).to_numpy(zero_copy_only=False)
            return pos, size, np.ones(len(pos), dtype=bool)  # a null is {1, 0}, as pylance returns it
        return self._guard(i, lambda: self._blob_descriptions_2_1(first, start, stop))

    def _blob_descriptions_2_1(self, column: int, start: int, stop: int) -> tuple[np.ndarray, np.ndarray,
                                                                                  np.ndarray]:
        from lance_spark_ops.encoding.layout.blob import BlobDecoder

        starts = self._page_starts_of(column)
        pos_parts, size_parts = [np.zeros(0, np.uint64)], [np.zeros(0, np.uint64)]
        first = int(np.searchsorted(starts, start, side="right") - 1)
        last = int(np.searchsorted(starts, stop, side="left"))
        for p in range(max(first, 0), last):
            ps, pe = int(starts[p]), int(starts[p + 1])
            lo, hi = max(start, ps), min(stop, pe)
            if hi <= lo:
                continue
            dec = self._page_decoder(column, p, cache=False)
            if not isinstance(dec, BlobDecoder):
                raise UnsupportedError(f"column {column} page {p} is not a blob page", path=self.path)
            rows = None if (lo, hi) == (ps, pe) else np.arange(lo - ps, hi - ps)
            fetch = page_fetch(self._store, self._rel, self._meta.column(column).pages[p],
                               self._cached)
            pos, size = dec._read_descriptors(fetch, rows)  # noqa: SLF001 - descriptors, no payloads
            pos_parts.append(pos)
            size_parts.append(size)
        pos, size = np.concatenate(pos_parts), np.concatenate(size_parts)
        return pos, size, ~((size == 0) & (pos != 0))  # a null smuggles its level into position

    def read_raw_ranges(self, ranges: Sequence[tuple[int, int]], scratch: ScratchBuffer | None = None
                        ) -> list[memoryview]:
        """Raw bytes of absolute (offset, size) ranges of the file (binary copy); with
        ``scratch`` (local files) they are views valid until its next use."""
        return self._absolute_fetch(ranges, scratch)

    def _absolute_fetch(self, ranges: Sequence[tuple[int, int]], scratch: ScratchBuffer | None = None
                        ) -> list[memoryview]:
        for off, size in ranges:
            if off < 0 or size < 0 or off + size > self._meta.size:
                raise CorruptFileError(f"buffer {off}..{off + size} lies outside the file "
                                       f"({self._meta.size} bytes)", path=self.path)
        got = self._cached(list(ranges))
        return got if got is not None else self._store.read_ranges(self._rel, list(ranges), scratch)
