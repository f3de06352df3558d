"""Hypothesis: data shaped to make pylance pick bitpacking / RLE (values and levels) is
written by pylance and must decode to the input, fully and for random row subsets."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.encoding._mb import item_values, list_column, nullable_column, write

SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
versions = st.sampled_from(["2.1", "2.2"])


def _write(table: pa.Table, version: str):
    tmp = tempfile.mkdtemp(prefix="mbprop")
    return write(Path(tmp), table, version)


def _note_encodings(w) -> None:
    for p in w.column_pages():
        event(" > ".join(p.encodings))


def _check_subset(w, seed: int, to_rows) -> None:
    _note_encodings(w)
    r = np.random.default_rng(seed)
    for page in w.column_pages():
        full = to_rows(page.decode())
        rows = np.sort(
            r.choice(page.num_rows, size=min(page.num_rows, int(r.integers(1, 50))), replace=False)
        )
        assert to_rows(page.decode(rows)) == [full[i] for i in rows]


@SETTINGS
@given(
    dtype=st.sampled_from(DTYPES),
    n=st.integers(1, 5000),
    frac=st.floats(0, 0.8),
    negative=st.booleans(),
    seed=st.integers(0, 2**31),
    version=versions,
)
def test_bitpacking_roundtrip(
    dtype: str, n: int, frac: float, negative: bool, seed: int, version: str
) -> None:
    dt = np.dtype(dtype)
    width = int(frac * (dt.itemsize * 8 - 1)) + 1
    r = np.random.default_rng(seed)
    vals = (
        r.integers(0, 2**63, n, dtype=np.uint64) >> np.uint64(64 - width) if width else np.zeros(n, np.uint64)
    ).astype(dt)
    if negative and dt.kind == "i":
        vals = -vals
    w = _write(pa.table({"x": pa.array(vals)}), version)
    if not all(p.decoder is not None for p in w.column_pages()):
        return  # constant data in 2.2: ConstantLayout, not mini-block
    pages = [p.decode() for p in w.column_pages()]
    got = np.concatenate([item_values(pd, dt) for pd in pages])
    np.testing.assert_array_equal(got, vals)
    _check_subset(w, seed, lambda pd: item_values(pd, dt).tolist())


@SETTINGS
@given(
    dtype=st.sampled_from(DTYPES + ["float32", "float64"]),
    runs=st.lists(st.tuples(st.integers(0, 2**31), st.integers(1, 700)), min_size=1, max_size=40),
    version=versions,
)
def test_rle_roundtrip(dtype: str, runs: list[tuple[int, int]], version: str) -> None:
    dt = np.dtype(dtype)
    values = np.array([v for v, _ in runs], dtype=np.uint64).astype(dt)
    vals = np.repeat(values, [k for _, k in runs])
    w = _write(pa.table({"x": pa.array(vals)}), version)
    if not all(p.decoder is not None for p in w.column_pages()):
        return  # constant data in 2.2: ConstantLayout, not mini-block
    got = np.concatenate([item_values(p.decode(), dt) for p in w.column_pages()])
    np.testing.assert_array_equal(got, vals)
    _check_subset(w, len(runs), lambda pd: item_values(pd, dt).tolist())


@SETTINGS
@given(n=st.integers(1, 6000), null_p=st.floats(0.01, 0.995), seed=st.integers(0, 2**31), version=versions)
def test_def_levels_roundtrip(n: int, null_p: float, seed: int, version: str) -> None:
    r = np.random.default_rng(seed)
    arr = pa.array(r.integers(0, 100, n).astype(np.int32), mask=r.random(n) < null_p)
    w = _write(pa.table({"x": arr}), version)
    if not all(p.decoder is not None for p in w.column_pages()):
        return  # all null
    assert nullable_column([p.decode() for p in w.column_pages()], np.int32) == arr.to_pylist()
    _check_subset(w, seed, lambda pd: nullable_column([pd], np.int32))


@SETTINGS
@given(
    n=st.integers(1, 800),
    max_len=st.sampled_from([1, 3, 40, 2000]),
    seed=st.integers(0, 2**31),
    null_items=st.booleans(),
    version=versions,
)
def test_rep_levels_roundtrip(n: int, max_len: int, seed: int, null_items: bool, version: str) -> None:
    r = np.random.default_rng(seed)
    rows: list = []
    for _ in range(n):
        k = int(r.integers(0, 5))
        if k == 0:
            rows.append(None)
        elif k == 1:
            rows.append([])
        else:
            vals = r.integers(0, 50, int(r.integers(1, max_len + 1))).tolist()
            rows.append([None if null_items and v % 7 == 0 else v for v in vals])
    if all(not row for row in rows):
        rows.append([1])
    arr = pa.array(rows, pa.list_(pa.int32()))
    w = _write(pa.table({"x": arr}), version)
    if not all(p.decoder is not None for p in w.column_pages()):
        return
    got = [row for p in w.column_pages() for row in list_column(p.decode(), np.int32)]
    assert got == rows
    _check_subset(w, seed, lambda pd: list_column(pd, np.int32))
