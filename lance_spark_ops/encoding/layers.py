"""Rep/def layer facts every layout and the level code share (file versions 2.1+).

A page's ``layers`` are ``RepDefLayer`` values (encodings_v2_1.proto), innermost first.
Each layer kind uses 0, 1 or 2 def values (``num_def_levels``); list layers own a rep
level (``max_rep`` = number of list layers; a row starts where rep == max_rep). An item
is *visible* (owns a value slot) when its def level is at most the def values of the
layers below the first list layer (``max_visible_def``, Lance's
``SerializedRepDefs::max_visible_level``): null / empty lists own no value.

Example: ``[NULLABLE_ITEM, NULL_AND_EMPTY_LIST]`` -> max_rep 1, def values 1 + 2,
max_visible_def 1 (def 2 = null list, def 3 = empty list are invisible).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from lance_spark_ops.errors import CorruptFileError

# RepDefLayer enum values (encodings_v2_1.proto).
ALL_VALID_ITEM = 1
ALL_VALID_LIST = 2
NULLABLE_ITEM = 3
NULLABLE_LIST = 4
EMPTYABLE_LIST = 5
NULL_AND_EMPTY_LIST = 6

LAYER_NAMES = {
    ALL_VALID_ITEM: "ALL_VALID_ITEM",
    ALL_VALID_LIST: "ALL_VALID_LIST",
    NULLABLE_ITEM: "NULLABLE_ITEM",
    NULLABLE_LIST: "NULLABLE_LIST",
    EMPTYABLE_LIST: "EMPTYABLE_LIST",
    NULL_AND_EMPTY_LIST: "NULL_AND_EMPTY_LIST",
}
LIST_LAYERS = frozenset((ALL_VALID_LIST, NULLABLE_LIST, EMPTYABLE_LIST, NULL_AND_EMPTY_LIST))
DEF_LEVELS = {
    ALL_VALID_ITEM: 0,
    ALL_VALID_LIST: 0,
    NULLABLE_ITEM: 1,
    NULLABLE_LIST: 1,
    EMPTYABLE_LIST: 1,
    NULL_AND_EMPTY_LIST: 2,
}
NO_LIST_VISIBLE = 0xFFFF  # max_visible_def of a page without lists: every item is visible


def layer_name(kind: int) -> str:
    """Readable name of a ``RepDefLayer`` value (for error messages)."""
    return LAYER_NAMES.get(kind, f"UNKNOWN({kind})")


def is_list_layer(kind: int) -> bool:
    """Whether the layer kind describes a list (has offsets and a rep level)."""
    return kind in LIST_LAYERS


def all_valid_struct_over_list(layers: list[int]) -> bool:
    """Whether an ALL_VALID item layer sits outside a list layer (``layers`` innermost first):
    a struct over a list written without its validity. pylance 14 fails to read a column
    whose pages mix that with a NULLABLE struct layer ("Incorrect number of nulls for
    StructArray"), so the writer never writes it for a nullable struct and does not move
    such pages next to its own (``repdef._shred``, ``file.writer``)."""
    seen_list = False
    for kind in layers:
        if kind in LIST_LAYERS:
            seen_list = True
        elif seen_list and kind == ALL_VALID_ITEM:
            return True
    return False


def struct_validity_conflict(pages: Iterable[Sequence[int]]) -> bool:
    """Whether pylance 14 fails to read a column of pages with these ``layers`` (innermost
    first; "Incorrect number of nulls for StructArray"): two pages disagree on whether a struct
    layer above a list is ALL_VALID or NULLABLE. Observed on every pylance-written pair of one
    and two struct levels (``tests/file/test_struct_over_list_pages.py``); the one exception:
    a page with no def levels at all whose only disagreement is the top-level struct."""
    seen: set[tuple[tuple[tuple[int, bool], ...], bool]] = set()
    for layers in pages:
        first_list = next((i for i, k in enumerate(layers) if k in LIST_LAYERS), None)
        if first_list is None:
            continue
        # (position, ALL_VALID) of each struct layer above the innermost list; whether it has defs
        mine = (tuple((i, layers[i] == ALL_VALID_ITEM) for i in range(first_list + 1, len(layers))
                      if layers[i] not in LIST_LAYERS), any(num_def_levels(k) for k in layers))
        if mine[0] and any(_conflict(mine, other, len(layers) - 1) for other in seen):
            return True
        seen.add(mine)
    return False


def copies_beside_nullable_structs(layers: Sequence[int]) -> bool:
    """Whether a page with these layers may be moved into a column whose other pages hold each
    struct over a list NULLABLE (what the writer writes for a nullable struct; a binary copy
    puts both in one file): no ``struct_validity_conflict`` between the two. True for pages
    NULLABLE there, and for pages without def levels whose only ALL_VALID one is the top."""
    first_list = next((i for i, k in enumerate(layers) if k in LIST_LAYERS), None)
    if first_list is None:
        return True
    written = tuple(NULLABLE_ITEM if i > first_list and k == ALL_VALID_ITEM else k
                    for i, k in enumerate(layers))
    return not struct_validity_conflict([tuple(layers), written])


def _conflict(a: tuple[tuple[tuple[int, bool], ...], bool], b: tuple[tuple[tuple[int, bool], ...], bool],
              top: int) -> bool:
    differ = [pa[0] for pa, pb in zip(a[0], b[0], strict=False) if pa != pb]
    if not differ:
        return False
    if differ == [top]:  # only the top-level struct: a page without def levels reads beside any
        all_valid_side = a if dict(a[0])[top] else b
        return all_valid_side[1]
    return True


def num_def_levels(kind: int) -> int:
    """How many def values the layer kind uses (0, 1, or 2 for null-and-empty lists)."""
    if kind in (ALL_VALID_ITEM, ALL_VALID_LIST):
        return 0
    if kind == NULL_AND_EMPTY_LIST:
        return 2
    return 1


def max_rep(layers: Iterable[int]) -> int:
    """Number of list layers: the rep level that starts a row."""
    return sum(1 for k in layers if is_list_layer(k))


def max_visible_def(layers: Iterable[int]) -> int:
    """Def values of the layers below the first list layer (all of them without lists):
    items with def <= this own a value slot."""
    total = 0
    for kind in layers:  # innermost first
        if is_list_layer(kind):
            break
        total += num_def_levels(kind)
    return total


@dataclass(frozen=True)
class LevelInfo:
    """What a page's layers imply: ``max_rep`` and ``max_visible_def`` (``NO_LIST_VISIBLE``
    without lists, so every item is visible whatever its def level)."""

    layers: tuple[int, ...]
    max_rep: int
    max_visible_def: int

    def visible(self, def_: np.ndarray | None, count: int) -> np.ndarray:
        if def_ is None or self.max_visible_def >= NO_LIST_VISIBLE:
            return np.ones(count, dtype=bool)
        return def_ <= self.max_visible_def


def level_info(layers: object, what: str) -> LevelInfo:
    """``LevelInfo`` of a page's layers; ``CorruptFileError`` naming ``what`` for unknown kinds."""
    kinds = tuple(int(x) for x in layers)  # type: ignore[attr-defined]
    for kind in kinds:
        if kind not in DEF_LEVELS:
            raise CorruptFileError(f"{what}: unknown rep/def layer {kind}")
    reps = max_rep(kinds)
    return LevelInfo(kinds, reps, max_visible_def(kinds) if reps else NO_LIST_VISIBLE)
