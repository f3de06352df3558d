"""List offsets of pages with few null / empty lists (``repdef.unravel`` finds them by a
binary search over the element-less entries) and with many (a cumulative sum): our reader
must return pylance's rows either way."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops import LanceFileReader
from tests.conftest import pylance_read, pylance_write

pytest.importorskip("lance")


def _lists(rng: np.random.Generator, n: int, empty: float, null: float,
           items: pa.Array | None = None) -> pa.Array:
    """``n`` lists (``empty`` / ``null`` fractions) over ``items`` (default random ints)."""
    lens = rng.integers(1, 6, n)
    lens[rng.random(n) < empty] = 0
    if items is not None:  # spread exactly len(items) over the lists
        lens = np.bincount(rng.integers(0, n, len(items)), minlength=n)
    offs = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    if items is None:
        items = pa.array(rng.integers(0, 100, int(offs[-1]), dtype=np.int32))
    mask = pa.array(rng.random(n) < null) if null else None
    return pa.ListArray.from_arrays(pa.array(offs), items, mask=mask)


@pytest.mark.parametrize("version", ["2.1", "2.2"])
@pytest.mark.parametrize(("empty", "null"), [(0.01, 0.0), (0.0, 0.01), (0.01, 0.01), (0.4, 0.3), (0.0, 0.0)])
def test_list_offsets_match_pylance(tmp_path: Path, version: str, empty: float, null: float) -> None:
    rng = np.random.default_rng(int(empty * 100) * 7 + int(null * 100))
    n = 12_000
    inner = _lists(rng, 3 * n, empty, null)
    table = pa.table({"l": _lists(rng, n, empty, null), "ll": _lists(rng, n, empty, null, items=inner)})
    path = pylance_write(tmp_path / "f.lance", table, version=version)
    expected = pylance_read(path)
    assert LanceFileReader(path).read().equals(expected)
    got = pa.Table.from_batches(list(LanceFileReader(path).iter_batches(batch_rows=5_000)))
    assert got.equals(expected)
