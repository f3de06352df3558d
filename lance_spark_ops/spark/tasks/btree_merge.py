"""Range-parallel BTREE merge (issue #27): the single merge task over every sorted run was the
long pole of a large build, so the runs are merged a value range per task.

The driver (``spark.scalar_index``) cuts the sampled keys of all runs (``Part.samples`` of
the part tasks, the old segments' ``page_lookup`` mins) into ranges (``plan_ranges``). A
range task (``run_range``) reads one window per run (``index.btree.window``), keeps the
rows of its range, merges them and writes them as a piece of ``page_data`` with the page
lookup rows of the pages starting or ending in it (its first global row is known: every row
at or before its lower boundary sorts before it). The finish task (``run_finish``) appends
the pieces' pages undecoded into ``page_data.lance``, writes ``page_lookup.lance`` and
deletes the pieces and parts. Files equal what one merge task writes, up to page cuts.
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
from lance_spark_ops.index import btree as bt
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.spark.runner import TaskContext
from lance_spark_ops.spark.tasks.scalar_index import keep_filter_is_all, old_dir, segment_dir
from lance_spark_ops.spark.tasks.scan import open_dataset
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


@dataclass(frozen=True)
class RangeOut:
    file: str | None
    rows: int
    cutter: bt.PageCutter | None


@dataclass(frozen=True)
class FinishSpec:
    """Picklable: the pieces in key order, their joined lookup, the part files to delete."""

    uri: str
    read_version: int
    new_uuid: bytes
    pieces: tuple[str, ...]
    parts: tuple[str, ...]
    cutters: tuple[bt.PageCutter, ...]
    value_type: Any
    file_version: str
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)


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


def _run_reader(ds: Dataset, spec: RangeSpec, part: str | None, old: bytes | None) -> LanceFileReader:
    if part is not None:
        return LanceFileReader(f"{segment_dir(spec.new_uuid)}/{part}", store=ds.store)
    store, src = old_dir(ds, table_pb2.IndexMetadata.FromString(old))
    return LanceFileReader(f"{src}/{bt.PAGE_DATA}", store=store)


def run_range(spec: RangeSpec, ctx: TaskContext) -> RangeOut:
    """Executor entry point: merge one key range of every run into a piece of page_data."""
    ds = open_dataset(spec.uri, spec.read_version, spec.storage_options)
    schema = bt.page_data_schema(spec.value_type)
    start, pieces = 0, []
    for (part, old), (a, c) in zip(spec.runs, spec.windows, strict=True):
        if c <= a:  # no row of this run in the range: the rows before a sort before it
            start += a
            continue
        reader = _run_reader(ds, spec, part, old)
        if reader.schema.names[:2] != ["values", "ids"]:
            raise CorruptFileError(f"columns {reader.schema.names}, expected values, ids", path=reader.path)
        t = pa.Table.from_batches(list(reader.iter_batches(["values", "ids"], batch_rows=max(1, c - a),
                                                           start=a, stop=c)))
        rank, v = bt.sort_keys(t.column("values"))
        s = int(np.count_nonzero(bt.keys_le(rank, v, spec.lo))) if spec.lo is not None else 0
        e = int(np.count_nonzero(bt.keys_le(rank, v, spec.hi))) if spec.hi is not None else t.num_rows
        start += a + s
        if e > s:
            pieces.append(t.slice(s, e - s).cast(schema))
    if not pieces:
        return RangeOut(None, 0, None)
    merged = bt.merge_pieces(pieces)
    rel = f"{segment_dir(spec.new_uuid)}/{ctx.file_prefix}_range.lance"
    write_table(rel, merged, spec.file_version, ds.store, ())
    cutter = bt.PageCutter.starting_at(spec.batch_size, bt.lookup_schema(spec.value_type, spec.batch_size),
                                       start)
    cutter.add(merged.column("values"))
    return RangeOut(rel.rsplit("/", 1)[1], merged.num_rows, cutter)


def run_finish(spec: FinishSpec, ctx: TaskContext) -> tuple[tuple[str, int], ...]:
    """Executor entry point: page_data from the pieces' pages, page_lookup, then delete the
    pieces and parts. An attempt finding a piece gone (an earlier one finished) returns the
    files it left."""
    ds = Dataset.open(spec.uri, spec.read_version, storage_options=spec.storage_options)
    store: ObjectStore = ds.store
    dst = segment_dir(spec.new_uuid)
    finals = (bt.PAGE_DATA, bt.PAGE_LOOKUP)
    if not all(store.exists(f"{dst}/{p}") for p in spec.pieces) and all(
            store.exists(f"{dst}/{f}") for f in finals):
        store.delete_many(f"{dst}/{p}" for p in (*spec.pieces, *spec.parts))
        return tuple((f, store.size(f"{dst}/{f}")) for f in finals)
    w = LanceFileWriter(f"{dst}/{bt.PAGE_DATA}", bt.page_data_schema(spec.value_type),
                        version=spec.file_version, store=store)
    try:
        for p in spec.pieces:
            w.append_file_pages(LanceFileReader(f"{dst}/{p}", store=store))
        size = w.close()[1]
    except BaseException:
        w.abort()
        raise
    lookup = bt.PageCutter.joined(list(spec.cutters)).finish()
    lookup_size = write_table(f"{dst}/{bt.PAGE_LOOKUP}", lookup, spec.file_version, store, ())
    store.delete_many(f"{dst}/{p}" for p in (*spec.pieces, *spec.parts))
    return ((bt.PAGE_DATA, size), (bt.PAGE_LOOKUP, lookup_size))
