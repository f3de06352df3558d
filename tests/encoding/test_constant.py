"""All-null (2.1 AllNullLayout) and constant (2.2 ConstantLayout) pages decode like pylance
reads them; the layout / buffer arrangement targeted by each case really occurs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops.encoding.blocks import ConstantBlock
from lance_spark_ops.encoding.layout.constant import ConstantDecoder, parse_scalar_block
from lance_spark_ops.errors import CorruptFileError, UnsupportedError
from tests.encoding._fz import Written

N = 150


def _struct_all_null() -> pa.Array:
    a = pa.nulls(N, pa.int32())
    return pa.StructArray.from_arrays([a], names=["a"], mask=pa.array(np.arange(N) % 3 == 0))


@dataclass
class Case:
    name: str
    build: Callable[[], pa.Table]
    versions: tuple[str, ...]
    inline: bool | None = None  # 2.2: inline_value expected set / unset
    buffers: int | None = None  # number of page buffers expected
    expect: tuple[str, ...] = ("constant_layout",)


CASES = [
    Case("null_int", lambda: pa.table({"a": pa.nulls(N, pa.int32())}), ("2.1", "2.2"), False, 0),
    Case("null_str", lambda: pa.table({"a": pa.nulls(N, pa.string())}), ("2.1", "2.2"), False, 0),
    Case(
        "null_list_2",
        lambda: pa.table({"a": pa.array([None if i % 2 else [] for i in range(N)], pa.list_(pa.int32()))}),
        ("2.1",),
        False,
        2,
    ),
    Case(
        "null_items_list",
        lambda: pa.table(
            {"a": pa.array([[None, None] if i % 3 else None for i in range(N)], pa.list_(pa.int64()))}
        ),
        ("2.1",),
        False,
        2,
    ),
    Case(
        "null_list_rle",
        lambda: pa.table({"a": pa.array([None if i % 2 else [] for i in range(N)], pa.list_(pa.int32()))}),
        ("2.2",),
        False,
        2,
        ("constant_layout", "rle"),
    ),
    Case(
        "null_items_list_bitpacked",
        lambda: pa.table(
            {"a": pa.array([[None] * (i % 3) if i % 4 else None for i in range(N)], pa.list_(pa.string()))}
        ),
        ("2.2",),
        False,
        2,
    ),
    Case("null_struct_child", lambda: pa.table({"s": _struct_all_null()}), ("2.1", "2.2"), False, 2),
    Case("const_int", lambda: pa.table({"a": pa.array([7] * N, pa.int64())}), ("2.2",), True, 0),
    Case(
        "const_fixed16",
        lambda: pa.table({"a": pa.array([b"0123456789abcdef"] * N, pa.binary(16))}),
        ("2.2",),
        True,
        0,
    ),
    Case(
        "const_fixed64", lambda: pa.table({"a": pa.array([b"z" * 64] * N, pa.binary(64))}), ("2.2",), False, 1
    ),
    Case("const_bool", lambda: pa.table({"a": pa.array([True] * N)}), ("2.2",), True, 0),
    Case(
        "const_float_nulls",
        lambda: pa.table({"a": pa.array([1.5 if i % 3 else None for i in range(N)])}),
        ("2.2",),
        True,
        2,
    ),
    Case("const_str", lambda: pa.table({"a": pa.array(["hello"] * N)}), ("2.2",), False, 1),
    Case("const_empty_str", lambda: pa.table({"a": pa.array([""] * N)}), ("2.2",), False, 1),
    Case(
        "const_large_str",
        lambda: pa.table({"a": pa.array(["abc"] * N, pa.large_string())}),
        ("2.2",),
        False,
        1,
    ),
    Case("const_str_40k", lambda: pa.table({"a": pa.array(["x" * 40 * 1024] * N)}), ("2.2",), False, 1),
    Case(
        "const_str_nulls",
        lambda: pa.table({"a": pa.array(["hey" if i % 3 else None for i in range(N)])}),
        ("2.2",),
        False,
        3,
    ),
    Case(
        "const_list_items",
        lambda: pa.table(
            {"a": pa.array([[7, 7] if i % 3 else None for i in range(N)], pa.list_(pa.int64()))}
        ),
        ("2.2",),
        True,
        2,
    ),
]
PARAMS = [pytest.param(c, v, id=f"{c.name}-{v}") for c in CASES for v in c.versions]


@pytest.mark.parametrize("case,version", PARAMS)
def test_constant_matches_pylance(tmp_path, case: Case, version: str) -> None:
    w = Written.of(tmp_path, case.build(), version, case.name)
    pages = [p for col in w.columns for p in col]
    found = {e for p in pages for e in p.encodings}
    for name in case.expect:
        assert name in found, f"{name} not in {sorted(found)}"
    for p in pages:
        assert p.layout.WhichOneof("layout") == "constant_layout"
        if case.inline is not None:
            assert p.layout.constant_layout.HasField("inline_value") == case.inline
        if case.buffers is not None:
            assert len(p.sizes) == case.buffers
    w.check()


def test_constant_values_block(tmp_path) -> None:
    w = Written.of(
        tmp_path,
        pa.table({"a": pa.array([[7, 7] if i % 3 else None for i in range(N)], pa.list_(pa.int64()))}),
        "2.2",
    )
    (page,) = w.columns[0]
    got = page.decoder("2.2").decode(page.fetch(), None)
    assert isinstance(got.values, ConstantBlock)
    assert got.values.value == (7).to_bytes(8, "little") and not got.values.variable
    visible = int((got.def_ == 0).sum())  # null lists hold no item
    assert got.values.num_values == visible == 2 * sum(1 for i in range(N) if i % 3)
    sub = page.decoder("2.2").decode(page.fetch(), np.array([0, 1, 2]))
    assert sub.num_rows == 3 and sub.values.num_values == 4 and sub.rep.tolist() == [1, 1, 0, 1, 0]


def test_simple_all_null_synthesizes_def(tmp_path) -> None:
    w = Written.of(tmp_path, pa.table({"a": pa.nulls(N, pa.float64())}), "2.1")
    (page,) = w.columns[0]
    got = page.decoder("2.1").decode(page.fetch(), None)
    assert got.values is None and got.rep is None and got.def_.tolist() == [1] * N


def test_scalar_block_errors() -> None:
    ok = np.frombuffer(
        b"\x02\x00\x00\x00\x08\x00\x00\x00\x02\x00\x00\x00" + b"\x00" * 4 + b"\x02\x00\x00\x00hi", np.uint8
    )
    assert parse_scalar_block(ok, "t") == (b"hi", True)
    for bad in (ok[:3], ok[:-1], np.concatenate([ok, ok[:1]])):
        with pytest.raises(CorruptFileError):
            parse_scalar_block(bad, "t")
    three = np.frombuffer(b"\x03\x00\x00\x00" + b"\x00" * 12, np.uint8)
    with pytest.raises(UnsupportedError):
        parse_scalar_block(three, "t")
    bad_off = ok.copy()
    bad_off[16] = 9  # end offset 9 > 2 value bytes
    with pytest.raises(CorruptFileError):
        parse_scalar_block(bad_off, "t")


def test_level_buffer_errors(tmp_path) -> None:
    w = Written.of(
        tmp_path,
        pa.table({"a": pa.array([None if i % 2 else [] for i in range(N)], pa.list_(pa.int32()))}),
        "2.1",
    )
    (page,) = w.columns[0]
    layout = page.layout.constant_layout
    with pytest.raises(CorruptFileError):  # wrong buffer count for an inline value
        bad = type(layout)()
        bad.CopyFrom(layout)
        bad.inline_value = b"\x01"
        ConstantDecoder(bad, page.num_rows, [1, 2, 3], "2.1")
    with pytest.raises(CorruptFileError):  # levels describe a different row count
        ConstantDecoder(layout, page.num_rows + 1, page.sizes, "2.1").decode(page.fetch(), None)
    data = bytearray(w.data)
    data[page.offsets[0]] = 5  # a rep level above max_rep
    with pytest.raises(CorruptFileError):
        ConstantDecoder(layout, page.num_rows, page.sizes, "2.1").decode(page.fetch(data=bytes(data)), None)
