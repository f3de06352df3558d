"""The repairs Lance's commit makes to metadata old releases wrote (``rust/lance/src/io/commit.rs``:
``migrate_manifest``, ``fix_schema``, ``migrate_indices``), applied to every manifest we commit.

- Fragments without ``physical_rows`` (pylance <= 0.7) or whose deletion file does not record
  ``num_deleted_rows`` get both from their files, and data files without ``file_size_bytes``
  (pylance <= 0.2x) their size from storage; fragments with no live row left then go, as in
  Lance's ``migrate_fragments``. Nothing is read when every fragment records them all, unless
  the previous version records no writer version (releases before writer versions sometimes
  wrote wrong ``physical_rows``, lance#1531): then every count is read again (``recount``),
  as Lance's commit does.
- Duplicate field ids across the data files of one fragment (pylance 0.10.5's add / drop
  columns): the last file's copy of a duplicated id gets a new id, the schema field follows it,
  files left with no schema field are dropped (Lance's ``fix_schema``: readers take the last
  file's column, and so does the schema after the repair).
- Index fragment bitmaps Lance recomputes on commit (none recorded, the manifest written by
  pylance < 0.8.15 or with no writer version, bitmaps of one index overlapping): recomputed
  from the rows the index's own files hold (``index.coverage``, Lance's
  ``calculate_included_frags``) by ``trusted_indices``, which the commit applies to the
  previous version's indices before building the new manifest (so a Rewrite moves correct
  bitmaps) and the jobs apply when they plan; an index whose rows cannot be listed, or a
  dataset with stable row ids, is refused (UnsupportedError naming the index).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from pyroaring import BitMap

from lance_spark_ops.cache import region
from lance_spark_ops.errors import CorruptFileError, UnsupportedError
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.table.deletion import deleted_offsets
from lance_spark_ops.table.format.fragment import DataFragment
from lance_spark_ops.table.format.manifest import Manifest, WriterVersion
from lance_spark_ops.table.paths import BaseResolver

# pylance < 0.8.15 could write wrong index fragment bitmaps (Lance's must_recalculate_fragment_bitmap)
_BITMAP_FIX = (0, 8, 15)
_SYSTEM_INDICES = ("__lance_frag_reuse", "__lance_mem_wal")


def repair_manifest(store: ObjectStore, manifest: Manifest, where: str, *, reserving: bool = False,
                    recount: bool = False) -> None:
    """Apply the repairs above to ``manifest`` (the version being committed) in place (index
    bitmaps: ``trusted_indices``, applied to the previous version's indices before the new
    manifest is built).
    ``reserving``: a ReserveFragments commit, whose caller writes files planned on the schema
    before it: field ids are left alone (the commit bringing those files repairs them)."""
    _fix_counts(store, manifest, where, recount)
    if not reserving:
        _fix_duplicate_field_ids(manifest)


def _old_writer(version: WriterVersion | None) -> bool:
    if version is None:
        return True
    if version.library != "lance":
        return False  # another library: not affected by the bug (as Lance assumes)
    try:
        parts = tuple(int(p) for p in version.version.split("-")[0].split(".")[:3])
    except ValueError:
        return True
    return parts < _BITMAP_FIX


def untrusted_bitmaps(manifest: Manifest | None, indices: Sequence[Any]) -> list[int]:
    """Positions in ``indices`` of the entries whose fragment bitmaps Lance recomputes on
    commit (``migrate_indices``): every segment of an index whose segments' bitmaps overlap,
    and, unless a system index, one recording no bitmap or written by ``manifest``'s writer
    when that is pylance < 0.8.15 or records no version."""
    if manifest is None or not indices:
        return []
    seen: dict[str, BitMap] = {}
    overlapping: set[str] = set()
    for i in indices:
        if i.fragment_bitmap:
            ids = BitMap.deserialize(i.fragment_bitmap)
            if seen.setdefault(i.name, BitMap()) & ids:
                overlapping.add(i.name)
            seen[i.name] |= ids
    old = _old_writer(manifest.writer_version)
    return [k for k, i in enumerate(indices)
            if i.name in overlapping or (i.name not in _SYSTEM_INDICES and (old or not i.fragment_bitmap))]


# recomputed bitmaps per (index directory, uuid): index files never change under a uuid
_RECOMPUTED = region("table.recomputed_bitmaps", max_entries=1024)


def trusted_indices(store: ObjectStore, manifest: Manifest | None, indices: Sequence[Any],
                    where: str) -> list[Any]:
    """``indices`` (of ``manifest``'s version) with every bitmap ``untrusted_bitmaps`` names
    recomputed from the index's own files (``index.coverage``), as Lance does on commit;
    untouched entries are returned as they are, recomputed ones as copies. UnsupportedError
    naming the index when its files are of a layout this library cannot list rows of, or
    the dataset uses stable row ids (index row ids are then not addresses)."""
    bad = untrusted_bitmaps(manifest, indices)
    if not bad:
        return list(indices)
    from lance_spark_ops.index.coverage import covered_fragments
    from lance_spark_ops.index.kinds import uuid_str

    assert manifest is not None
    if manifest.uses_stable_row_ids:
        names = sorted({indices[k].name for k in bad})
        raise UnsupportedError(f"the fragment bitmaps of index(es) {names} must be recomputed (missing, "
                               "overlapping or written by pylance < 0.8.15) but the dataset uses stable row "
                               "ids, whose index row ids this library does not map to fragments; commit any "
                               "change with pylance 14 first (e.g. ds.delete('false'))", path=where)
    resolver = BaseResolver(store, manifest.base_paths, where)
    out = list(indices)
    for k in bad:
        idx = indices[k]
        uuid = uuid_str(idx.uuid.uuid)
        idx_store, rel = resolver.index_dir(uuid, idx.base_id if idx.HasField("base_id") else None)
        key = (idx_store.uri(rel), bytes(idx.uuid.uuid))
        raw = _RECOMPUTED.get(key)
        if raw is None:
            bitmap = covered_fragments(idx_store, rel, idx.name)
            raw = bytes(BitMap(bitmap, optimize=False).serialize())
            _RECOMPUTED.put(key, raw, 64 + len(raw))
        fixed = copy.deepcopy(idx)
        fixed.fragment_bitmap = raw
        out[k] = fixed
    return out


def _fix_counts(store: ObjectStore, manifest: Manifest, where: str, recount: bool = False) -> None:
    cols = manifest.fragment_columns()  # unknown counts and sizes are 0 there, as in the protobuf
    counts = recount or (cols.physical_rows == 0).any() or \
        (cols.has_deletion & (cols.deleted_rows == 0)).any()
    # a fragment whose sizes sum to 0 records none; one of several files may lack its own
    suspects = np.flatnonzero((cols.data_bytes == 0) | (cols.num_files > 1))
    if not counts and not len(suspects):
        return
    frags = manifest.fragments
    if not counts and not any(d.file_size_bytes is None for k in suspects.tolist() for d in frags[k].files):
        return
    from lance_spark_ops.table.scan import FragmentScan

    resolver = BaseResolver(store, manifest.base_paths, where)
    out: list[DataFragment] = []
    for f in frags:
        rows = None if recount else f.physical_rows
        if rows is None:
            rows = FragmentScan(store, replace(f, physical_rows=None), [], row_ids=None, keep=None,
                                with_row_id=False, with_row_address=False, resolver=resolver).num_rows
        fixed = replace(f, physical_rows=rows)
        if f.deletion_file is not None and (recount or f.deletion_file.num_deleted_rows is None):
            n = int(len(deleted_offsets(store, fixed, resolver)))
            fixed = replace(fixed, deletion_file=replace(f.deletion_file, num_deleted_rows=n or None))
        if any(d.file_size_bytes is None for d in f.files):  # Lance's migrate_fragments sizes them too
            fixed = replace(fixed, files=[d if d.file_size_bytes is not None else
                                          replace(d, file_size_bytes=_file_size(resolver, d, where))
                                          for d in f.files])
        deleted = fixed.deletion_file.num_deleted_rows or 0 if fixed.deletion_file is not None else 0
        if rows - deleted > 0:
            out.append(fixed)
    manifest.fragments = out


def _file_size(resolver: BaseResolver, data_file: Any, where: str) -> int:
    file_store, rel = resolver.data_file(data_file)
    size = file_store.size(rel)
    if size == 0:  # Lance: "File {path} has size 0"
        raise CorruptFileError(f"data file {data_file.path} has size 0", path=file_store.uri(rel))
    return size


def _fix_duplicate_field_ids(manifest: Manifest) -> None:
    if (manifest.fragment_columns().num_files <= 1).all():
        return
    frags = manifest.fragments
    dup: set[int] = set()
    for f in frags:
        seen: set[int] = set()
        for d in f.files:
            for fid in d.fields:
                if fid >= 0 and fid in seen:
                    dup.add(fid)
                seen.add(fid)
    if not dup:
        return
    seed = manifest.max_field_id() + 1
    mapping = {old: seed + i for i, old in enumerate(sorted(dup))}
    schema = copy.deepcopy(manifest.schema)  # the previous manifest shares its schema object
    for old, new in mapping.items():
        schema.field_by_id(old).id = new
    live = {n.id for n in schema.walk()}
    out = []
    for f in frags:
        files = [replace(d, fields=list(d.fields)) for d in f.files]
        seen = set()
        for d in reversed(files):  # the last file's copy is the one the schema keeps
            for i, fid in enumerate(d.fields):
                if fid in mapping and fid not in seen:
                    seen.add(fid)
                    d.fields[i] = mapping[fid]
        files = [d for d in files if any(fid in live for fid in d.fields)]
        out.append(replace(f, files=files))
    manifest.schema = schema
    manifest.fragments = out
