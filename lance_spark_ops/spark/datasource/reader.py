"""Reading side of the ``lance`` data source: partition planning and the per-partition scan.

A partition is a list of fragment slices ``(fragment id, first, last)`` (physical rows
``first..last``; ``last`` None = to the end). By default a fragment over ``DEFAULT_SPLIT_ROWS``
physical rows is split into equal row ranges, and neighbouring whole fragments share a
partition up to ``max_bytes_per_partition`` of data files (128 MiB, each fragment counted 4 MiB
more, as Spark's file sources pack files; 0: a partition per fragment; a fragment whose file
sizes the manifest lacks gets its own); ``max_rows_per_partition`` instead both splits at that
size and packs neighbours by rows; ``split_fragments=false`` never splits (``add_columns`` needs
each fragment whole in one partition). Each partition yields its live rows in physical order.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from lance_spark_ops.concurrency import read_ahead
from lance_spark_ops.errors import NotFoundError, SchemaError
from lance_spark_ops.file.metadata import WHOLE_FILE_READ
from lance_spark_ops.spark.datasource import filters as F
from lance_spark_ops.spark.datasource.options import DEFAULT_SPLIT_ROWS, PARTITION_OPEN_BYTES, ReadOptions
from lance_spark_ops.spark.runtime.scan_tasks import ShippedManifest, open_dataset, receive, ship
from lance_spark_ops.spark.runtime.spark_types import spark_schema, spark_target_schema, to_spark_batch
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.format.fragment import DataFragment
from lance_spark_ops.table.fragment_batch import FragmentBatch

Slice = tuple[int, int, int | None]


class LancePartition(InputPartition):
    """Fragment slices read by one Spark task."""

    def __init__(self, slices: Sequence[Slice]) -> None:
        super().__init__(tuple(slices))
        self.slices: tuple[Slice, ...] = tuple(slices)


def plan_slices(sizes: Sequence[tuple[int, int | None] | tuple[int, int | None, int | None]],
                max_rows: int | None, split: bool = True, max_bytes: int = 0) -> list[list[Slice]]:
    """Group fragments ``(id, physical rows or None[, data file bytes or None])`` into
    partitions (see the module doc; ``max_bytes`` packs by bytes when ``max_rows`` is None)."""
    limit = max_rows if max_rows is not None else DEFAULT_SPLIT_ROWS
    groups: list[list[Slice]] = []
    rows = 0
    held: int | None = None  # bytes the last group holds (with open costs); None: it takes no more
    for entry in sizes:
        fid, n = entry[0], entry[1]
        nbytes = entry[2] if len(entry) > 2 else None
        if n is not None and split and n > limit:
            k = math.ceil(n / limit)
            bounds = [round(i * n / k) for i in range(k + 1)]
            groups.extend([[(fid, bounds[i], bounds[i + 1])] for i in range(k)])
            rows, held = limit, None  # nothing packs onto a split piece
            continue
        size = n if n is not None else limit
        cost = None if nbytes is None else nbytes + PARTITION_OPEN_BYTES
        if max_rows is not None:
            if groups and rows + size <= max_rows:
                groups[-1].append((fid, 0, n))
                rows += size
                continue
        elif max_bytes and cost is not None and held is not None and held + cost <= max_bytes:
            groups[-1].append((fid, 0, n))
            held += cost
            continue
        groups.append([(fid, 0, n)])
        rows, held = size, cost
    return groups


def _file_bytes(fragment: DataFragment) -> int | None:
    """Bytes of the fragment's data files as the manifest records them (None: one it does not)."""
    sizes = [df.file_size_bytes for df in fragment.files]
    return sum(sizes) if sizes and all(sizes) else None


def open_pinned(opts: ReadOptions) -> Dataset:
    """The version a read is planned on (through the per-process cache when pinned)."""
    if opts.version is not None:
        return open_dataset(opts.uri, opts.version, opts.storage_options, opts.version_timestamp)
    return Dataset.open(opts.uri, storage_options=opts.storage_options)


def scan_arrow_schema(ds: Dataset, opts: ReadOptions) -> pa.Schema:
    cols = list(opts.columns) if opts.columns is not None else None
    return ds.output_schema(cols, opts.with_row_id, opts.with_row_address)


class LanceReader(DataSourceReader):
    """Plans partitions on the driver and scans them on executors (pickled in between)."""

    def __init__(self, opts: ReadOptions, schema: Any, shipped: ShippedManifest | None = None) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema

        self.opts = opts
        receive([shipped])  # the source's, when it opened the version
        ds = open_pinned(opts)
        arrow = scan_arrow_schema(ds, opts)
        expected = spark_schema(arrow)
        if schema is not None and schema != expected:
            raise SchemaError(f"the schema given to the lance source ({schema.simpleString()}) is not the "
                              f"dataset's ({expected.simpleString()}); leave it out", path=opts.uri)
        self.version, self.timestamp = ds.version, ds.timestamp
        self.shipped = ship(ds)  # the manifest for the tasks (pickled with this reader), when small
        self.target = spark_target_schema(arrow)
        self.spark_arrow = to_arrow_schema(expected, timezone="UTC")
        self.types = {f.name: f.dataType for f in expected.fields}
        self.sizes = self._sizes(ds)
        self.filters: list[Any] = []

    def _sizes(self, ds: Dataset) -> list[tuple[int, int | None]]:
        frags = ds.fragments
        if self.opts.fragment_ids is not None:
            wanted = set(self.opts.fragment_ids)
            missing = sorted(wanted - {f.id for f in frags})
            if missing:
                raise NotFoundError(f"no fragment(s) {missing} in version {ds.version}", path=ds.uri)
            frags = [f for f in frags if f.id in wanted]
        return [(f.id, f.physical_rows, _file_bytes(f)) for f in frags]

    def pushFilters(self, filters: list[Any]) -> Iterator[Any]:  # noqa: N802 (pyspark's name)
        """Keep the filters ``filters.accepts``; hand the rest back to Spark."""
        accepted, rejected = F.split_filters(filters, self.types)
        self.filters.extend(accepted)
        yield from rejected

    def partitions(self) -> list[InputPartition]:
        groups = plan_slices(self.sizes, self.opts.max_rows_per_partition, self.opts.split_fragments,
                             self.opts.max_bytes_per_partition)
        return [LancePartition(g) for g in groups]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        slices = getattr(partition, "slices", ())
        if not slices:
            return
        receive([self.shipped])
        ds = open_dataset(self.opts.uri, self.version, self.opts.storage_options, self.timestamp)
        # object stores: the partition's deletion files and small data files in flight together
        # (read in turn, a fragment waited a round trip for its data file, then one for its
        # deletion file)
        batch = FragmentBatch.of(ds, (fid for fid, _, _ in slices))
        # and the next slices read while this one goes to Spark, as many as the byte budget
        # holds of the largest fragment (a footer and page reads each, in turn otherwise);
        # elsewhere, or one slice, batch by batch
        window = 1 if ds.store.is_local or len(slices) < 2 else batch.read_window(ds.store.budget)
        with batch.fetched_ahead(data_max_bytes=WHOLE_FILE_READ):
            pieces = (read_ahead(lambda s: list(self._scan(ds, s)), slices, window) if window > 1
                      else (self._scan(ds, s) for s in slices))
            for piece in pieces:
                yield from piece

    def _scan(self, ds: Dataset, piece: Slice) -> Iterator[pa.RecordBatch]:
        """One slice's live rows as Spark batches, filters applied."""
        fid, first, last = piece
        cols = list(self.opts.columns) if self.opts.columns is not None else None
        row_range = None if last is None else (first, last)
        for batch in ds.scan_fragment(fid, cols, self.opts.with_row_id, self.opts.with_row_address,
                                      self.opts.batch_rows, row_range=row_range):
            if batch.num_rows == 0:
                continue
            out = to_spark_batch(batch, self.target)
            if not out.schema.equals(self.spark_arrow):
                out = out.cast(self.spark_arrow)  # timestamps with a zone: Spark wants UTC
            out = F.apply(self.filters, out)
            if out.num_rows:
                yield out


class ReaderNoPushdown(LanceReader):
    """``LanceReader`` that hands every filter back to Spark (``LanceDataSourceNoPushdown``)."""

    pushFilters = DataSourceReader.pushFilters  # noqa: N815 - pyspark's own: every filter to Spark
