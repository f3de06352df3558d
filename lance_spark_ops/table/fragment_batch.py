"""``FragmentBatch``: what a task asks of each fragment of a batch (live mask, physical rows,
row ids, version sequences, an opened data file), answered for the batch at once.

A rewrite of 10 000 fragments of 20 rows asked ``Dataset`` these questions one fragment at a
time, and planned a ``FragmentScan`` per fragment to learn that each reads "column i of its
only file is dataset field i". Here that plan is made once per file schema (files of one
schema share one parsed schema object, ``file.metadata``) and reused for the batch's other
fragments of that schema; the per-fragment work left is opening the file (one read when it
is small) and the checks ``FragmentScan`` would make. Anything else - several data files,
another layout, a file that does not open - is left to ``FragmentScan`` (``simple_files``
returns None), which also names what is wrong.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from lance_spark_ops.errors import CorruptFileError, InconsistentDatasetError, InvalidInputError, LanceError
from lance_spark_ops.file.metadata import TAIL_READ, WHOLE_FILE_READ
from lance_spark_ops.file.reader import LanceFileReader
from lance_spark_ops.io.budget import IOBudget
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.format.fragment import DataFragment
from lance_spark_ops.table.format.support import check_data_file
from lance_spark_ops.table.scan import _FromFile
from lance_spark_ops.table.validate import deletion_finding, file_findings


@dataclass(frozen=True)
class SimpleFile:
    """A fragment's only data file, opened; its columns are the dataset's top-level fields in
    order (``names`` / ``schema``, the scan's): a batch of it needs no plan. ``keep``: the
    live-row mask when the fragment has deletions (None: every row is live)."""

    reader: LanceFileReader
    num_rows: int
    keep: np.ndarray | None


# fragments read ahead at most (``FragmentBatch.read_window``): a round trip of 20-50 ms against
# a few ms of work per small fragment
READ_AHEAD = 8


class FragmentBatch:
    """Fragments of one ``Dataset`` version (a task's share), asked about together."""

    def __init__(self, ds: Dataset, fragments: Sequence[DataFragment]) -> None:
        self.ds = ds
        self.fragments = list(fragments)

    def prefetch(self, data: bool = True, data_max_bytes: int | None = None) -> None:
        """Fetch the batch's deletion files and (``data``) its data files, whole and in the
        order a rewrite reads them - each fragment's deletion file beside its data files, so the
        first fragments can decode while the later ones are in flight - ahead of those reads
        (``ObjectStore.prefetch``: object stores
        only, many in flight within the task's byte budget). A task that reads every byte of its
        fragments (re-encode, binary copy) calls this first; one that reads a few columns passes
        ``data_max_bytes``: files up to that size are fetched whole (one request, in flight with
        the others, beats a footer and then page reads in turn); of larger ones (read whole
        only below ``WHOLE_FILE_READ``) the footer reads go out together
        (``ObjectStore.prefetch_tails``), so opening each waits for no round trip of its own.
        A file that does not resolve is left to the read that names what is wrong."""
        ds = self.ds
        plan: dict[int, tuple[ObjectStore, list[tuple[str, int | None]]]] = {}
        tails: dict[int, tuple[ObjectStore, list[tuple[str, int]]]] = {}

        def add(store: ObjectStore, rel: str, size: int | None) -> None:
            plan.setdefault(id(store), (store, []))[1].append((rel, size))

        for f in self.fragments:
            if f.deletion_file is not None:
                try:
                    add(*ds.base_resolver.deletion_file(f.id, f.deletion_file), None)
                except LanceError:
                    pass
            for df in f.files if data else ():
                try:
                    store, rel = ds.base_resolver.data_file(df, f"fragment {f.id}")
                except LanceError:
                    continue
                size = df.file_size_bytes or 0
                if data_max_bytes is None or 0 < size <= data_max_bytes:
                    add(store, rel, df.file_size_bytes)
                elif size > WHOLE_FILE_READ:
                    tails.setdefault(id(store), (store, []))[1].append((rel, size))
        for store, items in plan.values():
            if not store.is_local:
                store.prefetch(items)
        for store, named in tails.values():
            store.prefetch_tails(named, TAIL_READ)

    @classmethod
    def of(cls, ds: Dataset, ids: Iterable[int]) -> FragmentBatch:
        """The fragments with these ids, in the order first named (repeats and absent ones left
        out: the scan that reads an absent one says what is wrong)."""
        order = list(dict.fromkeys(int(i) for i in ids))
        found = ds.fragments_with_ids(order)
        return cls(ds, [found[i] for i in order if i in found])

    def read_window(self, budget: IOBudget) -> int:
        """Fragments a task may read ahead of the one it works on: as many as the byte budget
        holds of the largest one's data files, at most ``READ_AHEAD`` (what is read ahead is
        held decoded, larger than its file's bytes); 1 when a size is unknown: a fragment at a
        time."""
        sizes = [sum(df.file_size_bytes or 0 for df in f.files) for f in self.fragments]
        if not sizes or any(s <= 0 for s in sizes):
            return 1
        return max(1, min(READ_AHEAD, budget.max_requests, budget.max_bytes // max(sizes)))

    @contextmanager
    def fetched_ahead(self, data: bool = True, data_max_bytes: int | None = None) -> Iterator[None]:
        """``prefetch`` for the block's reads, and what it holds dropped after
        (``Dataset.stop_prefetch``): a task that reads its fragments one after another - a
        deletion file, a small data file each - waits one round trip per file otherwise."""
        self.prefetch(data, data_max_bytes)
        try:
            yield
        finally:
            self.ds.stop_prefetch()

    def release(self) -> None:
        """The reads of the batch's files are over: what ``prefetch`` holds of them is dropped
        now rather than when the budget needs the room (a task holds only the files still
        ahead of it, whatever its fragment count)."""
        ds = self.ds
        plan: dict[int, tuple[ObjectStore, list[str]]] = {}
        for f in self.fragments:
            for df in f.files:
                try:
                    store, rel = ds.base_resolver.data_file(df, f"fragment {f.id}")
                except LanceError:
                    continue
                plan.setdefault(id(store), (store, []))[1].append(rel)
            if f.deletion_file is not None:
                try:
                    store, rel = ds.base_resolver.deletion_file(f.id, f.deletion_file)
                except LanceError:
                    continue
                plan.setdefault(id(store), (store, []))[1].append(rel)
        for store, rels in plan.values():
            if not store.is_local:
                store.release(rels)

    def physical_rows(self) -> np.ndarray:
        """Physical rows per fragment (read from the data file where the manifest lacks it)."""
        rows = self.ds._physical_rows  # noqa: SLF001 - the manifest's count, else the data file's
        return np.fromiter((rows(f) if f.physical_rows is None else f.physical_rows for f in self.fragments),
                           np.int64, len(self.fragments))

    def live_masks(self) -> list[np.ndarray]:
        """True per live physical row, per fragment (all True without a deletion file; only the
        fragments with one read it)."""
        rows = self.physical_rows()
        out = [np.ones(int(n), dtype=bool) if f.deletion_file is None else self.ds._keep(f, int(n))  # noqa: SLF001
               for f, n in zip(self.fragments, rows, strict=True)]
        for f, keep in zip(self.fragments, out, strict=True):
            # a rewrite would commit counts its deletion file contradicts (pylance's compaction fails)
            found = deletion_finding(f, len(keep) - int(np.count_nonzero(keep))) if f.deletion_file else None
            if found is not None:
                raise InconsistentDatasetError(f"rewrite refused: {found}", path=self.ds.uri)
        return out

    def row_ids(self) -> list[np.ndarray | None]:
        """``Dataset.row_ids`` per fragment (all None without stable row ids)."""
        if not self.ds.uses_stable_row_ids:
            return [None] * len(self.fragments)
        return [self.ds.row_ids(f) for f in self.fragments]

    def created_at_versions(self) -> list[np.ndarray | None]:
        return [self.ds.created_at_versions(f) for f in self.fragments]

    def last_updated_at_versions(self) -> list[np.ndarray | None]:
        return [self.ds.last_updated_at_versions(f) for f in self.fragments]

    def simple_files(self, live: Sequence[np.ndarray | None], blobs: str = "descriptions",
                     ) -> tuple[list[SimpleFile], pa.Schema, dict | None] | None:
        """Every fragment's ``SimpleFile``, the scan's schema and the dataset's schema metadata
        (``scan_fragment``'s batches carry it), or None when a fragment is not that simple or
        does not open: then scan them one by one (``Dataset.fragment_scan``). ``live``: the
        fragments' live masks, as ``scan_fragment`` takes them. The checks are
        ``FragmentScan``'s (path inside the dataset, file version, row counts); a plan is made
        with it for the first fragment of each file schema."""
        ds = self.ds
        schema, scan_schema = ds._scan_schemas(None, False, False, blobs)  # noqa: SLF001
        # (id of the file's parsed schema, version, the data file's fields and columns) -> whether
        # the plan reads column i as field i
        verdicts: dict[tuple, bool] = {}
        keep_alive = []  # the schema objects keyed by id() above
        out: list[SimpleFile] = []
        for frag, keep in zip(self.fragments, live, strict=True):
            if len(frag.files) != 1 or frag.files[0].is_legacy:
                return None
            df = frag.files[0]
            try:
                store, rel = ds.base_resolver.data_file(df, f"fragment {frag.id}")
                where = store.uri(rel)
                check_data_file(df, where, legacy_ok=False)
                df.validate(where)
                reader = LanceFileReader(rel, store=store, legacy=False)
            except LanceError:
                return None
            key = (id(reader.metadata.schema), reader.version, tuple(df.fields), tuple(df.column_indices))
            verdict = verdicts.get(key)
            if verdict is None:
                keep_alive.append(reader.metadata.schema)
                verdict = verdicts[key] = _plans_trivially(ds, frag, reader, scan_schema, blobs)
            n = frag.physical_rows
            if not verdict or (n is not None and reader.num_rows != n):
                return None
            if file_findings(frag, df, footer_rows=reader.num_rows, footer_version=reader.version,
                             object_size=reader.metadata.size, trust_counts=False) \
                    or df.file_version != ds.data_storage_version:
                return None  # FragmentScan refuses it, naming what is wrong
            n = reader.num_rows
            mask = None
            if frag.deletion_file is not None:
                mask = keep if keep is not None else ds._keep(frag, n)  # noqa: SLF001
                if len(mask) != n:
                    raise InvalidInputError(f"live mask of {len(mask)} rows for fragment {frag.id} of "
                                            f"{n} rows")
            out.append(SimpleFile(reader, n, mask))
        return out, scan_schema, schema.metadata


def _plans_trivially(ds: Dataset, frag: DataFragment, reader: LanceFileReader, scan_schema: pa.Schema,
                     blobs: str) -> bool:
    """Whether ``FragmentScan`` reads each dataset field of ``frag`` as the same-named, same-typed
    top-level column of its only file (``reader``): no nulls filled, no struct re-assembly, no
    conversion. Decided by planning that scan; the same holds for every fragment whose data file
    records the same fields and columns and whose file has the same version and schema object."""
    try:
        scan, _ = ds.fragment_scan(frag, blobs=blobs, include_deleted=True)
    except (LanceError, CorruptFileError):
        return False
    if len(scan.views) != 1 or not all(isinstance(p, _FromFile) and p.file == 0 and not p.path
                                       for p in scan.plans):
        return False
    file_schema = scan.views[0].reader.schema
    if file_schema is not reader.schema:
        return False
    return [p.top for p in scan.plans] == reader.schema.names and reader.schema.types == scan_schema.types
