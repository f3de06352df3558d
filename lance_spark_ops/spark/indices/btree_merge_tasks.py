"""Range-parallel BTREE merge (issue #27): the single merge task over every sorted run was the
long pole of a large build, so the runs are merged a value range per task.

The driver (``spark.indices.scalar_index``) cuts the sampled keys of all runs (``Part.samples`` of
the part tasks, the old segments' ``page_lookup`` mins) into ranges (``plan_ranges``). A
range task (``run_range``) reads one window per run (``index.scalar.btree.window``), keeps the
rows of its range, merges them and writes them as a piece of ``page_data`` with the page
lookup rows of the pages starting or ending in it (its first global row is known: every row
at or before its lower boundary sorts before it); a range holding rows of one run only
(an old segment's values below or above all new ones, the usual optimize) is left in place
as a span of that run. The finish task (``run_finish``) appends the pieces' pages and the
spans' pages undecoded (a span's cut pages re-encoded) into ``page_data.lance``, writes
``page_lookup.lance`` and deletes the pieces and parts. Files equal what one merge task
writes, up to page cuts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from lance_spark_ops._pb import table_pb2
from lance_spark_ops.errors import CorruptFileError
from lance_spark_ops.file.reader import LanceFileReader
from lance_spark_ops.file.writer import LanceFileWriter, write_table
from lance_spark_ops.index.scalar import btree as bt
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.spark.indices.scalar_index_tasks import keep_filter_is_all, old_dir, segment_dir
from lance_spark_ops.spark.runtime.runner import TaskContext
from lance_spark_ops.spark.runtime.scan_tasks import open_dataset
from lance_spark_ops.table.dataset import Dataset


@dataclass(frozen=True)
class Run:
    """One sorted run: a part file of the new segment (``part``) or an old segment's
    ``page_data`` (``old``: its IndexMetadata bytes); ``rows`` and the sampled keys."""

    part: str | None
    old: bytes | None
    rows: int
    positions: np.ndarray
    rank: np.ndarray
    values: np.ndarray


@dataclass(frozen=True)
class RangeSpec:
    """Picklable: one value range ``(lo, hi]`` (None: unbounded) and each run's window."""

    uri: str
    read_version: int
    new_uuid: bytes
    runs: tuple[tuple[str | None, bytes | None], ...]
    windows: tuple[tuple[int, int], ...]
    lo: bt.Key | None
    hi: bt.Key | None
    value_type: Any
    batch_size: int
    file_version: str
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)
    # the read version's commit time (a cache key, as the part tasks': a dataset written again
    # at the same URI reuses version numbers)
    timestamp: Any = None


@dataclass(frozen=True)
class RangeOut:
    """A range's rows: merged into a piece ``file``, or (one run alone had rows in it) the
    ``span`` (run index, first row, end row) of that run, copied by the finish task."""

    file: str | None
    rows: int
    cutter: bt.PageCutter | None
    span: tuple[int, int, int] | None = None


@dataclass(frozen=True)
class FinishSpec:
    """Picklable: the ranges' outputs in key order, the runs their spans point into, the
    part files to delete."""

    uri: str
    read_version: int
    new_uuid: bytes
    runs: tuple[tuple[str | None, bytes | None], ...]
    outs: tuple[RangeOut, ...]
    parts: tuple[str, ...]
    value_type: Any
    file_version: str
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)
    timestamp: Any = None  # the version's commit time, as the driver opened it (``open_dataset``)


def old_run(ds: Dataset, index: Any, value_type: pa.DataType) -> Run | None:
    """An old segment as a run sampled by its lookup's mins (page i's first value), or None
    when the range merge cannot take it (rows of removed fragments to drop, another layout)."""
    if not keep_filter_is_all(ds, index):
        return None
    store, src = old_dir(ds, index)
    lookup = LanceFileReader(f"{src}/{bt.PAGE_LOOKUP}", store=store)
    bt.check_not_range_partitioned(lookup.schema, lookup.path)
    data = LanceFileReader(f"{src}/{bt.PAGE_DATA}", store=store)
    if data.schema.names[:2] != ["values", "ids"] or data.schema.field("values").type != value_type:
        return None
    stride = bt.batch_size_of(lookup.schema)
    mins = lookup.read(["min"]).column("min").cast(value_type)
    rank, v = bt.sort_keys(mins)
    positions = np.arange(len(mins), dtype=np.int64) * stride
    return Run(None, index.SerializeToString(), data.num_rows, positions, rank, v)


def plan_ranges(runs: list[Run], n_ranges: int) -> list[tuple[bt.Key | None, bt.Key | None,
                                                               tuple[tuple[int, int], ...]]]:
    """(lo, hi, a window per run) of each range, in key order."""
    samples = [(r.rank, r.values, max(1, int(r.positions[1] - r.positions[0]) if len(r.positions) > 1
                                      else r.rows)) for r in runs if len(r.positions)]
    bounds = bt.pick_bounds(samples, n_ranges)
    edges: list[bt.Key | None] = [None, *bounds, None]
    out = []
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        windows = tuple(bt.window(r.positions, r.rank, r.values, r.rows, lo, hi) for r in runs)
        out.append((lo, hi, windows))
    return out


def _run_reader(ds: Dataset, new_uuid: bytes, part: str | None, old: bytes | None) -> LanceFileReader:
    if part is not None:
        reader = LanceFileReader(f"{segment_dir(new_uuid)}/{part}", store=ds.store)
    else:
        store, src = old_dir(ds, table_pb2.IndexMetadata.FromString(old))
        reader = LanceFileReader(f"{src}/{bt.PAGE_DATA}", store=store)
    if reader.schema.names[:2] != ["values", "ids"]:
        raise CorruptFileError(f"columns {reader.schema.names}, expected values, ids", path=reader.path)
    return reader


def _rows(reader: LanceFileReader, column: str, start: int, stop: int) -> pa.Array:
    batches = list(reader.iter_batches([column], batch_rows=max(1, stop - start), start=start, stop=stop))
    return pa.chunked_array([b.column(0) for b in batches], reader.schema.field(column).type).combine_chunks()


def run_range(spec: RangeSpec, ctx: TaskContext) -> RangeOut:
    """Executor entry point: merge one key range of every run into a piece of page_data (or,
    when one run alone has rows in it, leave them where they are: a span)."""
    ds = open_dataset(spec.uri, spec.read_version, spec.storage_options, spec.timestamp)
    start, slices = 0, []
    for k, ((part, old), (a, c)) in enumerate(zip(spec.runs, spec.windows, strict=True)):
        if c <= a:  # no row of this run in the range: the rows before a sort before it
            start += a
            continue
        reader = _run_reader(ds, spec.new_uuid, part, old)
        values = _rows(reader, "values", a, c)
        rank, v = bt.sort_keys(values)
        s = int(np.count_nonzero(bt.keys_le(rank, v, spec.lo))) if spec.lo is not None else 0
        e = int(np.count_nonzero(bt.keys_le(rank, v, spec.hi))) if spec.hi is not None else len(values)
        start += a + s
        if e > s:
            slices.append((k, reader, a + s, a + e, values.slice(s, e - s)))
    if not slices:
        return RangeOut(None, 0, None)
    cutter = bt.PageCutter.starting_at(spec.batch_size, bt.lookup_schema(spec.value_type, spec.batch_size),
                                       start)
    if len(slices) == 1:
        k, _, x, y, values = slices[0]
        cutter.add(values)
        return RangeOut(None, y - x, cutter, (k, x, y))
    schema = bt.page_data_schema(spec.value_type)
    pieces = [pa.Table.from_arrays([values, _rows(reader, "ids", x, y)], names=["values", "ids"]).cast(schema)
              for _, reader, x, y, values in slices]
    merged = bt.merge_pieces(pieces)
    rel = f"{segment_dir(spec.new_uuid)}/{ctx.file_prefix}_range.lance"
    write_table(rel, merged, spec.file_version, ds.store, ())
    cutter.add(merged.column("values"))
    return RangeOut(rel.rsplit("/", 1)[1], merged.num_rows, cutter)


def _spans(outs: tuple[RangeOut, ...]) -> list[tuple[str | None, tuple[int, int, int] | None]]:
    """The outputs in order, consecutive spans of one run joined (one copy, fewer cut pages)."""
    out: list[tuple[str | None, tuple[int, int, int] | None]] = []
    for o in outs:
        if o.span is not None and out and out[-1][1] is not None:
            k, x, y = out[-1][1]
            if o.span[0] == k and o.span[1] == y:
                out[-1] = (None, (k, x, o.span[2]))
                continue
        if o.file is not None or o.span is not None:
            out.append((o.file, o.span))
    return out


def _copy_span(w: LanceFileWriter, reader: LanceFileReader, start: int, stop: int) -> None:
    """Rows ``start..stop`` of a run: pages inside moved undecoded, the cut ones re-encoded."""
    if w.can_copy_pages_from(reader) is None:
        keep = np.zeros(reader.num_rows, dtype=bool)
        keep[start:stop] = True
        w.append_live_pages(reader, keep)
        return
    for batch in reader.iter_batches(["values", "ids"], start=start, stop=stop):
        w.write(batch)


def run_finish(spec: FinishSpec, ctx: TaskContext) -> tuple[tuple[str, int], ...]:
    """Executor entry point: page_data from the ranges (pieces' pages, runs' spans),
    page_lookup, then delete the pieces and parts. An attempt finding one of them gone (an
    earlier attempt finished) returns the files it left."""
    ds = open_dataset(spec.uri, spec.read_version, spec.storage_options, spec.timestamp)
    store: ObjectStore = ds.store
    dst = segment_dir(spec.new_uuid)
    finals = (bt.PAGE_DATA, bt.PAGE_LOOKUP)
    temps = [*(o.file for o in spec.outs if o.file is not None), *spec.parts]
    if not all(store.exists(f"{dst}/{p}") for p in temps) and all(store.exists(f"{dst}/{f}") for f in finals):
        store.delete_many(f"{dst}/{p}" for p in temps)
        return tuple((f, store.size(f"{dst}/{f}")) for f in finals)
    w = LanceFileWriter(f"{dst}/{bt.PAGE_DATA}", bt.page_data_schema(spec.value_type),
                        version=spec.file_version, store=store)
    try:
        for piece, span in _spans(spec.outs):
            if piece is not None:
                w.append_file_pages(LanceFileReader(f"{dst}/{piece}", store=store))
            else:
                k, x, y = span
                _copy_span(w, _run_reader(ds, spec.new_uuid, *spec.runs[k]), x, y)
        size = w.close()[1]
    except BaseException:
        w.abort()
        raise
    lookup = bt.PageCutter.joined([o.cutter for o in spec.outs if o.cutter is not None]).finish()
    lookup_size = write_table(f"{dst}/{bt.PAGE_LOOKUP}", lookup, spec.file_version, store, ())
    store.delete_many(f"{dst}/{p}" for p in temps)
    return ((bt.PAGE_DATA, size), (bt.PAGE_LOOKUP, lookup_size))
