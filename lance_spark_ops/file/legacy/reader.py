"""``LegacyFileReader``: read a legacy (file format 0.1) Lance data file into Arrow.

Same surface as ``LanceFileReader`` (``schema``, ``num_rows``, ``version``, ``metadata``,
``read``, ``iter_batches``, ``take``). v1 pages are per write batch (``max_rows_per_group``
rows, 1024 by default), so any read decodes the whole batches it touches; the last decoded
batch of each field is kept for the next request.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from lance_spark_ops.encoding.v0_1 import PageSource, decode_field
from lance_spark_ops.errors import CorruptFileError, InvalidInputError, LanceError
from lance_spark_ops.file.legacy.container import LegacyFileMetadata, load_legacy_metadata
from lance_spark_ops.file.projection import ColumnSelection
from lance_spark_ops.io.storage import ObjectStore

DEFAULT_BATCH_ROWS = 64 * 1024


class LegacyFileReader(ColumnSelection):
    """Reader of one v1 Lance data file."""

    def __init__(self, uri: str, *, storage_options: dict[str, Any] | None = None,
                 store: ObjectStore | None = None) -> None:
        if store is None:
            store, rel = ObjectStore.for_file(uri, storage_options)
        else:
            rel = uri
        self._store, self._rel = store, rel
        self._meta: LegacyFileMetadata = load_legacy_metadata(store, rel)
        self.path = self._meta.path
        self.schema: pa.Schema = self._meta.schema.to_arrow()
        self._src = PageSource(self._page, self._dictionary, self._fetch, self.path)
        self._cache: dict[int, tuple[int, pa.Array]] = {}

    @property
    def num_rows(self) -> int:
        return self._meta.num_rows

    @property
    def version(self) -> str:
        return self._meta.version

    @property
    def metadata(self) -> LegacyFileMetadata:
        return self._meta

    # -- public reads ------------------------------------------------------
    def read(self, columns: Sequence[str] | None = None) -> pa.Table:
        fields = self._field_indices(columns)
        schema = self._project_schema(fields)
        if self.num_rows == 0:
            return schema.empty_table()
        return pa.Table.from_arrays([self._range(i, 0, self.num_rows) for i in fields], schema=schema)

    def iter_batches(self, columns: Sequence[str] | None = None,
                     batch_rows: int = DEFAULT_BATCH_ROWS, start: int = 0,
                     stop: int | None = None) -> Iterator[pa.RecordBatch]:
        """Record batches of up to ``batch_rows`` rows of rows ``start..stop`` (default all)."""
        if batch_rows <= 0:
            raise InvalidInputError(f"batch_rows must be positive, got {batch_rows}")
        end = self.num_rows if stop is None else stop
        if not 0 <= start <= end <= self.num_rows:
            raise InvalidInputError(f"row range {start}..{end} is outside a file of {self.num_rows} rows",
                                    path=self.path)
        fields = self._field_indices(columns)
        schema = self._project_schema(fields)
        for lo in range(start, end, batch_rows):
            hi = min(lo + batch_rows, end)
            yield pa.RecordBatch.from_arrays([self._range(i, lo, hi) for i in fields], schema=schema)

    def take(self, indices: Sequence[int] | np.ndarray | pa.Array,
             columns: Sequence[str] | None = None) -> pa.Table:
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
        offsets = self._meta.batch_offsets
        batch_of = np.searchsorted(offsets, idx, side="right") - 1
        arrays = []
        for i in fields:
            pieces, order = [], []
            for b in np.unique(batch_of):
                sel = np.flatnonzero(batch_of == b)
                pieces.append(self._batch(i, int(b)).take(pa.array(idx[sel] - offsets[b])))
                order.append(sel)
            arr = pa.concat_arrays(pieces) if len(pieces) > 1 else pieces[0]
            perm = np.empty(idx.size, dtype=np.int64)
            perm[np.concatenate(order)] = np.arange(idx.size)
            arrays.append(arr.take(pa.array(perm)))
        return pa.Table.from_arrays(arrays, schema=schema)

    # -- internals ---------------------------------------------------------
    def _range(self, field_index: int, start: int, stop: int) -> pa.Array:
        offsets = self._meta.batch_offsets
        first = int(np.searchsorted(offsets, start, side="right") - 1)
        pieces = []
        b = first
        while b < self._meta.num_batches and offsets[b] < stop:
            lo, hi = max(start, int(offsets[b])), min(stop, int(offsets[b + 1]))
            if hi > lo:
                pieces.append(self._batch(field_index, b).slice(lo - int(offsets[b]), hi - lo))
            b += 1
        dt = self.schema.field(field_index).type
        if not pieces:
            return pa.array([], dt)
        return pa.concat_arrays(pieces) if len(pieces) > 1 else pieces[0]

    def _batch(self, field_index: int, batch: int) -> pa.Array:
        hit = self._cache.get(field_index)
        if hit is not None and hit[0] == batch:
            return hit[1]
        field = self._meta.schema.fields[field_index]
        try:
            arr = decode_field(field, self._src, batch)
        except LanceError as e:
            if e.path:
                raise
            raise type(e)(f"field {field.name!r} batch {batch}: {e}", path=self.path) from e
        except (ValueError, IndexError, TypeError, KeyError, OverflowError, pa.ArrowException) as e:
            raise CorruptFileError(f"field {field.name!r} batch {batch}: cannot decode "
                                   f"({type(e).__name__}: {e})", path=self.path) from e
        rows = int(self._meta.batch_offsets[batch + 1] - self._meta.batch_offsets[batch])
        if len(arr) != rows:
            raise CorruptFileError(f"field {field.name!r} batch {batch}: {len(arr)} values, batch has {rows} "
                                   "rows", path=self.path)
        self._cache[field_index] = (batch, arr)
        return arr

    def _page(self, field_id: int, batch: int) -> tuple[int, int]:
        return self._meta.page(field_id, batch)

    def _dictionary(self, field_id: int) -> tuple[int, int]:
        d = self._meta.dictionaries.get(field_id)
        if d is None:
            raise CorruptFileError(f"dictionary field id {field_id} has no dictionary values", path=self.path)
        return d

    def _fetch(self, ranges: Sequence[tuple[int, int]]) -> list[memoryview]:
        for off, size in ranges:
            if off < 0 or size < 0 or off + size > self._meta.size:
                raise CorruptFileError(f"bytes {off}..{off + size} lie outside the file ({self._meta.size} "
                                       "bytes)", path=self.path)
        return self._store.read_ranges(self._rel, list(ranges))
