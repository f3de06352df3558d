"""Rewrite task: read a group of neighbouring fragments (deleted rows dropped) and write
their live rows, in order, into new data files of the target file version.

Returns only fragment metadata. The old -> new row-address map is not shipped: it is
implied by the order (live rows of the old fragments, in fragment then offset order, fill
the new fragments in order), and the driver rebuilds it from the old deletion vectors
when it needs it (carrying concurrent deletes, index remapping).

Binary copy (``try_binary_copy`` / ``force_binary_copy``), for a fragment with one data file
of the target version and the dataset's field layout: without deleted rows every page is
moved undecoded; with some, pages holding none are moved and the others are decoded,
filtered and re-encoded (``LanceFileWriter.append_live_pages``); fragments with several
data files are re-encoded (``force`` refuses them), and so, under ``try``, are fragments
whose every page holds deleted rows (nothing would move; re-encoded in runs, as reencode).
"""

from __future__ import annotations

import concurrent.futures
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from lance_spark_ops._gc import gc_paused
from lance_spark_ops._heap import release_freed_memory, retain_freed_memory
from lance_spark_ops.cache import region
from lance_spark_ops.errors import LanceError, NotFoundError, UnsupportedError
from lance_spark_ops.file.columns import data_file_field_ids
from lance_spark_ops.file.legacy.writer import LegacyFileWriter
from lance_spark_ops.file.reader import LanceFileReader
from lance_spark_ops.file.schema import LanceSchema
from lance_spark_ops.file.tuning import FileTuning
from lance_spark_ops.file.writer import LanceFileWriter
from lance_spark_ops.io.budget import prefetch_share
from lance_spark_ops.io.prefetch import UNKNOWN_SIZE, in_use_share
from lance_spark_ops.spark.runtime.runner import TaskContext
from lance_spark_ops.spark.runtime.scan_tasks import DATASET_BYTES
from lance_spark_ops.spark.runtime.task_common import DATA_DIR, file_version_numbers
from lance_spark_ops.spark.runtime.tuning import DEFAULT_TUNING
from lance_spark_ops.table.blob import BlobCarrier, blob_data_file, blob_version, descriptor_lance_field
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.format.fragment import DataFile, DataFragment
from lance_spark_ops.table.format.manifest import ManifestSlice
from lance_spark_ops.table.fragment_batch import FragmentBatch
from lance_spark_ops.table.rowids import encode_row_ids, encode_versions


@dataclass(frozen=True)
class RewriteSpec:
    """Picklable descriptor of one rewrite task (a few hundred bytes)."""

    uri: str
    read_version: int
    fragment_ids: tuple[int, ...]
    file_version: str
    max_rows_per_file: int
    max_bytes_per_file: int | None = None
    batch_rows: int = 64 * 1024
    page_bytes: int = 8 * 1024 * 1024
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)  # secrets: not in reprs
    mode: str = "reencode"  # | "try_binary_copy" | "force_binary_copy"
    # where the fragments lie in the manifest file (``Dataset.fragment_slice``): the task reads
    # them, and not the other fragments of the version; None: it opens the whole manifest
    manifest_slice: ManifestSlice | None = field(default=None, repr=False)
    # the job's ``Tuning``: fragments taken up at once, small fragments read together at most,
    # checked paths the dataset remembers, the writers' buffer / window sizes
    fragment_chunk: int = DEFAULT_TUNING.fragment_chunk
    run_fragments: int = DEFAULT_TUNING.run_fragments
    paths_kept: int = DEFAULT_TUNING.paths_kept
    file_tuning: FileTuning = DEFAULT_TUNING.file


@dataclass
class RewriteResult:
    fragment_ids: tuple[int, ...]
    new_fragments: list[DataFragment]  # ids are placeholders until commit
    files: list[str]  # paths relative to data/
    rows_read: int = 0
    rows_written: int = 0
    fragments_copied: int = 0  # binary copy: fragments whose pages were moved (some maybe re-encoded)
    pages_copied: int = 0  # binary copy: pages moved without decoding
    pages_reencoded: int = 0  # binary copy: pages holding deleted rows, decoded and re-encoded
    bytes_read: int = 0
    bytes_written: int = 0
    seconds: float = 0.0
    peak_rss_bytes: int = 0  # of the process that ran the task (a reused Python worker)


class _FragmentSink:
    """Rolls new data files as rows arrive; one new fragment per file."""

    def __init__(self, ds: Dataset, spec: RewriteSpec, prefix: str) -> None:
        self.ds, self.spec, self.prefix = ds, spec, prefix
        self.blob_v2 = [f for f in ds.lance_schema.fields if blob_version(f) == 2]
        self.blobs = "descriptions" if self.blob_v2 else "bytes"
        if self.blob_v2 and any(blob_version(f) == 1 for f in ds.lance_schema.fields):
            raise UnsupportedError("a dataset with both blob v1 and blob v2 columns cannot be rewritten",
                                   path=ds.uri)
        # blob v2 columns are rewritten as their packed descriptors, payloads carried to sidecars
        self.file_schema = LanceSchema([descriptor_lance_field(f) if blob_version(f) == 2 else f
                                        for f in ds.lance_schema.fields], ds.lance_schema.metadata)
        self.schema = self.file_schema.to_arrow()
        self.sources: dict[int, tuple[Any, str]] = {}  # blob v2 field id -> its current data file
        self.carrier: BlobCarrier | None = None
        self.sidecars: list[str] = []
        if spec.file_version == "0.1":  # every field, pre-order; v1 files have no column indices
            self.field_ids, self.column_indices = [f.id for f in ds.lance_schema.walk()], []
        else:
            self.field_ids, self.column_indices = data_file_field_ids(self.file_schema.fields,
                                                                      spec.file_version)
        self.done: list[tuple[DataFile, int]] = []
        self.writer: LanceFileWriter | None = None
        self.name = ""
        # 2.1+ writers take dictionary-encoded strings undecoded (encoding.carried_dictionary)
        self.keep_dictionaries = spec.file_version not in ("0.1", "2.0") and not self.blob_v2

    def _open(self) -> LanceFileWriter:
        self.name = f"{self.prefix}-{uuid.uuid4().hex}.lance"
        if self.spec.file_version == "0.1":
            return LegacyFileWriter(f"{DATA_DIR}/{self.name}", self.schema, store=self.ds.store,
                                    lance_schema=self.ds.lance_schema)
        if self.blob_v2:
            self.carrier = BlobCarrier(self.ds.store, f"{DATA_DIR}/{self.name}")
        return LanceFileWriter(f"{DATA_DIR}/{self.name}", self.schema, version=self.spec.file_version,
                               store=self.ds.store, page_bytes=self.spec.page_bytes,
                               lance_schema=self.file_schema, tuning=self.spec.file_tuning)

    def _carry(self, part: pa.RecordBatch) -> pa.RecordBatch:
        """Blob v2 descriptors of ``part`` pointing at the new file's sidecars."""
        if self.carrier is None:
            return part
        cols = list(part.columns)
        for f in self.blob_v2:
            i = part.schema.get_field_index(f.name)
            cols[i] = self.carrier.carry(cols[i], self.sources[f.id])
        return pa.RecordBatch.from_arrays(cols, schema=self.schema)

    def copy_file(self, reader: LanceFileReader, keep: np.ndarray) -> tuple[int, int] | None:
        """Binary copy of a data file's pages: all of them when ``keep`` (live rows) is all
        True, else those without deleted rows, the others re-encoded. Returns (pages
        copied, pages re-encoded), or None if the file's pages cannot be copied here."""
        live = int(keep.sum())
        if self.writer is not None and self.writer.rows_written + live > self.spec.max_rows_per_file:
            self.roll()
        if self.writer is None:
            self.writer = self._open()
        if self.writer.can_copy_pages_from(reader) is not None:
            return None
        if live == keep.size:
            counts = (self.writer.append_file_pages(reader), 0)
        else:
            counts = self.writer.append_live_pages(reader, keep)
        self._roll_if_full()
        return counts

    def write(self, batch: pa.RecordBatch) -> None:
        start = 0
        while start < batch.num_rows:
            if self.writer is None:
                self.writer = self._open()
            room = self.spec.max_rows_per_file - self.writer.rows_written
            part = batch.slice(start, room)
            self.writer.write(self._carry(part))
            start += part.num_rows
            self._roll_if_full()

    def write_run(self, batches: list[pa.RecordBatch]) -> None:
        """``write`` of each batch in turn, in one writer call when no file boundary falls
        inside the run (same files, same pages: ``LanceFileWriter.write_batches``)."""
        rows = sum(b.num_rows for b in batches)
        if self.blob_v2 or self.spec.max_bytes_per_file is not None or not rows:
            for batch in batches:
                self.write(batch)
            return
        if self.writer is None:
            self.writer = self._open()
        if self.writer.rows_written + rows > self.spec.max_rows_per_file:
            for batch in batches:
                self.write(batch)
            return
        self.writer.write_batches(batches)
        self._roll_if_full()

    def _roll_if_full(self) -> None:
        """The file-roll rule: close the current file once it holds ``max_rows_per_file`` rows or
        ``max_bytes_per_file`` bytes."""
        w = self.writer
        if w is not None and (w.rows_written >= self.spec.max_rows_per_file
                              or (self.spec.max_bytes_per_file is not None
                                  and w.bytes_pending >= self.spec.max_bytes_per_file)):
            self.roll()

    def roll(self) -> None:
        if self.writer is None:
            return
        rows, size = self.writer.close()
        if self.carrier is not None:
            self.carrier.close()
            self.sidecars += self.carrier.written
            self.carrier = None
        major, minor = file_version_numbers(self.spec.file_version)
        self.done.append((DataFile(self.name, list(self.field_ids), list(self.column_indices), major, minor,
                                   size), rows))
        self.writer = None

    def abort(self) -> list[str]:
        if self.writer is not None:
            self.writer.abort()
            self.writer = None
        if self.carrier is not None:
            self.carrier.abort()
            self.carrier = None
        self.ds.store.delete_many(self.sidecars)
        return [df.path for df, _ in self.done]


def run_rewrite(spec: RewriteSpec, ctx: TaskContext) -> RewriteResult:
    """Executor entry point: rewrite ``spec.fragment_ids`` of version ``spec.read_version``."""
    t0 = time.perf_counter()
    retain_freed_memory()  # numpy temporaries reuse heap pages instead of faulting new ones
    try:
        return _run_rewrite(spec, ctx, t0)
    finally:
        release_freed_memory()


# The version a job's tasks read, as the last task of that job in this worker process opened
# it: the job's next task here skips listing and parsing the manifest (0.15 s per task at
# 100 000 fragments), and whether it is a slice view (``Dataset.open_slice``). Keyed by the job
# id: a version read by another job is opened anew.
_OPENED = region("spark.rewrite_opened", max_entries=1)  # one entry: the latest job's version


def _opened_key(spec: RewriteSpec, job_id: str) -> tuple:
    slc = spec.manifest_slice
    return (job_id, spec.uri, spec.read_version, repr(sorted(spec.storage_options.items())),
            None if slc is None else (slc.path, slc.head))


def open_in_driver(spec: RewriteSpec, job_id: str, ds: Dataset) -> None:
    """A task about to run in the driver's process reads the version the driver opened
    (``ds``, its whole manifest parsed) instead of its manifest slice: one request fewer."""
    if ds.version == spec.read_version:
        _OPENED.put(_opened_key(spec, job_id), (ds, False), DATASET_BYTES)


def _open(spec: RewriteSpec, ctx: TaskContext) -> tuple[Dataset, Iterator[list[DataFragment]]]:
    """The version the task reads and its fragments, chunk by chunk: from its manifest slice
    when it has one (the manifest's other fragments never read), else from the whole manifest."""
    slc = spec.manifest_slice
    key = _opened_key(spec, ctx.job_id)
    hit = _OPENED.get(key)
    if hit is None:
        try:
            ds = Dataset.open_slice(spec.uri, slc, storage_options=spec.storage_options) if slc else None
        except NotFoundError:  # the file the driver read is gone (a staged external-store manifest)
            ds = None
        sliced = ds is not None and ds.version == spec.read_version
        if not sliced:
            ds = Dataset.open(spec.uri, spec.read_version, storage_options=spec.storage_options)
        ds.paths_kept = spec.paths_kept
        hit = (ds, sliced)
        _OPENED.put(key, hit, DATASET_BYTES)
    ds, sliced = hit
    if sliced:
        return ds, ds.fragments_in_slice(slc, spec.fragment_ids)
    return ds, ds.fragments_in_chunks(spec.fragment_ids, spec.fragment_chunk)


def _run_rewrite(spec: RewriteSpec, ctx: TaskContext, t0: float) -> RewriteResult:
    ds, chunks = _open(spec, ctx)
    sink = _FragmentSink(ds, spec, ctx.file_prefix)
    ids = _RowIds(ds.uses_stable_row_ids)
    tally = _Tally()
    bytes_read = seen = 0
    small = _SmallFragments(ds, spec, sink)
    try:
        # the fragments a chunk at a time: their objects, live masks and row ids are released
        # before the next chunk's are built, so a task's memory does not grow with its count
        for chunk in chunks:
            seen += len(chunk)
            FragmentBatch(ds, chunk).prefetch()  # object stores: the chunk's files fetched ahead (budget)
            bytes_read += sum(f.file_size_bytes or 0 for fr in chunk for f in fr.files)
            for frags in _growing_slices(chunk):
                # per-fragment facts asked for a slice at once: the first slice is small, so its
                # fragments decode while the later ones' deletion files are still in flight
                batch = FragmentBatch(ds, frags)
                masks = batch.live_masks()
                ids.add(batch, masks)
                for frag, keep in zip(frags, masks, strict=True):
                    _rewrite_fragment(ds, spec, sink, small, frag, keep, tally)
                del frags, batch, masks
            del chunk
        if seen != len(spec.fragment_ids):
            raise NotFoundError(f"{len(spec.fragment_ids) - seen} of the task's fragments are not in version "
                                f"{spec.read_version}", path=ds.uri)
        tally.rows_read += small.flush()
        small.close()
        # every input is read: the prefetch's share of the budget goes to the output's upload,
        # so the parts left at the writer's close go out together
        ds.stop_prefetch()
        sink.roll()
    except BaseException:
        small.close()  # before the prefetched files go: the decode thread may be reading them
        for path in sink.abort():
            ds.store.delete(f"{DATA_DIR}/{path}")
        raise
    finally:
        small.close()
        ds.stop_prefetch()
    new_fragments = _fragments(sink.done, ids)
    return RewriteResult(
        fragment_ids=spec.fragment_ids,
        new_fragments=new_fragments,
        files=[df.path for df, _ in sink.done],
        rows_read=tally.rows_read,
        rows_written=sum(n for _, n in sink.done),
        fragments_copied=tally.copied,
        pages_copied=tally.pages_copied,
        pages_reencoded=tally.pages_reencoded,
        bytes_read=bytes_read,
        bytes_written=sum(df.file_size_bytes or 0 for df, _ in sink.done),
        seconds=time.perf_counter() - t0,
        peak_rss_bytes=_peak_rss(),
    )


@dataclass
class _Tally:
    """What a rewrite task has read and moved so far (its result's counts)."""

    rows_read: int = 0
    copied: int = 0  # fragments binary-copied
    pages_copied: int = 0
    pages_reencoded: int = 0


def _rewrite_fragment(ds: Dataset, spec: RewriteSpec, sink: _FragmentSink, small: _SmallFragments,
                      frag: DataFragment, keep: np.ndarray, tally: _Tally) -> None:
    """One fragment into the sink: its pages moved (binary copy), or into the run of small
    fragments re-encoded together, or scanned and re-encoded on its own."""
    reader = _copyable(ds, frag, spec, sink) if spec.mode != "reencode" else None
    if reader is not None and spec.mode == "try_binary_copy" and not _moves_a_page(reader, keep):
        reader = None  # deleted rows on every page: nothing to move, re-encoded in runs
    if reader is None and small.add(frag, keep):
        return
    tally.rows_read += small.flush()  # their rows go first
    counts = sink.copy_file(reader, keep) if reader is not None else None
    if counts is not None:
        FragmentBatch(ds, [frag]).release()
        tally.rows_read += reader.num_rows
        tally.copied += 1
        tally.pages_copied += counts[0]
        tally.pages_reencoded += counts[1]
        return
    if spec.mode == "force_binary_copy":
        writer = sink.writer
        why = writer.can_copy_pages_from(reader) if reader is not None and writer is not None else None
        raise UnsupportedError(f"fragment {frag.id} cannot be binary-copied "
                               f"({why or 'several data files, or a different file version / schema'}); "
                               "use try_binary_copy")
    sink.sources = {f.id: blob_data_file(frag, f, ds.base_resolver) for f in sink.blob_v2}
    for part in ds.scan_fragment(frag, batch_rows=spec.batch_rows, blobs=sink.blobs, live=keep,
                                 keep_dictionaries=sink.keep_dictionaries):
        tally.rows_read += part.num_rows
        sink.write(part)
    FragmentBatch(ds, [frag]).release()


class _RowIds:
    """Under stable row ids, the old ids (and version sequences) of the live rows read so far,
    one array per chunk of fragments: the new fragments carry them."""

    def __init__(self, stable: bool) -> None:
        self.stable = stable
        self.ids: list[np.ndarray] = []
        self.created: list[np.ndarray] | None = []  # None once a fragment has none
        self.updated: list[np.ndarray] | None = []

    def add(self, batch: FragmentBatch, masks: list[np.ndarray]) -> None:
        if not self.stable:
            return
        self.ids.append(_live_concat(batch.row_ids(), masks))
        cre, upd = batch.created_at_versions(), batch.last_updated_at_versions()
        self.created = None if self.created is None or any(c is None for c in cre) else \
            [*self.created, _live_concat(cre, masks)]
        self.updated = None if self.updated is None or any(u is None for u in upd) else \
            [*self.updated, _live_concat(upd, masks)]


def _live_concat(seqs: list[np.ndarray], masks: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([s[keep] for s, keep in zip(seqs, masks, strict=True)]) if seqs \
        else np.zeros(0, np.uint64)


class _SmallFragments:
    """Re-encode of runs of small fragments, read together (``file.read_together``).

    A fragment joins the run when a re-encode would scan it as one batch from one data file of
    a 2.1+ version that holds exactly the rewritten fields (no blobs): then its batch is a
    slice of the run's arrays. The sink receives the same batches, in the same order, as from
    ``Dataset.scan_fragment`` one fragment at a time, so the files written are the same bytes.
    Anything unexpected (layouts that do not decode together, arrays with validity bitmaps,
    whose slices could count a byte more in ``nbytes`` and so move page cuts, any error) sends
    the run through ``scan_fragment`` fragment by fragment, which also names corrupt files."""

    def __init__(self, ds: Dataset, spec: RewriteSpec, sink: _FragmentSink) -> None:
        self.ds, self.spec, self.sink = ds, spec, sink
        # force_binary_copy moves every fragment's pages; try_binary_copy re-encodes in runs the
        # fragments it cannot move (or whose every page holds deleted rows)
        self.enabled = (spec.mode != "force_binary_copy" and spec.file_version != "0.1"
                        and not any(blob_version(f) for f in ds.lance_schema.fields))
        self.run: list[tuple[DataFragment, np.ndarray]] = []
        self.rows = 0  # physical rows in the run
        # object stores: a run's files are all held while it decodes, so a run stays within
        # what the prefetch keeps of files in use; a larger run lost its first files to the
        # ones fetched ahead and read them again, a round trip per read (a 16 MiB budget:
        # 94 GETs instead of 52 for 50 fragments, ``bench/rewrite_rss_profile.py``)
        store = ds.store
        self.max_run_bytes = None if store.is_local else in_use_share(prefetch_share(store.budget))
        self.run_bytes = 0
        self.read = 0  # live rows written since the last flush()
        self.pool: concurrent.futures.ThreadPoolExecutor | None = None  # the decode thread
        self.pending: concurrent.futures.Future[list[pa.RecordBatch]] | None = None  # run decoding

    def add(self, frag: DataFragment, keep: np.ndarray) -> bool:
        """Take ``frag`` into the run (True), or leave it to the caller (False)."""
        if not self.enabled:
            return False
        rows = frag.physical_rows or 0
        if (len(frag.files) != 1 or frag.files[0].is_legacy or not 0 < rows <= self.spec.batch_rows
                or frag.files[0].file_major_version < 2 or list(frag.files[0].fields) != self.sink.field_ids
                or list(frag.files[0].column_indices) != self.sink.column_indices):
            return False
        size = (frag.files[0].file_size_bytes or 0) + (UNKNOWN_SIZE if frag.deletion_file is not None else 0)
        over_bytes = self.max_run_bytes is not None and self.run_bytes + size > self.max_run_bytes
        if self.rows + rows > self.spec.batch_rows or len(self.run) >= self.spec.run_fragments or over_bytes:
            self.flush_to_sink()
        self.run.append((frag, keep))
        self.rows += rows
        self.run_bytes += size
        return True

    def flush(self) -> int:
        """Write the run (and the one decoding) to the sink; returns the live rows read since
        the last call."""
        self.flush_to_sink()
        self.drain()
        read, self.read = self.read, 0
        return read

    def flush_to_sink(self) -> None:
        """Hand the run to the decode thread and write the run decoded before it: the next run
        decodes while this one encodes (numpy, pyarrow and the compressors release the GIL on
        whole buffers, so a task keeps two cores busy). At most two runs are held decoded."""
        run, self.run, self.rows, self.run_bytes = self.run, [], 0, 0
        if not run:
            return
        if self.pool is None:
            self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="lso-decode")
        ahead = self.pool.submit(self._decode, run)
        self.drain()
        self.pending = ahead

    def drain(self) -> None:
        """Write the run being decoded, once it is."""
        fut, self.pending = self.pending, None
        if fut is None:
            return
        batches = fut.result()
        self.sink.write_run(batches)
        self.read += sum(b.num_rows for b in batches)

    def close(self) -> None:
        """Stop the decode thread (a failed task: its run is dropped)."""
        fut, self.pending = self.pending, None
        if fut is not None:
            fut.cancel()
            concurrent.futures.wait([fut])
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None

    def _decode(self, run: list[tuple[DataFragment, np.ndarray]]) -> list[pa.RecordBatch]:
        # a run of up to ``spec.run_fragments`` files opens readers, metadata and decoders by the
        # thousand, none in a cycle: the cyclic GC would walk them again and again (~15% of the task's CPU)
        with gc_paused():
            batches = self._together(run) if len(run) > 1 else None
        if batches is None:
            batches = [b for frag, keep in run
                       for b in self.ds.scan_fragment(frag, batch_rows=self.spec.batch_rows,
                                                      blobs=self.sink.blobs, live=keep,
                                                      keep_dictionaries=self.sink.keep_dictionaries)]
        FragmentBatch(self.ds, [frag for frag, _ in run]).release()  # their files are read
        return batches

    def _together(self, run: list[tuple[DataFragment, np.ndarray]]) -> list[pa.RecordBatch] | None:
        from lance_spark_ops.file.read_together import read_files_together

        # the files opened and checked as FragmentScan would, its plan made once per file schema;
        # None: some fragment is not that simple (fields renamed, reordered, retyped since ...)
        simple = FragmentBatch(self.ds, [frag for frag, _ in run]).simple_files(
            [keep for _, keep in run], blobs=self.sink.blobs)
        if simple is None:
            return None
        files, scan_schema, metadata = simple
        schema = scan_schema.with_metadata(metadata) if metadata else scan_schema
        readers = [f.reader for f in files]
        try:
            arrays = read_files_together(readers, readers[0].schema.names)
        except (LanceError, ValueError, IndexError, TypeError, KeyError, OverflowError, ZeroDivisionError,
                pa.ArrowException):
            return None  # read one by one: the error, if it recurs, names its file
        total = sum(f.num_rows for f in files)
        if arrays is None or any(len(a) != total or _has_bitmap(a) for a in arrays):
            return None
        out, start = [], 0
        for f in files:
            n, keep = f.num_rows, f.keep
            part = [a.slice(start, n) for a in arrays]
            start += n
            if keep is not None and not keep.any():
                continue
            batch = pa.RecordBatch.from_arrays(part, schema=schema)
            if keep is not None and not keep.all():
                batch = batch.filter(pa.array(keep))
            out.append(batch)
        return out


def _growing_slices(frags: list[DataFragment], first: int = 4) -> Iterator[list[DataFragment]]:
    """``frags`` in consecutive slices of ``first``, then twice as many each time: the first
    fragments are asked about (deletion files read) alone, the rest in few batches."""
    at, step = 0, first
    while at < len(frags):
        yield frags[at:at + step]
        at += step
        step *= 2


def _has_bitmap(arr: pa.Array) -> bool:
    """Whether ``arr`` or a child holds a validity bitmap or bit-packed values (booleans)."""
    if arr.buffers()[0] is not None or pa.types.is_boolean(arr.type):
        return True
    if pa.types.is_struct(arr.type):
        return any(_has_bitmap(arr.field(i)) for i in range(arr.type.num_fields))
    t = arr.type
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _has_bitmap(arr.values)
    return not (pa.types.is_primitive(t) or pa.types.is_string(t) or pa.types.is_binary(t)
                or pa.types.is_large_string(t) or pa.types.is_large_binary(t))


def _peak_rss() -> int:
    import resource
    import sys

    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib if sys.platform == "darwin" else kib * 1024


def _copyable(ds: Dataset, frag: DataFragment, spec: RewriteSpec, sink: _FragmentSink
              ) -> LanceFileReader | None:
    """A reader over the fragment's only data file when its pages can be moved: one data
    file holding every field, same file version, no blob column (deleted rows are handled
    page by page)."""
    if len(frag.files) != 1 or frag.files[0].is_legacy or spec.file_version == "0.1":
        return None
    if any(blob_version(f) for f in ds.lance_schema.fields):
        return None  # blob descriptors hold absolute offsets into the old file: re-encode
    df = frag.files[0]
    if (df.file_major_version, df.file_minor_version) != file_version_numbers(spec.file_version):
        return None
    if list(df.fields) != sink.field_ids or list(df.column_indices) != sink.column_indices:
        return None
    store, rel = ds.base_resolver.data_file(df)
    return LanceFileReader(rel, store=store, legacy=False)


def _moves_a_page(reader: LanceFileReader, keep: np.ndarray) -> bool:
    """Whether a binary copy of the file would move any page undecoded: some column whose
    pages count rows has a page without deleted rows. When none has, ``append_live_pages``
    would decode and re-encode every page one by one; a re-encode in runs writes the same
    rows (as pylance's ``try_binary_copy``, which re-encodes any group with deleted rows)."""
    if keep.all():
        return True
    dead = np.concatenate([[0], np.cumsum(~keep, dtype=np.int64)])
    meta = reader.metadata
    for c in range(meta.num_columns):
        lengths = np.fromiter((int(p.length) for p in meta.column(c).pages), np.int64)
        ends = np.cumsum(lengths)
        if ends.size and ends[-1] == keep.size and bool((dead[ends] == dead[ends - lengths]).any()):
            return True
    return False


def _fragments(done: list[tuple[DataFile, int]], row_ids: _RowIds) -> list[DataFragment]:
    """New fragment metadata; under stable row ids each carries its rows' old ids (and
    version sequences), re-chunked at the new fragment boundaries."""
    stable = row_ids.stable
    ids = np.concatenate(row_ids.ids) if row_ids.ids else None
    cre = np.concatenate(row_ids.created) if row_ids.created else None
    upd = np.concatenate(row_ids.updated) if row_ids.updated else None
    out, start = [], 0
    for df, rows in done:
        frag = DataFragment(id=0, files=[df], physical_rows=rows)
        if stable and ids is not None:
            frag.row_id_meta = encode_row_ids(ids[start:start + rows]).to_bytes()
            if cre is not None:
                frag.created_at_version_meta = encode_versions(cre[start:start + rows]).to_bytes()
            if upd is not None:
                frag.last_updated_at_version_meta = encode_versions(upd[start:start + rows]).to_bytes()
        out.append(frag)
        start += rows
    return out
