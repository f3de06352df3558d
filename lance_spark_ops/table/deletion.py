"""Deletion files: which row offsets of a fragment are deleted.

Two formats, chosen by size (Lance ``DeletionVector``, threshold 5000):

* ``_deletions/{frag}-{read_version}-{id}.arrow``: an Arrow IPC *file* holding exactly one
  record batch with schema ``row_id: uint32 not null`` (no metadata); pylance compresses the
  body with zstd and lists the offsets in no particular order. We write them sorted, zstd.
* ``_deletions/{frag}-{read_version}-{id}.bin``: a 32-bit roaring bitmap in the portable
  serialization (``pyroaring.BitMap.serialize``), without run containers (as pylance writes).

The choice (observed in pylance 14 and in ``lance-core/utils/deletion.rs``): a deletion vector
built fresh from ``n`` offsets is a bitmap when ``n >= 5000``; one that grows an existing Arrow
set becomes a bitmap only when the total passes 5000; a bitmap stays a bitmap. Example: one
delete of 5000 rows -> ``.bin``; 4000 then 1000 more -> ``.arrow`` with 5000 offsets.

``id`` is a random u64. ``DeletionFile.num_deleted_rows`` is always set by us.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
from pyroaring import BitMap

from lance_spark_ops.errors import CorruptFileError, NotFoundError, UnsupportedError
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.table.format.fragment import DataFragment, DeletionFile, DeletionFileType
from lance_spark_ops.table.format.ipc_bounds import check_single_batch, read_row_ids
from lance_spark_ops.table.paths import deletion_file_path

BITMAP_THRESHOLD = 5000
ARROW_SCHEMA = pa.schema([pa.field("row_id", pa.uint32(), nullable=False)])


def choose_file_type(total: int, previous: DeletionFileType | None = None) -> DeletionFileType:
    """Arrow or bitmap for ``total`` deleted offsets, given the fragment's previous file type."""
    if previous is DeletionFileType.BITMAP:
        return DeletionFileType.BITMAP
    if previous is None:
        return DeletionFileType.BITMAP if total >= BITMAP_THRESHOLD else DeletionFileType.ARROW_ARRAY
    return DeletionFileType.BITMAP if total > BITMAP_THRESHOLD else DeletionFileType.ARROW_ARRAY


# -- bytes <-> offsets ---------------------------------------------------------
def encode_arrow(offsets: np.ndarray) -> bytes:
    """Arrow IPC file bytes (zstd) for sorted, unique u32 offsets."""
    batch = pa.record_batch([pa.array(offsets, type=pa.uint32())], schema=ARROW_SCHEMA)
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, ARROW_SCHEMA, options=ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_batch(batch)
    return sink.getvalue().to_pybytes()


def _check_count(n: int, max_rows: int | None, path: str | None) -> None:
    if max_rows is not None and n > max_rows:
        raise CorruptFileError(f"deletion file holds {n} row offsets but the fragment has {max_rows} rows",
                               path=path)


def decode_arrow(data: bytes, path: str | None = None, max_rows: int | None = None) -> np.ndarray:
    """Sorted unique offsets from an Arrow deletion file (at most ``max_rows`` of them)."""
    check_single_batch(data, max_rows, 4, path)  # before pyarrow allocates what the file claims
    try:
        fast = read_row_ids(data)
    except CorruptFileError:
        fast = None  # pyarrow's reader below names what is wrong
    if fast is not None:  # the shape Lance writes, read without pyarrow's IPC reader (~5x cheaper)
        _check_count(fast[0], max_rows, path)
        return _sorted_unique(np.frombuffer(fast[1], dtype="<u4"))
    try:
        reader = ipc.open_file(pa.py_buffer(data))
        count = reader.num_record_batches
        schema = reader.schema
        if (len(schema) != 1 or schema.field(0).name != "row_id" or schema.field(0).type != pa.uint32()):
            shown = schema.to_string(show_schema_metadata=False)
            raise CorruptFileError(f"deletion file schema is {shown!r}, expected 'row_id: uint32 not null'",
                                   path=path)
        if count != 1:
            raise CorruptFileError(f"deletion file holds {count} record batches, expected 1", path=path)
        batch = reader.get_batch(0)
        _check_count(batch.num_rows, max_rows, path)
        col = batch.column(0)
        col.validate(full=True)
        nulls = col.null_count
    except (pa.ArrowException, OSError, ValueError, UnicodeDecodeError, IndexError) as e:
        # damaged IPC metadata surfaces as any Arrow error (invalid, not implemented, ...)
        raise CorruptFileError(f"deletion file is not a valid Arrow IPC file: {type(e).__name__}: {e}",
                               path=path) from e
    if nulls:
        raise CorruptFileError(f"deletion file has {nulls} null row ids", path=path)
    return _sorted_unique(col.to_numpy(zero_copy_only=False).astype(np.uint32, copy=False))


def _sorted_unique(offsets: np.ndarray) -> np.ndarray:
    if offsets.size > 1 and not bool(np.all(offsets[1:] > offsets[:-1])):
        # pylance writes them in hash-set order; a plain sort is far cheaper than np.unique
        offsets = np.sort(offsets)
        dup = offsets[1:] == offsets[:-1]
        if dup.any():
            offsets = offsets[np.concatenate([[True], ~dup])]
    return offsets


def encode_bitmap(offsets: np.ndarray) -> bytes:
    """Portable 32-bit roaring bitmap bytes."""
    # No run containers: pylance writes none, so the bytes match its files exactly.
    return bytes(BitMap(np.asarray(offsets, dtype=np.uint32), optimize=False).serialize())


def decode_bitmap(data: bytes, path: str | None = None, max_rows: int | None = None) -> np.ndarray:
    """Sorted offsets from a portable roaring bitmap (at most ``max_rows``, all below it).

    Run containers hold 65536 offsets in 4 bytes, so the count is checked before expanding.
    """
    try:
        bm = BitMap.deserialize(data)
    except (ValueError, OverflowError, MemoryError, IndexError) as e:  # IndexError: empty input
        raise CorruptFileError(f"deletion file is not a portable roaring bitmap: {e}", path=path) from e
    _check_count(len(bm), max_rows, path)
    if max_rows is not None and len(bm) and bm.max() >= max_rows:
        raise CorruptFileError(f"deletion file names row {bm.max()} but the fragment has {max_rows} rows",
                               path=path)
    return np.frombuffer(bm.to_array(), dtype=np.uint32)


# -- store I/O -----------------------------------------------------------------
def read_deletion_file(store: ObjectStore, fragment_id: int, deletion_file: DeletionFile,
                       resolver: Any = None, max_rows: int | None = None) -> np.ndarray:
    """Deleted row offsets of a fragment, sorted unique ``uint32``. A deletion file under another
    base path (``base_id``) needs the manifest's ``paths.BaseResolver``; ``max_rows``: the
    fragment's physical rows when known (more offsets than that is corruption, refused before
    expanding)."""
    rel = deletion_file_path(fragment_id, deletion_file)
    if resolver is not None:
        store, rel = resolver.deletion_file(fragment_id, deletion_file)
    elif deletion_file.base_id is not None:
        raise UnsupportedError(f"deletion file lives under base path {deletion_file.base_id}; reading it "
                               "needs the manifest's base paths", path=store.uri(rel))
    try:
        data = store.read(rel)
    except NotFoundError as e:
        raise NotFoundError(f"deletion file of fragment {fragment_id} is missing", path=store.uri(rel)) from e
    path = store.uri(rel)
    if deletion_file.file_type is DeletionFileType.ARROW_ARRAY:
        return decode_arrow(data, path, max_rows)
    return decode_bitmap(data, path, max_rows)


def deleted_offsets(store: ObjectStore, fragment: DataFragment, resolver: Any = None) -> np.ndarray:
    """The fragment's deleted offsets (empty when it has no deletion file)."""
    if fragment.deletion_file is None:
        return np.empty(0, dtype=np.uint32)
    return read_deletion_file(store, fragment.id, fragment.deletion_file, resolver, fragment.physical_rows)


def keep_mask(deleted: np.ndarray, physical_rows: int, where: str | None = None) -> np.ndarray:
    """Boolean mask over the fragment's physical rows, True where the row is live."""
    keep = np.ones(physical_rows, dtype=bool)
    if deleted.size:
        if int(deleted[-1]) >= physical_rows:
            raise CorruptFileError(f"deletion file names row {int(deleted[-1])} but the fragment has "
                                   f"{physical_rows} rows", path=where)
        keep[deleted] = False
    return keep


def new_deletion_id() -> int:
    return int.from_bytes(os.urandom(8), "little")


def write_deletion_file(store: ObjectStore, fragment_id: int, read_version: int,
                        offsets: Sequence[int] | np.ndarray,
                        previous: DeletionFileType | None = None) -> DeletionFile | None:
    """Write the complete set of deleted ``offsets`` of a fragment (None if empty).

    ``previous`` is the type of the file this one replaces (decides arrow vs bitmap as pylance
    does). The new file is created with put-if-not-exists; the random id makes clashes moot.
    """
    arr = np.unique(np.asarray(offsets, dtype=np.int64))
    if arr.size == 0:
        return None
    if arr[0] < 0 or arr[-1] > 0xFFFFFFFF:
        raise ValueError(f"deleted offsets must be u32, got range {int(arr[0])}..{int(arr[-1])}")
    u32 = arr.astype(np.uint32)
    kind = choose_file_type(int(u32.size), previous)
    dfile = DeletionFile(kind, read_version, new_deletion_id(), int(u32.size))
    data = encode_arrow(u32) if kind is DeletionFileType.ARROW_ARRAY else encode_bitmap(u32)
    store.put_if_not_exists(deletion_file_path(fragment_id, dfile), data)
    return dfile
