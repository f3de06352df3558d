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


def split_rows(lv: LeafLevels) -> tuple[list[tuple[int, int]], bool]:
    """Row ranges ``[(start, stop), ...]`` of the pages to write, and whether a single
    row is over the budget (then the page is kept whole and must be full-zip)."""
    n = int(lv.num_rows)
    budget = level_budget(list(lv.layers))
    if budget is None or lv.rep is None or lv.def_ is None or len(lv.rep) <= budget:
        return [(0, n)], False
    rep = np.asarray(lv.rep)
    starts = np.flatnonzero(rep == max_rep(lv.layers))  # first level of each row
    if len(starts) != n:
        return [(0, n)], False
    invisible = np.asarray(lv.def_) > max_visible_def(lv.layers)
    if not invisible.any():
        return [(0, n)], False
    level_end = np.append(starts[1:], len(rep))  # one past each row's last level
    inv_cum = np.concatenate(([0], np.cumsum(invisible)))  # invisible levels before level i
    row_levels = level_end - starts
    row_inv = inv_cum[level_end] - inv_cum[starts]
    if np.any((row_levels > budget) & (row_inv > 0)):
        return [(0, n)], True
    inv_at_end = inv_cum[level_end]  # invisible levels up to the end of each row
    ranges, r0 = [], 0
    while r0 < n:
        base_lv, base_inv = starts[r0], inv_cum[starts[r0]]
        # first row taking the page over the budget / first row giving it an invisible level
        over = int(np.searchsorted(level_end, base_lv + budget, side="right"))
        with_inv = int(np.searchsorted(inv_at_end, base_inv, side="right"))
        cut = max(over, with_inv, r0 + 1)
        ranges.append((r0, min(cut, n)))
        r0 = min(cut, n)
    return ranges, False


def slice_levels(lv: LeafLevels, start: int, stop: int) -> LeafLevels:
    """The levels and values of rows ``[start, stop)`` of a leaf page."""
    return slice_pages(lv, [(start, stop)])[0]


def slice_pages(lv: LeafLevels, ranges: list[tuple[int, int]]) -> list[LeafLevels]:
    """``slice_levels`` of each row range, the row starts and visible-item counts found
    once for all of them (not once per page: a list leaf may split into dozens)."""
    if ranges == [(0, lv.num_rows)]:
        return [lv]
    rep = np.asarray(lv.rep)
    row_starts = np.append(np.flatnonzero(rep == max_rep(lv.layers)), len(rep))
    d = np.asarray(lv.def_)
    visible_before = np.zeros(len(d) + 1, np.int64)  # visible items before each level
    np.cumsum(d <= max_visible_def(lv.layers), out=visible_before[1:])
    out = []
    for start, stop in ranges:
        if start == 0 and stop == lv.num_rows:
            out.append(lv)
            continue
        lo, hi = int(row_starts[start]), int(row_starts[stop])
        v0, v1 = int(visible_before[lo]), int(visible_before[hi])
        values = lv.values.slice(v0, v1 - v0)
        out.append(LeafLevels(values, rep[lo:hi], d[lo:hi], list(lv.layers), stop - start))
    return out
