"""The repairs Lance's commit makes to metadata old releases wrote (``rust/lance/src/io/commit.rs``:
``migrate_manifest``, ``fix_schema``, ``migrate_indices``), applied to every manifest we commit.

- Fragments without ``physical_rows`` (pylance <= 0.7) or whose deletion file does not record
  ``num_deleted_rows`` get both from their files; fragments with no live row left then go, as in
  Lance's ``migrate_fragments``. Nothing is read when every fragment records both.
- Duplicate field ids across the data files of one fragment (pylance 0.10.5's add / drop
  columns): the last file's copy of a duplicated id gets a new id, the schema field follows it,
  files left with no schema field are dropped (Lance's ``fix_schema``: readers take the last
  file's column, and so does the schema after the repair).
- Index fragment bitmaps Lance recomputes on commit (none recorded, the manifest written by
  pylance < 0.8.15 or with no writer version, bitmaps of one index overlapping): this library
  cannot recompute them from the index files, and committing under its own writer version
  would make pylance trust them from then on, so the commit is refused (UnsupportedError
  naming the index; any pylance 14 write repairs them).
File sizes left unrecorded are not filled in (a hint readers do without).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from lance_spark_ops.errors import UnsupportedError
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.table.deletion import deleted_offsets
from lance_spark_ops.table.format.fragment import DataFragment
from lance_spark_ops.table.format.manifest import Manifest, WriterVersion
from lance_spark_ops.table.paths import BaseResolver

# pylance < 0.8.15 could write wrong index fragment bitmaps (Lance's must_recalculate_fragment_bitmap)
_BITMAP_FIX = (0, 8, 15)
_SYSTEM_INDICES = ("__lance_frag_reuse", "__lance_mem_wal")


def repair_manifest(store: ObjectStore, manifest: Manifest, previous: Manifest | None,
                    indices: Sequence[Any], where: str, *, reserving: bool = False) -> None:
    """Apply the repairs above to ``manifest`` (the version being committed) in place.
    ``reserving``: a ReserveFragments commit, whose caller writes files planned on the schema
    before it: field ids are left alone (the commit bringing those files repairs them)."""
    _refuse_untrusted_bitmaps(previous, indices, where)
    _fix_counts(store, manifest, where)
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


def _refuse_untrusted_bitmaps(previous: Manifest | None, indices: Sequence[Any], where: str) -> None:
    user = [i for i in indices if i.name not in _SYSTEM_INDICES]
    if not user or previous is None:
        return
    missing = [i.name for i in user if not i.fragment_bitmap]
    old = _old_writer(previous.writer_version)
    seen: dict[str, set[int]] = {}
    overlapping = set()
    if not old:
        from pyroaring import BitMap

        for i in user:
            if not i.fragment_bitmap:
                continue
            ids = set(BitMap.deserialize(i.fragment_bitmap))
            if seen.setdefault(i.name, set()) & ids:
                overlapping.add(i.name)
            seen[i.name] |= ids
    bad = sorted(set(missing) | overlapping | ({i.name for i in user} if old else set()))
    if bad:
        writer = previous.writer_version
        who = f"pylance {writer.version}" if writer else "a pylance without a writer version"
        why = f"they were written by {who} (< 0.8.15, whose bitmaps may be wrong)" if old else \
            "some record no fragment bitmap or overlap another segment of the same index"
        raise UnsupportedError(f"the fragment bitmaps of index(es) {bad} cannot be trusted: {why}; Lance "
                               "recomputes them from the index files on its next commit, which this library "
                               "cannot do. Commit any change with pylance 14 first (e.g. ds.delete('false'))",
                               path=where)


def _fix_counts(store: ObjectStore, manifest: Manifest, where: str) -> None:
    cols = manifest.fragment_columns()  # unknown counts are 0 there, as in the protobuf
    if not ((cols.physical_rows == 0).any() or (cols.has_deletion & (cols.deleted_rows == 0)).any()):
        return
    from lance_spark_ops.table.scan import FragmentScan

    frags = manifest.fragments

    resolver = BaseResolver(store, manifest.base_paths, where)
    out: list[DataFragment] = []
    for f in frags:
        rows = f.physical_rows
        if rows is None:
            rows = FragmentScan(store, f, [], row_ids=None, keep=None, with_row_id=False,
                                with_row_address=False, resolver=resolver).num_rows
        fixed = replace(f, physical_rows=rows)
        if f.deletion_file is not None and f.deletion_file.num_deleted_rows is None:
            n = int(len(deleted_offsets(store, fixed, resolver)))
            fixed = replace(fixed, deletion_file=replace(f.deletion_file, num_deleted_rows=n or None))
        deleted = fixed.deletion_file.num_deleted_rows or 0 if fixed.deletion_file is not None else 0
        if rows - deleted > 0:
            out.append(fixed)
    manifest.fragments = out


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
