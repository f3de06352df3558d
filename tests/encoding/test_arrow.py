"""block_to_arrow for every leaf type: fixed width, booleans, variable width (offsets of
either width, not starting at 0), fixed-size lists, packed structs, dictionaries,
constants, and errors on blocks that do not match the type."""

from __future__ import annotations

import datetime as dt
import decimal

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops.encoding.arrow import block_to_arrow
from lance_spark_ops.encoding.blocks import (
    ConstantBlock,
    FixedSizeListBlock,
    FixedWidthBlock,
    StructBlock,
    VariableWidthBlock,
)
from lance_spark_ops.encoding.blocks_from_arrow import leaf_blocks
from lance_spark_ops.errors import CorruptFileError, UnsupportedError

FIXED_CASES = [
    pa.array([1, None, -3], pa.int8()),
    pa.array([1, None, 300], pa.int16()),
    pa.array([1, None, -70000], pa.int32()),
    pa.array([1, None, 2**40], pa.int64()),
    pa.array([1, None, 255], pa.uint8()),
    pa.array([1, None, 65535], pa.uint16()),
    pa.array([1, None, 2**32 - 1], pa.uint32()),
    pa.array([1, None, 2**64 - 1], pa.uint64()),
    pa.array(np.array([1.5, 0, -2], np.float16), pa.float16()),
    pa.array([1.5, None, -2.25], pa.float32()),
    pa.array([1.5, None, float("inf")], pa.float64()),
    pa.array([decimal.Decimal("1.25"), None, decimal.Decimal("-99.99")], pa.decimal128(10, 2)),
    pa.array([decimal.Decimal("1.25"), None], pa.decimal256(50, 2)),
    pa.array([dt.date(2020, 1, 1), None], pa.date32()),
    pa.array([dt.date(2020, 1, 1), None], pa.date64()),
    pa.array([dt.time(1, 2, 3), None], pa.time32("s")),
    pa.array([dt.time(1, 2, 3, 4), None], pa.time64("us")),
    pa.array([1, None, 3], pa.timestamp("ms")),
    pa.array([1, None, 3], pa.timestamp("us", tz="UTC")),
    pa.array([1, None, 3], pa.timestamp("ns", tz="America/New_York")),
    pa.array([1, None, 3], pa.duration("s")),
    pa.array([b"abcd", None, b"wxyz"], pa.binary(4)),
    pa.array([True, None, False, True, True, False, False, True, True], pa.bool_()),
    pa.array(["a", None, "", "héllo"], pa.string()),
    pa.array(["a", None, "", "héllo"], pa.large_string()),
    pa.array([b"a", None, b""], pa.binary()),
    pa.array([b"a", None, b""], pa.large_binary()),
    pa.array([[1.0, 2.0], None, [3.0, None]], pa.list_(pa.float32(), 2)),
    pa.array([[[1, 2], [3, 4]], None], pa.list_(pa.list_(pa.int8(), 2), 2)),
    pa.array([{"a": 1, "b": 2.0}, None], pa.struct([("a", pa.int32()), ("b", pa.float64())])),
]


def _validity(arr: pa.Array) -> np.ndarray | None:
    return None if arr.null_count == 0 else arr.is_valid().to_numpy(zero_copy_only=False)


@pytest.mark.parametrize("arr", FIXED_CASES, ids=lambda a: str(a.type))
def test_leaf_types(arr):
    block, _ = leaf_blocks(arr)
    out = block_to_arrow(block, arr.type, _validity(arr))
    out.validate(full=True)
    assert out.type == arr.type
    assert out.equals(arr), (out, arr)


@pytest.mark.parametrize("arr", FIXED_CASES[:6], ids=lambda a: str(a.type))
def test_sliced_input(arr):
    sl = arr.slice(1)
    block, _ = leaf_blocks(sl)
    assert block_to_arrow(block, sl.type, _validity(sl)).equals(sl)


def test_fixed_width_is_zero_copy():
    data = np.arange(16, dtype=np.int64).view(np.uint8)
    out = block_to_arrow(FixedWidthBlock(data, 64, 16), pa.int64())
    assert out.buffers()[1].address == data.ctypes.data


def test_offsets_not_starting_at_zero():
    data = np.frombuffer(b"xxhelloworld", np.uint8)
    block = VariableWidthBlock(np.array([2, 7, 12], np.uint32), data, 2)
    assert block_to_arrow(block, pa.string()).to_pylist() == ["hello", "world"]
    assert block_to_arrow(block, pa.large_string()).to_pylist() == ["hello", "world"]
    block64 = VariableWidthBlock(np.array([2, 7, 12], np.uint64), data, 2)
    out = block_to_arrow(block64, pa.string(), np.array([True, False]))
    assert out.to_pylist() == ["hello", None]
    out.validate(full=True)


def test_variable_width_zero_copy():
    data = np.frombuffer(b"abcdef", np.uint8)
    offs = np.array([0, 3, 6], np.uint32)
    out = block_to_arrow(VariableWidthBlock(offs, data, 2), pa.binary())
    assert out.buffers()[1].address == offs.ctypes.data


def test_fsl_from_flat_block():
    data = np.arange(8, dtype=np.float32).view(np.uint8)
    out = block_to_arrow(FixedWidthBlock(data, 128, 2), pa.list_(pa.float32(), 4))
    assert out.to_pylist() == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_fsl_item_validity():
    items = FixedWidthBlock(np.arange(4, dtype=np.int32).view(np.uint8), 32, 4)
    block = FixedSizeListBlock(items, 2, 2, np.array([True, False, True, True]))
    out = block_to_arrow(block, pa.list_(pa.int32(), 2), np.array([True, True]))
    assert out.to_pylist() == [[0, None], [2, 3]]


def test_packed_rows_from_flat_block():
    rows = np.zeros(2, dtype=[("a", "<i4"), ("b", "<i2")])
    rows["a"], rows["b"] = [1, 2], [3, 4]
    t = pa.struct([("a", pa.int32()), ("b", pa.int16())])
    out = block_to_arrow(FixedWidthBlock(rows.view(np.uint8), 48, 2), t, np.array([True, False]))
    assert out.to_pylist() == [{"a": 1, "b": 3}, None]


def test_packed_struct_with_variable_child():
    t = pa.struct([("a", pa.int32()), ("s", pa.string())])
    blk = StructBlock([FixedWidthBlock(np.array([1, 0, 0, 0, 2, 0, 0, 0], np.uint8), 32, 2),
                       VariableWidthBlock(np.array([0, 1, 3], np.uint32),
                                          np.frombuffer(b"abc", np.uint8), 2)], 2)
    assert block_to_arrow(blk, t).to_pylist() == [{"a": 1, "s": "a"}, {"a": 2, "s": "bc"}]


def test_dictionary_kept_as_dictionary():
    arr = pa.DictionaryArray.from_arrays(pa.array([1, 0, None, 1], pa.int8()), pa.array(["x", "y"]))
    idx, dic = leaf_blocks(arr)
    out = block_to_arrow(idx, arr.type, _validity(arr), dic)
    assert out.type == arr.type
    assert out.equals(arr)


def test_dictionary_decoded_for_plain_type():
    idx = FixedWidthBlock(np.array([1, 0, 7, 1], np.uint8), 8, 4)  # 7 is garbage under a null
    dic = VariableWidthBlock(np.array([0, 1, 3], np.uint32), np.frombuffer(b"xyz", np.uint8), 2)
    out = block_to_arrow(idx, pa.string(), np.array([True, True, False, True]), dic)
    assert out.to_pylist() == ["yz", "x", None, "yz"]
    out = block_to_arrow(idx, pa.large_string(), np.array([True, True, False, True]), dic)
    assert out.type == pa.large_string()


def test_plain_values_dictionary_encoded():
    block, _ = leaf_blocks(pa.array(["b", "a", "b"]))
    out = block_to_arrow(block, pa.dictionary(pa.int16(), pa.string()), np.array([True, True, False]))
    assert out.type == pa.dictionary(pa.int16(), pa.string())
    assert out.to_pylist() == ["b", "a", None]


def test_dictionary_index_out_of_range():
    idx = FixedWidthBlock(np.array([0, 5], np.uint8), 8, 2)
    dic = FixedWidthBlock(np.zeros(8, np.uint8), 32, 2)
    with pytest.raises(CorruptFileError, match="dictionary index 5"):
        block_to_arrow(idx, pa.int32(), None, dic)


@pytest.mark.parametrize("t,value,want", [
    (pa.int32(), (7).to_bytes(4, "little"), 7),
    (pa.float64(), np.float64(2.5).tobytes(), 2.5),
    (pa.bool_(), b"\x01", True),
    (pa.string(), b"hey", "hey"),
    (pa.large_binary(), b"hey", b"hey"),
    (pa.binary(2), b"ab", b"ab"),
    (pa.list_(pa.int16(), 2), np.array([1, 2], np.int16).tobytes(), [1, 2]),
])
def test_constant_broadcast(t, value, want):
    block = ConstantBlock(value, 3, variable=pa.types.is_string(t))
    out = block_to_arrow(block, t, np.array([True, False, True]))
    assert out.to_pylist() == [want, None, want]


def test_constant_all_null():
    out = block_to_arrow(ConstantBlock(None, 4), pa.string())
    assert out.null_count == 4 and out.type == pa.string()


def test_null_type():
    assert block_to_arrow(None, pa.null(), np.zeros(3, bool)).to_pylist() == [None] * 3


@pytest.mark.parametrize("block,t,msg", [
    (FixedWidthBlock(np.zeros(8, np.uint8), 32, 2), pa.int64(), "needs 64 bits"),
    (FixedWidthBlock(np.zeros(4, np.uint8), 32, 2), pa.int32(), "need 8 bytes"),
    (VariableWidthBlock(np.array([0, 5], np.uint32), np.zeros(3, np.uint8), 1), pa.string(), "exceed"),
    (VariableWidthBlock(np.array([0, 2, 1], np.uint32), np.zeros(3, np.uint8), 2), pa.string(), "decreasing"),
    (VariableWidthBlock(np.array([0], np.uint32), np.zeros(3, np.uint8), 1), pa.string(), "need 2 offsets"),
    (FixedWidthBlock(np.zeros(8, np.uint8), 32, 2), pa.string(), "expected variable width"),
    (VariableWidthBlock(np.array([0, 1], np.uint32), np.zeros(1, np.uint8), 1), pa.int32(), "expected fixed"),
    (FixedSizeListBlock(FixedWidthBlock(np.zeros(8, np.uint8), 32, 2), 3, 1), pa.list_(pa.int32(), 2),
     "dimension 3"),
    (FixedSizeListBlock(FixedWidthBlock(np.zeros(8, np.uint8), 32, 2), 2, 2), pa.list_(pa.int32(), 2),
     "need 4 items"),
    (StructBlock([FixedWidthBlock(np.zeros(4, np.uint8), 32, 1)], 1),
     pa.struct([("a", pa.int32()), ("b", pa.int32())]), "1 children"),
])
def test_mismatched_blocks_raise(block, t, msg):
    with pytest.raises(CorruptFileError, match=msg):
        block_to_arrow(block, t)


def test_validity_length_mismatch():
    with pytest.raises(CorruptFileError, match="3 validity entries for 2"):
        block_to_arrow(FixedWidthBlock(np.zeros(8, np.uint8), 32, 2), pa.int32(), np.ones(3, bool))


def test_huge_offsets_cannot_narrow():
    block = VariableWidthBlock(np.array([0, 2**31 + 5], np.uint64), np.zeros(0, np.uint8), 1)
    with pytest.raises(CorruptFileError):
        block_to_arrow(block, pa.string())
    with pytest.raises(UnsupportedError):
        from lance_spark_ops.encoding.arrow import _from_variable  # noqa: PLC0415
        big = np.lib.stride_tricks.as_strided(np.zeros(1, np.uint8), shape=(2**31 + 5,), strides=(0,))
        _from_variable(VariableWidthBlock(np.array([0, 2**31 + 5], np.uint64), big, 1), pa.string(), None)
