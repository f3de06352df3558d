"""MiniBlockDecoder + codecs against files written by pylance (2.1 and 2.2): each case checks
the decoded values against pylance's read *and* that the targeted encoding was chosen."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops.encoding.blocks import FixedSizeListBlock, StructBlock
from tests.encoding._mb import (
    block_numpy,
    item_values,
    list_column,
    nullable_column,
    table_with_meta,
    write,
)

# every test twice: fast *_ranges decode paths, then per-chunk paths, same pylance pages
pytestmark = pytest.mark.usefixtures("codec_path")

N = 5000
V = ("2.1", "2.2")


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


@dataclass
class Case:
    name: str
    build: Callable[[], pa.Table]
    expect: dict[str, tuple[str, ...]] = field(default_factory=dict)  # version -> oneof names
    versions: tuple[str, ...] = V


def _prim(dtype: str, values: np.ndarray, arrow: pa.DataType | None = None) -> pa.Table:
    return pa.table({"x": pa.array(values.astype(dtype), type=arrow)})


def both(*encodings: str) -> dict[str, tuple[str, ...]]:
    return {"2.1": encodings, "2.2": encodings}


def _meta(values: np.ndarray, **meta: str) -> pa.Table:
    return table_with_meta(pa.array(values), **meta)


PRIMITIVE = [
    Case("int8", lambda: _prim("int8", rng().integers(-128, 128, N)), both("flat")),
    Case("int16", lambda: _prim("int16", rng().integers(-(2**15), 2**15, N)), both("flat")),
    Case("int32_full_range", lambda: _prim("int32", rng().integers(-(2**31), 2**31, N)), both("flat")),
    Case("int64_full_range", lambda: _prim("int64", rng().integers(-(2**62), 2**62, N) * 2), both("flat")),
    Case("uint8", lambda: _prim("uint8", rng().integers(0, 256, N)), both("flat")),
    Case("uint16", lambda: _prim("uint16", rng().integers(0, 2**16, N)), both("flat")),
    Case("uint32", lambda: _prim("uint32", rng().integers(0, 2**32, N)), both("flat")),
    Case("uint64", lambda: _prim("uint64", rng().integers(0, 2**63, N, dtype=np.uint64) * 2), both("flat")),
    Case("int32_small_range", lambda: _prim("int32", rng().integers(0, 3000, N)), both("inline_bitpacking")),
    Case("int64_sorted", lambda: _prim("int64", np.arange(N) * 7 + 10**12), both("inline_bitpacking")),
    Case("uint16_small", lambda: _prim("uint16", rng().integers(0, 20, N)), both("inline_bitpacking")),
    Case("float32", lambda: _prim("float32", rng().random(N)), both("inline_bitpacking")),
    Case("float64", lambda: _prim("float64", rng().random(N)), both("inline_bitpacking")),
    Case(
        "timestamp_us",
        lambda: pa.table(
            {"x": pa.array(np.arange(N) * 1_000_003 + 1_700_000_000_000_000, pa.timestamp("us"))}
        ),
        both("inline_bitpacking"),
    ),
    Case("long_runs", lambda: _prim("int32", np.repeat(np.arange(N // 100), 100)), both("rle")),
    Case("constant_2_1", lambda: _prim("int64", np.full(N, 42)), {"2.1": ("rle",)}, versions=("2.1",)),
    Case(
        "zstd_ints",
        lambda: _meta(rng().integers(0, 10**9, N), compression="zstd"),
        both("general", "byte_stream_split"),
    ),
    Case(
        "lz4_ints",
        lambda: _meta(rng().integers(0, 10**9, N).astype(np.int32), compression="lz4"),
        both("general", "inline_bitpacking"),
    ),
    Case(
        "zstd_floats",
        lambda: _meta(rng().random(N), compression="zstd"),
        both("general", "inline_bitpacking"),
    ),
    Case(
        "lz4_floats", lambda: _meta(rng().random(N), compression="lz4"), both("general", "inline_bitpacking")
    ),
    Case(
        "zstd_level9",
        lambda: _meta(rng().integers(0, 10**9, N), compression="zstd", compression_level="9"),
        both("general", "level", "byte_stream_split"),
    ),
    Case(  # 2.2: dictionary of <= 1024 items stored as an InlineBitpacking *block*
        "zstd_level9_low_cardinality",
        lambda: _meta(rng().integers(0, 1000, N), compression="zstd", compression_level="9"),
        {"2.1": ("general", "level"), "2.2": ("general", "dictionary", "inline_bitpacking")},
    ),
    Case(
        "bss_zstd_f32",
        lambda: _meta(rng().random(N).astype(np.float32), compression="zstd", bss="on"),
        both("general", "byte_stream_split"),
    ),
    Case(  # 2.2: dictionary under General(lz4, Flat)
        "int64_low_cardinality",
        lambda: _prim("int64", rng().integers(0, 10, N)),
        {"2.1": ("inline_bitpacking",), "2.2": ("dictionary", "general", "flat")},
    ),
]


def _values_of(w) -> np.ndarray:
    pages = [p.decode() for p in w.column_pages()]
    expected = w.expected.column(0).combine_chunks()
    dtype = expected.type.to_pandas_dtype() if not pa.types.is_timestamp(expected.type) else np.int64
    return np.concatenate([item_values(pd, dtype) for pd in pages]), expected.to_numpy(zero_copy_only=False)


@pytest.mark.parametrize(
    "case,version", [pytest.param(c, v, id=f"{c.name}-{v}") for c in PRIMITIVE for v in c.versions]
)
def test_primitive(case: Case, version: str, tmp_path) -> None:
    w = write(tmp_path, case.build(), version, case.name)
    assert all(p.decoder is not None for p in w.column_pages()), "expected mini-block pages"
    for enc in case.expect.get(version, ()):
        assert enc in w.encodings(), f"{case.name} {version}: {enc} not in {w.encodings()}"
    got, exp = _values_of(w)
    if exp.dtype.kind == "M":
        exp = exp.view(np.int64)
    np.testing.assert_array_equal(got, exp)


def test_constant_2_2_is_not_miniblock(tmp_path) -> None:
    w = write(tmp_path, _prim("int64", np.full(N, 42)), "2.2")
    assert w.column_pages()[0].layout.WhichOneof("layout") == "constant_layout"


@pytest.mark.parametrize("version", V)
def test_bool(version: str, tmp_path) -> None:
    arr = pa.array(rng(3).random(N) < 0.3)
    w = write(tmp_path, pa.table({"b": arr}), version)
    assert "flat" in w.encodings()
    got = np.concatenate([block_numpy(p.decode().values, "bool") for p in w.column_pages()])
    np.testing.assert_array_equal(got, w.expected.column(0).to_numpy())


@pytest.mark.parametrize("version", V)
@pytest.mark.parametrize("kind", ["nullable", "mostly_null", "nullable_bool"])
def test_nullable(kind: str, version: str, tmp_path) -> None:
    r = rng(5)
    if kind == "nullable":
        arr = pa.array(r.integers(0, 1000, N).astype(np.int32), mask=r.random(N) < 0.3)
    elif kind == "mostly_null":
        arr = pa.array(np.arange(N, dtype=np.int32), mask=np.arange(N) % 97 != 0)
    else:
        arr = pa.array(r.random(N) < 0.5, mask=r.random(N) < 0.2)
    w = write(tmp_path, pa.table({"x": arr}), version)
    pages = [p.decode() for p in w.column_pages()]
    assert all(pd.def_ is not None for pd in pages)
    encs = w.encodings()
    if kind == "mostly_null" and version == "2.2":
        assert "rle" in encs  # def levels
    elif kind == "nullable":
        assert "out_of_line_bitpacking" in encs
    if kind == "nullable_bool":
        got = []
        for pd in pages:
            vals = block_numpy(pd.values, "bool")
            got.extend(v if d == 0 else None for v, d in zip(vals.tolist(), pd.def_.tolist(), strict=True))
    else:
        got = nullable_column(pages, np.int32)
    assert got == w.expected.column(0).to_pylist()


@pytest.mark.parametrize("version", V)
def test_null_struct_items_keep_value_slots(version: str, tmp_path) -> None:
    """struct<a: int32> with null structs and null a: layers [NULLABLE_ITEM, NULLABLE_ITEM];
    every row (null struct or not) has a value slot."""
    a = pa.array(np.arange(N, dtype=np.int32), mask=np.arange(N) % 7 == 0)
    st = pa.StructArray.from_arrays([a], names=["a"], mask=pa.array(np.arange(N) % 5 == 0))
    w = write(tmp_path, pa.table({"s": st}), version)
    pd = w.column_pages()[0].decode()
    assert len(pd.layers) == 2 and pd.values.num_values == pd.num_rows == N
    vals = block_numpy(pd.values, np.int32)
    exp = [None if r is None else r["a"] for r in w.expected.column(0).to_pylist()]
    assert [v if d == 0 else None for v, d in zip(vals.tolist(), pd.def_.tolist(), strict=True)] == exp
    assert set(np.unique(pd.def_).tolist()) == {0, 1, 2}


def _fsl(item_nulls: bool, row_nulls: bool) -> pa.Table:
    r = rng(7)
    vals = r.integers(-(2**31), 2**31, N * 4).astype(np.int32)
    items = pa.array(vals, mask=(r.random(N * 4) < 0.2) if item_nulls else None)
    mask = pa.array(r.random(N) < 0.1) if row_nulls else None
    return pa.table({"f": pa.FixedSizeListArray.from_arrays(items, 4, mask=mask)})


@pytest.mark.parametrize("version", V)
@pytest.mark.parametrize("item_nulls,row_nulls", [(False, False), (True, False), (False, True), (True, True)])
def test_fixed_size_list(item_nulls: bool, row_nulls: bool, version: str, tmp_path) -> None:
    w = write(tmp_path, _fsl(item_nulls, row_nulls), version)
    assert "fixed_size_list" in w.encodings()
    got: list = []
    for page in w.column_pages():
        pd = page.decode()
        blk = pd.values
        assert isinstance(blk, FixedSizeListBlock) and blk.dimension == 4
        assert (blk.item_validity is not None) == item_nulls
        items = block_numpy(blk.items, np.int32).reshape(-1, 4).tolist()
        valid = np.ones(blk.num_values * 4, bool) if blk.item_validity is None else blk.item_validity
        valid = valid.reshape(-1, 4).tolist()
        rows_ok = [True] * pd.num_rows if pd.def_ is None else (pd.def_ == 0).tolist()
        for row, ok, v in zip(items, rows_ok, valid, strict=True):
            got.append([x if m else None for x, m in zip(row, v, strict=True)] if ok else None)
    assert got == w.expected.column(0).to_pylist()


@pytest.mark.parametrize("version", V)
def test_packed_struct(version: str, tmp_path) -> None:
    r = rng(9)
    st = pa.StructArray.from_arrays(
        [
            pa.array(np.arange(3000, dtype=np.int32)),
            pa.array(r.random(3000)),
            pa.array(r.integers(0, 2**15, 3000).astype(np.int16)),
            pa.array(r.integers(0, 255, 3000).astype(np.uint8)),
        ],
        names=["a", "b", "c", "d"],
    )
    w = write(tmp_path, table_with_meta(st, "p", packed="true"), version)
    assert "packed_struct" in w.encodings()
    pd = w.column_pages()[0].decode()
    assert isinstance(pd.values, StructBlock) and len(pd.values.children) == 4
    exp = w.expected.column(0).combine_chunks()
    for i, dt in enumerate([np.int32, np.float64, np.int16, np.uint8]):
        np.testing.assert_array_equal(block_numpy(pd.values.children[i], dt), exp.field(i).to_numpy())


@pytest.mark.parametrize("version", V)
def test_low_cardinality_strings(version: str, tmp_path) -> None:
    strings = [f"category-{i % 11}" for i in range(N)]
    w = write(tmp_path, pa.table({"s": pa.array(strings)}), version)
    assert "dictionary" in w.encodings()
    if version == "2.2":
        assert "general" in w.encodings()
    pd = w.column_pages()[0].decode()
    assert pd.dictionary is not None and pd.dictionary.num_values == 11
    idx = block_numpy(pd.values, f"<u{pd.values.bits_per_value // 8}").astype(np.int64)
    d = pd.dictionary
    offs = np.asarray(d.offsets, np.int64)
    data = bytes(np.asarray(d.data, np.uint8))
    words = [data[offs[i] : offs[i + 1]].decode() for i in range(d.num_values)]
    assert [words[i] for i in idx] == w.expected.column(0).to_pylist()


def _lists(n: int, seed: int, max_len: int, item_nulls: bool) -> pa.Array:
    r = rng(seed)
    rows = []
    for i in range(n):
        k = i % 6
        if k == 1:
            rows.append(None)
        elif k == 2:
            rows.append([])
        else:
            vals = r.integers(0, 1000, int(r.integers(1, max_len + 1))).tolist()
            rows.append([None if item_nulls and v % 5 == 0 else v for v in vals])
    return pa.array(rows, pa.list_(pa.int32()))


LIST_CASES = {
    "short": lambda: _lists(N, 1, 4, False),
    "null_items": lambda: _lists(N, 2, 4, True),
    "long_rows": lambda: _lists(300, 3, 3000, False),  # rows span several chunks
    "long_rows_null_items": lambda: _lists(300, 4, 2500, True),
}


@pytest.mark.parametrize("version", V)
@pytest.mark.parametrize("kind", sorted(LIST_CASES))
def test_list(kind: str, version: str, tmp_path) -> None:
    w = write(tmp_path, pa.table({"l": LIST_CASES[kind]()}), version, kind)
    page = w.column_pages()[0]
    mb = page.layout.mini_block_layout
    assert mb.repetition_index_depth == 1 and mb.HasField("rep_compression")
    got = [row for p in w.column_pages() for row in list_column(p.decode(), np.int32)]
    assert got == w.expected.column(0).to_pylist()


def _fsl_py(blk) -> list:
    """Nested FixedSizeListBlock -> Python lists (item validity applied per layer)."""
    if not isinstance(blk, FixedSizeListBlock):
        return block_numpy(blk, bool if blk.bits_per_value == 1 else np.int32).tolist()
    items = _fsl_py(blk.items)
    if blk.item_validity is not None:
        items = [x if ok else None for x, ok in zip(items, blk.item_validity.tolist(), strict=True)]
    d = blk.dimension
    return [items[i * d : (i + 1) * d] for i in range(blk.num_values)]


@pytest.mark.parametrize("version", V)
def test_nested_and_bool_fixed_size_lists(version: str, tmp_path) -> None:
    r = rng(12)
    inner = pa.FixedSizeListArray.from_arrays(
        pa.array(r.integers(0, 2**31, 3000 * 6).astype(np.int32), mask=r.random(18000) < 0.1), 2
    )
    bools = pa.FixedSizeListArray.from_arrays(pa.array(r.random(9000) < 0.5, mask=r.random(9000) < 0.2), 3)
    for name, arr, depth in [("nested", pa.FixedSizeListArray.from_arrays(inner, 3), 2), ("bools", bools, 1)]:
        w = write(tmp_path, pa.table({"x": arr}), version, name)
        assert list(w.column_pages()[0].encodings).count("fixed_size_list") == depth
        got = [row for p in w.column_pages() for row in _fsl_py(p.decode().values)]
        assert got == w.expected.column(0).to_pylist()
