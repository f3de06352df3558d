"""Hypothesis strategies: random nested Arrow types and arrays with nulls at every level
(null structs, null / empty lists, null items)."""

from __future__ import annotations

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
