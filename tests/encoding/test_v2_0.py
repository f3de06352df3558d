"""Lance 2.0 decoders against files written by pylance (the oracle).

Every case writes a 2.0 file with ``lance.file.LanceFileWriter(version="2.0")`` (small
``data_cache_bytes`` and several batches so most columns get several pages), decodes every
column with ``lance_spark_ops.encoding.v2_0`` from the raw bytes, and compares with
``LanceFileReader.read_all()``: whole columns and row ranges. Each case also checks that the
encodings it targets really occur in the file.
"""

from __future__ import annotations

import decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops._pb import encodings_v2_0_pb2 as pb
from lance_spark_ops._pb import file_pb2
from lance_spark_ops.encoding.v2_0 import ColumnPages, count_columns_2_0, decode_field_2_0
from lance_spark_ops.errors import CorruptFileError, InvalidInputError, UnsupportedError
from lance_spark_ops.file.container import parse_column_metadata, parse_footer, parse_offset_table
from lance_spark_ops.file.schema import schema_from_pb

lance_file = pytest.importorskip("lance.file")

N = 3000
BATCHES = 4


# -- helpers -------------------------------------------------------------------------------
def _unsliced(table: pa.Table) -> pa.Table:
    """A copy without slice offsets (pylance's 2.0 writer panics on sliced nested structs)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return pa.ipc.open_stream(sink.getvalue()).read_all()


def write(path: Path, table: pa.Table, cache: int | None = 16 * 1024, batches: int = BATCHES) -> str:
    """Write ``table`` as a 2.0 file in ``batches`` write_batch calls (more pages)."""
    step = max(1, -(-table.num_rows // batches))
    with lance_file.LanceFileWriter(str(path), table.schema, version="2.0", data_cache_bytes=cache) as w:
        for start in range(0, table.num_rows, step):
            w.write_batch(_unsliced(table.slice(start, step)))
    return str(path)


class Opened:
    """A 2.0 file parsed with our container code; ``fetches`` records every read."""

    def __init__(self, path: str) -> None:
        self.data = Path(path).read_bytes()
        view = memoryview(self.data)
        size = len(self.data)
        footer = parse_footer(self.data[-40:], size, path)
        assert footer.version == "2.0"
        cmo = parse_offset_table(self.data[footer.cmo_table_pos:], footer.num_columns, size, "col", path)
        gbo = parse_offset_table(self.data[footer.gbo_table_pos:], footer.num_global_buffers, size, "gb",
                                 path)
        fd = file_pb2.FileDescriptor()
        pos, length = (int(x) for x in gbo[0])
        fd.ParseFromString(self.data[pos: pos + length])
        self.num_rows = fd.length
        self.schema = schema_from_pb(fd.schema.fields, dict(fd.schema.metadata)).to_arrow()
        self.fetches: list[tuple[int, int]] = []

        def fetch(ranges):
            self.fetches.extend(ranges)
            for off, n in ranges:
                assert 0 <= off and off + n <= size
            return [view[off: off + n] for off, n in ranges]

        self.columns = [
            ColumnPages(parse_column_metadata(self.data[int(p): int(p) + int(s)], i, size, path), fetch,
                        index=i)
            for i, (p, s) in enumerate(cmo)
        ]
        self.slices: dict[str, list[ColumnPages]] = {}
        c = 0
        for f in self.schema:
            n = count_columns_2_0(f)
            self.slices[f.name] = self.columns[c: c + n]
            c += n
        assert c == len(self.columns), f"schema maps to {c} columns, file has {len(self.columns)}"

    def read(self, name: str, rows: tuple[int, int] | None = None) -> pa.Array:
        return decode_field_2_0(self.schema.field(name), self.slices[name], rows)

    def table(self, rows: tuple[int, int] | None = None) -> pa.Table:
        return pa.Table.from_arrays([self.read(f.name, rows) for f in self.schema], schema=self.schema)

    def encodings(self, name: str | None = None) -> set[str]:
        """Names of every ArrayEncoding node (plus ``compression:<scheme>`` and column-level
        ``column:<kind>``) in the pages of one field (default: all)."""
        found: set[str] = set()

        def walk(msg) -> None:
            for fd, value in msg.ListFields():
                if fd.message_type is pb.ArrayEncoding.DESCRIPTOR:
                    items = value if fd.is_repeated else [value]
                    for item in items:
                        found.add(item.WhichOneof("array_encoding"))
                        walk(item)
                elif fd.name == "compression":
                    found.add(f"compression:{value.scheme}")
                elif fd.message_type is not None:
                    for item in (value if fd.is_repeated else [value]):
                        walk(item)
                elif fd.name in ("no_nulls", "some_nulls", "all_nulls"):
                    found.add(fd.name)

        cols = self.columns if name is None else self.slices[name]
        for col in cols:
            found.add("column:" + str(col.column_encoding().WhichOneof("column_encoding")))
            for p in range(len(col.meta.pages)):
                enc = col.encoding(p)
                found.add(enc.WhichOneof("array_encoding"))
                walk(enc)
                if enc.WhichOneof("array_encoding") == "nullable":
                    found.add(enc.nullable.WhichOneof("nullability"))
        return found

    def max_pages(self, name: str) -> int:
        return max(len(c.meta.pages) for c in self.slices[name])


def oracle(path: str) -> pa.Table:
    return lance_file.LanceFileReader(path).read_all().to_table()


def assert_same(got: pa.Array | pa.Table, want: pa.ChunkedArray | pa.Table | pa.Array, what: str) -> None:
    if isinstance(want, pa.ChunkedArray):
        want = want.combine_chunks()
    assert got.type == want.type if isinstance(got, pa.Array) else got.schema == want.schema, what
    if not got.equals(want):
        a, b = (got.to_pylist(), want.to_pylist())
        bad = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
        raise AssertionError(f"{what}: differs (first at {bad}: {a[bad] if bad is not None else a[:3]!r} != "
                             f"{b[bad] if bad is not None else b[:3]!r}, lengths {len(a)} / {len(b)})")


RANGES = [(0, 1), (0, 0), (N - 1, N), (1, 2), (7, 1234), (999, 1001), (1500, N), (2048, 2059)]


def check_file(path: str, expect: dict[str, set[str]], source: pa.Table | None = None) -> Opened:
    f = Opened(path)
    want = oracle(path) if source is None else source
    assert f.num_rows == want.num_rows
    for name, encs in expect.items():
        missing = encs - f.encodings(name)
        assert not missing, f"{name}: expected encodings {missing} not found in {f.encodings(name)}"
    for field in f.schema:
        col = want.column(field.name).combine_chunks()
        assert_same(f.read(field.name), col, f"{field.name} (all rows)")
        for a, b in RANGES:
            b = min(b, f.num_rows)
            a = min(a, b)
            assert_same(f.read(field.name, (a, b)), col.slice(a, b - a), f"{field.name} rows {a}..{b}")
    return f


rng = np.random.default_rng(42)


def nullable(values: list, every: int, offset: int = 0) -> list:
    return [None if (i + offset) % every == 0 else v for i, v in enumerate(values)]


# -- cases ---------------------------------------------------------------------------------
def test_primitive_types(tmp_path: Path) -> None:
    ints = {f"i{w}": pa.array(rng.integers(-(2 ** (w - 1)), 2 ** (w - 1), N, dtype=f"int{w}"))
            for w in (8, 16, 32, 64)}
    uints = {f"u{w}": pa.array(rng.integers(0, 2 ** w - 1, N, dtype=f"uint{w}", endpoint=True))
             for w in (8, 16, 32, 64)}
    secs = rng.integers(0, 2_000_000_000, N)
    cols = {
        **ints,
        **uints,
        "f16": pa.array(rng.standard_normal(N).astype(np.float16)),
        "f32": pa.array(rng.standard_normal(N).astype(np.float32)),
        "f64": pa.array(nullable(list(rng.standard_normal(N)), 9), pa.float64()),
        "bool": pa.array(rng.random(N) < 0.3),
        "bool_nulls": pa.array(nullable([bool(x) for x in rng.random(N) < 0.5], 4)),
        "i32_nulls": pa.array(nullable(list(range(N)), 3), pa.int32()),
        "all_null": pa.array([None] * N, pa.int64()),
        "null": pa.nulls(N),
        "dec128": pa.array(nullable([decimal.Decimal(int(x)) / 100
                                     for x in rng.integers(-10**9, 10**9, N)], 11),
                           pa.decimal128(20, 2)),
        "dec256": pa.array([decimal.Decimal(int(x)) for x in rng.integers(-10**9, 10**9, N)],
                           pa.decimal256(40, 0)),
        "date32": pa.array(secs // 86400, pa.int32()).cast(pa.date32()),
        "date64": pa.array(secs * 1000 // 86400000 * 86400000).cast(pa.date64()),
        "t32s": pa.array(secs % 86400, pa.int32()).cast(pa.time32("s")),
        "t32ms": pa.array(secs % 86400 * 1000, pa.int32()).cast(pa.time32("ms")),
        "t64us": pa.array(secs % 86400 * 10**6).cast(pa.time64("us")),
        "t64ns": pa.array(secs % 86400 * 10**9).cast(pa.time64("ns")),
        "ts_s": pa.array(secs).cast(pa.timestamp("s")),
        "ts_ms_tz": pa.array(secs * 1000).cast(pa.timestamp("ms", "America/New_York")),
        "ts_us_utc": pa.array(nullable(list(secs * 10**6), 5)).cast(pa.timestamp("us", "UTC")),
        "ts_ns": pa.array(secs * 10**9).cast(pa.timestamp("ns")),
        "dur_s": pa.array(secs).cast(pa.duration("s")),
        "dur_ms": pa.array(secs).cast(pa.duration("ms")),
        "dur_us": pa.array(secs).cast(pa.duration("us")),
        "dur_ns": pa.array(nullable(list(secs), 7)).cast(pa.duration("ns")),
        "fsb": pa.array(nullable([bytes(rng.integers(0, 256, 5, dtype=np.uint8)) for _ in range(N)], 6),
                        pa.binary(5)),
    }
    path = write(tmp_path / "prim.lance", pa.table(cols))
    f = check_file(path, {
        "i64": {"nullable", "no_nulls", "flat"},
        "bool": {"flat"},
        "bool_nulls": {"some_nulls"},
        "i32_nulls": {"some_nulls"},
        "all_null": {"all_nulls"},
        "null": {"all_nulls"},
        "dec128": {"some_nulls", "flat"},
    })
    assert f.max_pages("i64") > 1 and f.max_pages("bool") >= 1
    bits = {f.columns[0].encoding(0).nullable.no_nulls.values.flat.bits_per_value}
    assert bits == {8}
    flat = f.slices["bool"][0].encoding(0)
    inner = flat.nullable.no_nulls.values if flat.WhichOneof("array_encoding") == "nullable" else flat
    assert inner.flat.bits_per_value == 1


def test_strings_and_binary(tmp_path: Path) -> None:
    words = [f"w{i}-" * (i % 7) for i in range(N)]  # includes empty strings, high cardinality
    few = ["alpha", "beta", "", "gamma"]
    cols = {
        "s": pa.array(words),
        "s_nulls": pa.array(nullable(words, 5)),
        "s_all_null": pa.array([None] * N, pa.string()),
        "ls": pa.array(nullable(words, 4, 1), pa.large_string()),
        "ls_all_null": pa.array([None] * N, pa.large_string()),
        "b": pa.array([w.encode() for w in words], pa.binary()),
        "lb": pa.array(nullable([bytes(rng.integers(0, 256, i % 40, dtype=np.uint8)) for i in range(N)], 3),
                       pa.large_binary()),
        "b_all_null": pa.array([None] * N, pa.binary()),
        "lowcard": pa.array([few[i % 4] for i in range(N)]),
        "lowcard_nulls": pa.array(nullable([few[i % 4] for i in range(N)], 7)),
    }
    path = write(tmp_path / "str.lance", pa.table(cols))
    f = check_file(path, {
        "s": {"binary"},
        "s_nulls": {"binary"},
        "ls": {"binary"},
        "lb": {"binary"},
        "lowcard": {"dictionary", "binary"},
        "lowcard_nulls": {"dictionary"},
    })
    assert f.max_pages("s") > 1


def test_buffer_compression(tmp_path: Path) -> None:
    words = [f"value number {i} " * (1 + i % 5) for i in range(N)]
    schema = pa.schema([
        pa.field("zstd", pa.string(), metadata={"lance-encoding:compression": "zstd"}),
        pa.field("lz4", pa.large_binary(), metadata={"lance-encoding:compression": "lz4"}),
        pa.field("zstd9", pa.large_string(), metadata={"lance-encoding:compression": "zstd",
                                                       "lance-encoding:compression-level": "9"}),
        pa.field("none", pa.binary(), metadata={"lance-encoding:compression": "none"}),
    ])
    table = pa.Table.from_arrays([
        pa.array(nullable(words, 10)),
        pa.array([w.encode() for w in words], pa.large_binary()),
        pa.array(nullable(words, 3), pa.large_string()),
        pa.array([w.encode() for w in words], pa.binary()),
    ], schema=schema)
    path = write(tmp_path / "comp.lance", table)
    check_file(path, {
        "zstd": {"binary", "compression:zstd"},
        "lz4": {"binary", "compression:lz4"},
        "zstd9": {"compression:zstd"},
        "none": {"binary"},
    })


def test_fixed_size_lists(tmp_path: Path) -> None:
    items8 = pa.array(nullable(list(rng.standard_normal(N * 8).astype(np.float32)), 13), pa.float32())
    row_mask = pa.array(rng.random(N) < 0.1)
    cols = {
        "v8": pa.FixedSizeListArray.from_arrays(items8, 8, mask=row_mask),
        "v128": pa.FixedSizeListArray.from_arrays(
            pa.array(rng.standard_normal(N * 128).astype(np.float32)), 128),
        "v128_nulls": pa.FixedSizeListArray.from_arrays(
            pa.array(nullable(list(rng.standard_normal(N * 128).astype(np.float32)), 101), pa.float32()), 128,
            mask=pa.array(rng.random(N) < 0.05)),
        "i4": pa.FixedSizeListArray.from_arrays(pa.array(np.arange(N * 4, dtype=np.int32)), 4),
        "bool3": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(N * 3) < 0.5), 3,
                                                   mask=pa.array(rng.random(N) < 0.2)),
        "nested": pa.FixedSizeListArray.from_arrays(
            pa.FixedSizeListArray.from_arrays(pa.array(np.arange(N * 6, dtype=np.int16)), 2), 3),
    }
    path = write(tmp_path / "fsl.lance", pa.table(cols), cache=256 * 1024)
    f = check_file(path, {
        "v8": {"fixed_size_list", "some_nulls"},
        "v128": {"fixed_size_list", "flat"},
        "v128_nulls": {"fixed_size_list", "some_nulls"},
    })
    assert f.max_pages("v128") > 1


def _lists(n: int, null_every: int, empty_every: int, maker) -> list:
    out = []
    for i in range(n):
        if i % null_every == 0:
            out.append(None)
        elif i % empty_every == 0:
            out.append([])
        else:
            out.append([maker(i, j) for j in range(i % 5 + 1)])
    return out


def test_lists(tmp_path: Path) -> None:
    st = pa.struct([("a", pa.int32()), ("b", pa.string())])
    cols = {
        "li": pa.array(_lists(N, 7, 5, lambda i, j: i + j if j != 2 else None), pa.list_(pa.int32())),
        "lli": pa.array(_lists(N, 9, 4, lambda i, j: i * j), pa.large_list(pa.int64())),
        "lls": pa.array(_lists(N, 11, 6, lambda i, j: [f"{i}:{j}:{k}" if k != 1 else None for k in range(j)]),
                        pa.list_(pa.list_(pa.string()))),
        "lst": pa.array(_lists(N, 8, 3, lambda i, j: {"a": i * 10 + j, "b": f"s{i}"}), pa.list_(st)),
        "lfsl": pa.array(_lists(N, 6, 4, lambda i, j: [float(i), float(j)]),
                         pa.list_(pa.list_(pa.float32(), 2))),
        "lbool": pa.array(_lists(N, 9, 4, lambda i, j: None if (i + j) % 3 == 0 else bool(j % 2)),
                          pa.list_(pa.bool_())),
        "l_all_null": pa.array([None] * N, pa.list_(pa.int16())),
        "l_all_empty": pa.array([[]] * N, pa.list_(pa.int16())),
    }
    path = write(tmp_path / "lists.lance", pa.table(cols))
    f = check_file(path, {"li": {"list"}, "lli": {"list"}, "lls": {"list", "binary"},
                          "lst": {"list", "struct"}})
    assert len(f.slices["lls"]) == 3 and len(f.slices["lst"]) == 4
    assert f.max_pages("li") > 1
    # list pages and item pages do not line up: rows in the middle map through num_items
    offsets_pages, item_pages = ([p.length for p in c.meta.pages] for c in f.slices["li"])
    assert offsets_pages != item_pages


def test_structs_and_packed(tmp_path: Path) -> None:
    inner = pa.struct([("x", pa.int16()), ("y", pa.list_(pa.int32()))])
    schema = pa.schema([
        pa.field("st", pa.struct([("a", pa.int32()), ("b", pa.string()), ("c", inner)]), nullable=False),
        pa.field("packed",
                 pa.struct([("x", pa.int32()), ("y", pa.float64()), ("z", pa.list_(pa.int16(), 3))]),
                 metadata={"lance-encoding:packed": "true"}),
        pa.field("packed_legacy", pa.struct([("p", pa.uint8()), ("q", pa.int64())]),
                 metadata={"packed": "true"}),
    ])
    table = pa.Table.from_arrays([
        pa.array([{"a": i if i % 3 else None, "b": f"b{i}" * (i % 4),
                   "c": {"x": i % 100, "y": None if i % 5 == 0 else list(range(i % 4))}} for i in range(N)],
                 schema.field("st").type),
        pa.array([{"x": i, "y": i / 3, "z": [i % 7, -i % 5, 3]} for i in range(N)],
                 schema.field("packed").type),
        pa.array([{"p": i % 256, "q": -i} for i in range(N)], schema.field("packed_legacy").type),
    ], schema=schema)
    path = write(tmp_path / "struct.lance", table)
    f = check_file(path, {"st": {"struct", "list"}, "packed": {"packed_struct"},
                          "packed_legacy": {"packed_struct"}})
    # st: header, a, b, c header, c.x, c.y offsets, c.y items
    assert [len(f.slices[n]) for n in ("st", "packed", "packed_legacy")] == [7, 1, 1]


def test_packed_key_presence_is_what_counts(tmp_path: Path) -> None:
    """The writer packs a struct whenever ``lance-encoding:packed`` is present (even "false");
    pylance's own reader then miscounts columns, ours follows the writer."""
    field = pa.field("s", pa.struct([("x", pa.int32())]), metadata={"lance-encoding:packed": "false"})
    table = pa.Table.from_arrays([pa.array([{"x": i} for i in range(100)], field.type)],
                                 schema=pa.schema([field]))
    path = write(tmp_path / "pf.lance", table, batches=1)
    f = Opened(path)
    assert len(f.columns) == 1 and f.encodings("s") >= {"packed_struct"}
    assert f.read("s").equals(table.column("s").combine_chunks())


def test_dictionary_arrays(tmp_path: Path) -> None:
    d32 = pa.DictionaryArray.from_arrays(pa.array(nullable([i % 3 for i in range(N)], 10), pa.int32()),
                                         pa.array(["red", "green", "blue"]))
    d8 = pa.DictionaryArray.from_arrays(pa.array([i % 2 for i in range(N)], pa.int8()), pa.array(["x", "yy"]))
    table = pa.table({"d32": d32, "d8": d8})
    path = write(tmp_path / "dict.lance", table, batches=1, cache=1 << 20)
    check_file(path, {"d32": {"dictionary"}, "d8": {"dictionary"}})
    # Several pages: each page has its own dictionary; compare values.
    path = write(tmp_path / "dict_pages.lance", table, cache=4096)
    f = Opened(path)
    assert f.max_pages("d32") > 1
    want = oracle(path)
    for name in ("d32", "d8"):
        got = f.read(name)
        assert got.type == table.schema.field(name).type
        assert got.cast(pa.string()).equals(want.column(name).combine_chunks().cast(pa.string()))
        assert f.read(name, (5, 2999)).cast(pa.string()).equals(
            table.column(name).combine_chunks().slice(5, 2994).cast(pa.string()))


def test_blob(tmp_path: Path) -> None:
    field = pa.field("blob", pa.large_binary(), metadata={"lance-encoding:blob": "true"})
    values = [None if i % 7 == 0 else b"" if i % 7 == 1 else bytes([i % 251]) * (i % 300) for i in range(N)]
    values[5] = bytes(rng.integers(0, 256, 200_000, dtype=np.uint8))  # big payload: a separate read
    table = pa.Table.from_arrays([pa.array(values, pa.large_binary()), pa.array(np.arange(N))],
                                 schema=pa.schema([field, pa.field("i", pa.int64())]))
    path = write(tmp_path / "blob.lance", table)
    f = check_file(path, {"blob": {"column:blob", "packed_struct"}})
    f.fetches.clear()
    f.read("blob", (1, 4))
    assert sum(n for _, n in f.fetches) < 200_000  # row 5's payload was not fetched


def test_multi_page_int64_reads_only_needed_pages(tmp_path: Path) -> None:
    n = 3_000_000
    table = pa.table({"x": pa.array(np.arange(n, dtype=np.int64) * 3)})
    path = write(tmp_path / "big.lance", table, cache=None, batches=6)  # default 8 MiB pages
    f = Opened(path)
    pages = f.columns[0].meta.pages
    assert len(pages) > 1
    assert_same(f.read("x"), table.column("x"), "all rows")
    boundary = int(pages[0].length)
    f.fetches.clear()
    got = f.read("x", (boundary - 5, boundary + 5))
    assert got.to_numpy().tolist() == [3 * i for i in range(boundary - 5, boundary + 5)]
    assert sum(size for _, size in f.fetches) == 80  # only the 10 values, from two pages


# -- column mapping and errors -------------------------------------------------------------
def test_count_columns() -> None:
    st = pa.struct([("a", pa.int32()), ("b", pa.list_(pa.string()))])
    assert count_columns_2_0(pa.field("x", pa.int32())) == 1
    assert count_columns_2_0(pa.field("x", pa.list_(pa.float32(), 128))) == 1
    assert count_columns_2_0(pa.field("x", pa.dictionary(pa.int8(), pa.string()))) == 1
    assert count_columns_2_0(pa.field("x", pa.list_(pa.list_(pa.string())))) == 3
    assert count_columns_2_0(pa.field("x", st)) == 4
    assert count_columns_2_0(pa.field("x", pa.large_list(st))) == 5
    assert count_columns_2_0(pa.field("x", st, metadata={"packed": "true"})) == 1
    assert count_columns_2_0(pa.field("x", st, metadata={"packed": "false"})) == 4
    with pytest.raises(UnsupportedError):
        count_columns_2_0(pa.field("x", pa.map_(pa.string(), pa.int32())))
    with pytest.raises(UnsupportedError):
        count_columns_2_0(pa.field("x", pa.list_(pa.string(), 2)))


@pytest.fixture
def small_file(tmp_path: Path) -> str:
    table = pa.table({"s": pa.array([f"v{i}" for i in range(500)]),
                      "z": pa.array([f"v{i}" * 3 for i in range(500)])})
    schema = pa.schema([table.schema.field(0),
                        table.schema.field(1).with_metadata({"lance-encoding:compression": "zstd"})])
    return write(tmp_path / "small.lance", table.cast(schema), batches=1)


def _rewrite_page(col: ColumnPages, edit) -> None:
    from google.protobuf import any_pb2

    anyv = any_pb2.Any()
    anyv.ParseFromString(col.meta.pages[0].encoding.direct.encoding)
    enc = pb.ArrayEncoding()
    enc.ParseFromString(anyv.value)
    edit(enc)
    anyv.value = enc.SerializeToString()
    col.meta.pages[0].encoding.direct.encoding = anyv.SerializeToString()
    col._encodings.clear()


def test_errors(small_file: str) -> None:
    f = Opened(small_file)
    with pytest.raises(InvalidInputError):
        f.read("s", (0, 501))
    with pytest.raises(InvalidInputError):
        decode_field_2_0(f.schema.field("s"), f.columns, None)
    # A page buffer shorter than its offsets claim.
    f.slices["s"][0].meta.pages[0].buffer_sizes[1] = 10
    with pytest.raises(CorruptFileError, match="bytes"):
        f.read("s")
    # An unknown compression scheme.
    _rewrite_page(f.slices["z"][0], lambda e: setattr(e.binary.bytes.flat.compression, "scheme", "brotli"))
    with pytest.raises(UnsupportedError, match="brotli"):
        f.read("z")
    # The page says 32-bit values, the field is a string.
    g = Opened(small_file)
    _rewrite_page(g.slices["s"][0], lambda e: e.binary.indices.nullable.no_nulls.values.flat.__setattr__(
        "bits_per_value", 3))
    with pytest.raises(UnsupportedError, match="3-bit"):
        g.read("s")
    # Damaged zstd payload.
    h = Opened(small_file)
    col = h.slices["z"][0]
    off = col.meta.pages[0].buffer_offsets[1]
    data = bytearray(h.data)
    data[off + 12: off + 40] = b"\xff" * 28
    view = memoryview(bytes(data))
    col.fetch = lambda ranges: [view[o: o + n] for o, n in ranges]
    with pytest.raises(CorruptFileError, match="zstd"):
        h.read("z")
    # A field type that does not match the page encoding.
    with pytest.raises(CorruptFileError):
        decode_field_2_0(pa.field("s", pa.int64()), f.slices["s"], None)
