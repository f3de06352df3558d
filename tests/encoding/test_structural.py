"""build_array: leaf pages -> nested Arrow arrays. Synthetic round trips (levels_from_arrow
-> PageData -> build_array), random nesting with hypothesis, multi-page columns whose
pages use different layer kinds, leaf enumeration, and errors on inconsistent input."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lance_spark_ops.encoding.blocks import FixedWidthBlock
from lance_spark_ops.encoding.blocks_from_arrow import leaf_blocks
from lance_spark_ops.encoding.page import PageData
from lance_spark_ops.encoding.repdef import NULLABLE_ITEM, levels_from_arrow
from lance_spark_ops.encoding.structural import build_array, field_leaf_count, leaf_fields
from lance_spark_ops.errors import CorruptFileError

from ._strategies import nested_arrays


def pages_of(arr: pa.Array, field: pa.Field | None = None,
             splits: list[int] | None = None) -> list[list[PageData]]:
    """Shred ``arr`` into leaf columns, one page per slice between ``splits``."""
    field = field or pa.field("c", arr.type)
    bounds = [0, *(splits or []), len(arr)]
    cols: list[list[PageData]] | None = None
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        leaves = levels_from_arrow(arr.slice(lo, hi - lo), field)
        if cols is None:
            cols = [[] for _ in leaves]
        for col, lv in zip(cols, leaves, strict=True):
            values, dictionary = leaf_blocks(lv.values)
            col.append(PageData(hi - lo, values, lv.rep, lv.def_, list(lv.layers), dictionary))
    return cols


def assert_same(got: pa.Array, want: pa.Array) -> None:
    assert got.type == want.type
    got.validate(full=True)
    assert got.to_pylist() == want.to_pylist()
    assert got.equals(want)


def roundtrip(arr: pa.Array, field: pa.Field | None = None, splits: list[int] | None = None) -> pa.Array:
    field = field or pa.field("c", arr.type)
    out = build_array(field, pages_of(arr, field, splits))
    assert_same(out, arr)
    return out


LIST_INT = pa.list_(pa.int32())


@pytest.mark.parametrize("arr", [
    pa.array([1, None, 3], pa.int32()),
    pa.array(["a", None, ""], pa.string()),
    pa.array([[1, 2], None, [], [None]], LIST_INT),
    pa.array([[1, 2], None, [], [None]], pa.large_list(pa.int64())),
    pa.array([[["a"], [], None], None, [[None, "b"]], []], pa.list_(pa.list_(pa.string()))),
    pa.array([{"a": 1, "b": "x"}, None, {"a": None, "b": None}],
             pa.struct([("a", pa.int32()), ("b", pa.string())])),
    pa.array([{"l": [1, None], "i": 1}, {"l": None, "i": None}, None, {"l": [], "i": 3}],
             pa.struct([("l", LIST_INT), ("i", pa.int64())])),
    pa.array([[{"x": [1, None]}, None], None, [], [{"x": None}, {"x": []}]],
             pa.list_(pa.struct([("x", pa.list_(pa.int64()))]))),
    pa.array([[("a", 1)], None, [], [("b", None), ("c", 3)]], pa.map_(pa.string(), pa.int32())),
    pa.array([{"m": [("k", [1, None])]}, None, {"m": None}],
             pa.struct([("m", pa.map_(pa.string(), LIST_INT))])),
    pa.array([[None, None], None, []], pa.list_(pa.null())),
    pa.array([None, None], pa.null()),
    pa.array([[1.5, None], None], pa.list_(pa.float64())),
    pa.array([[[1, 2], None], None, [[3, None]]], pa.list_(pa.list_(pa.int16(), 2))),
    pa.array([["a", "b", "a"], None, ["b"]], pa.list_(pa.dictionary(pa.int8(), pa.string()))),
])
def test_roundtrip_examples(arr):
    roundtrip(arr)
    if len(arr) > 2:
        roundtrip(arr, splits=[1, 2])


def test_dictionary_leaf_keeps_dictionary():
    arr = pa.array(["x", None, "y", "x"]).dictionary_encode()
    out = roundtrip(arr)
    assert pa.types.is_dictionary(out.type)
    assert out.dictionary.to_pylist() == ["x", "y"]


def test_packed_struct_is_one_leaf():
    t = pa.struct([("a", pa.int32()), ("b", pa.float64())])
    f = pa.field("p", t, metadata={"lance-encoding:packed": "true"})
    assert field_leaf_count(f) == 1
    arr = pa.array([{"a": 1, "b": 2.0}, None, {"a": 3, "b": 4.5}], t)
    roundtrip(arr, f)


def test_leaf_enumeration():
    t = pa.struct([
        ("a", pa.int32()),
        ("l", pa.list_(pa.struct([("x", pa.string()), ("y", pa.list_(pa.int8()))]))),
        ("m", pa.map_(pa.string(), pa.struct([("p", pa.int32()), ("q", pa.int32())]))),
        ("v", pa.list_(pa.float32(), 4)),
        ("d", pa.dictionary(pa.int32(), pa.string())),
        ("e", pa.struct([])),
        ("b", pa.large_binary()),
    ])
    f = pa.field("s", t)
    assert [x.name for x in leaf_fields(f)] == ["a", "x", "item", "key", "p", "q", "v", "d", "e", "b"]
    assert field_leaf_count(f) == 10
    assert field_leaf_count(pa.field("b", pa.large_binary(), metadata={"lance-encoding:blob": "true"})) == 1


def test_empty_struct_reads_all_valid():
    f = pa.field("e", pa.struct([]))
    page = PageData(3, None, None, np.array([0, 1, 0], np.uint16), [NULLABLE_ITEM])
    out = build_array(f, [[page]])
    assert len(out) == 3 and out.null_count == 0


def test_no_pages_gives_empty_array():
    t = pa.struct([("l", LIST_INT)])
    out = build_array(pa.field("s", t), [[]])
    assert len(out) == 0 and out.type == t


def test_string_offsets_widen_and_narrow():
    arr = pa.array([["ab", None], ["c"]], pa.list_(pa.string()))
    pages = pages_of(arr)
    out = build_array(pa.field("c", pa.list_(pa.large_string())), pages)
    assert out.to_pylist() == arr.to_pylist()


def test_all_valid_page_then_nullable_page():
    arr = pa.array([[1, 2], [3], None, [None, 4]], LIST_INT)
    cols = pages_of(arr, splits=[2])
    assert cols[0][0].def_ is None and cols[0][1].def_ is not None
    build = build_array(pa.field("c", LIST_INT), cols)
    assert_same(build, arr)


def test_missing_layers_default_to_all_valid():
    page = PageData(2, FixedWidthBlock(np.array([1, 0, 0, 0, 2, 0, 0, 0], np.uint8), 32, 2))
    out = build_array(pa.field("c", pa.int32()), [[page]])
    assert out.to_pylist() == [1, 2]


def _pages(arr):
    return pages_of(arr)


@pytest.mark.parametrize("mutate,msg", [
    (lambda p: setattr(p, "num_rows", 5), "rows but the page has 5"),
    (lambda p: setattr(p, "layers", [NULLABLE_ITEM]), "rep/def layers"),
    (lambda p: setattr(p, "layers", [NULLABLE_ITEM, NULLABLE_ITEM]),
     "is NULLABLE_ITEM but the field has a list"),
    (lambda p: setattr(p, "def_", p.def_[:-1]), "repetition levels but"),
    (lambda p: setattr(p, "values", FixedWidthBlock(np.zeros(4, np.uint8), 32, 1)), "page decoded 1"),
])
def test_inconsistent_pages_raise(mutate, msg):
    cols = _pages(pa.array([[1, 2], None, [], [None]], LIST_INT))
    mutate(cols[0][0])
    with pytest.raises(CorruptFileError, match=msg):
        build_array(pa.field("c", LIST_INT), cols)


def test_leaf_count_mismatch_raises():
    t = pa.struct([("a", pa.int32()), ("b", pa.int32())])
    arr = pa.array([{"a": 1, "b": 2}], t)
    cols = pages_of(arr)
    with pytest.raises(CorruptFileError, match="2 leaf columns, got 1"):
        build_array(pa.field("s", t), cols[:1])
    cols[1][0].num_rows = 2
    cols[1][0].values = FixedWidthBlock(np.zeros(8, np.uint8), 32, 2)
    with pytest.raises(CorruptFileError, match="different row counts"):
        build_array(pa.field("s", t), cols)


def test_struct_children_disagree_raise():
    t = pa.struct([("l", LIST_INT), ("m", LIST_INT)])
    arr = pa.array([{"l": [1], "m": [2]}], t)
    other = pa.array([{"l": [1], "m": [2, 3]}], t)
    cols = pages_of(arr)
    cols[1] = pages_of(other)[1]
    out = build_array(pa.field("s", t), cols)  # each list carries its own offsets
    assert out.to_pylist() == [{"l": [1], "m": [2, 3]}]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nested_arrays(), st.data())
def test_roundtrip_hypothesis(arr, data):
    splits = []
    if len(arr) > 1:
        splits = sorted(set(data.draw(st.lists(st.integers(1, len(arr) - 1), max_size=3))))
    roundtrip(arr, splits=splits)
