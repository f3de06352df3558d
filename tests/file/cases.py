# ruff: noqa: E501 -- each Case row is one line of a data table; wrapping the rows would hide the table.
"""The reader/writer test matrix: tables covering types x nulls x nesting x distributions x
field-metadata options, each with the encodings pylance 14 is expected to pick per version.

``expect[version]`` lists oneof names that must all appear somewhere in the pages of the
file (see lance_spark_ops.file.inspect), so the matrix demonstrably exercises every decoder.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

N = 5000
ALL = ("2.0", "2.1", "2.2")
V21 = ("2.1", "2.2")


@dataclass
class Case:
    name: str
    build: Callable[[], pa.Table]
    versions: tuple[str, ...] = ALL
    expect: dict[str, tuple[str, ...]] = field(default_factory=dict)


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _with_meta(arr: pa.Array, name: str, **meta: str) -> pa.Table:
    f = pa.field(name, arr.type, True, {f"lance-encoding:{k.replace('_', '-')}": v for k, v in meta.items()})
    return pa.table([arr], schema=pa.schema([f]))


def _nulls(arr: pa.Array, every: int) -> pa.Array:
    mask = np.zeros(len(arr), bool)
    mask[::every] = True
    return pa.array(arr.to_pylist(), arr.type, mask=mask) if len(arr) < 20000 else arr


def _text(n: int, seed: int = 1, width: int = 20) -> list[str]:
    words = ["lance", "spark", "column", "page", "mini", "block", "zip", "row", "id", "data", "file"]
    r = _rng(seed)
    out = []
    for _ in range(n):
        s = " ".join(r.choice(words, 6))
        out.append((s * (width // len(s) + 1))[:width])
    return out


def _struct_rows(n: int) -> pa.Array:
    a = pa.array(np.arange(n, dtype=np.int32))
    b = pa.array([f"b{i % 13}" if i % 7 else None for i in range(n)])
    mask = pa.array(np.arange(n) % 5 == 0)
    return pa.StructArray.from_arrays([a, b], names=["a", "b"], mask=mask)


def _list_int(n: int, large: bool = False) -> pa.Array:
    r = _rng(3)
    rows = []
    for i in range(n):
        k = i % 6
        rows.append(None if k == 1 else [] if k == 2 else [int(x) for x in r.integers(0, 1000, k)])
    return pa.array(rows, pa.large_list(pa.int32()) if large else pa.list_(pa.int32()))


def _list_list_str(n: int) -> pa.Array:
    rows = []
    for i in range(n):
        k = i % 5
        if k == 0:
            rows.append(None)
        elif k == 1:
            rows.append([])
        else:
            rows.append([[f"s{(i + j) % 17}" for j in range(m)] if m != 1 else [] for m in range(k)])
    return pa.array(rows, pa.list_(pa.list_(pa.string())))


def _fsl(n: int, dim: int, item_nulls: bool = False, row_nulls: bool = False, dtype=np.float32) -> pa.Array:
    vals = _rng(4).random(n * dim).astype(dtype)
    items = pa.array(vals, mask=(np.arange(n * dim) % 11 == 0) if item_nulls else None)
    arr = pa.FixedSizeListArray.from_arrays(items, dim)
    if row_nulls:
        arr = pa.FixedSizeListArray.from_arrays(items, dim, mask=pa.array(np.arange(n) % 9 == 0))
    return arr


def _packed(n: int, with_string: bool = False) -> pa.Table:
    fields = [pa.array(np.arange(n, dtype=np.int32)), pa.array(np.arange(n, dtype=np.float64) / 3)]
    names = ["x", "y"]
    if with_string:
        fields.append(pa.array([f"name-{i % 100}" for i in range(n)]))
        names.append("z")
    arr = pa.StructArray.from_arrays(fields, names=names)
    f = pa.field("p", arr.type, True, {"lance-encoding:packed": "true"})
    return pa.table([arr], schema=pa.schema([f]))


CASES: list[Case] = [
    Case("int64_full_range", lambda: pa.table({"v": pa.array(_rng().integers(-2**62, 2**62, N))}),
         expect={"2.0": ("flat",), "2.1": ("mini_block_layout", "flat")}),
    Case("ints_small_range", lambda: pa.table({
        f"{t}": pa.array(_rng().integers(0, 100, N).astype(t)) for t in
        ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]}),
        expect={"2.1": ("inline_bitpacking",), "2.2": ("inline_bitpacking",)}),
    Case("sorted_ints", lambda: pa.table({"v": pa.array(np.arange(N, dtype=np.int64) * 3)}),
         expect={"2.1": ("inline_bitpacking",)}),
    Case("floats", lambda: pa.table({"f32": pa.array(_rng().random(N).astype(np.float32)),
                                     "f64": pa.array(_rng(2).random(N)),
                                     "f16": pa.array(_rng(3).random(N).astype(np.float16))})),
    Case("nullable_ints", lambda: pa.table({"v": pa.array(_rng().integers(0, 1000, N), mask=np.arange(N) % 3 == 0)}),
         expect={"2.0": ("some_nulls",), "2.1": ("out_of_line_bitpacking",)}),
    Case("mostly_null_ints", lambda: pa.table({"v": pa.array(np.arange(N), mask=np.arange(N) % 500 != 0)}),
         expect={"2.2": ("rle",)}),
    Case("all_null_ints", lambda: pa.table({"v": pa.nulls(N, pa.int32())}),
         expect={"2.0": ("all_nulls",), "2.1": ("constant_layout",), "2.2": ("constant_layout",)}),
    Case("bools", lambda: pa.table({"b": pa.array(_rng().random(N) > 0.5),
                                    "bn": pa.array(_rng(1).random(N) > 0.5, mask=np.arange(N) % 4 == 0)})),
    Case("long_runs", lambda: pa.table({"v": pa.array(np.repeat(np.arange(N // 250, dtype=np.int64), 250))}),
         expect={"2.1": ("rle",), "2.2": ("rle",)}),
    Case("constant_ints", lambda: pa.table({"v": pa.array(np.full(N, 42, dtype=np.int64)),
                                            "fb": pa.array([b"abcd"] * N, pa.binary(4))}),
         expect={"2.2": ("constant_layout",)}),
    Case("text_20b", lambda: pa.table({"s": pa.array(_text(N))}),
         expect={"2.0": ("binary",), "2.1": ("fsst",), "2.2": ("fsst",)}),
    Case("text_nullable_large", lambda: pa.table({"s": pa.array(_text(N), pa.large_string(), mask=np.arange(N) % 6 == 0)}),
         expect={"2.1": ("fsst",)}),
    Case("random_binary", lambda: pa.table({"b": pa.array([bytes(_rng(i).integers(0, 256, 20, dtype=np.uint8)) for i in range(N)]),
                                            "lb": pa.array([bytes([i % 256]) * (i % 30) for i in range(N)], pa.large_binary())}),
         expect={"2.1": ("variable",)}),
    Case("low_cardinality_strings", lambda: pa.table({"s": pa.array([f"cat-{i % 10}" for i in range(N)]),
                                                      "sn": pa.array([f"c{i % 3}" if i % 5 else None for i in range(N)])}),
         expect={"2.0": ("dictionary",), "2.1": ("dictionary",), "2.2": ("dictionary",)}),
    Case("strings_500b", lambda: pa.table({"s": pa.array(_text(400, 5, 500)), "sn": pa.array(_text(400, 6, 500), mask=np.arange(400) % 3 == 0)}),
         expect={"2.1": ("full_zip_layout", "fsst"), "2.2": ("full_zip_layout",)}),
    Case("values_40k", lambda: pa.table({"b": pa.array([bytes([i]) * 40_000 + bytes(range(256)) * i for i in range(20)], pa.binary())}),
         expect={"2.1": ("full_zip_layout", "general")}),
    Case("vectors_128", lambda: pa.table({"v": _fsl(800, 128)}),
         expect={"2.0": ("fixed_size_list",), "2.1": ("full_zip_layout", "fixed_size_list")}),
    Case("vectors_item_nulls", lambda: pa.table({"v": _fsl(800, 128, item_nulls=True)}),
         expect={"2.1": ("full_zip_layout", "fixed_size_list")}),
    Case("vectors_row_nulls", lambda: pa.table({"v": _fsl(800, 128, row_nulls=True)}),
         expect={"2.1": ("full_zip_layout",)}),
    Case("fsl_int32_4", lambda: pa.table({"v": _fsl(N, 4, dtype=np.int32), "vn": _fsl(N, 4, item_nulls=True, row_nulls=True)}),
         expect={"2.1": ("mini_block_layout", "fixed_size_list")}),
    Case("list_int", lambda: pa.table({"l": _list_int(N), "ll": _list_int(N, large=True)}),
         expect={"2.0": ("list",), "2.1": ("mini_block_layout",)}),
    Case("list_list_string", lambda: pa.table({"l": _list_list_str(N)})),
    Case("list_long_strings", lambda: pa.table({"l": pa.array([[s] * (i % 3) if i % 4 else None for i, s in enumerate(_text(600, 8, 300))], pa.list_(pa.string()))}),
         expect={"2.1": ("full_zip_layout",)}),
    Case("nullable_struct", lambda: pa.table({"st": _struct_rows(N)}), versions=V21),
    Case("non_null_struct", lambda: pa.table({"st": pa.StructArray.from_arrays(
        [pa.array(np.arange(N, dtype=np.int32)), pa.array(_text(N, 9, 8))], names=["a", "b"])})),
    Case("nested_struct_list", lambda: pa.table({"st": pa.StructArray.from_arrays(
        [_list_int(N), _struct_rows(N)], names=["l", "inner"], mask=pa.array(np.arange(N) % 7 == 3))}), versions=V21),
    Case("list_of_struct", lambda: pa.table({"ls": pa.array(
        [[{"x": i, "y": f"y{i}"}] * (i % 3) if i % 5 else None for i in range(N)],
        pa.list_(pa.struct([("x", pa.int64()), ("y", pa.string())])))}), versions=V21),
    Case("map", lambda: pa.table({"m": pa.array([[(f"k{j}", j) for j in range(i % 4)] if i % 6 else None for i in range(N)],
                                                pa.map_(pa.string(), pa.int32()))}), versions=("2.2",)),
    Case("dictionary_arrays", lambda: pa.table({"d": pa.array([f"d{i % 7}" if i % 9 else None for i in range(N)]).dictionary_encode()})),
    Case("temporal_decimal_misc", lambda: pa.table({
        "d32": pa.array(np.arange(N, dtype=np.int32), pa.date32()),
        "d64": pa.array(np.arange(N, dtype=np.int64) * 86_400_000, pa.date64()),
        "t32": pa.array(np.arange(N, dtype=np.int32), pa.time32("ms")),
        "t64": pa.array(np.arange(N, dtype=np.int64) * 1000, pa.time64("ns")),
        "ts": pa.array(np.arange(N, dtype=np.int64), pa.timestamp("ns", tz="Europe/Oslo")),
        "tsn": pa.array(np.arange(N, dtype=np.int64), pa.timestamp("s"), mask=np.arange(N) % 10 == 0),
        "dur": pa.array(np.arange(N, dtype=np.int64), pa.duration("us")),
        "dec": pa.array([i * 7 for i in range(N)], pa.decimal128(20, 2)),
        "dec256": pa.array([i * 11 if i % 3 else None for i in range(N)], pa.decimal256(50, 4)),
        "fsb": pa.array([bytes([i % 256, (i * 7) % 256, 3]) for i in range(N)], pa.binary(3)),
        "nul": pa.nulls(N),
    })),
    Case("zstd_option", lambda: _with_meta(pa.array(_text(N)), "s", compression="zstd"),
         expect={"2.0": ("compression",), "2.1": ("general",)}),
    Case("lz4_option", lambda: _with_meta(pa.array(_text(N)), "s", compression="lz4"),
         expect={"2.1": ("general",)}),
    Case("zstd_ints_level9", lambda: _with_meta(pa.array(_rng().integers(0, 10**9, N)), "v", compression="zstd", compression_level="9"),
         versions=V21, expect={"2.1": ("general",)}),
    Case("zstd_floats_bss", lambda: _with_meta(pa.array(_rng().random(N)), "f", compression="zstd", bss="on"),
         versions=V21, expect={"2.1": ("general",)}),
    Case("compression_none", lambda: _with_meta(pa.array(_text(N)), "s", compression="none"),
         expect={"2.1": ("variable",)}),
    Case("rle_threshold", lambda: _with_meta(pa.array(np.repeat(np.arange(N // 4, dtype=np.int32), 4)), "v", rle_threshold="0.9"),
         versions=V21),
    Case("dict_divisor", lambda: _with_meta(pa.array([f"v{i % 1000}" for i in range(N)]), "s", dict_divisor="100"), versions=V21),
    Case("packed_struct", lambda: _packed(N), expect={"2.0": ("packed_struct",), "2.1": ("packed_struct",)}),
    Case("packed_struct_string", lambda: _packed(N, with_string=True), versions=("2.2",),
         expect={"2.2": ("variable_packed_struct",)}),
    Case("fullzip_forced", lambda: _with_meta(pa.array(_rng().integers(0, 10**6, N)), "v", structural_encoding="fullzip"),
         versions=V21, expect={"2.1": ("full_zip_layout",)}),
    Case("constant_strings", lambda: pa.table({"s": pa.array(["same-value"] * 50), "big": pa.array(["x" * 40_000] * 50)}),
         expect={"2.2": ("constant_layout",)}),
    Case("all_null_lists", lambda: pa.table({"l": pa.nulls(N, pa.list_(pa.int32())), "s": pa.nulls(N, pa.string())}),
         expect={"2.2": ("constant_layout",)}),
    Case("blob", lambda: _with_meta(pa.array([bytes([i % 256]) * (1000 + i) if i % 4 else None for i in range(60)], pa.large_binary()), "blob", blob="true"),
         expect={"2.1": ("blob_layout",)}),
]

CASES_BY_NAME = {c.name: c for c in CASES}
