"""Executor side of ``add_columns``: write new-column data files aligned with physical rows.

Input is a stream of batches holding ``_rowaddr`` (``fragment id << 32 | offset``, as Spark
``long`` or Lance ``uint64``) and the new columns' values, ascending by address - a fragment's
live rows in physical order (SQL and function modes), or rows of several fragments sorted by
address (join mode). ``ColumnFileWriter`` cuts the stream at fragment boundaries and, per
fragment, writes one Lance file holding only the new columns with exactly ``physical_rows``
rows: each value lands at its row's offset, every other offset (deleted rows, rows a join did
not match) is null. Example: fragment 3 has 5 physical rows, rows 1 and 3 deleted; values
``[a, c, e]`` at addresses ``3<<32 | {0, 2, 4}`` are written as ``[a, null, c, null, e]``.

Scattering is one Arrow ``take`` with null indices per batch (no per-row Python); memory is
bounded by the writer's page buffers. File version 2.0 cannot store struct-level nulls, so
there the padding of a struct column is a valid struct whose children are null.

A fragment that receives no value gets no file at all: Lance reads a field held by none of a
fragment's data files as nulls, which is exactly what that fragment needs.

``run_function_task`` is the function mode end to end on one task group (read with our scanner,
call the user's function on Lance-typed batches, write), run through ``spark.runtime.runner``. SQL
translated by ``spark.files.sql_arrow`` takes the same route but reads every physical row
(``scan_fragment(include_deleted=True)``): expressions are row-wise, so their values at deleted
rows are simply nulled and the rows go to the file in order (``append_rows``), without the
scatter; only when deleted rows alone raise an evaluation error are the live rows evaluated
apart and scattered (``append_live``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_spark_ops.errors import InvalidInputError, SchemaError
from lance_spark_ops.file.legacy.writer import LegacyFileWriter
from lance_spark_ops.file.metadata import WHOLE_FILE_READ
from lance_spark_ops.file.schema import LanceSchema
from lance_spark_ops.file.writer import LanceFileWriter
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.spark.files.sql_arrow import SqlColumns
from lance_spark_ops.spark.runtime.runner import TaskContext
from lance_spark_ops.spark.runtime.task_common import DATA_DIR, attempt_id
from lance_spark_ops.table.dataset import DEFAULT_BATCH_ROWS
from lance_spark_ops.table.format.fragment import DataFile
from lance_spark_ops.table.fragment_batch import FragmentBatch

ROW_ADDR = "_rowaddr"
RESULT_SCHEMA = "fragment_id long, path string, rows long, size long"
_RESULT_ARROW = pa.schema([("fragment_id", pa.int64()), ("path", pa.string()), ("rows", pa.int64()),
                           ("size", pa.int64())])
_PAD_ROWS = 64 * 1024
CLOSES_IN_FLIGHT = 4  # per task, object stores only (see ``ColumnFileWriter``)
BatchFunction = Callable[[pa.RecordBatch], "pa.RecordBatch | pa.Table | dict[str, Any]"]


@dataclass(frozen=True)
class ColumnWriteSpec:
    """Everything a writer task needs (pickled into the task, a few KB)."""

    uri: str
    version: int  # the dataset version the fragments belong to
    job_id: str
    schema: pa.Schema  # the new columns, nullable, as stored
    lance_schema: LanceSchema  # the same with their dataset field ids
    field_ids: tuple[int, ...]
    column_indices: tuple[int, ...]
    file_version: str
    file_major_minor: tuple[int, int]
    physical_rows: dict[int, int]  # fragment id -> physical rows
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)  # secrets: not in reprs
    timestamp: datetime | None = None  # of the version (see tasks.scan.open_dataset)


@dataclass
class WrittenFile:
    fragment_id: int
    path: str  # relative to data/
    rows: int
    size: int

    def data_file(self, spec: ColumnWriteSpec) -> DataFile:
        major, minor = spec.file_major_minor
        return DataFile(self.path, list(spec.field_ids), list(spec.column_indices), major, minor, self.size)


def _valid_struct_nulls(arr: pa.Array) -> pa.Array:
    """2.0: nulls of a struct become a valid struct of null children (recursively)."""
    if not pa.types.is_struct(arr.type):
        return arr
    children = [_valid_struct_nulls(arr.field(i)) for i in range(arr.type.num_fields)]
    if arr.null_count:
        keep = arr.is_valid()
        children = [pc.if_else(keep, c, pa.nulls(len(c), c.type)) for c in children]
    return pa.StructArray.from_arrays(children, fields=list(arr.type))


class ColumnFileWriter:
    """Streams address-sorted value batches into one new data file per fragment."""

    def __init__(self, spec: ColumnWriteSpec, attempt: str) -> None:
        self.spec = spec
        self.attempt = attempt
        self.store = ObjectStore(spec.uri, spec.storage_options)
        self.written: list[WrittenFile] = []
        self._fid: int | None = None
        self._writer: LanceFileWriter | LegacyFileWriter | None = None
        self._name = ""
        self._cursor = 0
        self._seen: set[int] = set()
        # object stores: files whose close (last pages, the upload's end) runs while the next
        # fragment is read and written - each close is a round trip, a fragment's files one after
        # another waited one apiece; settled in order, at most ``CLOSES_IN_FLIGHT`` at once
        self._closing: list[tuple[int, str, LanceFileWriter | LegacyFileWriter, Future]] = []
        self._pool: ThreadPoolExecutor | None = None

    # -- per fragment ------------------------------------------------------------------------
    def _open(self, fid: int) -> None:
        if fid not in self.spec.physical_rows:
            raise InvalidInputError(f"row address names fragment {fid}, which version {self.spec.version} "
                                    "does not hold (or is not being computed)", path=self.spec.uri)
        if fid in self._seen:
            raise InvalidInputError(f"rows of fragment {fid} arrived out of address order",
                                    path=self.spec.uri)
        self._seen.add(fid)
        self._fid, self._cursor = fid, 0
        self._name = f"{self.spec.job_id}-f{fid}-a{self.attempt}-{uuid.uuid4().hex[:8]}.lance"
        if self.spec.file_version == "0.1":  # a legacy dataset: v1 column files, as pylance 14 adds them
            self._writer = LegacyFileWriter(f"{DATA_DIR}/{self._name}", self.spec.schema, store=self.store,
                                            lance_schema=self.spec.lance_schema)
        else:
            self._writer = LanceFileWriter(f"{DATA_DIR}/{self._name}", self.spec.schema,
                                           version=self.spec.file_version, store=self.store,
                                           lance_schema=self.spec.lance_schema)

    def _write(self, arrays: list[pa.Array]) -> None:
        assert self._writer is not None
        if self.spec.file_version == "2.0":
            arrays = [_valid_struct_nulls(a) for a in arrays]
        self._writer.write(pa.RecordBatch.from_arrays(arrays, schema=self.spec.schema))

    def _pad(self, upto: int) -> None:
        while self._cursor < upto:
            n = min(_PAD_ROWS, upto - self._cursor)
            self._write([pa.nulls(n, f.type) for f in self.spec.schema])
            self._cursor += n

    def _finish(self) -> None:
        if self._writer is None or self._fid is None:
            return
        self._pad(self.spec.physical_rows[self._fid])
        if self.store.is_local:
            rows, size = self._writer.close()
            self.written.append(WrittenFile(self._fid, self._name, rows, size))
            self._writer, self._fid = None, None
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(CLOSES_IN_FLIGHT, thread_name_prefix="lso-column-close")
        self._closing.append((self._fid, self._name, self._writer, self._pool.submit(self._writer.close)))
        self._writer, self._fid = None, None
        while len(self._closing) > CLOSES_IN_FLIGHT:
            self._settle()

    def _settle(self) -> None:
        """Wait for the oldest close; a file whose close failed is aborted, as a failed close in
        turn was, and the error raised."""
        fid, name, writer, closing = self._closing.pop(0)
        try:
            rows, size = closing.result()
        except BaseException:
            writer.abort()
            raise
        self.written.append(WrittenFile(fid, name, rows, size))

    def _stop_pool(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    # -- the stream ------------------------------------------------------------------------------
    def _values(self, batch: pa.RecordBatch) -> list[pa.Array]:
        out = []
        for f in self.spec.schema:
            i = batch.schema.get_field_index(f.name)
            if i < 0:
                raise SchemaError(f"computed batch has no column {f.name!r} (has {batch.schema.names})")
            col = batch.column(i)
            try:
                out.append(col if col.type == f.type else col.cast(f.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise SchemaError(f"column {f.name!r}: values of type {col.type} do not cast to the declared "
                                  f"{f.type}: {e}") from e
        return out

    def _segment(self, fid: int, offsets: np.ndarray, values: list[pa.Array]) -> None:
        if self._fid != fid:
            self._finish()
            self._open(fid)
        rows = self.spec.physical_rows[fid]
        if int(offsets[-1]) >= rows:
            raise InvalidInputError(f"row address {fid}:{int(offsets[-1])} is past the {rows} rows of "
                                    f"fragment {fid}", path=self.spec.uri)
        ascending = offsets.size < 2 or bool(np.all(offsets[1:] > offsets[:-1]))
        if int(offsets[0]) < self._cursor or not ascending:
            raise InvalidInputError(f"fragment {fid}: a row got two values (a join key matching several "
                                    "rows?) or rows arrived out of order", path=self.spec.uri)
        span = int(offsets[-1]) + 1 - self._cursor
        idx = np.full(span, -1, dtype=np.int64)
        idx[offsets - self._cursor] = np.arange(offsets.size)
        indices = pa.array(idx, mask=idx < 0)
        self._write([v.take(indices) for v in values])
        self._cursor += span

    def append_rows(self, fid: int, start: int, arrays: list[pa.Array]) -> None:
        """Values for the fragment's physical rows ``start, start+1, ...`` (every row, deleted
        ones included, already null there): written as they are, no scatter."""
        if self._fid != fid:
            self._finish()
            self._open(fid)
        n = len(arrays[0])
        if start != self._cursor or start + n > self.spec.physical_rows[fid]:
            raise InvalidInputError(f"fragment {fid}: rows {start}..{start + n} do not continue at row "
                                    f"{self._cursor} of {self.spec.physical_rows[fid]}", path=self.spec.uri)
        self._write(arrays)
        self._cursor += n

    def append_live(self, fid: int, start: int, n: int, offsets: np.ndarray, values: list[pa.Array]) -> None:
        """Values of some of the physical rows ``start .. start + n`` (at ``offsets``); the
        others of that range are null."""
        if self._fid == fid and start != self._cursor:
            raise InvalidInputError(f"fragment {fid}: rows from {start} do not continue at row "
                                    f"{self._cursor}", path=self.spec.uri)
        self._segment(fid, offsets, values)
        self._pad(start + n)

    def feed(self, batch: pa.RecordBatch) -> None:
        """One batch of ``_rowaddr`` + new columns, ascending by address."""
        if not batch.num_rows:
            return
        addr_col = batch.column(batch.schema.get_field_index(ROW_ADDR))
        if addr_col.null_count:
            raise InvalidInputError("_rowaddr holds nulls", path=self.spec.uri)
        addrs = addr_col.to_numpy().view(np.uint64)
        frags = (addrs >> np.uint64(32)).astype(np.int64)
        offsets = (addrs & np.uint64(0xFFFF_FFFF)).astype(np.int64)
        values = self._values(batch)
        cuts = np.flatnonzero(frags[1:] != frags[:-1]) + 1
        for s, e in zip(np.r_[0, cuts], np.r_[cuts, frags.size], strict=True):
            self._segment(int(frags[s]), offsets[s:e], [v.slice(s, e - s) for v in values])

    def close(self) -> list[WrittenFile]:
        self._finish()
        while self._closing:
            self._settle()
        self._stop_pool()
        return self.written

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.abort()
        while self._closing:  # every close over first: the files that landed are deleted below
            try:
                self._settle()
            except BaseException:  # noqa: BLE001, S112 - aborted in _settle; the first error is the task's
                continue
        self._stop_pool()
        self.store.delete_many(f"{DATA_DIR}/{w.path}" for w in self.written)


def write_stream(spec: ColumnWriteSpec, batches: Iterator[pa.RecordBatch], attempt: str) -> list[WrittenFile]:
    """Write a whole stream; on error every file of this attempt is removed."""
    writer = ColumnFileWriter(spec, attempt)
    try:
        for b in batches:
            writer.feed(b)
        return writer.close()
    except BaseException:
        writer.abort()
        raise


def make_writer_mapper(spec: ColumnWriteSpec
                       ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """``mapInArrow`` function: value batches in, one result row per written file out."""

    def mapper(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        written = write_stream(spec, batches, attempt_id())
        if written:
            yield pa.RecordBatch.from_pylist([w.__dict__ for w in written], schema=_RESULT_ARROW)

    return mapper


# -- function mode ----------------------------------------------------------------------------
@dataclass(frozen=True)
class FunctionTask:
    """One task of the function mode: fragments of one version, the columns the function reads."""

    fragment_ids: tuple[int, ...]
    read_columns: tuple[str, ...] | None
    batch_rows: int = DEFAULT_BATCH_ROWS


def apply_function(fn: BatchFunction, batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """Call the user's function on a batch (without ``_rowaddr``) and check its output."""
    addr = batch.column(batch.schema.get_field_index(ROW_ADDR))
    user_in = batch.drop_columns([ROW_ADDR])
    out = fn(user_in)
    if isinstance(out, dict):
        out = pa.RecordBatch.from_pydict(out)
    if isinstance(out, pa.Table):
        out = pa.RecordBatch.from_arrays([c.combine_chunks() for c in out.columns], schema=out.schema)
    if not isinstance(out, pa.RecordBatch):
        raise SchemaError(f"the column function returned {type(out).__name__}, not a RecordBatch, Table "
                          "or dict")
    if out.num_rows != batch.num_rows:
        raise SchemaError(f"the column function returned {out.num_rows} rows for {batch.num_rows}")
    missing = [n for n in schema.names if n not in out.schema.names]
    if missing:
        raise SchemaError(f"the column function did not return declared column(s) {missing}")
    arrays = [addr, *[out.column(n) for n in schema.names]]
    return pa.RecordBatch.from_arrays(arrays, names=[ROW_ADDR, *schema.names])


def _null_where(arrays: list[pa.Array], keep: np.ndarray | None) -> list[pa.Array]:
    if keep is None or keep.all():
        return arrays
    mask = pa.array(keep)
    return [pc.if_else(mask, a, pa.scalar(None, a.type)) for a in arrays]


def _sql_rows(fn: SqlColumns, batch: pa.RecordBatch, keep: np.ndarray | None) -> list[pa.Array] | None:
    """The expressions over every physical row of ``batch``, null where ``keep`` is False;
    None when only deleted rows raised an evaluation error (the caller evaluates the live
    rows alone, which raises if they fail too).

    Expressions are row-wise, so evaluating deleted rows too changes no live value and saves
    the filter and the scatter back."""
    if keep is not None and not keep.any():
        return [pa.nulls(batch.num_rows, f.type) for f in fn.output_schema]
    try:
        return _null_where(fn.arrays(batch, raw_errors=True), keep)
    except pa.ArrowInvalid:
        if keep is None or keep.all():
            fn.arrays(batch)  # the same error, named after its column
            raise
    return None


def _run_sql_task(ds: Any, spec: ColumnWriteSpec, fn: SqlColumns, task: FunctionTask,
                  attempt: str) -> list[WrittenFile]:
    """Arrow-evaluated SQL: physical rows in, the new file's rows out, one for one."""
    writer = ColumnFileWriter(spec, attempt)
    cols = list(task.read_columns) if task.read_columns is not None else None
    try:
        for fid in task.fragment_ids:
            keep = ds.live_mask(ds.fragment(fid))
            start = 0
            for batch in ds.scan_fragment(fid, cols, batch_rows=task.batch_rows, include_deleted=True):
                n = batch.num_rows
                part = None if keep is None else keep[start:start + n]
                arrays = _sql_rows(fn, batch, part)
                if arrays is not None:
                    writer.append_rows(fid, start, arrays)
                else:  # part is a mask with live and deleted rows here
                    live = fn.arrays(batch.filter(pa.array(part)))
                    writer.append_live(fid, start, n, start + np.flatnonzero(part), live)
                start += n
        return writer.close()
    except BaseException:
        writer.abort()
        raise


def run_function_task(spec: ColumnWriteSpec, fn: BatchFunction, task: FunctionTask,
                      ctx: TaskContext) -> list[WrittenFile]:
    """Executor entry point of the function mode (Lance-typed input, as pylance's BatchUDF)."""
    from lance_spark_ops.spark.runtime.scan_tasks import open_dataset

    ds = open_dataset(spec.uri, spec.version, spec.storage_options, spec.timestamp)
    # object stores: the fragments' deletion files and small data files in flight together (a
    # fragment read in turn waits a round trip for each)
    ahead = FragmentBatch.of(ds, task.fragment_ids)
    with ahead.fetched_ahead(data_max_bytes=WHOLE_FILE_READ):
        if isinstance(fn, SqlColumns):
            return _run_sql_task(ds, spec, fn, task, ctx.attempt)
        cols = list(task.read_columns) if task.read_columns is not None else None

        def stream() -> Iterator[pa.RecordBatch]:
            for fid in task.fragment_ids:
                for batch in ds.scan_fragment(fid, cols, with_row_address=True, batch_rows=task.batch_rows):
                    yield apply_function(fn, batch, spec.schema)

        return write_stream(spec, stream(), ctx.attempt)

