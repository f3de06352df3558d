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
Rewrite        only the indices in ``rewritten_indices`` (the caller rewrote their data) are
               remapped old group -> new group and get their new uuid (a group that is partly
               indexed is an error); other bitmaps keep naming the old fragments: those are
               gone, so the index simply stops covering the moved rows, which are scanned
               instead. Also under stable row ids: the late-2025 Lance sources remap every
               bitmap then, but pylance 14 itself rewrites its indices on compaction even with
               stable row ids, and a BTREE index whose bitmap was remapped without rewriting
               its data loses the moved rows (observed), so no bitmap moves without its data.
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

from pyroaring import BitMap

from lance_spark_ops._pb import table_pb2
from lance_spark_ops.errors import CorruptFileError, InvalidInputError
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


def retain_relevant_indices(indices: list[IndexMetadata], field_ids: set[int],
                            fragment_ids: Iterable[int]) -> list[IndexMetadata]:
    """Lance's ``retain_relevant_indices`` (see the module docstring)."""
    kept = [i for i in indices if all(f in field_ids for f in i.fields) or is_system_index(i)]
    live = BitMap(fragment_ids)
    by_name: dict[str, list[IndexMetadata]] = defaultdict(list)
    for idx in kept:
        if idx.name != FRAG_REUSE_INDEX_NAME:
            by_name[idx.name].append(idx)

    def empty(idx: IndexMetadata) -> bool:
        bm = fragment_bitmap(idx)
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


def rewrite_indices(indices: list[IndexMetadata], groups: list[RewriteGroup],
                    rewritten: list[object]) -> list[IndexMetadata]:
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
            raise InvalidInputError(f"rewrite remaps index {old_id.hex()}, which does not exist")
        bm = fragment_bitmap(target)
        if bm is None:
            raise InvalidInputError(f"index {target.name!r} has no fragment bitmap to remap")
        set_fragment_bitmap(target, recalculate_fragment_bitmap(bm, groups, target.name))
        target.uuid.CopyFrom(r.new_id)  # type: ignore[attr-defined]
    return out


def index_section(indices: list[IndexMetadata]) -> table_pb2.IndexSection | None:
    """The section to write (None when there are no indices, as Lance writes none)."""
    return table_pb2.IndexSection(indices=indices) if indices else None
