"""Executor tasks of the row-id index rebuild.

``run_sequence_rebuild`` (through ``spark.runtime.runner``): for each fragment of its group, read the
row-id sequence (inline, or an ``external_row_ids`` slice left by an older writer) and the
deletion vector, and re-encode the sequence (``row_id_sequences.compact_sequence``: live ids
unchanged, ids at deleted positions chosen to encode smallest). A fragment whose sequence is
already as small (and inline) is reported unchanged.

Every new sequence is inline. Lance releases write only inline sequences, and pylance 14 no
longer reads the ``external_row_ids`` arm at all (its ``RowIdMeta`` has ``Inline`` and
``Column`` only; a manifest with an external slice fails to open with "All fragments must have
row ids"). Its placement for large sequences is the opt-in *spilled* arm (table config
``lance.row_lineage.spill``, a hidden ``uint64`` column at field id -3 in one of the
fragment's data files, reader/writer feature flag 2048), which this library's table layer
does not read or write yet; so large sequences stay inline, as every Lance build keeps them
unless the table opts into spilling.

``make_pairs_mapper`` / ``make_part_writer`` (through ``mapInArrow``): emit ``(row_id,
row_addr)`` of every live row, then, after Spark's range partitioning and sort, write each
partition as one Lance file of the index (layout in ``lance_spark_ops.row_id_index``). Ids and
addresses travel through Spark as ``long`` with the same bits; ids at or above ``2**63`` (which
would sort wrongly as signed) are refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa

from lance_spark_ops.errors import CorruptFileError, UnsupportedError
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.row_id_index import PART_SCHEMA, index_dir
from lance_spark_ops.spark.files.row_id_sequences import compact_sequence
from lance_spark_ops.spark.runtime.runner import TaskContext
from lance_spark_ops.spark.runtime.scan_tasks import ShippedManifest, open_dataset, receive
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.deletion import keep_mask
from lance_spark_ops.table.format.fragment import DataFragment, ExternalFile, SequenceMeta
from lance_spark_ops.table.fragment_batch import FragmentBatch
from lance_spark_ops.table.rowids import decode_row_ids

PAIRS_SCHEMA = "row_id long, row_addr long"
PART_RESULT_SCHEMA = "part long, path string, rows long, min_row_id long, max_row_id long, size long"
_PAIR_BATCH = 1 << 20


@dataclass(frozen=True)
class SequenceSpec:
    """One rebuild task: a group of fragments of one version."""

    uri: str
    version: int
    fragment_ids: tuple[int, ...]
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)  # secrets: not in reprs
    timestamp: datetime | None = None  # of the version (see tasks.scan.open_dataset)


@dataclass
class FragmentSequence:
    fragment_id: int
    bytes_before: int
    bytes_after: int
    segments_before: int
    segments_after: int
    meta: bytes | None = None  # the new inline row_id_meta; None: leave the fragment unchanged

    @property
    def changed(self) -> bool:
        return self.meta is not None


def meta_size(meta: SequenceMeta) -> int:
    """Bytes of sequence metadata a fragment carries (inline bytes or the external slice)."""
    if meta is None:
        return 0
    return meta.size if isinstance(meta, ExternalFile) else len(meta)


def rebuild_fragment_sequence(ds: Dataset, frag: DataFragment) -> FragmentSequence:
    """The compacted sequence of one fragment (``meta`` None when nothing would improve)."""
    old = ds.row_id_sequence(frag)
    if old is None:
        raise CorruptFileError(f"fragment {frag.id} has no row-id sequence", path=ds.uri)
    ids = decode_row_ids(old)
    deleted = ~keep_mask(ds.deleted_offsets(frag), ids.size, ds.uri)
    new = compact_sequence(ids, deleted)
    data = new.to_bytes()
    before = meta_size(frag.row_id_meta)
    result = FragmentSequence(frag.id, before, before, len(old.segments), len(old.segments))
    if len(data) < before or isinstance(frag.row_id_meta, ExternalFile):
        result.bytes_after, result.segments_after, result.meta = len(data), len(new.segments), data
    return result


def run_sequence_rebuild(spec: SequenceSpec, ctx: TaskContext) -> list[FragmentSequence]:
    """Executor entry point: re-encode the sequences of ``spec.fragment_ids``."""
    ds = open_dataset(spec.uri, spec.version, spec.storage_options, spec.timestamp)
    by_id = {f.id: f for f in ds.fragments}
    frags = [by_id[fid] for fid in spec.fragment_ids]
    with FragmentBatch(ds, frags).fetched_ahead(data=False):  # object stores: deletion files together
        return [rebuild_fragment_sequence(ds, f) for f in frags]


# -- the lookup index ------------------------------------------------------------------------
def live_pairs(ds: Dataset, frag: DataFragment) -> tuple[np.ndarray, np.ndarray]:
    """``(row ids, row addresses)`` of the fragment's live rows, in physical order."""
    ids = ds.row_ids(frag)
    if ids is None:
        raise UnsupportedError("the dataset has no stable row ids: row ids are row addresses", path=ds.uri)
    keep = keep_mask(ds.deleted_offsets(frag), ids.size, ds.uri)
    offsets = np.flatnonzero(keep).astype(np.uint64)
    return ids[keep], offsets | (np.uint64(frag.id) << np.uint64(32))


def _pairs_batches(ds: Dataset, fragment_ids: list[int]) -> Iterator[pa.RecordBatch]:
    by_id = {f.id: f for f in ds.fragments}
    frags = [by_id[fid] for fid in fragment_ids]
    with FragmentBatch(ds, frags).fetched_ahead(data=False):  # object stores: deletion files together
        yield from _fragment_pairs(ds, frags)


def _fragment_pairs(ds: Dataset, frags: list[DataFragment]) -> Iterator[pa.RecordBatch]:
    for frag in frags:
        fid = frag.id
        ids, addrs = live_pairs(ds, frag)
        if ids.size and int(ids.max()) >= 1 << 63:
            raise UnsupportedError(f"fragment {fid} holds row id {int(ids.max())} >= 2**63, which the index "
                                   "build cannot sort as a Spark long", path=ds.uri)
        for s in range(0, ids.size, _PAIR_BATCH):
            chunk = slice(s, s + _PAIR_BATCH)
            yield pa.RecordBatch.from_arrays(
                [pa.array(ids[chunk].view(np.int64)), pa.array(addrs[chunk].view(np.int64))],
                names=["row_id", "row_addr"])


def make_pairs_mapper(uri: str, version: int, storage_options: dict[str, Any], groups: list[list[int]],
                      timestamp: datetime | None = None, shipped: ShippedManifest | None = None
                      ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """``mapInArrow`` function over ``spark.range(len(groups))``: row ``i`` stands for the
    fragments ``groups[i]``; yields their live ``(row_id, row_addr)`` pairs. ``shipped``: the
    version's manifest as the driver holds it (``scan_tasks.ship``)."""

    def mapper(ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        receive([shipped])
        ds = open_dataset(uri, version, storage_options, timestamp)
        for batch in ids:
            for i in batch.column(0).to_pylist():
                yield from _pairs_batches(ds, groups[i])

    return mapper


@dataclass
class PartInfo:
    rows: int
    min_row_id: int
    max_row_id: int
    size: int


def write_part(store: ObjectStore, rel: str, batches: Iterator[pa.RecordBatch],
               file_version: str) -> PartInfo | None:
    """Write sorted ``(row_id, row_addr)`` batches (``long`` bits) as one index part; None if empty.

    CorruptFileError if ids are not strictly ascending (a live id twice, or unsorted input)."""
    from lance_spark_ops.file.writer import LanceFileWriter

    writer: LanceFileWriter | None = None
    first = last = None
    try:
        for b in batches:
            if not b.num_rows:
                continue
            ids = b.column(0).to_numpy().view(np.uint64)
            addrs = b.column(1).to_numpy().view(np.uint64)
            ascending = ids.size < 2 or bool(np.all(ids[1:] > ids[:-1]))
            if not ascending or (last is not None and int(ids[0]) <= last):
                raise CorruptFileError("row ids of the index are not strictly ascending: a row id is live in "
                                       "two places, or the input was not sorted", path=store.uri(rel))
            if writer is None:
                writer = LanceFileWriter(rel, PART_SCHEMA, version=file_version, store=store)
                first = int(ids[0])
            last = int(ids[-1])
            writer.write(pa.record_batch([pa.array(ids), pa.array(addrs)], schema=PART_SCHEMA))
        if writer is None:
            return None
        rows, size = writer.close()
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    assert first is not None and last is not None
    return PartInfo(rows, first, last, size)


def make_part_writer(uri: str, version: int, job_id: str, file_version: str, storage_options: dict[str, Any]
                     ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """``mapInArrow`` function over one range partition: writes it, yields one result row."""

    def mapper(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext as SparkTaskContext

        ctx = SparkTaskContext.get()
        part = ctx.partitionId() if ctx is not None else 0
        attempt = f"{ctx.stageId()}.{ctx.attemptNumber()}" if ctx is not None else "local"
        name = f"part-{part:05d}-{job_id}-{attempt}.lance"
        store = ObjectStore(uri, storage_options)
        info = write_part(store, f"{index_dir(version)}/{name}", batches, file_version)
        if info is None:
            return
        yield pa.RecordBatch.from_pylist(
            [{"part": part, "path": name, "rows": info.rows, "min_row_id": info.min_row_id,
              "max_row_id": info.max_row_id, "size": info.size}],
            schema=pa.schema([("part", pa.int64()), ("path", pa.string()), ("rows", pa.int64()),
                              ("min_row_id", pa.int64()), ("max_row_id", pa.int64()), ("size", pa.int64())]))

    return mapper
