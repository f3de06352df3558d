"""Split a leaf's page by rows so that no mini-block chunk can hold more rep/def levels
than its header can count (Lance's ``MiniBlockRepDefBudget``, observed on pylance 14).

A chunk carries at most ``min(16 KiB * 8 / bits_per_level, 65535)`` levels, where
``bits_per_level`` is the bit width of the largest rep level plus that of the largest def
level the layers allow. Chunks are cut by *values*, so only levels that own no value -
null and empty lists - can pile up in one chunk. Rows are therefore packed greedily into
pages: a page is closed before the row that would take it over the budget *and* leave it
holding at least one such invisible level. A single row that alone breaks the budget
(with invisible levels) cannot be split: the page goes to full-zip instead.

Example: 70 000 null lists then 10 lists ``[1, 2]`` (2 bits per level, budget 65 535):
pages of 65 535 and 4 475 rows. 100 000 one-item lists then one null: pages of 100 000
and 1 rows (the first page has no invisible level, its chunks stay small).
"""

from __future__ import annotations

import numpy as np

from lance_spark_ops.encoding.compression._arrays import count_below
from lance_spark_ops.encoding.layers import max_rep, max_visible_def, num_def_levels
from lance_spark_ops.encoding.repdef import LeafLevels

REPDEF_BUDGET_BITS = 16 * 1024 * 8
MAX_CHUNK_LEVELS = 0xFFFF


def level_budget(layers: list[int]) -> int | None:
    """Most levels one mini-block chunk may hold (None: the page has no rep levels)."""
    reps = max_rep(layers)
    if reps == 0:
        return None
    max_def = sum(num_def_levels(k) for k in layers)
    bits = int(reps).bit_length() + int(max_def).bit_length()
    return min(REPDEF_BUDGET_BITS // bits, MAX_CHUNK_LEVELS)


class _RowIndex:
    """Where the rows and the invisible levels of a leaf page are, found once for both
    the split and the slicing: row starts (levels with rep == max_rep) and the positions
    of the invisible levels, which are few (null / empty lists), so counts of them before
    a level are binary searches instead of a cumulative sum over every level."""

    def __init__(self, lv: LeafLevels) -> None:
        rep = np.asarray(lv.rep)
        self.num_levels = len(rep)
        if lv.row_starts is not None and lv.invisible is not None:  # known from the shredding
            self.starts, self.invisible = lv.row_starts, lv.invisible
            return
        self.starts = np.flatnonzero(rep == max_rep(lv.layers))  # first level of each row
        self.invisible = np.flatnonzero(np.asarray(lv.def_) > max_visible_def(lv.layers))

    def invisible_before(self, levels: np.ndarray) -> np.ndarray:
        """Invisible levels before each of the sorted distinct ``levels``."""
        return count_below(self.invisible, levels)


def split_rows(lv: LeafLevels) -> tuple[list[tuple[int, int]], bool]:
    """Row ranges ``[(start, stop), ...]`` of the pages to write, and whether a single
    row is over the budget (then the page is kept whole and must be full-zip)."""
    ranges, over, _ = _split(lv)
    return ranges, over


def split_pages(lv: LeafLevels, budget: int | None = None) -> tuple[list[tuple[int, LeafLevels]], bool]:
    """``split_rows`` and ``slice_pages`` in one: (first row, page levels) per page, and
    whether a single row is over the budget (``budget``: levels a chunk may hold, None:
    ``level_budget``, Lance's)."""
    ranges, over, index = _split(lv, budget)
    return [(lo, page) for (lo, _), page in zip(ranges, slice_pages(lv, ranges, index), strict=True)], over


def _split(lv: LeafLevels, budget: int | None = None) -> tuple[list[tuple[int, int]], bool, _RowIndex | None]:
    n = int(lv.num_rows)
    if budget is None or not max_rep(list(lv.layers)):
        budget = level_budget(list(lv.layers))
    if budget is None or lv.rep is None or lv.def_ is None or len(lv.rep) <= budget:
        return [(0, n)], False, None
    index = _RowIndex(lv)
    starts = index.starts
    if len(starts) != n or len(index.invisible) == 0:
        return [(0, n)], False, None
    level_end = np.append(starts[1:], index.num_levels)  # one past each row's last level
    inv_at_start = index.invisible_before(starts)  # invisible levels before each row
    inv_at_end = np.append(inv_at_start[1:], len(index.invisible))  # ... up to the end of each row
    row_levels = level_end - starts
    row_inv = inv_at_end - inv_at_start
    if np.any((row_levels > budget) & (row_inv > 0)):
        return [(0, n)], True, None
    ranges, r0 = [], 0
    while r0 < n:
        base_lv, base_inv = starts[r0], inv_at_start[r0]
        # first row taking the page over the budget / first row giving it an invisible level
        over = int(np.searchsorted(level_end, base_lv + budget, side="right"))
        with_inv = int(np.searchsorted(inv_at_end, base_inv, side="right"))
        cut = max(over, with_inv, r0 + 1)
        ranges.append((r0, min(cut, n)))
        r0 = min(cut, n)
    return ranges, False, index


def slice_levels(lv: LeafLevels, start: int, stop: int) -> LeafLevels:
    """The levels and values of rows ``[start, stop)`` of a leaf page."""
    return slice_pages(lv, [(start, stop)])[0]


def slice_pages(lv: LeafLevels, ranges: list[tuple[int, int]],
                index: _RowIndex | None = None) -> list[LeafLevels]:
    """``slice_levels`` of each row range, the row starts and invisible levels found once
    for all of them (not once per page: a list leaf may split into dozens)."""
    if ranges == [(0, lv.num_rows)]:
        return [lv]
    index = _RowIndex(lv) if index is None else index
    rep, d = np.asarray(lv.rep), np.asarray(lv.def_)
    row_starts = np.append(index.starts, index.num_levels)
    bounds = np.array([[row_starts[a], row_starts[b]] for a, b in ranges], np.int64).reshape(-1)
    visible_before = bounds - index.invisible_before(bounds)  # visible items before each bound
    out = []
    for k, (start, stop) in enumerate(ranges):
        if start == 0 and stop == lv.num_rows:
            out.append(lv)
            continue
        lo, hi = int(bounds[2 * k]), int(bounds[2 * k + 1])
        v0, v1 = int(visible_before[2 * k]), int(visible_before[2 * k + 1])
        values = lv.values.slice(v0, v1 - v0)
        i0, i1 = lo - v0, hi - v1  # invisible levels before lo / hi
        out.append(LeafLevels(values, rep[lo:hi], d[lo:hi], list(lv.layers), stop - start,
                              row_starts=index.starts[start:stop] - lo,
                              invisible=index.invisible[i0:i1] - lo))
    return out
