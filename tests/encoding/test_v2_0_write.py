"""Lance 2.0 encoders (``encoding.v2_0.encoder``) through the public ``LanceFileWriter``.

For the decoders' type x nulls x nesting x options matrix: files we write (one write, and
several writes with a small ``page_bytes`` so columns get many pages) are read back by
pylance (the oracle) and by our reader, and must equal the input; the encodings each case
targets must occur. With one page per column our pages must be *identical* to pylance's
(length, ``ArrayEncoding`` and every buffer byte), which also proves the encoding choices
(dictionary threshold, compression framing, packing, blob descriptions). Sizes are compared
with pylance's own 2.0 file per column kind.
"""

from __future__ import annotations

import decimal
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lance_spark_ops
from lance_spark_ops._pb import encodings_v2_0_pb2 as pb
from lance_spark_ops.encoding.v2_0.arrays import bitmap_slice
from lance_spark_ops.encoding.v2_0.binary import field_compression
from lance_spark_ops.encoding.v2_0.buffers import compress, decompress
from lance_spark_ops.encoding.v2_0.encoder import (
    check_array_2_0,
    column_encodings_2_0,
    encode_field_2_0,
    is_struct_header_2_0,
)
from lance_spark_ops.errors import LanceError, SchemaError, UnsupportedError
from lance_spark_ops.file.writer import LanceFileWriter
from tests.encoding._strategies import values_for
from tests.encoding.test_v2_0 import Opened
from tests.file.cases import CASES as FILE_CASES

lance_file = pytest.importorskip("lance.file")

N = 1200
rng = np.random.default_rng(7)


def nullable(values: list, every: int, offset: int = 0) -> list:
    return [None if (i + offset) % every == 0 else v for i, v in enumerate(values)]


def _lists(n: int, null_every: int, empty_every: int, maker) -> list:
    return [None if i % null_every == 0 else [] if i % empty_every == 0 else
            [maker(i, j) for j in range(i % 5 + 1)] for i in range(n)]


# -- the matrix: (table, {column: encodings that must occur}) --------------------------------
def case_primitive() -> tuple[pa.Table, dict[str, set[str]]]:
    secs = rng.integers(0, 2_000_000_000, N)
    cols = {
        **{f"i{w}": pa.array(rng.integers(-(2 ** (w - 1)), 2 ** (w - 1), N, dtype=f"int{w}"))
           for w in (8, 16, 32, 64)},
        **{f"u{w}": pa.array(rng.integers(0, 2**w - 1, N, dtype=f"uint{w}", endpoint=True))
           for w in (8, 16, 32, 64)},
        "f16": pa.array(rng.standard_normal(N).astype(np.float16)),
        "f32": pa.array(rng.standard_normal(N).astype(np.float32)),
        "f64": pa.array(nullable(list(rng.standard_normal(N)), 9), pa.float64()),
        "bool": pa.array(rng.random(N) < 0.3),
        "bool_nulls": pa.array(nullable([bool(x) for x in rng.random(N) < 0.5], 4)),
        "i32_nulls": pa.array(nullable(list(range(N)), 3), pa.int32()),
        "all_null": pa.array([None] * N, pa.int64()),
        "null": pa.nulls(N),
        "dec128": pa.array(nullable([decimal.Decimal(int(x)) / 100 for x in rng.integers(-(10**9), 10**9, N)],
                                    11), pa.decimal128(20, 2)),
        "dec256": pa.array([decimal.Decimal(int(x)) for x in rng.integers(-(10**9), 10**9, N)],
                           pa.decimal256(40, 0)),
        "date32": pa.array(secs // 86400, pa.int32()).cast(pa.date32()),
        "date64": pa.array(secs * 1000 // 86400000 * 86400000).cast(pa.date64()),
        "t32s": pa.array(secs % 86400, pa.int32()).cast(pa.time32("s")),
        "t64ns": pa.array(secs % 86400 * 10**9).cast(pa.time64("ns")),
        "ts_ms_tz": pa.array(secs * 1000).cast(pa.timestamp("ms", "America/New_York")),
        "ts_us_utc": pa.array(nullable(list(secs * 10**6), 5)).cast(pa.timestamp("us", "UTC")),
        "dur_ns": pa.array(nullable(list(secs), 7)).cast(pa.duration("ns")),
        "fsb": pa.array(nullable([bytes(rng.integers(0, 256, 5, dtype=np.uint8)) for _ in range(N)], 6),
                        pa.binary(5)),
    }
    return pa.table(cols), {"i64": {"no_nulls", "flat"}, "bool_nulls": {"some_nulls"}, "null": {"all_nulls"},
                            "all_null": {"all_nulls"}, "dec128": {"some_nulls", "flat"}}


def case_strings() -> tuple[pa.Table, dict[str, set[str]]]:
    words = [f"w{i}-" * (i % 7) for i in range(N)]
    few = ["alpha", "beta", "", "gamma"]
    cols = {
        "s": pa.array(words),
        "s_nulls": pa.array(nullable(words, 5)),
        "s_all_null": pa.array([None] * N, pa.string()),
        "ls": pa.array(nullable(words, 4, 1), pa.large_string()),
        "b": pa.array([w.encode() for w in words], pa.binary()),
        "lb": pa.array(nullable([bytes(rng.integers(0, 256, i % 40, dtype=np.uint8)) for i in range(N)], 3),
                       pa.large_binary()),
        "b_all_null": pa.array([None] * N, pa.binary()),
        "lowcard": pa.array([few[i % 4] for i in range(N)]),
        "lowcard_nulls": pa.array(nullable([few[i % 4] for i in range(N)], 7)),
        "lowcard_large": pa.array([few[i % 4] for i in range(N)], pa.large_string()),  # never a dictionary
    }
    return pa.table(cols), {"s": {"binary"}, "ls": {"binary"}, "lowcard": {"dictionary"},
                            "lowcard_nulls": {"dictionary"}, "s_all_null": {"dictionary"}}


def case_compression() -> tuple[pa.Table, dict[str, set[str]]]:
    words = [f"value number {i} " * (1 + i % 5) for i in range(N)]
    comp = "lance-encoding:compression"
    schema = pa.schema([
        pa.field("zstd", pa.string(), metadata={comp: "zstd"}),
        pa.field("lz4", pa.large_binary(), metadata={comp: "lz4"}),
        pa.field("zstd9", pa.large_string(),
                 metadata={comp: "zstd", "lance-encoding:compression-level": "9"}),
        pa.field("none", pa.binary(), metadata={comp: "none"}),
        pa.field("zstd_all_null", pa.string(), metadata={comp: "zstd"}),
        pa.field("brotli", pa.string(), metadata={comp: "brotli"}),  # unknown: ignored, as pylance does
        pa.field("items_zstd", pa.list_(pa.field("item", pa.string(), metadata={comp: "zstd"}))),
    ])
    table = pa.Table.from_arrays([
        pa.array(nullable(words, 10)),
        pa.array([w.encode() for w in words], pa.large_binary()),
        pa.array(nullable(words, 3), pa.large_string()),
        pa.array([w.encode() for w in words], pa.binary()),
        pa.array([None] * N, pa.string()),
        pa.array(words),
        pa.array([[w, w[:5]] if i % 4 else None for i, w in enumerate(words)], pa.list_(pa.string())),
    ], schema=schema)
    return table, {"zstd": {"compression:zstd"}, "lz4": {"compression:lz4"}, "zstd9": {"compression:zstd"},
                   "none": {"compression:none"}, "items_zstd": {"compression:zstd"}}


def case_fixed_size_lists() -> tuple[pa.Table, dict[str, set[str]]]:
    items8 = pa.array(nullable(list(rng.standard_normal(N * 8).astype(np.float32)), 13), pa.float32())
    cols = {
        "v8": pa.FixedSizeListArray.from_arrays(items8, 8, mask=pa.array(rng.random(N) < 0.1)),
        "v64": pa.FixedSizeListArray.from_arrays(
            pa.array(rng.standard_normal(N * 64).astype(np.float32)), 64),
        "i4": pa.FixedSizeListArray.from_arrays(pa.array(np.arange(N * 4, dtype=np.int32)), 4),
        "bool3": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(N * 3) < 0.5), 3,
                                                   mask=pa.array(rng.random(N) < 0.2)),
        "nested": pa.FixedSizeListArray.from_arrays(
            pa.FixedSizeListArray.from_arrays(pa.array(np.arange(N * 6, dtype=np.int16)), 2), 3),
        "rows_null": pa.FixedSizeListArray.from_arrays(pa.array(np.arange(N * 2, dtype=np.int16)), 2,
                                                       mask=pa.array(np.ones(N, bool))),
        "items_null": pa.FixedSizeListArray.from_arrays(pa.nulls(N * 2, pa.int16()), 2),
    }
    return pa.table(cols), {"v8": {"fixed_size_list", "some_nulls"}, "v64": {"fixed_size_list", "flat"},
                            "rows_null": {"all_nulls"}}


def case_lists() -> tuple[pa.Table, dict[str, set[str]]]:
    st_t = pa.struct([("a", pa.int32()), ("b", pa.string())])
    cols = {
        "li": pa.array(_lists(N, 7, 5, lambda i, j: i + j if j != 2 else None), pa.list_(pa.int32())),
        "lli": pa.array(_lists(N, 9, 4, lambda i, j: i * j), pa.large_list(pa.int64())),
        "lls": pa.array(_lists(N, 11, 6, lambda i, j: [f"{i}:{j}:{k}" if k != 1 else None for k in range(j)]),
                        pa.list_(pa.list_(pa.string()))),
        "lst": pa.array(_lists(N, 8, 3, lambda i, j: {"a": i * 10 + j, "b": f"s{i}"}), pa.list_(st_t)),
        "lfsl": pa.array(_lists(N, 6, 4, lambda i, j: [float(i), float(j)]),
                         pa.list_(pa.list_(pa.float32(), 2))),
        "lbool": pa.array(_lists(N, 9, 4, lambda i, j: None if (i + j) % 3 == 0 else bool(j % 2)),
                          pa.list_(pa.bool_())),
        "lowcard_items": pa.array(_lists(N, 9, 4, lambda i, j: "abc"[j % 3]), pa.list_(pa.string())),
        "l_all_null": pa.array([None] * N, pa.list_(pa.int16())),
        "l_all_empty": pa.array([[]] * N, pa.list_(pa.string())),
        "ll_all_null": pa.array([None] * N, pa.list_(pa.list_(pa.string()))),
    }
    return pa.table(cols), {"li": {"list"}, "lls": {"list", "binary"}, "lst": {"list", "struct"},
                            "lowcard_items": {"dictionary"}}


def case_structs() -> tuple[pa.Table, dict[str, set[str]]]:
    inner = pa.struct([("x", pa.int16()), ("y", pa.list_(pa.int32()))])
    schema = pa.schema([
        pa.field("st", pa.struct([("a", pa.int32()), ("b", pa.string()), ("c", inner)]), nullable=False),
        pa.field("packed",
                 pa.struct([("x", pa.int32()), ("y", pa.float64()), ("z", pa.list_(pa.int16(), 3))]),
                 metadata={"lance-encoding:packed": "true"}),
        pa.field("packed_legacy", pa.struct([("p", pa.uint8()), ("q", pa.int64()), ("r", pa.binary(3))]),
                 metadata={"packed": "true"}),
        pa.field("empty", pa.struct([])),
    ])
    table = pa.Table.from_arrays([
        pa.array([{"a": i if i % 3 else None, "b": f"b{i}" * (i % 4),
                   "c": {"x": i % 100, "y": None if i % 5 == 0 else list(range(i % 4))}} for i in range(N)],
                 schema.field("st").type),
        pa.array([{"x": i, "y": i / 3, "z": [i % 7, -i % 5, 3]} for i in range(N)],
                 schema.field("packed").type),
        pa.array([{"p": i % 256, "q": -i, "r": b"abc"} for i in range(N)],
                 schema.field("packed_legacy").type),
        pa.array([{}] * N, pa.struct([])),
    ], schema=schema)
    return table, {"st": {"struct", "list"}, "packed": {"packed_struct"}, "packed_legacy": {"packed_struct"}}


def case_dictionary() -> tuple[pa.Table, dict[str, set[str]]]:
    cols = {
        "d32": pa.DictionaryArray.from_arrays(pa.array(nullable([i % 3 for i in range(N)], 10), pa.int32()),
                                              pa.array(["red", "green", "blue"])),
        "d8": pa.DictionaryArray.from_arrays(pa.array([i % 2 for i in range(N)], pa.int8()),
                                             pa.array(["x", "yy"])),
        "d_all_null": pa.DictionaryArray.from_arrays(pa.array([None] * N, pa.int16()), pa.array(["x", "y"])),
        "d_int": pa.DictionaryArray.from_arrays(pa.array(nullable([i % 3 for i in range(N)], 4), pa.uint32()),
                                                pa.array([10, 20, 30], pa.int64())),
        "d_null_item": pa.DictionaryArray.from_arrays(
            pa.array(nullable([i % 3 for i in range(N)], 5), pa.int32()), pa.array(["a", None, "c"])),
    }
    return pa.table(cols), {"d32": {"dictionary"}, "d_int": {"dictionary", "flat"}}


def case_blob() -> tuple[pa.Table, dict[str, set[str]]]:
    blob = pa.field("blob", pa.large_binary(), metadata={"lance-encoding:blob": "true"})
    values = [None if i % 7 == 0 else b"" if i % 7 == 1 else bytes([i % 251]) * (i % 300) for i in range(N)]
    values[5] = bytes(rng.integers(0, 256, 100_000, dtype=np.uint8))
    schema = pa.schema([blob, pa.field("lblob", pa.list_(blob)), pa.field("sblob", pa.struct([blob])),
                        pa.field("i", pa.int64())])
    table = pa.Table.from_arrays([
        pa.array(values, pa.large_binary()),
        pa.array([values[i: i + 3] if i % 5 else None for i in range(N)], schema.field("lblob").type),
        pa.array([{"blob": v} for v in reversed(values)], schema.field("sblob").type),
        pa.array(np.arange(N)),
    ], schema=schema)
    return table, {"blob": {"column:blob", "packed_struct"}, "lblob": {"column:blob"},
                   "sblob": {"column:blob"}}


CASES = {f.__name__[5:]: f for f in (case_primitive, case_strings, case_compression, case_fixed_size_lists,
                                     case_lists, case_structs, case_dictionary, case_blob)}


# -- writing helpers ---------------------------------------------------------------------------
def write_ours(path: Path, table: pa.Table, writes: int = 1, page_bytes: int | None = None,
               writer: type[LanceFileWriter] = LanceFileWriter) -> str:
    kw = {} if page_bytes is None else {"page_bytes": page_bytes}
    step = max(1, -(-table.num_rows // writes))
    with writer(str(path), table.schema, version="2.0", **kw) as w:
        for start in range(0, table.num_rows, step):
            w.write(table.slice(start, step))
    return str(path)


def write_pylance(path: Path, table: pa.Table) -> str:
    with lance_file.LanceFileWriter(str(path), table.schema, version="2.0") as w:
        w.write_batch(table)
    return str(path)


def assert_equal_columns(got: pa.Table, want: pa.Table, who: str) -> None:
    assert got.schema.names == want.schema.names, who
    for name in want.schema.names:
        a, b = got.column(name), want.column(name)
        assert a.type == b.type, f"{who} {name}: {a.type} != {b.type}"
        if pa.types.is_dictionary(b.type):  # pages have their own dictionaries: compare values
            a, b = a.cast(b.type.value_type), b.cast(b.type.value_type)
        a, b = a.combine_chunks(), b.combine_chunks()
        if not a.equals(b):
            x, y = a.to_pylist(), b.to_pylist()
            bad = next((i for i, (p, q) in enumerate(zip(x, y, strict=False)) if p != q), None)
            first = (x[bad], y[bad]) if bad is not None else (len(x), len(y))
            raise AssertionError(f"{who} {name}: differs at row {bad}: {first[0]!r} != {first[1]!r}")


def read_both(path: str, want: pa.Table) -> None:
    assert_equal_columns(lance_file.LanceFileReader(path).read_all().to_table(), want, "pylance")
    assert_equal_columns(lance_spark_ops.LanceFileReader(path).read(), want, "ours")


def page_dump(path: str) -> list[list[tuple[int, bytes, list[bytes]]]]:
    """(length, serialized ArrayEncoding, buffers) of every page of every column. In blob
    columns the payload positions (which depend on where pages went) are zeroed."""
    f = Opened(path)
    out = []
    for col in f.columns:
        blob = col.column_encoding().WhichOneof("column_encoding") == "blob"
        pages = []
        for p, page in enumerate(col.meta.pages):
            ranges = list(zip(page.buffer_offsets, page.buffer_sizes, strict=True))
            bufs = [bytes(b) for b in col.fetch(ranges)]
            if blob:
                rows = np.frombuffer(bufs[0], "<u8").reshape(-1, 2).copy()
                assert (rows[rows[:, 1] > 0, 0] % 64 == 0).all()
                rows[rows[:, 1] > 0, 0] = 0
                bufs[0] = rows.tobytes()
            pages.append((page.length, col.encoding(p).SerializeToString(deterministic=True), bufs))
        out.append(pages)
    return out


# -- round trips ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(CASES))
def test_round_trip_one_write(tmp_path: Path, name: str) -> None:
    table, expect = CASES[name]()
    path = write_ours(tmp_path / f"{name}.lance", table)
    read_both(path, table)
    f = Opened(path)
    for column, encs in expect.items():
        missing = encs - f.encodings(column)
        assert not missing, f"{column}: {missing} not in {f.encodings(column)}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_round_trip_many_pages(tmp_path: Path, name: str) -> None:
    table, _ = CASES[name]()
    path = write_ours(tmp_path / f"{name}.lance", table, writes=5, page_bytes=3000)
    read_both(path, table)
    f = Opened(path)
    assert max(f.max_pages(c) for c in table.schema.names) > 1
    # row ranges across page boundaries, through our reader's 2.0 range decoding
    for column in table.schema.names:
        want = table.column(column).combine_chunks()
        got = f.read(column, (101, 1000))
        if pa.types.is_dictionary(want.type):
            got, want = got.cast(want.type.value_type), want.cast(want.type.value_type)
        assert got.equals(want.slice(101, 899)), column


@pytest.mark.parametrize("name", sorted(CASES))
def test_pages_identical_to_pylance(tmp_path: Path, name: str) -> None:
    """One page per column: same lengths, encodings and buffer bytes as pylance's file."""
    table, _ = CASES[name]()
    ours = page_dump(write_ours(tmp_path / "ours.lance", table))
    theirs = page_dump(write_pylance(tmp_path / "theirs.lance", table))
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert len(a) == len(b) == 1, f"column {i}: {len(a)} / {len(b)} pages"
        (la, ea, ba), (lb, eb, bb) = a[0], b[0]
        assert (la, ea) == (lb, eb), f"column {i}: length/encoding differ"
        assert [len(x) for x in ba] == [len(x) for x in bb], f"column {i}: buffer sizes differ"
        assert ba == bb, f"column {i}: buffer bytes differ"


def test_sliced_input_matches_unsliced(tmp_path: Path) -> None:
    table = pa.concat_tables([CASES[n]()[0].slice(0, 300) for n in ("lists",)])
    sliced = table.slice(37, 200)
    copy = pa.Table.from_batches([pa.record_batch([c.combine_chunks().take(np.arange(37, 237))
                                                   for c in table.columns], schema=table.schema)])
    a = page_dump(write_ours(tmp_path / "a.lance", sliced))
    b = page_dump(write_pylance(tmp_path / "b.lance", copy))
    assert [[(p[0], p[1]) for p in c] for c in a] == [[(p[0], p[1]) for p in c] for c in b]


_FILE_CASES_2_0 = [pytest.param(c, id=c.name) for c in FILE_CASES if "2.0" in c.versions]


@pytest.mark.parametrize("case", _FILE_CASES_2_0)
def test_file_matrix(tmp_path: Path, case: Any) -> None:
    """The reader/writer matrix (tests/file/cases.py): identical pages and file size as
    pylance's for one write; both readers on one and on several writes with small pages."""
    table = case.build()
    ours = write_ours(tmp_path / "ours.lance", table)
    theirs = write_pylance(tmp_path / "theirs.lance", table)
    read_both(ours, table)
    assert page_dump(ours) == page_dump(theirs)
    assert os.path.getsize(ours) == os.path.getsize(theirs)
    read_both(write_ours(tmp_path / "many.lance", table, writes=3, page_bytes=20_000), table)


# -- sizes -----------------------------------------------------------------------------------
SIZE_ROWS = 100_000


def _size_kinds() -> dict[str, tuple[pa.Array, dict[str, str] | None]]:
    g = np.random.default_rng(11)
    n = SIZE_ROWS
    words = np.array([f"w{i}-" * (i % 7) for i in range(1000)])
    mask = g.random(n) < 0.1
    return {
        "int64": (pa.array(g.integers(0, 10**12, n)), None),
        "int32_nulls": (pa.array(g.integers(0, 1000, n).astype(np.int32), mask=mask), None),
        "float64": (pa.array(g.standard_normal(n)), None),
        "bool": (pa.array(g.random(n) < 0.5), None),
        "timestamp": (pa.array(g.integers(0, 10**15, n)).cast(pa.timestamp("us")), None),
        "string": (pa.array(words[g.integers(0, 1000, n)], mask=mask), None),
        "string_lowcard": (pa.array(words[g.integers(0, 20, n)]), None),
        "large_binary": (pa.array(words[g.integers(0, 1000, n)], pa.large_binary()), None),
        "string_zstd": (pa.array(words[g.integers(0, 1000, n)]), {"lance-encoding:compression": "zstd"}),
        "binary_lz4": (pa.array(words[g.integers(0, 1000, n)], pa.binary()),
                       {"lance-encoding:compression": "lz4"}),
        "list_int32": (pa.array([list(range(i % 5)) if i % 9 else None for i in range(n)],
                                pa.list_(pa.int32())), None),
        "fsl_f32x4": (pa.FixedSizeListArray.from_arrays(
            pa.array(g.standard_normal(n * 4).astype(np.float32)), 4), None),
        "struct": (pa.StructArray.from_arrays([pa.array(g.integers(0, 100, n)),
                                               pa.array(words[g.integers(0, 1000, n)])], ["a", "b"]), None),
        "packed_struct": (pa.StructArray.from_arrays([pa.array(g.integers(0, 100, n)), pa.array(g.random(n))],
                                                     ["a", "b"]), {"lance-encoding:packed": "true"}),
        "dictionary": (pa.array(words[g.integers(0, 50, n)]).dictionary_encode(), None),
        "blob": (pa.array([bytes(g.integers(0, 256, int(g.integers(0, 3000)), dtype=np.uint8))
                           if i % 5 else None for i in range(n // 50)], pa.large_binary()),
                 {"lance-encoding:blob": "true"}),
    }


def test_file_sizes_match_pylance(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kinds = _size_kinds()
    ratios = {}
    for kind, (arr, meta) in kinds.items():
        table = pa.Table.from_arrays([arr], schema=pa.schema([pa.field(kind, arr.type, metadata=meta)]))
        ours = os.path.getsize(write_ours(tmp_path / f"o_{kind}.lance", table))
        theirs = os.path.getsize(write_pylance(tmp_path / f"p_{kind}.lance", table))
        ratios[kind] = ours / theirs
    same_rows = {k: v for k, v in kinds.items() if k != "blob"}
    schema = pa.schema([pa.field(k, a.type, metadata=m) for k, (a, m) in same_rows.items()])
    table = pa.Table.from_arrays([a for a, _ in same_rows.values()], schema=schema)
    ratios["overall"] = (os.path.getsize(write_ours(tmp_path / "o_all.lance", table))
                         / os.path.getsize(write_pylance(tmp_path / "p_all.lance", table)))
    with capsys.disabled():
        print("\n2.0 file size ours / pylance:", ", ".join(f"{k} {v:.4f}" for k, v in ratios.items()))
    bad = {k: v for k, v in ratios.items() if not 0.95 <= v <= 1.05}
    assert not bad, bad


# -- refusals --------------------------------------------------------------------------------
_ST = pa.struct([("a", pa.int32())])
_PACKED = {"lance-encoding:packed": "true"}
REFUSALS = [
    ("null_struct", pa.field("x", _ST), pa.array([{"a": 1}, None], _ST), SchemaError, "struct validity"),
    ("null_struct_in_list", pa.field("x", pa.list_(_ST)), pa.array([[{"a": 1}, None]], pa.list_(_ST)),
     SchemaError, "struct validity"),
    ("null_struct_in_struct", pa.field("x", pa.struct([("s", _ST)])),
     pa.array([{"s": None}], pa.struct([("s", _ST)])), SchemaError, "struct validity"),
    ("map", pa.field("x", pa.map_(pa.string(), pa.int32())),
     pa.array([[("a", 1)]], pa.map_(pa.string(), pa.int32())), SchemaError, "map"),
    ("packed_string", pa.field("x", pa.struct([("a", pa.string())]), metadata=_PACKED),
     pa.array([{"a": "x"}], pa.struct([("a", pa.string())])), SchemaError, "fixed width"),
    ("packed_bool", pa.field("x", pa.struct([("a", pa.bool_())]), metadata=_PACKED),
     pa.array([{"a": True}], pa.struct([("a", pa.bool_())])), SchemaError, "fixed width"),
    ("packed_null_child", pa.field("x", _ST, metadata=_PACKED), pa.array([{"a": 1}, {"a": None}], _ST),
     SchemaError, "null"),
    ("blob_binary", pa.field("x", pa.binary(), metadata={"lance-encoding:blob": "true"}), pa.array([b"a"]),
     SchemaError, "large_binary"),
    ("fsl_string", pa.field("x", pa.list_(pa.string(), 2)), pa.array([["a", "b"]], pa.list_(pa.string(), 2)),
     UnsupportedError, "fixed_size_list"),
    ("fsb0", pa.field("x", pa.binary(0)), pa.array([b""], pa.binary(0)), UnsupportedError,
     "fixed_size_binary"),
]


@pytest.mark.parametrize("name,field,array,error,match", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_refusals(tmp_path: Path, name: str, field: pa.Field, array: pa.Array, error: type,
                  match: str) -> None:
    with pytest.raises(error, match=match):
        check_array_2_0(field, array)
    table = pa.Table.from_arrays([array], schema=pa.schema([field]))
    path = tmp_path / f"{name}.lance"
    with pytest.raises(LanceError):
        write_ours(path, table)
    assert not path.exists()
    with pytest.raises(BaseException):  # noqa: B017 - pylance refuses too (to write, or to read back)
        lance_file.LanceFileReader(write_pylance(tmp_path / f"p_{name}.lance", table)).read_all().to_table()


@pytest.mark.parametrize("name", ["blob", "structs", "lists"])
def test_plain_writer_many_pages(tmp_path: Path, name: str) -> None:
    table, _ = CASES[name]()
    path = write_ours(tmp_path / "plain.lance", table, writes=3, page_bytes=3000, writer=LanceFileWriter)
    read_both(path, table)


# -- units -----------------------------------------------------------------------------------
def test_encode_field_contract() -> None:
    field = pa.field("l", pa.list_(pa.struct([("a", pa.int32()), ("b", pa.list_(pa.string()))])))
    arr = pa.array([[{"a": 1, "b": ["x", None]}], None, [], [{"a": 2, "b": None}, {"a": 3, "b": []}]],
                   field.type).slice(1)
    pages = encode_field_2_0(field, arr)
    kinds = [p.encoding.WhichOneof("array_encoding") for p in pages]
    assert kinds == ["list", "struct", "nullable", "list", "binary"]
    assert [p.num_rows for p in pages] == [3, 2, 2, 2, 0]  # rows, items, items, items, items of b
    assert pages[0].encoding.list.num_items == 2 and pages[0].encoding.list.null_offset_adjustment == 3
    assert np.frombuffer(pages[0].buffers[0], "<u8").tolist() == [3, 0, 2]
    assert is_struct_header_2_0(pages[1].encoding) and not is_struct_header_2_0(pages[0].encoding)
    assert [e.WhichOneof("column_encoding") for e in column_encodings_2_0(field)] == ["values"] * 5


def test_blob_page_payloads_and_finalize() -> None:
    field = pa.field("b", pa.large_binary(), metadata={"lance-encoding:blob": "true"})
    arr = pa.array([b"q", b"abc", None, b"", b"x" * 70, b"yz"], pa.large_binary()).slice(1)
    (page,) = encode_field_2_0(field, arr)
    assert page.buffers == [] and page.finalize is not None  # unusable until placed
    (data,) = page.external
    data = np.asarray(data)
    assert data.size == 64 + 128 + 2
    assert bytes(data[:3]) == b"abc" and bytes(data[64:134]) == b"x" * 70 and bytes(data[192:194]) == b"yz"
    page.finalize([128])
    rows = np.frombuffer(page.buffers[0], "<u8").reshape(-1, 2).tolist()
    assert rows == [[128, 3], [1, 0], [0, 0], [192, 70], [320, 2]]
    (empty,) = encode_field_2_0(field, pa.array([None, b""], pa.large_binary()))
    assert empty.external == [] and np.frombuffer(empty.buffers[0], "<u8").tolist() == [1, 0, 0, 0]
    assert column_encodings_2_0(field)[0].WhichOneof("column_encoding") == "blob"
    nested = pa.field("s", pa.struct([field, pa.field("i", pa.int8())]))
    kinds = [e.WhichOneof("column_encoding") for e in column_encodings_2_0(nested)]
    assert kinds == ["values", "blob", "values"]


@pytest.mark.parametrize("offset", [0, 1, 7, 8, 13])
@pytest.mark.parametrize("n", [0, 1, 8, 9, 30])
def test_bitmap_slice(offset: int, n: int) -> None:
    bits = rng.random(offset + n + 5) < 0.5
    buf = pa.py_buffer(np.packbits(bits, bitorder="little"))
    out = bitmap_slice(buf, offset, n)
    assert out.size == (n + 7) // 8
    got = np.unpackbits(out, bitorder="little")
    assert got[:n].astype(bool).tolist() == bits[offset: offset + n].tolist()
    assert not got[n:].any()


@pytest.mark.parametrize("scheme,level", [("zstd", None), ("zstd", 19), ("zstd", -3), ("lz4", None),
                                          ("none", None)])
def test_compress_round_trip(scheme: str, level: int | None) -> None:
    for data in (b"", b"abc" * 1000, bytes(rng.integers(0, 256, 5000, dtype=np.uint8))):
        packed = compress(scheme, np.frombuffer(data, np.uint8), level)
        assert bytes(decompress(scheme, memoryview(bytes(packed)), "t")) == data


def test_field_compression_parsing() -> None:
    key, lvl = b"lance-encoding:compression", b"lance-encoding:compression-level"
    assert field_compression({key: b"zstd", lvl: b"+7"}) == pb.Compression(scheme="zstd", level=7)
    assert not field_compression({key: b"zstd", lvl: b"7.5"}).HasField("level")
    assert field_compression({key: b"fsst"}) is None and field_compression({key: b"ZSTD"}) is None
    assert field_compression(None) is None


# -- property: random 2.0 data through our writer and both readers ---------------------------
_LEAVES = [pa.int32(), pa.int64(), pa.string(), pa.large_binary(), pa.bool_(), pa.float64()]
_types_2_0 = st.recursive(
    st.sampled_from(_LEAVES),
    lambda c: st.one_of(c.map(pa.list_), c.map(pa.large_list),
                        st.lists(c, min_size=1, max_size=3).map(
                            lambda ts: pa.struct([pa.field(f"f{i}", t) for i, t in enumerate(ts)]))),
    max_leaves=4)


@st.composite
def _tables(draw: st.DrawFn) -> tuple[pa.Table, int, int]:
    t = draw(_types_2_0)
    arr = pa.array(draw(st.lists(values_for(t), min_size=1, max_size=40)), type=t)
    return (pa.table({"x": arr, "i": pa.array(np.arange(len(arr)))}), draw(st.integers(1, 4)),
            draw(st.sampled_from([64, 512, 1 << 20])))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=_tables())
def test_property_round_trip(tmp_path: Path, case: tuple[pa.Table, int, int]) -> None:
    table, writes, page_bytes = case
    path = tmp_path / "p.lance"
    if path.exists():
        path.unlink()
    try:
        check_array_2_0(table.schema.field("x"), table.column("x").combine_chunks())
    except SchemaError:  # null structs: pylance refuses as well
        with pytest.raises(Exception):  # noqa: B017
            write_pylance(tmp_path / "q.lance", table)
        return
    read_both(write_ours(path, table, writes=writes, page_bytes=page_bytes), table)
