"""The persisted row-id index: row id -> row address for one dataset version, and ``lookup``.

Written by ``spark.files.row_id_index.rebuild_row_id_index`` for datasets with stable row ids.
Layout under the dataset root (outside ``_indices/``, whose directories Lance's
``cleanup_old_versions`` deletes unless the manifest lists their uuid, and outside ``data/``)::

    _lance_spark_ops/row_id_index/v{version}/index.json
    _lance_spark_ops/row_id_index/v{version}/part-{k:05d}-{job}-{attempt}.lance

Each part is a Lance file with two non-null ``uint64`` columns, ``row_id`` and ``row_addr``,
sorted by ``row_id``; parts are ranges of row ids (``repartitionByRange``), disjoint and
ascending. ``index.json`` is written last (its presence means the index is complete)::

    {"format": "lance-spark-ops/row-id-index", "format_version": 1, "dataset_version": 7,
     "rows": 18461, "file_version": "2.1",
     "partitions": [{"path": "part-00000-lso-1a2b-0.3.12.lance", "min_row_id": 0,
                     "max_row_id": 9999, "rows": 9233, "size": 41210}, ...]}

Only live rows are indexed (deleted rows have no address to answer). The index describes
exactly ``dataset_version``: any later commit may move rows (compaction), so ``lookup``
answers for the version it opens and refuses a version that has no index.

``lookup`` sorts the requested ids, finds the partitions whose ranges hold them from the
JSON bounds, reads only those parts (a small per-process cache keeps recently read ones) and
answers with ``searchsorted``; ids that are not live get ``MISSING`` (``2**64 - 1``, Lance's
tombstone address). For a dataset without stable row ids the row id *is* the row address:
``lookup`` returns the id when that row exists and is live, else ``MISSING``, and no index is
read.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from lance_spark_ops.cache import region
from lance_spark_ops.errors import CorruptFileError, InvalidInputError, NotFoundError
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.deletion import deleted_offsets

__all__ = ["MISSING", "IndexManifest", "IndexPartition", "index_dir", "lookup", "read_index_manifest"]

MISSING = np.uint64(0xFFFF_FFFF_FFFF_FFFF)
ROOT_DIR = "_lance_spark_ops/row_id_index"
MANIFEST_NAME = "index.json"
FORMAT = "lance-spark-ops/row-id-index"
FORMAT_VERSION = 1
PART_SCHEMA = pa.schema([pa.field("row_id", pa.uint64(), False), pa.field("row_addr", pa.uint64(), False)])
_CACHE_BYTES = 256 * 1024 * 1024


def index_dir(version: int) -> str:
    """Directory (relative to the dataset root) of the index describing ``version``."""
    return f"{ROOT_DIR}/v{version}"


@dataclass(frozen=True)
class IndexPartition:
    path: str  # relative to the index directory
    min_row_id: int
    max_row_id: int
    rows: int
    size: int


@dataclass
class IndexManifest:
    dataset_version: int
    rows: int
    file_version: str
    partitions: list[IndexPartition] = field(default_factory=list)
    format: str = FORMAT
    format_version: int = FORMAT_VERSION

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str) -> IndexManifest:
        try:
            raw = json.loads(data)
            if raw.get("format") != FORMAT:
                raise CorruptFileError(f"not a row-id index manifest (format {raw.get('format')!r})",
                                       path=where)
            if raw.get("format_version") != FORMAT_VERSION:
                raise CorruptFileError(f"row-id index format version {raw.get('format_version')} is not "
                                       f"{FORMAT_VERSION}", path=where)
            parts = [IndexPartition(**p) for p in raw["partitions"]]
            m = cls(int(raw["dataset_version"]), int(raw["rows"]), str(raw["file_version"]), parts)
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptFileError(f"row-id index manifest does not parse: {e}", path=where) from e
        m.validate(where)
        return m

    def validate(self, where: str) -> None:
        prev = -1
        for p in self.partitions:
            if p.min_row_id > p.max_row_id or p.min_row_id <= prev:
                raise CorruptFileError(f"row-id index partition {p.path} covers {p.min_row_id}.."
                                       f"{p.max_row_id}, overlapping or before the previous one (ends at "
                                       f"{prev})", path=where)
            prev = p.max_row_id
        if sum(p.rows for p in self.partitions) != self.rows:
            held = sum(p.rows for p in self.partitions)
            raise CorruptFileError(f"row-id index partitions hold {held} rows, the manifest says {self.rows}",
                                   path=where)


def read_index_manifest(store: ObjectStore, version: int) -> IndexManifest:
    """The index of ``version``; NotFoundError when none was written for it."""
    rel = f"{index_dir(version)}/{MANIFEST_NAME}"
    try:
        data = store.read(rel)
    except NotFoundError:
        raise NotFoundError(f"no row-id index for version {version}; run rebuild_row_id_index "
                            "(jobs/rebuild_row_id_index.py) on it", path=store.uri(rel)) from None
    m = IndexManifest.from_json(data, store.uri(rel))
    if m.dataset_version != version:
        raise CorruptFileError(f"index manifest describes version {m.dataset_version}, not {version}",
                               path=store.uri(rel))
    return m


# -- reading parts --------------------------------------------------------------------------
_parts = region("row_id_index.parts", max_bytes=_CACHE_BYTES)


def _read_part(store: ObjectStore, version: int, part: IndexPartition) -> tuple[np.ndarray, np.ndarray]:
    from lance_spark_ops.file.reader import LanceFileReader

    rel = f"{index_dir(version)}/{part.path}"
    key = (store.root, rel)
    hit = _parts.get(key)
    if hit is not None:
        return hit
    tbl = LanceFileReader(rel, store=store).read(["row_id", "row_addr"])
    ids = tbl.column("row_id").to_numpy().astype(np.uint64, copy=False)
    addrs = tbl.column("row_addr").to_numpy().astype(np.uint64, copy=False)
    bounds = (int(ids[0]), int(ids[-1])) if ids.size else None
    if ids.size != part.rows or (bounds is not None and bounds != (part.min_row_id, part.max_row_id)):
        raise CorruptFileError(f"index part holds {ids.size} rows over {bounds}, the manifest says "
                               f"{part.rows} over {part.min_row_id}..{part.max_row_id}", path=store.uri(rel))
    _parts.put(key, (ids, addrs), ids.nbytes + addrs.nbytes)
    return ids, addrs


def _as_ids(row_ids: Any) -> np.ndarray:
    if isinstance(row_ids, (pa.Array, pa.ChunkedArray)):
        row_ids = row_ids.to_numpy(zero_copy_only=False)
    arr = np.asarray(row_ids)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise InvalidInputError(f"row ids must be integers, got {arr.dtype}")
    if arr.size and np.issubdtype(arr.dtype, np.signedinteger) and int(arr.min()) < 0:
        raise InvalidInputError("row ids must not be negative")
    return arr.astype(np.uint64, copy=False).ravel()


def lookup_in_index(store: ObjectStore, manifest: IndexManifest, ids: np.ndarray) -> np.ndarray:
    """Addresses of ``ids`` from an index (``MISSING`` where absent), reading only needed parts."""
    out = np.full(ids.size, MISSING, dtype=np.uint64)
    if not ids.size or not manifest.partitions:
        return out
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    mins = np.array([p.min_row_id for p in manifest.partitions], dtype=np.uint64)
    maxs = np.array([p.max_row_id for p in manifest.partitions], dtype=np.uint64)
    part_of = np.searchsorted(mins, sorted_ids, side="right").astype(np.int64) - 1
    inside = (part_of >= 0) & (sorted_ids <= maxs[np.clip(part_of, 0, None)])
    for k in np.unique(part_of[inside]).tolist():
        sel = np.flatnonzero(inside & (part_of == k))
        part_ids, part_addrs = _read_part(store, manifest.dataset_version, manifest.partitions[k])
        want = sorted_ids[sel]
        pos = np.searchsorted(part_ids, want)
        pos_c = np.minimum(pos, part_ids.size - 1)
        hit = (pos < part_ids.size) & (part_ids[pos_c] == want)
        out[order[sel[hit]]] = part_addrs[pos_c[hit]]
    return out


def _lookup_addresses(ds: Dataset, ids: np.ndarray) -> np.ndarray:
    """No stable row ids: the id is the address, answered when that row exists and is live."""
    out = np.full(ids.size, MISSING, dtype=np.uint64)
    frag_of = (ids >> np.uint64(32)).astype(np.int64)
    offsets = (ids & np.uint64(0xFFFF_FFFF)).astype(np.int64)
    by_id = {f.id: f for f in ds.fragments}
    for fid in np.unique(frag_of).tolist():
        frag = by_id.get(fid)
        if frag is None:
            continue
        sel = np.flatnonzero(frag_of == fid)
        rows = frag.physical_rows or 0
        ok = offsets[sel] < rows
        dead = deleted_offsets(ds.store, frag)
        if dead.size:
            ok &= ~np.isin(offsets[sel], dead.astype(np.int64))
        out[sel[ok]] = ids[sel[ok]]
    return out


def lookup(uri: str, row_ids: Sequence[int] | np.ndarray | pa.Array, version: int | None = None, *,
           storage_options: dict[str, Any] | None = None) -> np.ndarray:
    """Row addresses (``uint64``) of ``row_ids`` in ``version`` (default: the latest), ``MISSING``
    for ids with no live row. NotFoundError when that version has no row-id index."""
    ids = _as_ids(row_ids)
    ds = Dataset.open(uri, version, storage_options=storage_options)
    if not ds.uses_stable_row_ids:
        return _lookup_addresses(ds, ids)
    manifest = read_index_manifest(ds.store, ds.version)
    return lookup_in_index(ds.store, manifest, ids)
