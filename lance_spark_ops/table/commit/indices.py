"""The index section carried from one manifest to the next, per Lance's ``build_manifest`` rules.

Indices are ``IndexMetadata`` protobufs (kept as messages so fields this library does not
interpret survive unchanged). Each names the fields it covers and, in ``fragment_bitmap``, the
fragments whose rows it holds: a portable 32-bit roaring bitmap, empty bytes meaning "unknown".
A bitmap is not shrunk when fragments disappear: Lance intersects it with the live fragments
when it plans a query (``effective_fragment_bitmap``), so an index naming removed fragments is
harmless (fragment ids are never reused). The operations change indices as follows:

=============  ==================================================================================
Append         unchanged
Delete         ``retain_relevant_indices``
Overwrite      all dropped
Rewrite        indices in ``rewritten_indices`` (the caller rewrote their data) get their new
               uuid, details, version and files, and each group's old fragment ids replaced by
               its new ones (a group partly indexed is an error); ``uncovered_indices`` lose
               the rewritten fragments (ZONEMAP / BLOOMFILTER, as pylance 14); under stable
               row ids every other bitmap of an index of row ids is recalculated like a
               rewritten one (row ids do not move; a BTREE at index_version 1 holds row
               addresses, so it keeps its bitmap unless rewritten); otherwise bitmaps keep the
               fragments (the fragment reuse index, when the caller installs one, maps them
               for pylance). ``frag_reuse_index`` replaces the previous one, which must still
               be the one the caller extended (``frag_reuse_replaces``), else CommitConflict.
Merge/Project  ``retain_relevant_indices``
DataReplace    unchanged (Lance leaves them; a replaced column's index keeps its bitmap)
=============  ==================================================================================

``retain_relevant_indices`` drops indices on fields that left the schema (system indices
``__lance_frag_reuse`` / ``__lance_mem_wal`` stay); among same-name indices whose live bitmap
is empty only the oldest scalar one is kept, and an empty vector index goes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import numpy as np
from pyroaring import BitMap

from lance_spark_ops._pb import table_pb2
from lance_spark_ops.errors import CommitConflict, CorruptFileError, InvalidInputError
from lance_spark_ops.index.frag_reuse import load_versions, remap_fragment_bitmap
from lance_spark_ops.index.kinds import stores_row_addresses
from lance_spark_ops.table.format.fragment_run import fragment_ids
from lance_spark_ops.table.format.transaction import RewriteGroup

FRAG_REUSE_INDEX_NAME = "__lance_frag_reuse"
MEM_WAL_INDEX_NAME = "__lance_mem_wal"
SYSTEM_INDEX_NAMES = (FRAG_REUSE_INDEX_NAME, MEM_WAL_INDEX_NAME)

IndexMetadata = table_pb2.IndexMetadata


def fragment_bitmap(index: IndexMetadata, where: str | None = None) -> BitMap | None:
    """The index's fragment bitmap, or None when it records none."""
    if not index.fragment_bitmap:
        return None
    try:
        return BitMap.deserialize(index.fragment_bitmap)
    except (ValueError, OverflowError) as e:
        raise CorruptFileError(f"index {index.name!r}: fragment bitmap does not parse ({e})",
                               path=where) from e


def set_fragment_bitmap(index: IndexMetadata, bitmap: BitMap) -> None:
    index.fragment_bitmap = bytes(BitMap(bitmap, optimize=False).serialize())


def is_system_index(index: IndexMetadata) -> bool:
    return index.name in SYSTEM_INDEX_NAMES


def is_vector_index(index: IndexMetadata) -> bool:
    return index.HasField("index_details") and index.index_details.type_url.endswith("VectorIndexDetails")


def copy_indices(indices: Iterable[IndexMetadata]) -> list[IndexMetadata]:
    out = []
    for idx in indices:
        c = IndexMetadata()
        c.CopyFrom(idx)
        out.append(c)
    return out


def _reuse_versions(indices: list[IndexMetadata]) -> list | str | None:
    """The fragment reuse index's versions when they are inline in its details (None without
    one; "unknown" when they are in a file): pylance 14 loads index bitmaps remapped through
    them, so an index whose stored bitmap names only rewritten fragments is not empty."""
    fri = next((i for i in indices if i.name == FRAG_REUSE_INDEX_NAME), None)
    if fri is None:
        return None

    def no_file(rel: str) -> bytes:
        raise LookupError(rel)
    try:
        return load_versions(fri, no_file)
    except (LookupError, CorruptFileError):
        return "unknown"


def retain_relevant_indices(indices: list[IndexMetadata], field_ids: set[int],
                            fragment_ids: Iterable[int]) -> list[IndexMetadata]:
    """Lance's ``retain_relevant_indices`` (see the module docstring)."""
    kept = [i for i in indices if all(f in field_ids for f in i.fields) or is_system_index(i)]
    live = BitMap(fragment_ids)
    by_name: dict[str, list[IndexMetadata]] = defaultdict(list)
    for idx in kept:
        if idx.name != FRAG_REUSE_INDEX_NAME:
            by_name[idx.name].append(idx)

    reuse = _reuse_versions(kept)

    def empty(idx: IndexMetadata) -> bool:
        bm = fragment_bitmap(idx)
        if bm is not None and reuse is not None and not (bm & live):
            if reuse == "unknown":
                return False  # may be covered through the fragment reuse index: keep it
            bm = remap_fragment_bitmap(bm, reuse, idx.name)
        return bm is None or not (bm & live)

    keep_ids: set[int] = set()
    for group in by_name.values():
        non_empty = [i for i in group if not empty(i)]
        if non_empty:
            keep_ids.update(id(i) for i in non_empty)
        elif len(group) > 1:
            oldest = min(group, key=lambda i: i.dataset_version)
            if not is_vector_index(oldest):
                keep_ids.add(id(oldest))
        elif not is_vector_index(group[0]):
            keep_ids.add(id(group[0]))
    return [i for i in kept if i.name == FRAG_REUSE_INDEX_NAME or id(i) in keep_ids]


def recalculate_fragment_bitmap(old: BitMap, groups: list[RewriteGroup], index_name: str) -> BitMap:
    """Replace each fully indexed group's old fragment ids by its new ones."""
    new = BitMap(old)
    for g in groups:
        ids = [f.id for f in g.old_fragments]
        covered = [i in old for i in ids]
        if any(covered):
            if not all(covered):
                raise InvalidInputError(f"rewrite group {ids} is only partly covered by index "
                                        f"{index_name!r}: "
                                        "a compaction must not mix indexed and unindexed fragments")
            new -= BitMap(ids)
            new |= BitMap(f.id for f in g.new_fragments)
    return new


def _uuid_bytes(msg: object) -> bytes:
    return bytes(getattr(msg, "uuid", b""))


def rewrite_indices(indices: list[IndexMetadata], groups: list[RewriteGroup], rewritten: list[object],
                    stable_row_ids: bool = False, uncovered: Iterable[bytes] = (),
                    frag_reuse_index: IndexMetadata | None = None,
                    frag_reuse_replaces: bytes | None = None,
                    bases: dict[bytes, bytes] | None = None) -> list[IndexMetadata]:
    """Indices after a Rewrite (Lance's ``handle_rewrite_indices``; see the module docstring)."""
    out = copy_indices(indices)
    seen: set[bytes] = set()
    for r in rewritten:
        old_id = _uuid_bytes(r.old_id)  # type: ignore[attr-defined]
        if old_id in seen:
            raise InvalidInputError(f"rewrite remaps index {old_id.hex()} twice")
        seen.add(old_id)
        target = next((i for i in out if _uuid_bytes(i.uuid) == old_id), None)
        if target is None:
            raise CommitConflict(f"rewrite remaps index {old_id.hex()}, which no longer exists")
        if bases and old_id in bases:
            target.fragment_bitmap = bases[old_id]
        _move_bitmap(target, groups)
        _apply_rewritten(target, r)
    dropped = set(uncovered)
    old_ids: BitMap | None = None  # built when an index needs it
    for idx in out:
        key = _uuid_bytes(idx.uuid)
        if key in seen or is_system_index(idx):
            continue
        bm = fragment_bitmap(idx)
        if key in dropped and bm is not None:
            if old_ids is None:
                old_ids = BitMap(np.concatenate([fragment_ids(g.old_fragments) for g in groups]).tolist())
            set_fragment_bitmap(idx, bm - old_ids)
        elif stable_row_ids and bm is not None and not stores_row_addresses(idx, True):
            _move_bitmap(idx, groups)
    if frag_reuse_index is not None:
        current = next((i for i in out if i.name == FRAG_REUSE_INDEX_NAME), None)
        if (_uuid_bytes(current.uuid) if current is not None else None) != frag_reuse_replaces:
            raise CommitConflict("the fragment reuse index changed since this compaction read it")
        out = [i for i in out if i.name != FRAG_REUSE_INDEX_NAME] + copy_indices([frag_reuse_index])
    return out


def _move_bitmap(index: IndexMetadata, groups: list[RewriteGroup]) -> None:
    bm = fragment_bitmap(index)
    if bm is None:
        raise InvalidInputError(f"index {index.name!r} has no fragment bitmap to remap")
    set_fragment_bitmap(index, recalculate_fragment_bitmap(bm, groups, index.name))


def _apply_rewritten(index: IndexMetadata, r: object) -> None:
    """The new uuid and, when given, details, version and files of a rewritten index."""
    index.uuid.CopyFrom(r.new_id)  # type: ignore[attr-defined]
    index.ClearField("base_id")  # rewritten under the dataset's own root
    if r.HasField("new_index_details"):  # type: ignore[attr-defined]
        index.index_details.CopyFrom(r.new_index_details)  # type: ignore[attr-defined]
    index.index_version = r.new_index_version  # type: ignore[attr-defined]
    if len(r.new_index_files):  # type: ignore[attr-defined]
        del index.files[:]
        index.files.extend(r.new_index_files)  # type: ignore[attr-defined]


def index_section(indices: list[IndexMetadata]) -> table_pb2.IndexSection | None:
    """The section to write (None when there are no indices, as Lance writes none)."""
    return table_pb2.IndexSection(indices=indices) if indices else None
