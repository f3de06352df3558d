"""``LanceFileWriter``: stream Arrow data into a Lance 2.0 / 2.1 / 2.2 data file.

No row groups: each top-level field buffers its own rows and flushes a page (one per
column of the field) once it holds ``page_bytes`` of Arrow data, or when the fields together
hold more than the writer's share of the task's byte budget (``io.budget.writer_share``: its
largest field flushes), so memory is bounded by that share, not by the file nor by the
number of columns (a field keeps at least ``WRITER_COLUMN_FLOOR`` before the share cuts it).
Encoding is delegated to ``encoding`` (2.1+: rep/def + layout/compression strategy; 2.0: the
legacy encoders); this module only batches rows and lays out the container
(``container_writer``).
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from types import TracebackType
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from lance_spark_ops._pb import file_pb2
from lance_spark_ops.cache import region
from lance_spark_ops.encoding.carried_dictionary import (
    TWIN_BITMAP,
    carries_dictionary,
    decoded_nbytes,
    plain_type,
    twin_bitmap,
)
from lance_spark_ops.encoding.layers import copies_beside_nullable_structs
from lance_spark_ops.encoding.page import EncodedPage
from lance_spark_ops.errors import InvalidInputError, LanceError, SchemaError, UnsupportedError
from lance_spark_ops.file.columns import column_ranges
from lance_spark_ops.file.container_writer import ContainerWriter
from lance_spark_ops.file.pylance_quirks import LAYERED_LAYOUTS
from lance_spark_ops.file.schema import LanceSchema, schema_from_arrow, schema_to_pb
from lance_spark_ops.file.tuning import DEFAULT_FILE_TUNING, FileTuning
from lance_spark_ops.io.budget import WRITER_COLUMN_FLOOR, writer_share
from lance_spark_ops.io.remote import S3Upload
from lance_spark_ops.io.storage import ObjectStore, ScratchBuffer

DEFAULT_PAGE_BYTES = 8 * 1024 * 1024
VERSION_ALIASES = {"stable": "2.2", "2.0": "2.0", "2.1": "2.1", "2.2": "2.2"}
UNSUPPORTED_VERSIONS = {
    "next": "'next' resolves to the unstable 2.3 format, which this library does not write",
    "2.3": "2.3 is an unstable format this library does not write",
    "legacy": "the legacy v1 (0.1) format is not supported",
    "0.1": "the legacy v1 (0.1) format is not supported",
}


def resolve_version(version: str | None) -> str:
    v = (version or "2.2").lower()
    if v in UNSUPPORTED_VERSIONS:
        raise UnsupportedError(UNSUPPORTED_VERSIONS[v])
    if v not in VERSION_ALIASES:
        raise InvalidInputError(f"unknown file version {version!r}; use 2.0, 2.1, 2.2 or stable")
    return VERSION_ALIASES[v]


def _concat(chunks: list[pa.Array], target: pa.DataType) -> pa.Array:
    if any(c.type != chunks[0].type for c in chunks):  # carried dictionaries and plain values
        chunks = [c if c.type == target else c.cast(target) for c in chunks]
    try:
        return pa.concat_arrays(chunks)
    except pa.ArrowNotImplementedError:
        # Dictionaries that hold nulls cannot be unified by Arrow: go through the values.
        dt = chunks[0].type
        if dt != target and carries_dictionary(dt):
            return pa.concat_arrays([c.cast(target) for c in chunks])
        if not pa.types.is_dictionary(dt):
            raise
        values = pa.concat_arrays([c.dictionary_decode() for c in chunks])
        return values.dictionary_encode().cast(dt)


def _page_message(encoding: Any) -> tuple[str, bytes]:
    from lance_spark_ops.file.container import unpack_any

    return unpack_any(encoding, "", "page")


def _is_struct_header(encoding: Any) -> bool:
    from lance_spark_ops._pb import encodings_v2_0_pb2

    name, payload = _page_message(encoding)
    if name != "lance.encodings.ArrayEncoding":
        return False
    msg = encodings_v2_0_pb2.ArrayEncoding.FromString(payload)
    return msg.WhichOneof("array_encoding") == "struct"


# page encodings (packed bytes) already judged by _layout_traits: a binary copy asks per page
# of every source file, and the files of one dataset repeat a handful of page encodings
_LAYOUT_TRAITS = region("file.layout_traits", max_entries=4096)


def _is_blob_layout(encoding: Any) -> bool:
    return _layout_traits(encoding)[0]


def _struct_validity_clash(encoding: Any) -> bool:
    """Whether the page holds a struct over a list ALL_VALID in a way pylance 14 cannot read
    beside the NULLABLE pages this writer writes (``layers.copies_beside_nullable_structs``)."""
    return _layout_traits(encoding)[1]


def _layout_traits(encoding: Any) -> tuple[bool, bool]:
    """(blob layout, a struct-over-list validity that clashes with the writer's) of a 2.1+ page."""
    from lance_spark_ops._pb import encodings_v2_1_pb2

    key = encoding.direct.encoding if encoding.WhichOneof("location") == "direct" else None
    hit = None if key is None else _LAYOUT_TRAITS.get(key)
    if hit is not None:
        return hit
    name, payload = _page_message(encoding)
    traits = (False, False)
    if name == "lance.encodings21.PageLayout":
        layout = encodings_v2_1_pb2.PageLayout.FromString(payload)
        which = layout.WhichOneof("layout")
        layers = list(getattr(layout, which).layers) if which in LAYERED_LAYOUTS else []
        traits = (which == "blob_layout", not copies_beside_nullable_structs(layers))
    if key is not None:
        _LAYOUT_TRAITS.put(key, traits, 64 + len(key))
    return traits



class _PageCopy(NamedTuple):
    """A source page to move undecoded: its column, metadata, rows, first row in the new file."""

    column: int
    page: Any
    rows: int
    first_row: int


def _has_dictionary(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        return True
    return any(_has_dictionary(t.field(i).type) for i in range(t.num_fields))


class _FieldBuffer:
    """Rows of one top-level field waiting to become pages.

    Sizes are Arrow ``nbytes``; a carried dictionary array (``encoding.carried_dictionary``,
    a re-encode's undecoded strings) counts as its decoded twin, so pages are cut where the
    decoded values would have cut them."""

    def __init__(self, field: pa.Field, first_column: int, num_columns: int,
                 merge_chunks: int = DEFAULT_FILE_TUNING.merge_chunks) -> None:
        self.field = field
        self.merge_chunks = merge_chunks
        self.first_column = first_column
        self.num_columns = num_columns
        self.chunks: list[pa.Array] = []
        self.bitmaps: list[bool] = []  # per chunk: its decoded twin has a validity bitmap
        self.carried_bytes = 0  # bytes of the carried dictionaries' values in the chunks
        self.nbytes = 0
        self.flushed_rows = 0
        self.merged = 0  # leading chunks that are merges of others (``merge_tail``)
        self.mergeable = not _has_dictionary(field.type)  # unifying dictionaries in steps could reorder them

    def add(self, arr: pa.Array, bitmap: bool = True) -> None:
        if len(arr):
            self.chunks.append(arr)
            self.bitmaps.append(bitmap)
            if arr.type == self.field.type:
                self.nbytes += arr.nbytes
            else:
                nbytes, carried = decoded_nbytes(arr, bitmap)
                self.nbytes += nbytes
                self.carried_bytes += carried
            if len(self.chunks) - self.merged >= self.merge_chunks:
                self.merge_tail()

    def merge_tail(self) -> None:
        """The chunks added since the last merge as one array. A page of tiny batches (a run of
        small fragments) held an Arrow array per fragment and column until it was cut; the
        page is the concatenation of all chunks either way (``pop_page``), so merging them in
        steps changes neither its values nor its cut (``nbytes`` counts as added)."""
        tail = self.chunks[self.merged:]
        if self.mergeable and len(tail) > 1 and all(c.type == self.field.type for c in tail):
            self.chunks[self.merged:] = [pa.concat_arrays(tail)]
            self.bitmaps[self.merged:] = [False]  # as pop_page's concatenation of several chunks
            self.merged += 1
        else:  # carried dictionaries: left to pop_page
            self.merged = len(self.chunks)

    def pop_page(self, page_bytes: int) -> tuple[pa.Array, int] | None:
        """Up to one page of buffered rows and the file row of its first row."""
        if not self.chunks:
            return None
        if len(self.chunks) == 1:
            arr, bitmap = self.chunks[0], self.bitmaps[0]
        else:  # Arrow's concatenation drops all-valid bitmaps
            arr, bitmap = _concat(self.chunks, self.field.type), False
        carried = self.carried_bytes
        self.chunks, self.bitmaps, self.nbytes, self.carried_bytes, self.merged = [], [], 0, 0, 0
        nbytes = arr.nbytes if arr.type == self.field.type else decoded_nbytes(arr, bitmap, carried)[0]
        if nbytes > page_bytes and len(arr) > 1:
            # Keep the rows beyond one page buffered so pages stay near page_bytes.
            n = max(1, min(len(arr), page_bytes // max(1, nbytes // len(arr))))
            if n < len(arr):
                self.add(arr.slice(n), bitmap)
                arr = arr.slice(0, n)
        first = self.flushed_rows
        self.flushed_rows += len(arr)
        return arr, first


class LanceFileWriter:
    """Write one Lance data file; ``write`` any number of times, then ``close``.

    >>> with LanceFileWriter("out.lance", table.schema, version="2.1") as w:   # doctest: +SKIP
    ...     w.write(table)
    """

    def __init__(self, uri: str, schema: pa.Schema, *, version: str | None = "2.2",
                 storage_options: dict[str, Any] | None = None, page_bytes: int = DEFAULT_PAGE_BYTES,
                 store: ObjectStore | None = None, lance_schema: LanceSchema | None = None,
                 tuning: FileTuning = DEFAULT_FILE_TUNING, buffer_bytes: int | None = None) -> None:
        """``lance_schema``: the dataset's field tree (with its field ids) for files that belong
        to a dataset; by default ids are assigned depth first from 0. ``tuning``: buffer and
        copy-window sizes (``file.tuning``). ``buffer_bytes``: Arrow bytes buffered for pages,
        all fields together (None: the store's ``writer_share``; at least ``WRITER_COLUMN_FLOOR``
        per field)."""
        self.version = resolve_version(version)
        if page_bytes <= 0:
            raise InvalidInputError(f"page_bytes must be positive, got {page_bytes}")
        if buffer_bytes is not None and buffer_bytes <= 0:
            raise InvalidInputError(f"buffer_bytes must be positive, got {buffer_bytes}")
        self.schema = schema
        self.page_bytes = page_bytes
        self.tuning = tuning
        self._lance_schema: LanceSchema = lance_schema or schema_from_arrow(schema)
        self._check_schema()
        if store is None:
            store, rel = ObjectStore.for_file(uri, storage_options)
        else:
            rel = uri
        self._store, self._rel = store, rel
        self.path = store.uri(rel)
        ranges = column_ranges(schema, self.version)
        self._fields = [_FieldBuffer(f, first, n, tuning.merge_chunks)
                        for f, (first, n) in zip(schema, ranges, strict=True)]
        num_columns = sum(n for _, n in ranges)
        share = writer_share(store.budget) if buffer_bytes is None else buffer_bytes
        self.buffer_bytes = max(share, WRITER_COLUMN_FLOOR * len(self._fields))
        self._out = store.open_output(rel)
        self._container = ContainerWriter(self._out, num_columns, self.version)
        # 2.0 struct header columns get one page, written at close, holding every row.
        self._struct_header_rows: dict[int, int] = {}
        if self.version == "2.0":
            from lance_spark_ops.encoding.v2_0.encoder import column_encodings_2_0

            for buf in self._fields:
                for j, enc in enumerate(column_encodings_2_0(buf.field)):
                    self._container.set_column_encoding(buf.first_column + j, enc)
        self._rows = 0
        self._closed = False
        # global buffers 1.. (0 is the file descriptor); Lance index files keep bitmaps there
        self.extra_global_buffers: list[bytes] = []
        self._result: tuple[int, int] | None = None
        self._checked: tuple[Any, str | None] | None = None  # last reader can_copy_pages_from judged
        self._same_schema: pa.Schema | None = None  # a source schema found to match ours
        self._scratch: ScratchBuffer | None = None  # binary copy: pages pass through it (one window)

    @property
    def bytes_written(self) -> int:
        """Bytes of pages written so far (the file grows by metadata at close)."""
        return self._container.position

    @property
    def bytes_pending(self) -> int:
        """Bytes written plus Arrow bytes still buffered for pages (an upper bound on what
        those pages add: encoding only shrinks them); for soft file-size limits."""
        return self._container.position + sum(buf.nbytes for buf in self._fields)

    @property
    def rows_written(self) -> int:
        return self._rows

    # -- schema checks -----------------------------------------------------
    def _check_schema(self) -> None:
        from lance_spark_ops.encoding.support import check_field_supported
        from lance_spark_ops.file.schema import arrow_to_logical_type

        for f in self.schema:
            check_field_supported(f, self.version, type_check=arrow_to_logical_type)

    # -- writing -----------------------------------------------------------
    def write(self, data: pa.Table | pa.RecordBatch) -> None:
        """Append rows (a Table or RecordBatch whose schema matches the writer's)."""
        if self._closed:
            raise InvalidInputError("write() after close()", path=self.path)
        if isinstance(data, pa.RecordBatch):
            data = pa.Table.from_batches([data])
        if not data.schema.equals(self.schema, check_metadata=False) and not self._carried(data.schema):
            try:
                data = data.select(self.schema.names).cast(self.schema)
            except (KeyError, ValueError, pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise SchemaError(f"data schema {data.schema} does not match the writer's {self.schema}: {e}",
                                  path=self.path) from e
        if data.num_rows == 0:
            return
        for i, buf in enumerate(self._fields):
            bitmap = twin_bitmap(data.schema.field(i))
            for chunk in data.column(i).chunks:
                buf.add(chunk, bitmap)
            while buf.nbytes >= self.page_bytes:
                self._flush(buf)
        self._fit_share()
        self._rows += data.num_rows

    write_batch = write

    def write_batches(self, batches: Sequence[pa.RecordBatch]) -> None:
        """``write`` of each batch in turn - the same pages - for many small batches of exactly
        the writer's schema (one check for all of them, no Table per batch). Others: ``write``."""
        if self._closed:
            raise InvalidInputError("write() after close()", path=self.path)
        if not batches:
            return
        schema = batches[0].schema
        if (any(b.schema is not schema and not b.schema.equals(schema) for b in batches)
                or not schema.equals(self.schema, check_metadata=False)):
            for b in batches:
                self.write(b)
            return
        bitmaps = [twin_bitmap(f) for f in schema]
        # the batches' types are the fields' (the schemas are equal): ``_FieldBuffer.add`` inlined,
        # no type comparison per chunk (many small batches: a run of small fragments)
        page_bytes, merge_chunks = self.page_bytes, self.tuning.merge_chunks
        for b in batches:
            if not b.num_rows:
                continue
            for buf, bitmap, arr in zip(self._fields, bitmaps, b.columns, strict=True):
                buf.chunks.append(arr)
                buf.bitmaps.append(bitmap)
                buf.nbytes += arr.nbytes
                if len(buf.chunks) - buf.merged >= merge_chunks:
                    buf.merge_tail()
                while buf.nbytes >= page_bytes:
                    self._flush(buf)
            self._fit_share()
            self._rows += b.num_rows

    def _carried(self, schema: pa.Schema) -> bool:
        """``schema`` is ours but for carried dictionaries (``encoding.carried_dictionary``:
        dictionary arrays standing for our string / binary types, marked by the reader that
        kept them), which 2.1+ encodes without decoding them. Other dictionary data for
        plain fields is cast, as always."""
        if self.version == "2.0" or schema.names != self.schema.names:
            return False
        return all(f.type == g.type or (f.nullable == g.nullable and TWIN_BITMAP in (f.metadata or {})
                                        and plain_type(f.type) == g.type)
                   for f, g in zip(schema, self.schema, strict=True))

    def _fit_share(self) -> None:
        """Flush the largest field's page while the fields together buffer more than
        ``buffer_bytes``: a wide table's pages get shorter instead of its buffers adding up to
        ``page_bytes`` per column."""
        fields = self._fields
        total = sum(b.nbytes for b in fields)
        while total > self.buffer_bytes:
            buf = max(fields, key=attrgetter("nbytes"))
            before = buf.nbytes
            self._flush(buf)
            if buf.nbytes >= before:
                return
            total -= before - buf.nbytes

    def _flush(self, buf: _FieldBuffer) -> None:
        popped = buf.pop_page(self.page_bytes)
        if popped is None:
            return
        arr, first_row = popped
        try:
            columns = self._encode(buf.field, arr)
        except LanceError as e:
            if e.path:
                raise
            raise type(e)(f"field {buf.field.name!r}: {e}", path=self.path) from e
        if len(columns) != buf.num_columns:
            raise LanceError(f"field {buf.field.name!r}: encoder produced pages for {len(columns)} columns, "
                             f"the field has {buf.num_columns}", path=self.path)
        for j, pages in enumerate(columns):
            column = buf.first_column + j
            for row, page in pages:
                if self.version == "2.0":
                    from lance_spark_ops.encoding.v2_0.encoder import is_struct_header_2_0

                    if is_struct_header_2_0(page.encoding):
                        rows_so_far = self._struct_header_rows.get(column, 0)
                        self._struct_header_rows[column] = rows_so_far + page.num_rows
                        continue
                # 2.1+: a page's priority is its first row in the file; 2.0 writes 0.
                priority = first_row + row if self.version != "2.0" else 0
                self._container.write_encoded_page(column, page, priority)

    def _encode(self, field: pa.Field, arr: pa.Array) -> list[list[tuple[int, EncodedPage]]]:
        """Per column of ``field``, its pages for ``arr`` with each page's first row."""
        from lance_spark_ops.encoding.support import check_array_supported

        check_array_supported(field, arr, self.version)
        if self.version == "2.0":
            from lance_spark_ops.encoding.v2_0.encoder import encode_field_2_0

            return [[(0, page)] for page in encode_field_2_0(field, arr)]
        from lance_spark_ops.encoding.encode import encode_field_pages

        return encode_field_pages(field, arr, self.version)

    # -- binary copy -------------------------------------------------------
    def can_copy_pages_from(self, reader: Any) -> str | None:
        """Why ``append_file_pages`` cannot take ``reader``'s pages (None: it can)."""
        if self._checked is not None and self._checked[0] is reader:
            return self._checked[1]  # asked again by append_*: the answer is the same
        why = self._why_not_copy(reader)
        self._checked = (reader, why)
        return why

    def _why_not_copy(self, reader: Any) -> str | None:
        if reader.version != self.version:
            return f"file version {reader.version} != {self.version}"
        if reader.schema is not self._same_schema:  # file schemas are shared objects (file.metadata)
            if reader.schema.types != self.schema.types or reader.schema.names != self.schema.names:
                return "schema differs"
            self._same_schema = reader.schema
        if reader.metadata.num_columns != self._container.num_columns:
            return "column count differs"
        for c in range(reader.metadata.num_columns):
            enc = reader.metadata.column(c).encoding
            if enc != self._container.column_encoding(c) or b"blob" in enc.direct.encoding:
                return f"column {c} is a blob column: its pages point at payloads by absolute offset"
        pages = [p for c in range(reader.metadata.num_columns) for p in reader.metadata.column(c).pages]
        if any(_is_blob_layout(p.encoding) for p in pages):
            return "blob pages point at payloads by absolute offset"
        if any(_struct_validity_clash(p.encoding) for p in pages):
            # pylance 14 cannot read a column mixing these pages with the NULLABLE ones written here
            return "a struct over a list is stored without its validity layer (re-encoded instead)"
        return None

    def _start_copy(self, reader: Any) -> None:
        """Refuse pages this file cannot take; flush buffered rows so copied pages follow them."""
        why = self.can_copy_pages_from(reader)
        if why is not None:
            raise InvalidInputError(f"cannot copy pages from {reader.path}: {why}", path=self.path)
        for buf in self._fields:
            while buf.chunks:
                self._flush(buf)

    def _copy_pages(self, reader: Any, pages: list[_PageCopy]) -> None:
        """Move ``pages`` of ``reader`` undecoded, in order. Their buffers are read a window of
        up to ``tuning.copy_window`` bytes (or one larger page) at a time, in coalesced requests: one
        read covers many neighbouring pages instead of one request per page. (Local files go
        through user space on purpose: ``os.copy_file_range`` measured slower on ext4 without
        reflinks, 0.15 s against 0.095 s of read + write per 400 MB from the page cache.)"""
        start, window_bytes = 0, self.tuning.copy_window
        while start < len(pages):
            stop, size = start + 1, sum(pages[start].page.buffer_sizes)
            while stop < len(pages) and size + sum(pages[stop].page.buffer_sizes) <= window_bytes:
                size += sum(pages[stop].page.buffer_sizes)
                stop += 1
            window = pages[start:stop]
            if self._scratch is None:
                self._scratch = ScratchBuffer()
            # views into the scratch buffer: written out before the next window is read
            data = reader.read_raw_ranges([r for p in window for r in
                                           zip(p.page.buffer_offsets, p.page.buffer_sizes, strict=True)],
                                          self._scratch)
            at = 0
            for p in window:
                n = len(p.page.buffer_offsets)
                # 2.1+ pages record their first row; 2.0 pages (and 2.0 list item pages, whose
                # length counts items) record 0, as _flush writes them.
                priority = p.first_row if self.version != "2.0" else 0
                self._container.write_packed_page(p.column, data[at:at + n], p.page.encoding, p.rows,
                                                  priority)
                at += n
            start = stop
        pages.clear()

    def append_file_pages(self, reader: Any) -> int:
        """Binary copy: append every page of ``reader``'s file (same version and schema) after
        the rows written so far, without decoding. Buffered rows are flushed first so rows
        stay in order; memory is bounded by one copy window (``tuning.copy_window``, or one larger
        page). Returns the number of pages copied."""
        self._start_copy(reader)
        base = self._rows
        meta = reader.metadata
        pages: list[_PageCopy] = []
        for c in range(meta.num_columns):
            first = 0
            for page in meta.column(c).pages:
                rows = int(page.length)
                if self.version == "2.0" and _is_struct_header(page.encoding):
                    self._struct_header_rows[c] = self._struct_header_rows.get(c, 0) + rows
                    continue
                pages.append(_PageCopy(c, page, rows, base + first))
                first += rows
        copied = len(pages)
        self._copy_pages(reader, pages)
        self._rows += reader.num_rows
        for buf in self._fields:
            buf.flushed_rows += reader.num_rows
        return copied

    def append_live_pages(self, reader: Any, keep: np.ndarray) -> tuple[int, int]:
        """Binary copy with deletions: append the rows of ``reader``'s file where
        ``keep`` is True. A page none of whose rows is deleted is copied as it is; a page
        holding deleted rows is decoded, filtered and re-encoded (through the field's page
        buffer, so small leftovers merge with the next re-encoded rows). Fields spread over
        several columns (2.1+ structs of several leaves; 2.0 lists and structs) are re-encoded
        whole, their columns' pages not being row-aligned (2.0 item pages count items).
        Returns (pages copied, pages re-encoded); memory stays one page (or copy window)."""
        keep = np.asarray(keep, dtype=bool)
        if keep.size != reader.num_rows:
            raise InvalidInputError(
                f"keep mask has {keep.size} rows, the file {reader.num_rows}", path=self.path
            )
        self._start_copy(reader)
        dead = np.concatenate([[0], np.cumsum(~keep, dtype=np.int64)])
        copied = reencoded = 0
        step = self.tuning.reencode_rows
        meta = reader.metadata
        pending: list[_PageCopy] = []  # pages to move, written before anything re-encoded after them
        for index, buf in enumerate(self._fields):
            if buf.num_columns != 1:
                for start in range(0, reader.num_rows, step):
                    stop = min(reader.num_rows, start + step)
                    self._add_filtered(buf, reader, index, keep, start, stop)
                reencoded += sum(len(meta.column(c).pages)
                                 for c in range(buf.first_column, buf.first_column + buf.num_columns))
                continue
            column, start = buf.first_column, 0
            run = None  # first row of the pages holding deleted rows not yet decoded
            for page in meta.column(column).pages:
                stop = start + int(page.length)
                if dead[stop] == dead[start]:  # no deleted row: move the page as it is
                    if run is not None:
                        self._add_filtered(buf, reader, index, keep, run, start)
                        run = None
                    if buf.chunks:  # rows re-encoded before it go first
                        self._copy_pages(reader, pending)
                        while buf.chunks:
                            self._flush(buf)
                    pending.append(_PageCopy(column, page, stop - start, buf.flushed_rows))
                    buf.flushed_rows += stop - start
                    copied += 1
                else:
                    # neighbouring pages with deleted rows are decoded together, up to
                    # ``tuning.reencode_rows`` at a time (one multi-page decode, not one per page)
                    if run is None:
                        self._copy_pages(reader, pending)
                        run = start
                    elif start - run >= step:
                        self._add_filtered(buf, reader, index, keep, run, start)
                        run = start
                    reencoded += 1
                start = stop
            if run is not None:
                self._add_filtered(buf, reader, index, keep, run, start)
            self._copy_pages(reader, pending)
        self._rows += int(keep.sum())
        return copied, reencoded

    def _add_filtered(self, buf: _FieldBuffer, reader: Any, index: int, keep: np.ndarray, start: int,
                      stop: int) -> None:
        mask = keep[start:stop]
        if not mask.any():
            return
        arr = reader._decode_field_range(index, start, stop)  # noqa: SLF001 - same package
        buf.add(arr if mask.all() else arr.filter(pa.array(mask)))
        while buf.nbytes >= self.page_bytes:
            self._flush(buf)
        self._fit_share()

    # -- closing -----------------------------------------------------------
    def close(self) -> tuple[int, int]:
        """Flush every field, write the metadata and footer; returns (rows, file size)."""
        if self._closed:
            assert self._result is not None
            return self._result
        try:
            for buf in self._fields:
                while buf.chunks:
                    self._flush(buf)
            if self._struct_header_rows:
                from lance_spark_ops.encoding.v2_0.encoder import struct_header_encoding_2_0

                for column, rows in sorted(self._struct_header_rows.items()):
                    self._container.write_page(column, [], struct_header_encoding_2_0(), rows, 0)
            descriptor = file_pb2.FileDescriptor(length=self._rows)
            descriptor.schema.fields.extend(schema_to_pb(self._lance_schema))
            for k, v in self._lance_schema.metadata.items():
                descriptor.schema.metadata[k.decode() if isinstance(k, bytes) else k] = v
            size = self._container.finish([descriptor.SerializeToString(), *self.extra_global_buffers])
            self._out.close()
        except BaseException:
            self.abort()
            raise
        self._closed = True
        self._scratch = None
        self._result = (self._rows, size)
        return self._result

    def abort(self) -> None:
        """Stop writing and remove the partial file."""
        self._closed = True
        try:
            if isinstance(self._out, S3Upload):
                self._out.discard()  # an upload is aborted, not completed
            else:
                self._out.close()  # (fsspec's own local files refuse discard(): autocommit)
        finally:
            self._store.delete(self._rel)

    def __enter__(self) -> LanceFileWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.close()
        elif not self._closed:
            self.abort()


def write_table(rel: str, table: pa.Table, version: str, store: Any,
                extra_global_buffers: Sequence[bytes] = ()) -> int:
    """Write ``table`` as one whole file (global buffers 1.. = ``extra_global_buffers``, as
    index files carry their metadata) and return its size; a failed write leaves no file."""
    w = LanceFileWriter(rel, table.schema, version=version, store=store)
    w.extra_global_buffers = list(extra_global_buffers)
    try:
        w.write(table)
        return w.close()[1]
    except BaseException:
        w.abort()
        raise
