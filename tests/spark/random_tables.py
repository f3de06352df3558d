"""Random tables for the randomized compatibility tests: every Arrow type pylance 14 stores,
nested up to two levels (lists, structs, vectors), with nulls, NaNs, long and non-ASCII
strings and value patterns that pick different encodings (constant, runs, sorted, few
distinct, random). A seed gives the same table every time."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

LEAVES = [pa.bool_(), pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(),
          pa.uint64(), pa.float32(), pa.float64(), pa.date32(), pa.timestamp("us"), pa.timestamp("us", "UTC"),
          pa.time64("us"), pa.decimal128(12, 2), pa.binary(3), pa.string(), pa.large_string(), pa.binary(),
          pa.large_binary()]


def _ints(rng: np.random.Generator, n: int, lo: int, hi: int) -> np.ndarray:
    pattern = rng.integers(0, 5)
    if pattern == 1:  # constant
        return np.full(n, rng.integers(lo, hi))
    if pattern == 2:  # runs of 50
        return np.repeat(rng.integers(lo, hi, n // 50 + 1), 50)[:n]
    if pattern == 3:
        return np.sort(rng.integers(lo, hi, n))
    if pattern == 4:  # few distinct
        return rng.choice(rng.integers(lo, hi, 5), n)
    return rng.integers(lo, hi, n)


def _strings(rng: np.random.Generator, n: int) -> list[str]:
    words = [f"w{i}" * int(rng.integers(0, 4)) for i in range(int(rng.integers(1, 300)))]
    if rng.random() < 0.2:
        words.insert(0, "x" * int(rng.integers(100, 3000)))
    if rng.random() < 0.1:
        words.insert(0, "é€𝄞" * int(rng.integers(0, 5)))
    return [words[i] for i in _ints(rng, n, 0, len(words)) % len(words)]


def leaf(rng: np.random.Generator, n: int, t: pa.DataType, null_p: float) -> pa.Array:
    """``n`` values of the leaf type ``t``, a fraction ``null_p`` of them null."""
    mask = rng.random(n) < null_p if null_p else None
    if pa.types.is_boolean(t):
        return pa.array(_ints(rng, n, 0, 2).astype(bool), mask=mask)
    if pa.types.is_integer(t):
        info = np.iinfo(t.to_pandas_dtype())
        wide = rng.random() < 0.3
        lo, hi = (max(int(info.min), -2**62), min(int(info.max), 2**62)) if wide else (0, 1000)
        return pa.array(_ints(rng, n, lo, hi).astype(t.to_pandas_dtype()), type=t, mask=mask)
    if pa.types.is_floating(t):
        x = _ints(rng, n, -10**6, 10**6) / 7.0
        if rng.random() < 0.2:
            x[rng.random(n) < 0.1] = np.nan
        return pa.array(x.astype(t.to_pandas_dtype()), type=t, mask=mask)
    if pa.types.is_date32(t):
        return pa.array(_ints(rng, n, 0, 30_000).astype(np.int32), mask=mask).cast(t)
    if pa.types.is_timestamp(t) or pa.types.is_time64(t):
        return pa.array(_ints(rng, n, 0, 10**12).astype(np.int64), mask=mask).cast(t)
    if pa.types.is_decimal(t):
        vals = _ints(rng, n, -10**8, 10**8).tolist()
        return pa.array([None if mask is not None and mask[i] else Decimal(v) / 100
                         for i, v in enumerate(vals)], type=t)
    if pa.types.is_fixed_size_binary(t):
        raw = np.repeat(_ints(rng, n, 0, 256).astype(np.uint8), t.byte_width).tobytes()
        arr = pa.FixedSizeBinaryArray.from_buffers(t, n, [None, pa.py_buffer(raw)])
        return arr if mask is None else pc.if_else(pa.array(mask), pa.scalar(None, t), arr)
    return pa.array(_strings(rng, n), mask=mask).cast(t)


def column(rng: np.random.Generator, n: int, null_p: float, struct_nulls: bool, depth: int = 0) -> pa.Array:
    """A random column: a leaf (most often), a float32 vector, a list or a struct of columns."""
    r = rng.random()
    if depth >= 2 or r < 0.55:
        return leaf(rng, n, LEAVES[rng.integers(len(LEAVES))], null_p)
    if r < 0.7:
        dim = int(rng.choice([2, 4, 8, 16]))
        values = pa.array(rng.standard_normal(n * dim).astype(np.float32))
        arr = pa.FixedSizeListArray.from_arrays(values, dim)
        if null_p and rng.random() < 0.5:
            arr = pc.if_else(pa.array(rng.random(n) < null_p), pa.scalar(None, arr.type), arr)
        return arr
    if r < 0.85:
        offsets = np.concatenate([[0], np.cumsum(rng.integers(0, 4, n))]).astype(np.int32)
        child = column(rng, int(offsets[-1]), null_p, struct_nulls, depth + 1)
        mask = pa.array(rng.random(n) < null_p) if null_p else None
        return pa.ListArray.from_arrays(pa.array(offsets), child, mask=mask)
    kids = [column(rng, n, null_p, struct_nulls, depth + 1) for _ in range(int(rng.integers(1, 4)))]
    # file version 2.0 stores no struct validity (pylance refuses null structs there)
    mask = pa.array(rng.random(n) < null_p) if null_p and struct_nulls and rng.random() < 0.5 else None
    return pa.StructArray.from_arrays(kids, names=[f"c{i}" for i in range(len(kids))], mask=mask)


def random_table(seed: int, rows: int, nested: int, null_p: float, struct_nulls: bool = True) -> pa.Table:
    """``id`` (0..rows-1), one column of each of a random half of the leaf types and ``nested``
    random columns (leaves, vectors, lists, structs): ``k0``, ``k1``, ..."""
    rng = np.random.default_rng(seed)
    cols: dict[str, pa.Array] = {"id": pa.array(np.arange(rows, dtype=np.int64))}
    for t in rng.permutation(len(LEAVES))[:len(LEAVES) // 2 + 1].tolist():
        values = np.random.default_rng(rng.integers(1 << 30))
        cols[f"k{len(cols) - 1}"] = leaf(values, rows, LEAVES[t], null_p)
    for _ in range(nested):
        cols[f"k{len(cols) - 1}"] = column(np.random.default_rng(rng.integers(1 << 30)), rows, null_p,
                                           struct_nulls)
    return pa.table(cols)


def _plain(v: Any) -> Any:
    """A Python value with NaN made comparable (NaN != NaN) and nested values walked."""
    if isinstance(v, float) and math.isnan(v):
        return "NaN"
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, tuple):
        return tuple(_plain(x) for x in v)
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def same_rows(a: pa.Table, b: pa.Table) -> str | None:
    """None if ``a`` and ``b`` hold the same schema and values (NaN equal to NaN), else what differs."""
    if a.schema != b.schema:
        return f"schema {b.schema} where {a.schema} was expected"
    if a.num_rows != b.num_rows:
        return f"{b.num_rows} rows where {a.num_rows} were expected"
    for name in a.column_names:
        x, y = a.column(name), b.column(name)
        if not x.equals(y) and _plain(x.to_pylist()) != _plain(y.to_pylist()):
            return f"column {name} ({a.schema.field(name).type}) differs"
    return None
