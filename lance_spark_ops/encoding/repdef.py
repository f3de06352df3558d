"""Repetition / definition levels <-> per-layer offsets and validity (file versions 2.1+).

A leaf column of a nested field stores one (rep, def) pair per *level entry*: every leaf
item, plus one entry for every null or empty list (and every list hidden by a null
struct) that owns no item. ``layers`` (``RepDefLayer`` values, innermost first) tell what
each nesting level is and which def values it uses. Lance numbers levels from the inside
out (unlike Parquet):

* def 0 is "valid all the way down"; each layer, innermost first, takes the next
  ``num_def_levels(kind)`` values: a NULLABLE_ITEM / NULLABLE_LIST layer one (null), an
  EMPTYABLE_LIST one (empty), a NULL_AND_EMPTY_LIST two (null = base+1, empty = base+2).
  An entry carries the level of its *outermost* null / empty layer.
* rep ``r`` means "this entry starts a new list at list layer r (counting list layers
  from 1 innermost) and at every list layer inside it"; rep == number of list layers
  starts a new row, rep 0 continues the innermost list.

Decoding (``unravel``) is vectorised: for layer ``k`` an entry starts a new element when
it is *visible* at ``k`` (its def level belongs to a layer below the next list layer above
``k`` - a null/empty list owns no children) and its rep is at least the number of list
layers at or below ``k``. The element's validity is read from the def level of the entry
that starts it; list offsets count the child layer's element starts between list starts.
This reproduces Lance's ``RepDefUnraveler`` (rust/lance-encoding/src/repdef.rs).

Encoding (``levels_from_arrow``) mirrors Lance's ``RepDefBuilder``: struct nulls are
pushed down into children, nulls under a null list are dropped ("garbage"), and each layer
gets the cheapest kind that describes what was seen (ALL_VALID vs NULLABLE item,
ALL_VALID / NULLABLE / EMPTYABLE / NULL_AND_EMPTY list).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from lance_spark_ops.encoding.compression._arrays import alloc_empty, count_below
from lance_spark_ops.encoding.layers import (
    ALL_VALID_ITEM,
    ALL_VALID_LIST,
    EMPTYABLE_LIST,
    LAYER_NAMES,
    NULL_AND_EMPTY_LIST,
    NULLABLE_ITEM,
    NULLABLE_LIST,
    is_list_layer,
    layer_name,
    num_def_levels,
)
from lance_spark_ops.encoding.leaves import children_of, is_single_leaf, map_entries, storage_type
from lance_spark_ops.errors import CorruptFileError

_ALL_VALID_KINDS = frozenset((ALL_VALID_ITEM, ALL_VALID_LIST, EMPTYABLE_LIST))


def _check_kinds(layers: list[int]) -> None:
    for k in layers:
        if k not in LAYER_NAMES:
            raise CorruptFileError(f"unknown rep/def layer kind {k} in layers {list(layers)}")
    if layers and is_list_layer(layers[0]):
        raise CorruptFileError(
            f"innermost rep/def layer is a list ({layer_name(layers[0])}); it must be an item layer"
        )


# ----------------------------------------------------------------------------------------
# decoding
# ----------------------------------------------------------------------------------------


@dataclass
class LayerInfo:
    """One unravelled nesting level.

    ``num_elements`` is the length of the Arrow array at this level; ``validity`` is a bool
    per element (None: all valid); ``offsets`` (int64, ``num_elements + 1`` entries, starting
    at 0) index the next-inner layer's elements and are set for list layers only.
    """

    kind: int
    num_elements: int
    validity: np.ndarray | None = None
    offsets: np.ndarray | None = None

    @property
    def is_list(self) -> bool:
        return is_list_layer(self.kind)


@dataclass
class Unraveled:
    """Structure recovered from one page's levels: ``layers`` innermost first.

    ``visible`` marks the level entries that own a value slot (None: every entry);
    ``num_values`` (= ``layers[0].num_elements``) is how many values the page must hold.
    """

    layers: list[LayerInfo]
    num_levels: int
    num_values: int
    visible: np.ndarray | None = None


def _levels_array(levels: np.ndarray | None, what: str) -> np.ndarray | None:
    if levels is None:
        return None
    arr = np.asarray(levels)
    if arr.ndim != 1 or arr.dtype.kind not in "ui":
        raise CorruptFileError(f"{what} levels must be a 1-D integer array, got {arr.dtype} {arr.shape}")
    if arr.dtype.kind == "i" and arr.size and int(arr.min()) < 0:
        raise CorruptFileError(f"negative {what} level {int(arr.min())}")
    return arr


def unravel(
    rep: np.ndarray | None,
    def_: np.ndarray | None,
    layers: list[int],
    num_rows: int,
    num_items: int | None = None,
) -> Unraveled:
    """Turn one page's rep/def levels into per-layer element counts, validity and offsets.

    ``num_items`` is the level count when both ``rep`` and ``def_`` are absent (defaults
    to ``num_rows``; without levels there are no lists so items are rows). Raises
    ``CorruptFileError`` when levels and layers disagree (a level beyond what the layers
    define, rep without lists, a first entry that does not start a row, a row count that
    differs from ``num_rows``).
    """
    layers = [int(k) for k in layers]
    _check_kinds(layers)
    rep = _levels_array(rep, "repetition")
    def_ = _levels_array(def_, "definition")
    nlayers = len(layers)
    ndef = [num_def_levels(k) for k in layers]
    base = np.concatenate([[0], np.cumsum(ndef)]).astype(np.int64)  # base[k]: levels below k
    max_def = int(base[-1])
    list_flags = [is_list_layer(k) for k in layers]
    n_lists = sum(list_flags)
    lists_upto = np.cumsum(list_flags) if nlayers else np.zeros(0, np.int64)

    if rep is not None and def_ is not None and len(rep) != len(def_):
        raise CorruptFileError(f"{len(rep)} repetition levels but {len(def_)} definition levels")
    if rep is not None:
        n = len(rep)
    elif def_ is not None:
        n = len(def_)
    else:
        n = int(num_rows if num_items is None else num_items)
    if n and def_ is not None:
        top = int(def_.max())
        if top > max_def:
            raise CorruptFileError(
                f"definition level {top} exceeds the maximum {max_def} of layers "
                f"{[layer_name(k) for k in layers]}"
            )
    if n and rep is not None:
        top = int(rep.max())
        if top > n_lists:
            raise CorruptFileError(
                f"repetition level {top} exceeds the {n_lists} list layers of "
                f"{[layer_name(k) for k in layers]}"
            )
        if int(rep[0]) != n_lists:
            raise CorruptFileError(
                f"first repetition level is {int(rep[0])}; a page must start a row (level {n_lists})"
            )
    if n and n_lists and rep is None:
        raise CorruptFileError(f"layers {[layer_name(k) for k in layers]} have lists but the page has "
                               "no repetition levels")
    if nlayers == 0:
        if n != num_rows:
            raise CorruptFileError(f"{n} items without layers for {num_rows} rows")
        return Unraveled([], n, n, None)

    out: list[LayerInfo] = []
    prev_start: np.ndarray | None = None  # element-start mask of layer k-1 (None: all)
    prev_count = n
    visible: np.ndarray | None = None
    for k, kind in enumerate(layers):
        # Highest def value still visible at k: levels owned by layers below the next list
        # layer above k (that list's own null/empty entries are visible at the list itself).
        above = [m for m in range(k + 1, nlayers) if list_flags[m]]
        thresh = int(base[above[0]]) if above else max_def
        start: np.ndarray | None = None
        if def_ is not None and thresh < max_def:
            start = def_ <= thresh
        if rep is not None and lists_upto[k] > 0:
            r_ok = rep >= int(lists_upto[k])  # a Python int keeps the comparison in uint16
            start = r_ok if start is None else (start & r_ok)
        has_validity = kind not in _ALL_VALID_KINDS and def_ is not None
        idx = None
        if start is None:
            count = n
        elif has_validity or list_flags[k]:
            idx = np.flatnonzero(start)
            count = len(idx)
        else:  # only the count is needed (an all-valid item or struct layer)
            count = int(np.count_nonzero(start))
        if k == 0:
            visible = start

        validity = None
        if has_validity:
            d = def_ if idx is None else def_[idx]
            validity = d <= int(base[k])
            if kind == NULL_AND_EMPTY_LIST:
                validity |= d == int(base[k]) + 2

        offsets = None
        if list_flags[k]:
            offsets = alloc_empty(count + 1, np.int64)
            if prev_start is None:  # every entry is a child element: offsets are entry indices
                offsets[:-1] = np.arange(n, dtype=np.int64) if idx is None else idx
                offsets[-1] = n
            elif idx is not None and (n - prev_count) * 8 < n:
                # few entries below own no child element (null / empty lists): an offset is
                # the entry's index less the element-less entries before it
                hidden = np.flatnonzero(~prev_start)
                offsets[:-1] = idx
                offsets[:-1] -= count_below(hidden, idx)
                offsets[-1] = n - len(hidden)
            else:
                cum = np.empty(n + 1, np.int64)
                cum[0] = 0
                np.cumsum(prev_start, out=cum[1:])
                offsets[:-1] = cum[:-1] if idx is None else cum[idx]
                offsets[-1] = cum[-1]
        out.append(LayerInfo(kind, count, validity, offsets))
        prev_start, prev_count = start, count

    if out[-1].num_elements != num_rows:
        raise CorruptFileError(
            f"levels describe {out[-1].num_elements} rows but the page has {num_rows} "
            f"(layers {[layer_name(k) for k in layers]}, {n} levels)"
        )
    return Unraveled(out, n, out[0].num_elements, visible)


def concat_unraveled(parts: list[Unraveled]) -> list[LayerInfo]:
    """Join per-page results layer by layer (pages may use different layer kinds).

    Validity stays None for a layer only when every page has it all valid; offsets are
    shifted by the child counts of the preceding pages.
    """
    if not parts:
        return []
    nlayers = len(parts[0].layers)
    for p in parts:
        if len(p.layers) != nlayers:
            raise CorruptFileError(f"pages of one column have {nlayers} and {len(p.layers)} rep/def layers")
    if len(parts) == 1:
        return list(parts[0].layers)
    merged: list[LayerInfo] = []
    for k in range(nlayers):
        infos = [p.layers[k] for p in parts]
        is_list = infos[0].is_list
        if any(i.is_list != is_list for i in infos):
            raise CorruptFileError(f"rep/def layer {k} is a list in some pages and an item in others")
        count = sum(i.num_elements for i in infos)
        validity = None
        if any(i.validity is not None for i in infos):
            validity = np.concatenate([
                i.validity if i.validity is not None else np.ones(i.num_elements, bool) for i in infos
            ])
        offsets = None
        if is_list:
            pieces, shift = [np.zeros(1, np.int64)], 0
            for i in infos:
                pieces.append(i.offsets[1:] + shift)
                shift += int(i.offsets[-1])
            offsets = np.concatenate(pieces)
        kinds = {i.kind for i in infos}
        kind = infos[0].kind if len(kinds) == 1 else (
            (NULLABLE_LIST if is_list else NULLABLE_ITEM) if validity is not None
            else (ALL_VALID_LIST if is_list else ALL_VALID_ITEM))
        merged.append(LayerInfo(kind, count, validity, offsets))
    return merged


# ----------------------------------------------------------------------------------------
# encoding
# ----------------------------------------------------------------------------------------


@dataclass
class LeafLevels:
    """Levels of one leaf column, as a writer stores them in a page.

    ``values`` holds the leaf items that own a value slot (visible items; null items keep
    a slot), ``rep`` / ``def_`` are uint16 per level entry (None: no lists / all valid),
    ``layers`` innermost first.
    """

    values: pa.Array
    rep: np.ndarray | None
    def_: np.ndarray | None
    layers: list[int]
    num_rows: int
    # When the shredder knows them (one list layer): the level of each row's first entry
    # and the levels without a value slot (null / empty lists), so later stages need no
    # pass over the levels to find them.
    row_starts: np.ndarray | None = None
    invisible: np.ndarray | None = None


@dataclass
class _Layer:
    is_list: bool
    has_null: bool = False
    has_empty: bool = False


@dataclass
class _State:
    """Per level-entry state while shredding outer -> inner.

    ``rep_code``: 0 or 1 + ordinal (outermost first) of the outermost list started here.
    ``def_code``: 0 or 1 + 2 * depth (+1 for "empty") of the outermost null/empty layer.
    ``special``: the entry ended at an outer layer (null/empty list); ``idx``: element index
    into the current layer's array for non-special entries. None stands for the common
    values, not materialised on the fast paths: ``def_code`` all 0, no ``special`` entry,
    ``idx``: the non-special entries are the elements ``first, first + 1, ...`` in order
    (with specials interleaved, e.g. below a list with empty lists); ``defs()`` etc. give
    the arrays.
    """

    rep_code: np.ndarray  # int16
    def_code: np.ndarray | None = None
    special: np.ndarray | None = None
    idx: np.ndarray | None = None
    layers: list[_Layer] = field(default_factory=list)
    num_lists: int = 0
    first: int = 0
    row_starts: np.ndarray | None = None  # see LeafLevels; kept while only one list is applied
    invisible: np.ndarray | None = None

    @property
    def dense(self) -> bool:
        """No special entry and the entries are the elements ``first, first + 1, ...``."""
        return self.special is None and self.idx is None

    def defs(self) -> np.ndarray:
        return np.zeros(len(self.rep_code), np.int16) if self.def_code is None else self.def_code

    def specials(self) -> np.ndarray:
        return np.zeros(len(self.rep_code), bool) if self.special is None else self.special

    def indices(self) -> np.ndarray:
        if self.idx is None:
            if self.special is None:
                return np.arange(self.first, self.first + len(self.rep_code), dtype=np.int64)
            live = ~self.special
            idx = np.zeros(len(self.rep_code), np.int64)
            idx[live] = np.arange(self.first, self.first + int(np.count_nonzero(live)), dtype=np.int64)
            return idx
        return self.idx

    def num_live(self) -> int:
        """Entries that are not special (own an element of the current layer)."""
        n = len(self.rep_code)
        return n if self.special is None else n - int(np.count_nonzero(self.special))


def _validity_np(arr: pa.Array) -> np.ndarray:
    """Logical validity (dictionary value nulls count; null type is all null)."""
    if pa.types.is_null(arr.type):
        return np.zeros(len(arr), bool)
    if _no_nulls(arr):
        return np.ones(len(arr), bool)
    return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


def _apply_item(state: _State, arr: pa.Array) -> None:
    depth = len(state.layers)
    if _no_nulls(arr):  # nothing becomes null here
        dc = state.def_code
        live_codes = dc if dc is None or state.special is None else dc[~state.special]
        state.layers.append(_Layer(False, has_null=live_codes is not None and bool(live_codes.any())))
        return
    live = np.flatnonzero(~state.specials())
    valid = _validity_np(arr)
    dc = state.defs()
    newly_null = live[(dc[live] == 0) & ~valid[state.indices()[live]]]
    if len(newly_null):
        dc = dc.copy()
        dc[newly_null] = 1 + 2 * depth
        state.def_code = dc
    state.layers.append(_Layer(False, has_null=bool(np.any(dc[live] != 0))))


def _no_nulls(arr: pa.Array) -> bool:
    """No null element (dictionary value nulls and the null type count as nulls)."""
    if pa.types.is_dictionary(arr.type):
        return arr.null_count == 0 and arr.dictionary.null_count == 0
    return arr.null_count == 0 and not pa.types.is_null(arr.type)


def _apply_dense_list(state: _State, offs: np.ndarray, ordinal: int) -> bool:
    """``_apply_list`` when every entry is a live, unmasked, non-empty list over a
    contiguous run of lists (e.g. a top-level list column without null / empty rows): the
    items are a contiguous run too. Returns False (nothing done) when that does not hold."""
    n = len(state.rep_code)
    if not state.dense or n == 0 or (state.def_code is not None and state.def_code.any()):
        return False
    run = offs[state.first : state.first + n + 1]
    if not (np.diff(run) > 0).all():
        return False
    base, total = int(run[0]), int(run[-1] - run[0])
    first = run[:-1] - base
    rep_code = state.rep_code
    new_rep = np.zeros(total, np.int16)
    new_rep[first] = np.where(rep_code == 0, ordinal + 1, rep_code)
    state.rep_code, state.def_code, state.first = new_rep, None, base
    state.layers.append(_Layer(True))
    _record_rows(state, ordinal, first, np.zeros(0, np.int64))
    return True


def _record_rows(state: _State, ordinal: int, first: np.ndarray, invisible: np.ndarray) -> None:
    """Keep the row starts / invisible levels after the outermost list when it is applied
    to whole rows (every entry a row); any further list shifts the levels: forget them."""
    if ordinal == 0 and state.num_lists == 1:
        state.row_starts, state.invisible = first, invisible
    else:
        state.row_starts = state.invisible = None


def _apply_run_list(state: _State, offs: np.ndarray, ordinal: int, depth: int) -> bool:
    """``_apply_list`` for a list array without nulls when the live entries are a run of
    lists ``first, first + 1, ...`` (``state.idx`` None) and every live list that is not
    expanded (empty, or masked by a null above) holds no items: the items of the expanded
    lists are then a run too, so the new state needs no per-entry index array (the common
    top-level ``list<T>`` with empty lists). Returns False (nothing done) otherwise."""
    if state.idx is not None:
        return False
    n = len(state.rep_code)
    special, def_code = state.special, state.def_code
    live_pos = None if special is None else np.flatnonzero(~special)
    nlive = n if live_pos is None else len(live_pos)
    run = offs[state.first : state.first + nlive + 1]
    if len(run) != nlive + 1:
        return False
    if live_pos is None:
        lengths = np.diff(run)
    else:
        lengths = np.zeros(n, np.int64)
        lengths[live_pos] = np.diff(run)
    expand = lengths > 0  # specials carry length 0
    masked = None
    if def_code is not None and def_code.any():
        masked = def_code != 0
        if special is not None:
            masked &= ~special
        if np.any(expand & masked):
            return False  # a masked list hides items: the expanded items are no run
    is_empty = ~expand
    if special is not None:
        is_empty &= ~special
    if masked is not None:
        is_empty &= ~masked
    has_empty = bool(is_empty.any())
    state.layers.append(_Layer(True, has_null=masked is not None and bool(masked.any()), has_empty=has_empty))
    counts = np.maximum(lengths, 1)  # every entry not expanded keeps one level
    first = np.zeros(n, np.int64)
    if n > 1:
        np.cumsum(counts[:-1], out=first[1:])
    total = int(first[-1] + counts[-1]) if n else 0
    rep_code = state.rep_code
    new_rep = np.zeros(total, np.int16)
    start_code = np.where(rep_code == 0, ordinal + 1, rep_code)
    if special is not None:
        start_code = np.where(special, rep_code, start_code)
    new_rep[first] = start_code
    if has_empty or (def_code is not None and def_code.any()):
        codes = np.zeros(n, np.int16) if def_code is None else def_code
        if has_empty:
            codes = np.where(is_empty, 2 + 2 * depth, codes).astype(np.int16)
        new_def = np.zeros(total, np.int16)
        new_def[first] = codes
        state.def_code = new_def
    else:
        state.def_code = None
    if expand.all():
        state.special = None
    else:
        new_special = np.zeros(total, bool)
        new_special[first] = ~expand
        state.special = new_special
    state.rep_code, state.idx, state.first = new_rep, None, int(run[0])
    if special is None and def_code is None:  # whole rows: specials are exactly the invisible levels
        _record_rows(state, ordinal, first, first[~expand])
    else:
        state.row_starts = state.invisible = None
    return True


def _apply_list(state: _State, arr: pa.Array) -> None:
    """Record one list layer: null / empty / masked lists end their entry here (specials),
    other lists expand it into one entry per item (first keeps the outer rep code)."""
    depth = len(state.layers)
    ordinal = state.num_lists
    state.num_lists += 1
    if len(arr) and _no_nulls(arr):
        offs = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
        if _apply_dense_list(state, offs, ordinal) or _apply_run_list(state, offs, ordinal, depth):
            return
    special, idx, def_code = state.specials(), state.indices(), state.defs()
    if len(arr):
        offs = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
        starts = offs[idx]  # special entries carry idx 0, always in range
        lengths = offs[idx + 1] - starts
        valid = _validity_np(arr)[idx]
    else:  # only special entries can exist
        starts = lengths = np.zeros(len(special), np.int64)
        valid = np.ones(len(special), bool)
    live = ~special
    masked = live & (def_code != 0)
    ok = live & ~masked
    is_null = ok & ~valid
    is_empty = ok & valid & (lengths == 0)
    expand = ok & valid & (lengths > 0)
    state.layers.append(_Layer(True, has_null=bool(masked.any() or is_null.any()),
                               has_empty=bool(is_empty.any())))

    def_code = np.where(is_null, 1 + 2 * depth, np.where(is_empty, 2 + 2 * depth, def_code))
    counts = np.where(expand, lengths, 1)
    total = int(counts.sum())
    first = np.zeros(len(special), np.int64)
    if len(counts) > 1:
        np.cumsum(counts[:-1], out=first[1:])

    rep_code = state.rep_code
    new_rep = np.zeros(total, np.int16)
    new_rep[first] = np.where(live & (rep_code == 0), ordinal + 1, rep_code)
    new_def = np.zeros(total, np.int16)
    new_def[first] = def_code
    new_special = np.zeros(total, bool)
    new_special[first] = ~expand
    new_idx = np.repeat(np.where(expand, starts, 0) - first, counts) + np.arange(total, dtype=np.int64)
    new_idx[new_special] = 0
    state.rep_code, state.def_code, state.special, state.idx = new_rep, new_def, new_special, new_idx
    state.row_starts = state.invisible = None


def _finish_leaf(state: _State, arr: pa.Array, num_rows: int) -> LeafLevels:
    outer_first = state.layers
    nl = len(outer_first)
    kinds_outer = []
    for lay in outer_first:
        if lay.is_list:
            kinds_outer.append(
                NULL_AND_EMPTY_LIST if lay.has_null and lay.has_empty else
                NULLABLE_LIST if lay.has_null else EMPTYABLE_LIST if lay.has_empty else ALL_VALID_LIST)
        else:
            kinds_outer.append(NULLABLE_ITEM if lay.has_null else ALL_VALID_ITEM)
    layers = kinds_outer[::-1]  # innermost first
    ndef = [num_def_levels(k) for k in layers]
    base = np.concatenate([[0], np.cumsum(ndef)]).astype(np.int64)
    table = np.zeros(1 + 2 * nl, np.int64)
    for p, kind in enumerate(kinds_outer):
        b = int(base[nl - 1 - p])
        if kind in (NULLABLE_ITEM, NULLABLE_LIST, NULL_AND_EMPTY_LIST):
            table[1 + 2 * p] = b + 1
        if kind == EMPTYABLE_LIST:
            table[2 + 2 * p] = b + 1
        elif kind == NULL_AND_EMPTY_LIST:
            table[2 + 2 * p] = b + 2
    n = len(state.rep_code)
    def_ = table.astype(np.uint16)[state.defs()] if base[-1] > 0 and n else None
    rep = None
    if state.num_lists and n:
        # rep code 0 -> 0, code c (list ordinal c - 1, outermost first) -> num_lists + 1 - c
        if state.num_lists == 1:
            rep = state.rep_code.astype(np.uint16)
        else:
            rep = np.array([0, *range(state.num_lists, 0, -1)], np.uint16)[state.rep_code]
    known = {} if state.row_starts is None or rep is None else {
        "row_starts": state.row_starts, "invisible": state.invisible}
    if state.dense:
        return LeafLevels(arr.slice(state.first if n else 0, n), rep, def_, layers, num_rows, **known)
    if state.idx is None:  # the live entries are a run of elements
        return LeafLevels(arr.slice(state.first, state.num_live()), rep, def_, layers, num_rows, **known)
    live_idx = state.indices()[~state.specials()]
    if len(live_idx) and np.array_equal(live_idx, np.arange(live_idx[0], live_idx[0] + len(live_idx))):
        values = arr.slice(int(live_idx[0]), len(live_idx))
    else:
        values = arr.take(pa.array(live_idx, pa.int64()))
    return LeafLevels(values, rep, def_, layers, num_rows)


def _holds_list(field: pa.Field) -> bool:
    """Whether a list or map is nested somewhere below this struct (not inside a single
    leaf such as a fixed-size list): a child that is not a single leaf is a list, a map or
    a struct to look into."""
    return any(not is_single_leaf(c) and (not pa.types.is_struct(storage_type(c.type)) or _holds_list(c))
               for c in children_of(field))


def _shred(node_field: pa.Field, arr: pa.Array, state: _State, num_rows: int, out: list[LeafLevels]) -> None:
    dt = node_field.type
    if is_single_leaf(node_field):
        _apply_item(state, arr)
        out.append(_finish_leaf(state, arr, num_rows))
        return
    if pa.types.is_struct(dt):
        _apply_item(state, arr)
        if node_field.nullable and _holds_list(node_field):
            # a nullable struct over a list is NULLABLE on every page, nulls or not: pylance 14
            # cannot read a column whose pages mix ALL_VALID and NULLABLE there (its struct
            # decoder miscounts the nulls; ``layers.all_valid_struct_over_list``)
            state.layers[-1].has_null = True
        for i in range(dt.num_fields):
            child = _State(state.rep_code, state.def_code, state.special, state.idx,
                           list(state.layers), state.num_lists, state.first, state.row_starts,
                           state.invisible)
            _shred(dt.field(i), arr.field(i), child, num_rows, out)
        return
    if pa.types.is_map(dt):
        _apply_list(state, arr)
        _shred(map_entries(dt), arr.values, state, num_rows, out)
        return
    if pa.types.is_list(dt) or pa.types.is_large_list(dt):
        _apply_list(state, arr)
        _shred(dt.value_field, arr.values, state, num_rows, out)
        return
    raise AssertionError(f"unhandled type {dt}")  # is_single_leaf covers every other type


def levels_from_arrow(array: pa.Array | pa.ChunkedArray, field: pa.Field | None = None) -> list[LeafLevels]:
    """Shred an Arrow array into one ``LeafLevels`` per leaf column, depth-first.

    Leaves follow ``structural.leaf_fields``: struct children in order, a list's item, a
    map's key then value; fixed-size lists, dictionaries, packed structs (field metadata
    ``lance-encoding:packed``) and blobs are single leaves. Layer kinds and def numbering
    follow Lance's ``RepDefBuilder`` for the whole array as one page.
    """
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    if field is None:
        field = pa.field("", array.type)
    n = len(array)
    if is_single_leaf(field):  # fast path: one layer, def = 1 where null
        valid = _validity_np(array)
        if valid.all():
            return [LeafLevels(array, None, None, [ALL_VALID_ITEM], n)]
        return [LeafLevels(array, None, (~valid).astype(np.uint16), [NULLABLE_ITEM], n)]
    simple = _simple_list_levels(array, field)
    if simple is not None:
        return [simple]
    state = _State(np.zeros(n, np.int16))
    out: list[LeafLevels] = []
    _shred(field, array, state, n, out)
    return out


def _simple_list_levels(array: pa.Array, field: pa.Field) -> LeafLevels | None:
    """The levels of a top-level ``list<leaf>`` with no null list and no null item (the
    common list column), written directly: rep 1 at each row's first level, def 1 at the
    empty lists (absent without any), the items a run. What ``_shred`` gives for it,
    without its general per-level state (None when the shape is not this one)."""
    dt = field.type
    if not (pa.types.is_list(dt) or pa.types.is_large_list(dt)) or not is_single_leaf(dt.value_field):
        return None
    n = len(array)
    if n == 0 or array.null_count or not _no_nulls(array.values):
        return None
    offs = np.asarray(array.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    lengths = np.diff(offs)
    empty = lengths == 0
    counts = np.maximum(lengths, 1)  # an empty list keeps one level
    first = np.zeros(n, np.int64)
    np.cumsum(counts[:-1], out=first[1:])
    total = int(first[-1] + counts[-1])
    rep = np.zeros(total, np.uint16)
    rep[first] = 1
    invisible = first[empty]
    if len(invisible):
        def_ = np.zeros(total, np.uint16)
        def_[invisible] = 1
        layers = [ALL_VALID_ITEM, EMPTYABLE_LIST]
    else:
        def_ = None
        layers = [ALL_VALID_ITEM, ALL_VALID_LIST]
    base = int(offs[0])
    values = array.values.slice(base, int(offs[-1]) - base)
    return LeafLevels(values, rep, def_, layers, n, row_starts=first, invisible=invisible)
