"""Small vectorised helpers of ``compression._arrays`` against the numpy they replace."""

from __future__ import annotations

import numpy as np
import pytest

from lance_spark_ops.encoding.compression._arrays import count_below, strided_rows


@pytest.mark.parametrize("seed", range(5))
def test_count_below_is_searchsorted(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(400):
        values = np.sort(rng.integers(0, 60, rng.integers(0, 40)))
        keys = np.sort(rng.integers(0, 60, rng.integers(0, 80)))  # repeats in both
        got = count_below(values, keys)
        assert got.dtype.kind == "i"
        assert np.array_equal(got, np.searchsorted(values, keys))


def test_strided_rows_uneven_starts() -> None:
    data = np.arange(1000, dtype=np.uint32)
    starts = np.array([3, 10, 11, 500, 900], np.int64)
    rows = strided_rows(data, starts, 40)
    assert np.array_equal(rows, data[starts[:, None] + np.arange(40)[None, :]])
    rows[0, 0] = 7  # a copy, not a view of data
    assert data[3] == 3
