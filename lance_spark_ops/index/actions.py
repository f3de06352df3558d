"""What a compaction does to each index (no I/O): the decision table of issue #11.

Without stable row ids an index meeting the rewritten fragments is
  * rewritten through the old -> new address map (``remap``) when its type can be remapped
    here (BTREE, BITMAP, LABEL_LIST, NGRAM, MINHASHLSH, INVERTED, IVF_*), its files are ones this
    library knows, ``readable`` accepts it and ``defer_index_remap`` is off; data behind
    the fragment reuse index are first mapped through its versions (pylance writes
    FRI-remapped bitmaps back on later commits, so the bitmap cannot tell whether data are
    behind; mapping current data is a no-op); IVF_HNSW_* indices are remapped even with
    ``defer_index_remap`` when rewritten fragments they cover had deleted rows (pylance 14
    cannot read them through the FRI then);
  * otherwise covered by a new version of the fragment reuse index (``reuse``): its entry
    stays, pylance remaps it when it loads it. ``readable`` (the driver reads an INVERTED
    index's ``metadata.lance``) keeps here the INVERTED indices this library can neither
    remap (its own FTS layout) nor re-tokenize (pylance's: a tokenizer or layout it does not
    know, ``deleted_fragments`` set, or a covered fragment gone from the dataset);
  * ZONEMAP / BLOOMFILTER: the rewritten fragments leave its bitmap (``uncover``), as pylance;
    RTREE (which pylance cannot remap) is left as it was unless deferred (then the FRI).
With stable row ids, indices of row ids get their bitmaps recalculated (``recalc``); those
holding row addresses are remapped (BTREE index_version 1) or uncovered (ZONEMAP,
BLOOMFILTER, and a BTREE when its remap is not possible).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyroaring import BitMap

from lance_spark_ops.index.frag_reuse import remap_fragment_bitmap
from lance_spark_ops.index.kinds import SUMMARY_KINDS, VECTOR_KINDS, index_kind, is_hnsw, stores_row_addresses

# types whose files this library rewrites, and the files it knows for each: an index listing
# other files (a newer layout) is covered by the fragment reuse index instead
KNOWN_FILES = {
    "BTREE": frozenset({"page_data.lance", "page_lookup.lance"}),
    "BITMAP": frozenset({"bitmap_page_lookup.lance"}),
    "LABEL_LIST": frozenset({"bitmap_page_lookup.lance"}),
    "NGRAM": frozenset({"ngram_postings.lance"}),
    "MINHASHLSH": frozenset({"signatures.lance", "bands.lance"}),
    "INVERTED": frozenset({"metadata.lance"}),  # and FTS_PART_FILE's
    **{k: frozenset({"index.idx", "auxiliary.idx"}) for k in VECTOR_KINDS},
}
FTS_PART_FILE = re.compile(r"part_\d+_(docs|tokens|invert)\.lance")
IVF_KINDS = frozenset(VECTOR_KINDS)
REMAPPABLE_KINDS = frozenset(KNOWN_FILES)


def can_remap(index: Any, remappable: frozenset[str], kind: str | None = None,
              readable: Callable[[Any], bool] | None = None) -> bool:
    """Whether this library rewrites ``index``: its type in ``remappable`` (``kind``: the type
    when its details do not say, read from its files by the caller), its files known and
    (``readable``, when given) their layout one it writes (the driver reads FTS metadata)."""
    kind = kind or index_kind(index)
    if kind not in remappable:
        return False
    known = KNOWN_FILES.get(kind, frozenset())
    names = {f.path for f in index.files}
    if kind == "INVERTED":
        names = {n for n in names if not FTS_PART_FILE.fullmatch(n)}
    if names and not names <= known:
        return False
    return readable is None or readable(index)


@dataclass
class IndexActions:
    remap: list[Any] = field(default_factory=list)
    reuse: list[Any] = field(default_factory=list)
    uncover: list[Any] = field(default_factory=list)
    recalc: list[Any] = field(default_factory=list)

    def counts(self) -> dict[str, dict[str, int]]:
        """{action: {index type: n}} for the metrics."""
        out: dict[str, dict[str, int]] = {}
        for name in ("remap", "reuse", "uncover", "recalc"):
            for idx in getattr(self, name):
                kind = index_kind(idx)
                out.setdefault(name, {})[kind] = out.setdefault(name, {}).get(kind, 0) + 1
        return out


def stored_bitmap(index: Any) -> BitMap | None:
    return BitMap.deserialize(index.fragment_bitmap) if index.fragment_bitmap else None


def effective_bitmap(index: Any, reuse_versions: Sequence[Any]) -> BitMap | None:
    """The fragments an index covers as pylance sees it (stored bitmap through the FRI)."""
    bm = stored_bitmap(index)
    if bm is None or not reuse_versions or index_kind(index) in ("FRAG_REUSE", "MEM_WAL"):
        return bm
    return remap_fragment_bitmap(bm, reuse_versions, index.name)


def plan_index_actions(indices: Iterable[Any], rewritten: Iterable[int], reuse_versions: Sequence[Any],
                       stable_row_ids: bool, defer: bool,
                       remappable: frozenset[str] = REMAPPABLE_KINDS,
                       with_deletions: Iterable[int] = (),
                       kinds: Mapping[bytes, str] | None = None,
                       readable: Callable[[Any], bool] | None = None) -> IndexActions:
    """Sort every index meeting the ``rewritten`` fragment ids into one action;
    ``with_deletions``: those of them that had deleted rows; ``kinds``: index uuid -> type of
    old vector indices whose details do not name it (read from their files); ``readable``: see
    ``can_remap``."""
    old = BitMap(rewritten)
    deleted = BitMap(with_deletions)
    acts = IndexActions()
    for idx in indices:
        kind = (kinds or {}).get(bytes(idx.uuid.uuid)) or index_kind(idx)
        if kind in ("FRAG_REUSE", "MEM_WAL"):
            continue
        bm = effective_bitmap(idx, reuse_versions)
        if bm is None or not (bm & old):
            continue
        if stable_row_ids:
            if not stores_row_addresses(idx, True):
                acts.recalc.append(idx)
            elif can_remap(idx, remappable, kind, readable) and not defer:
                acts.remap.append(idx)
            else:
                acts.uncover.append(idx)
        elif kind == "RTREE" and not defer:
            # pylance 14 cannot remap an RTREE: its compaction leaves the entry as it was,
            # naming the old fragments (the new ones unindexed); deferred, it goes behind the FRI
            continue
        elif kind in SUMMARY_KINDS:
            acts.uncover.append(idx)
        elif can_remap(idx, remappable, kind, readable) and (
                not defer or (is_hnsw(kind) and bm & deleted)):
            # through every FRI version first (a no-op on current data); deferred, an HNSW
            # index meeting deleted rows is rebuilt all the same: pylance cannot read it
            # through the fragment reuse index
            acts.remap.append(idx)
        else:
            acts.reuse.append(idx)
    return acts
