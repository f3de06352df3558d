"""The row starts / invisible levels the shredder carries (``LeafLevels.row_starts`` /
``invisible``, used by page splitting, chunk level counts and the repetition index instead
of passes over the levels) are exactly those the levels say, before and after a split."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import lance_spark_ops.encoding.page_split as page_split
from lance_spark_ops.encoding.layers import max_rep, max_visible_def
from lance_spark_ops.encoding.repdef import LeafLevels, levels_from_arrow


def _lists(rng: np.random.Generator, n: int, p_null: float, p_empty: float, p_item_null: float) -> pa.Array:
    lens = rng.integers(0, 5, n)
    lens[rng.random(n) < p_empty] = 0
    offs = pa.array(np.concatenate([[0], np.cumsum(lens)]).astype(np.int32))
    total = int(lens.sum())
    items = pa.array(rng.integers(0, 9, total), pa.int32(), mask=rng.random(total) < p_item_null)
    mask = pa.array(rng.random(n) < p_null) if p_null else None
    return pa.ListArray.from_arrays(offs, items, mask=mask)


def _check(lv: LeafLevels) -> bool:
    if lv.row_starts is None:
        return False
    assert np.array_equal(lv.row_starts, np.flatnonzero(np.asarray(lv.rep) == max_rep(lv.layers)))
    d = np.zeros(len(lv.rep), int) if lv.def_ is None else np.asarray(lv.def_)
    assert np.array_equal(lv.invisible, np.flatnonzero(d > max_visible_def(lv.layers)))
    return True


@pytest.mark.parametrize("p_empty", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("p_item_null", [0.0, 0.2])
def test_known_rows_match_levels(p_empty: float, p_item_null: float) -> None:
    rng = np.random.default_rng(int(p_empty * 10 + p_item_null * 100))
    checked = 0
    for n in range(1, 40):
        arr = _lists(rng, n, 0.0, p_empty, p_item_null)
        for a in (arr, arr.slice(1, max(n - 2, 0))):
            for struct in (False, True):
                x = pa.StructArray.from_arrays([a], names=["l"]) if struct else a
                for lv in levels_from_arrow(x, pa.field("x", x.type)):
                    checked += _check(lv)
                    if lv.rep is not None and lv.def_ is not None:
                        pages, _ = page_split.split_pages(lv, budget=7)  # Lance's: thousands
                        checked += sum(_check(page) for _, page in pages)
    assert checked > 0
    # null lists and nested lists take the general path: nothing carried, levels still right
    for x in (_lists(rng, 30, 0.3, 0.3, 0.0),
              pa.ListArray.from_arrays(pa.array([0, 2, 3], pa.int32()), _lists(rng, 3, 0.0, 0.3, 0.0))):
        for lv in levels_from_arrow(x, pa.field("x", x.type)):
            _check(lv)
