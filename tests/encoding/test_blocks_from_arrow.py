"""Arrow leaf -> DataBlock: round trip through block_to_arrow, zero copy, slices, the
dictionary normalisation Lance applies, refusals."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lance_spark_ops.encoding.arrow import block_to_arrow
from lance_spark_ops.encoding.blocks import (
    FixedSizeListBlock,
    FixedWidthBlock,
    StructBlock,
    VariableWidthBlock,
)
from lance_spark_ops.encoding.blocks_from_arrow import arrow_to_block, dictionary_blocks, leaf_blocks
from lance_spark_ops.errors import InvalidInputError, UnsupportedError

LEAVES = [
    pa.array([True, False, None, True, True, False, True, False, True], pa.bool_()),
    pa.array([1, -2, None, 4], pa.int8()),
    pa.array([1, 2, None, 2**40], pa.uint64()),
    pa.array([1.5, None, -0.0], pa.float16()),
    pa.array([1.5, None, float("inf")], pa.float64()),
    pa.array([1, None, 3], pa.decimal128(20, 2)),
    pa.array([1, None, 3], pa.decimal256(50, 4)),
    pa.array([1, None, 3], pa.date32()),
    pa.array([1, None, 3], pa.timestamp("us", tz="UTC")),
    pa.array([1, None, 3], pa.duration("ns")),
    pa.array([1, None, 3], pa.time32("s")),
    pa.array([b"ab", None, b"cd"], pa.binary(2)),
    pa.array(["a", None, "", "hello"], pa.string()),
    pa.array([b"a", None, b"xyz"], pa.large_binary()),
    pa.array(["a", None, "bc"], pa.large_string()),
    pa.array([[1, 2], None, [3, None]], pa.list_(pa.int32(), 2)),
    pa.array([[[1, 2], [3, 4]], None], pa.list_(pa.list_(pa.int16(), 2), 2)),
    pa.array([{"a": 1, "b": 2.0}, None, {"a": 3, "b": 4.0}],
             pa.struct([("a", pa.int32()), ("b", pa.float64())])),
    pa.array([{"a": 1, "s": "x"}, {"a": 2, "s": "yz"}], pa.struct([("a", pa.int32()), ("s", pa.string())])),
]


def _validity(arr: pa.Array) -> np.ndarray | None:
    return None if arr.null_count == 0 else arr.is_valid().to_numpy(zero_copy_only=False)


@pytest.mark.parametrize("arr", LEAVES, ids=lambda a: str(a.type))
@pytest.mark.parametrize("start", [0, 1])
def test_round_trip(arr, start):
    arr = arr.slice(start)
    block = arrow_to_block(arr)
    out = block_to_arrow(block, arr.type, _validity(arr))
    out.validate(full=True)
    assert out.equals(arr), (out, arr)


def test_fixed_width_is_a_view():
    arr = pa.array(np.arange(10, dtype=np.int64)).slice(3)
    block = arrow_to_block(arr)
    assert isinstance(block, FixedWidthBlock) and block.bits_per_value == 64 and block.num_values == 7
    assert block.data.ctypes.data == arr.buffers()[1].address + 3 * 8


def test_strings_keep_offsets_as_stored():
    arr = pa.array(["aa", "b", "cccc"]).slice(1)
    block = arrow_to_block(arr)
    assert isinstance(block, VariableWidthBlock)
    assert block.offsets.dtype == np.uint32 and block.offsets.tolist() == [2, 3, 7]
    large = arrow_to_block(pa.array(["x"], pa.large_string()))
    assert large.offsets.dtype == np.uint64


def test_bool_unaligned_slice_and_tail_bits():
    arr = pa.array([True] * 13).slice(3, 7)
    block = arrow_to_block(arr)
    assert block.bits_per_value == 1 and block.num_values == 7
    assert bytes(block.data) == b"\x7f"


def test_fsl_item_validity_only_when_items_hold_nulls():
    plain = arrow_to_block(pa.array([[1, 2]], pa.list_(pa.int32(), 2)))
    assert isinstance(plain, FixedSizeListBlock) and plain.item_validity is None
    nulls = arrow_to_block(pa.array([[1, None], [3, 4]], pa.list_(pa.int32(), 2)).slice(1))
    assert nulls.item_validity is None  # the sliced rows hold no null item
    nulls = arrow_to_block(pa.array([[1, None], [3, 4]], pa.list_(pa.int32(), 2)))
    assert nulls.item_validity.tolist() == [True, False, True, True]


def test_packed_struct_children():
    block = arrow_to_block(LEAVES[-1])
    assert isinstance(block, StructBlock) and len(block.children) == 2
    assert isinstance(block.children[1], VariableWidthBlock)


def test_packed_struct_nullable_child_refused():
    arr = pa.StructArray.from_arrays([pa.array([1, None], pa.int32())], names=["x"])
    with pytest.raises(UnsupportedError, match="nullable children"):
        arrow_to_block(arr)


def test_dictionary_and_null_refused_by_arrow_to_block():
    with pytest.raises(InvalidInputError, match="dictionary_blocks"):
        arrow_to_block(pa.array(["a"]).dictionary_encode())
    with pytest.raises(InvalidInputError):
        arrow_to_block(pa.nulls(3))
    assert leaf_blocks(pa.nulls(3)) == (None, None)


def test_dictionary_keeps_key_width():
    arr = pa.array(["x", "y", "x"]).dictionary_encode().cast(pa.dictionary(pa.int8(), pa.string()))
    idx, items = dictionary_blocks(arr)
    assert idx.bits_per_value == 8 and np.asarray(idx.data).tolist() == [0, 1, 0]
    assert block_to_arrow(items, pa.string()).to_pylist() == ["x", "y"]


def test_dictionary_value_nulls_move_to_keys():
    arr = pa.DictionaryArray.from_arrays(pa.array([0, 1, 2, None, 1], pa.int32()), pa.array(["a", None, "c"]))
    idx, items = dictionary_blocks(arr)
    assert block_to_arrow(items, pa.string()).to_pylist() == ["a", "c"]
    keys = np.asarray(idx.data).view(np.int32)
    valid = np.array([True, False, True, False, False])
    assert keys[valid].tolist() == [0, 1]
    out = block_to_arrow(idx, arr.type, valid, items)
    assert out.to_pylist() == ["a", None, "c", None, None]


def test_dictionary_out_of_range_null_keys_cleared():
    keys = pa.Array.from_buffers(pa.int32(), 2, [pa.py_buffer(np.packbits([1, 0], bitorder="little")),
                                                 pa.py_buffer(np.array([1, 99], np.int32))])
    arr = pa.DictionaryArray.from_arrays(keys, pa.array(["a", "b"]))
    idx, _ = dictionary_blocks(arr)
    assert np.asarray(idx.data).view(np.int32).tolist() == [1, 0]


@settings(max_examples=50, deadline=None)
@given(vals=st.lists(st.one_of(st.none(), st.integers(-2**31, 2**31 - 1)), max_size=40),
       start=st.integers(0, 5))
def test_random_int_slices(vals, start):
    arr = pa.array(vals, pa.int32()).slice(min(start, len(vals)))
    assert block_to_arrow(arrow_to_block(arr), pa.int32(), _validity(arr)).equals(arr)
