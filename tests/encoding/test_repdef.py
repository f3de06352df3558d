"""rep/def levels <-> offsets and validity: Lance's own examples (repdef.rs tests), error
cases, and hypothesis round trips of levels_from_arrow -> unravel."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings

from lance_spark_ops.encoding.repdef import (
    ALL_VALID_ITEM,
    ALL_VALID_LIST,
    EMPTYABLE_LIST,
    NULL_AND_EMPTY_LIST,
    NULLABLE_ITEM,
    NULLABLE_LIST,
    concat_unraveled,
    levels_from_arrow,
    unravel,
)
from lance_spark_ops.errors import CorruptFileError

from ._strategies import nested_arrays

u16 = lambda xs: np.array(xs, np.uint16)  # noqa: E731


def _lists(offsets, validity, values, large=False):
    mask = None if validity is None else pa.array([not v for v in validity])
    cls = pa.LargeListArray if large else pa.ListArray
    return cls.from_arrays(pa.array(offsets, pa.int64() if large else pa.int32()), values, mask=mask)


def test_lance_basic_example():
    # [[I], [I, I]], NULL, [[NULL, NULL], NULL, [NULL, I, I, NULL]]  (repdef.rs test_repdef_basic)
    items = pa.array([1, 2, 3, None, None, None, 4, 5, None], pa.int32())
    inner = _lists([0, 1, 3, 5, 5, 9], [True, True, True, False, True], items, large=True)
    outer = _lists([0, 2, 2, 5], [True, False, True], inner, large=True)
    [lv] = levels_from_arrow(outer)
    assert lv.rep.tolist() == [2, 1, 0, 2, 2, 0, 1, 1, 0, 0, 0]
    assert lv.def_.tolist() == [0, 0, 0, 3, 1, 1, 2, 1, 0, 0, 1]
    assert lv.layers == [NULLABLE_ITEM, NULLABLE_LIST, NULLABLE_LIST]
    u = unravel(lv.rep, lv.def_, lv.layers, 3)
    item, mid, top = u.layers
    assert item.validity.tolist() == [True, True, True, False, False, False, True, True, False]
    assert mid.offsets.tolist() == [0, 1, 3, 5, 5, 9]
    assert mid.validity.tolist() == [True, True, True, False, True]
    assert top.offsets.tolist() == [0, 2, 2, 5]
    assert top.validity.tolist() == [True, False, True]
    assert u.num_values == 9 and u.visible.sum() == 9


@pytest.mark.parametrize("validity,kind", [([True, False, True], NULLABLE_LIST), (None, EMPTYABLE_LIST)])
def test_null_and_empty_list_serialize_alike(validity, kind):
    arr = _lists([0, 2, 2, 5], validity, pa.array([1, 2, 3, None, 5]))
    [lv] = levels_from_arrow(arr)
    assert lv.rep.tolist() == [1, 0, 1, 1, 0, 0]
    assert lv.def_.tolist() == [0, 0, 2, 0, 1, 0]
    assert lv.layers == [NULLABLE_ITEM, kind]


def test_empty_list_at_end():
    [lv] = levels_from_arrow(_lists([0, 2, 5, 5], None, pa.array([1, 2, 3, None, 5])))
    assert lv.rep.tolist() == [1, 0, 1, 0, 0, 1]
    assert lv.def_.tolist() == [0, 0, 0, 1, 0, 2]


def test_garbage_under_null_list_is_dropped():
    arr = _lists([0, 2, 5, 8], [True, False, True], pa.array([1, 2, 9, 9, 9, 3, 4, 5]))
    [lv] = levels_from_arrow(arr)
    assert lv.rep.tolist() == [1, 0, 1, 1, 0, 0]
    assert lv.def_.tolist() == [0, 0, 1, 0, 0, 0]
    assert lv.layers == [ALL_VALID_ITEM, NULLABLE_LIST]
    assert lv.values.to_pylist() == [1, 2, 3, 4, 5]


def test_sliced_offsets():
    arr = _lists([5, 7, 7, 10], [True, False, True], pa.array(range(10)))
    [lv] = levels_from_arrow(arr)
    assert lv.rep.tolist() == [1, 0, 1, 1, 0, 0]
    assert lv.def_.tolist() == [0, 0, 1, 0, 0, 0]
    assert lv.values.to_pylist() == [5, 6, 7, 8, 9]


def test_complex_null_empty():
    inner = _lists([0, 1, 1, 2, 2, 2, 3], [True, False, True, False, True, True], pa.array([1, 2, 3]))
    outer = _lists([0, 4, 4, 4, 6], [True, False, True, True], inner)
    [lv] = levels_from_arrow(outer)
    assert lv.rep.tolist() == [2, 1, 1, 1, 2, 2, 2, 1]
    assert lv.def_.tolist() == [0, 1, 0, 1, 3, 4, 2, 0]
    u = unravel(lv.rep, lv.def_, lv.layers, 4)
    assert u.layers[1].offsets.tolist() == [0, 1, 1, 2, 2, 2, 3]
    assert u.layers[1].validity.tolist() == [True, False, True, False, True, True]
    assert u.layers[2].offsets.tolist() == [0, 4, 4, 4, 6]
    assert u.layers[2].validity.tolist() == [True, False, True, True]


def test_all_valid_lists_have_no_def():
    inner = _lists([0, 1, 3, 5, 7, 9], None, pa.array(range(9)))
    [lv] = levels_from_arrow(_lists([0, 2, 3, 5], None, inner))
    assert lv.def_ is None
    assert lv.rep.tolist() == [2, 1, 0, 2, 0, 2, 0, 1, 0]
    assert lv.layers == [ALL_VALID_ITEM, ALL_VALID_LIST, ALL_VALID_LIST]
    u = unravel(lv.rep, None, lv.layers, 3)
    assert u.layers[1].offsets.tolist() == [0, 1, 3, 5, 7, 9]
    assert u.layers[2].offsets.tolist() == [0, 2, 3, 5]
    assert all(layer.validity is None for layer in u.layers)


def test_null_struct_above_null_lists():
    # struct<list<int>>: [{l: null}, null, {l: null}]  (repdef.rs regress_empty_list_case)
    lists = _lists([0, 0, 0, 0], [False, False, False], pa.array([], pa.int32()))
    arr = pa.StructArray.from_arrays([lists], ["l"], mask=pa.array([False, True, False]))
    [lv] = levels_from_arrow(arr)
    assert lv.rep.tolist() == [1, 1, 1]
    assert lv.def_.tolist() == [1, 2, 1]
    assert lv.layers == [ALL_VALID_ITEM, NULLABLE_LIST, NULLABLE_ITEM]
    u = unravel(lv.rep, lv.def_, lv.layers, 3)
    assert u.num_values == 0
    assert u.layers[1].offsets.tolist() == [0, 0, 0, 0]
    assert u.layers[1].validity.tolist() == [False, False, False]
    assert u.layers[2].validity.tolist() == [True, False, True]


def test_list_ends_with_null():
    inner = _lists([0, 1, 1], [True, False], pa.array([7]))
    outer = _lists([0, 1, 2, 2], [True, True, False], inner)
    [lv] = levels_from_arrow(outer)
    assert lv.rep.tolist() == [2, 2, 2]
    assert lv.def_.tolist() == [0, 1, 2]


def test_struct_nulls_push_down():
    arr = pa.array([{"a": 1}, None, {"a": None}], pa.struct([("a", pa.int32())]))
    [lv] = levels_from_arrow(arr)
    assert lv.layers == [NULLABLE_ITEM, NULLABLE_ITEM]
    assert lv.def_.tolist() == [0, 2, 1]
    assert lv.rep is None
    u = unravel(None, lv.def_, lv.layers, 3)
    assert u.layers[0].validity.tolist() == [True, False, False]
    assert u.layers[1].validity.tolist() == [True, False, True]


def test_no_nulls_no_levels():
    [lv] = levels_from_arrow(pa.array([{"a": 1}, {"a": 2}], pa.struct([("a", pa.int32())])))
    assert lv.rep is None and lv.def_ is None
    assert lv.layers == [ALL_VALID_ITEM, ALL_VALID_ITEM]
    u = unravel(None, None, lv.layers, 2)
    assert [layer.num_elements for layer in u.layers] == [2, 2]


def test_map_layers():
    arr = pa.array([[("a", 1)], None, [], [("b", None)]], pa.map_(pa.string(), pa.int32()))
    keys, vals = levels_from_arrow(arr)
    # as pylance 14 writes them (2.2)
    assert keys.layers == [ALL_VALID_ITEM, ALL_VALID_ITEM, NULL_AND_EMPTY_LIST]
    assert vals.layers == [NULLABLE_ITEM, ALL_VALID_ITEM, NULL_AND_EMPTY_LIST]


def test_mixed_pages_concat():
    # Page 1: nullable items + emptyable list; page 2: all-valid items + nullable list
    p1 = unravel(u16([1, 0, 1]), u16([0, 1, 2]), [NULLABLE_ITEM, EMPTYABLE_LIST], 2)
    p2 = unravel(u16([1, 1, 0]), u16([1, 0, 0]), [ALL_VALID_ITEM, NULLABLE_LIST], 2)
    items, lists = concat_unraveled([p1, p2])
    assert items.validity.tolist() == [True, False, True, True]
    assert lists.offsets.tolist() == [0, 2, 2, 2, 4]
    assert lists.validity.tolist() == [True, True, False, True]


@pytest.mark.parametrize("rep,def_,layers,rows,msg", [
    (None, [0, 3], [NULLABLE_ITEM], 2, "exceeds the maximum"),
    ([1, 2], None, [ALL_VALID_ITEM, ALL_VALID_LIST], 2, "exceeds the 1 list"),
    ([0, 1], None, [ALL_VALID_ITEM, ALL_VALID_LIST], 1, "must start a row"),
    ([1, 0, 1], None, [ALL_VALID_ITEM, ALL_VALID_LIST], 3, "describe 2 rows"),
    ([1, 0], [0, 0, 0], [ALL_VALID_ITEM, ALL_VALID_LIST], 1, "repetition levels but"),
    (None, None, [ALL_VALID_ITEM, ALL_VALID_LIST], 2, "no repetition levels"),
    ([1, 1], None, [ALL_VALID_ITEM], 2, "exceeds the 0 list"),
    (None, None, [ALL_VALID_LIST], 1, "innermost"),
    (None, None, [9], 1, "unknown"),
])
def test_inconsistent_levels_raise(rep, def_, layers, rows, msg):
    with pytest.raises(CorruptFileError, match=msg):
        unravel(None if rep is None else u16(rep), None if def_ is None else u16(def_), layers, rows)


def _check_roundtrip(arr: pa.Array) -> None:
    leaves = levels_from_arrow(arr)
    first_layers = None
    for lv in leaves:
        n = len(lv.rep) if lv.rep is not None else len(lv.def_) if lv.def_ is not None else lv.num_rows
        u = unravel(lv.rep, lv.def_, lv.layers, len(arr), None if lv.rep is not None else n)
        assert u.num_values == len(lv.values)
        assert u.layers[-1].num_elements == len(arr)
        for layer in u.layers:
            if layer.is_list:
                assert layer.offsets[0] == 0 and np.all(np.diff(layer.offsets) >= 0)
        if first_layers is None:
            first_layers = u.layers
        # every leaf agrees on the outermost layer (the top-level field)
        top, ref = u.layers[-1], first_layers[-1]
        assert top.num_elements == ref.num_elements
        if top.validity is not None or ref.validity is not None:
            tv = top.validity if top.validity is not None else np.ones(top.num_elements, bool)
            rv = ref.validity if ref.validity is not None else np.ones(ref.num_elements, bool)
            assert np.array_equal(tv, rv)
        # outermost validity equals Arrow's
        if top.validity is not None:
            assert np.array_equal(top.validity, arr.is_valid().to_numpy(zero_copy_only=False))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nested_arrays())
def test_roundtrip_levels_hypothesis(arr):
    _check_roundtrip(arr)


def test_negative_levels_raise():
    with pytest.raises(CorruptFileError, match="negative definition level"):
        unravel(None, np.array([0, -1], np.int16), [NULLABLE_ITEM], 2)


@pytest.mark.parametrize("arr", [
    pa.array([[1, 2], [3], [4, 5, 6]] * 100, pa.list_(pa.int32())),
    pa.array([[[1], [2, 3]], [[4]]] * 50, pa.list_(pa.list_(pa.int64()))),
    pa.array([{"a": [1, 2], "b": 3}, {"a": [4], "b": 5}] * 50,
             pa.struct([("a", pa.list_(pa.int16())), ("b", pa.int8())])),
    pa.array([[1, 2], [3], [4, 5, 6]] * 100, pa.list_(pa.int32())).slice(7, 200),
])
def test_dense_list_fast_path_equals_general_path(arr, monkeypatch):
    """Lists without null / empty entries take a shortcut; it shreds exactly as the
    general path does."""
    from lance_spark_ops.encoding import repdef

    fast = levels_from_arrow(arr)
    monkeypatch.setattr(repdef, "_apply_dense_list", lambda state, offs, ordinal: False)
    general = levels_from_arrow(arr)
    assert len(fast) == len(general)
    for f, g in zip(fast, general, strict=True):
        assert f.values.equals(g.values) and f.layers == g.layers and f.num_rows == g.num_rows
        for a, b in ((f.rep, g.rep), (f.def_, g.def_)):
            assert (a is None and b is None) or np.array_equal(a, b)
