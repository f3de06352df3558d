"""Hypothesis strategies: random nested Arrow types and arrays with nulls at every level
(null structs, null / empty lists, null items)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import strategies as st

LEAF_TYPES = [pa.int32(), pa.int64(), pa.string(), pa.large_binary(), pa.bool_(), pa.float64()]


def _wrap(children: st.SearchStrategy[pa.DataType]) -> st.SearchStrategy[pa.DataType]:
    return st.one_of(
        children.map(pa.list_),
        children.map(pa.large_list),
        st.lists(children, min_size=1, max_size=3).map(
            lambda ts: pa.struct([pa.field(f"f{i}", t) for i, t in enumerate(ts)])),
        children.map(lambda t: pa.map_(pa.string(), t)),
    )


nested_types = st.recursive(st.sampled_from(LEAF_TYPES), _wrap, max_leaves=5)


def values_for(t: pa.DataType, null_p: bool = True) -> st.SearchStrategy:
    """Python values of type ``t`` (None allowed at every level when ``null_p``)."""
    def opt(s: st.SearchStrategy) -> st.SearchStrategy:
        return st.one_of(st.none(), s) if null_p else s

    if pa.types.is_integer(t):
        return opt(st.integers(-1000, 1000))
    if pa.types.is_floating(t):
        return opt(st.floats(-1e6, 1e6, allow_nan=False))
    if pa.types.is_boolean(t):
        return opt(st.booleans())
    if pa.types.is_string(t):
        return opt(st.text(max_size=4))
    if pa.types.is_large_binary(t) or pa.types.is_binary(t):
        return opt(st.binary(max_size=4))
    if pa.types.is_map(t):
        return opt(st.lists(st.tuples(st.text(max_size=2), values_for(t.item_type)), max_size=3))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return opt(st.lists(values_for(t.value_type), max_size=4))
    if pa.types.is_struct(t):
        return opt(st.fixed_dictionaries({t.field(i).name: values_for(t.field(i).type)
                                          for i in range(t.num_fields)}))
    raise AssertionError(t)


@st.composite
def nested_arrays(draw: st.DrawFn, max_rows: int = 12) -> pa.Array:
    """A random nested array, sometimes sliced so it starts at a non-zero offset."""
    t = draw(nested_types)
    vals = draw(st.lists(values_for(t), max_size=max_rows))
    arr = pa.array(vals, type=t)
    if len(arr) > 2 and draw(st.booleans()):
        start = draw(st.integers(0, len(arr) - 1))
        arr = arr.slice(start, draw(st.integers(0, len(arr) - start)))
    return arr


@st.composite
def flat_columns(draw: st.DrawFn) -> pa.Table:
    """One column: a type, a value distribution (cardinality, runs) and nulls."""
    n = draw(st.integers(1, 3000))
    kind = draw(st.sampled_from(["int8", "int16", "int32", "int64", "uint64", "float32", "float64",
                                 "string", "large_binary", "bool", "date32", "decimal128"]))
    card = draw(st.sampled_from([1, 2, 3, 10, 100, 1000, 10**6]))
    run = draw(st.sampled_from([1, 1, 4, 300]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    base = np.repeat(rng.integers(0, card, -(-n // run)), run)[:n]
    if kind == "string":
        arr = pa.array([f"v{x}" * (1 + x % 3) for x in base.tolist()])
    elif kind == "large_binary":
        arr = pa.array([bytes([x % 256]) * (x % 7) for x in base.tolist()], pa.large_binary())
    elif kind == "bool":
        arr = pa.array(base % 2 == 0)
    elif kind == "date32":
        arr = pa.array(base.astype(np.int32), pa.date32())
    elif kind == "decimal128":
        arr = pa.array(base.tolist(), pa.decimal128(30, 0))
    else:
        arr = pa.array((base % min(np.iinfo(kind).max, 2**31) if "int" in kind else base).astype(kind))
    null_p = draw(st.sampled_from([0.0, 0.0, 0.1, 0.9, 1.0]))
    if null_p:
        mask = rng.random(n) < null_p
        arr = pa.array(arr.to_pylist(), arr.type, mask=mask)
    meta = draw(st.sampled_from([{}, {}, {"compression": "zstd"}, {"compression": "lz4"},
                                 {"compression": "none"}, {"dict_divisor": "10"}]))
    md = {f"lance-encoding:{k.replace('_', '-')}": v for k, v in meta.items()} or None
    return pa.table([arr], schema=pa.schema([pa.field("c", arr.type, True, md)]))
