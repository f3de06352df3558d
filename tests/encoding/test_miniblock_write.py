"""Mini-block page writer against pylance (2.1 and 2.2).

Each case encodes one column with our codec + ``encode_miniblock_page`` and checks that
1. pylance reads the file we write back value for value;
2. the page is byte-identical to the page pylance writes for the same data (layout message
   and every buffer: chunk metadata, chunks, repetition index), which also proves the
   intended encodings were chosen and that sizes match pylance's exactly (ratio 1.00).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import FixedWidthBlock
from lance_spark_ops.encoding.compression.bitpacking import (
    encode_inline_bitpacking_block,
    encode_inline_bitpacking_miniblock,
)
from lance_spark_ops.encoding.compression.byte_stream_split import encode_byte_stream_split_miniblock
from lance_spark_ops.encoding.compression.encoded import CompressionParams
from lance_spark_ops.encoding.compression.fixed_size_list import encode_fixed_size_list_miniblock
from lance_spark_ops.encoding.compression.general import encode_general_block, encode_general_miniblock
from lance_spark_ops.encoding.compression.packed_struct import encode_packed_struct_miniblock
from lance_spark_ops.encoding.compression.rle import encode_rle_miniblock
from lance_spark_ops.encoding.compression.strategy import level_codec
from lance_spark_ops.encoding.compression.value import encode_flat_miniblock
from lance_spark_ops.encoding.layout.miniblock_encode import (
    encode_miniblock_page,
    level_counts,
    repetition_index,
)
from lance_spark_ops.errors import InvalidInputError, UnsupportedError
from lance_spark_ops.file.inspect import _oneofs as oneof_names
from tests.conftest import pylance_read, pylance_write
from tests.encoding._mb import Written, table_with_meta
from tests.encoding._mbw import encode_column, level_codecs, page_bytes, raw_pages, write_file

V = ("2.1", "2.2")
N = 20_000
FLAT = encode_flat_miniblock
BP = encode_inline_bitpacking_miniblock
RLE = encode_rle_miniblock


def _general(scheme: str, inner: Callable, level: int | None = None) -> Callable:
    params = CompressionParams(compression=scheme, compression_level=level)
    return lambda block: encode_general_miniblock(block, params, inner)


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _col(arr: pa.Array) -> pa.Table:
    return pa.table({"x": arr})


def _ints(dtype: str, lo: int, hi: int, n: int = N, seed: int = 0) -> pa.Table:
    return _col(pa.array(rng(seed).integers(lo, hi, n, endpoint=True, dtype=dtype)))


def _lists(n: int, max_len: int, null_p: float, empty_p: float, seed: int = 1) -> pa.Table:
    """Lists whose null entries own no items (pylance keeps bytes under nulls as they are)."""
    g = rng(seed)
    lens = g.integers(1, max_len, n)
    null = g.random(n) < null_p
    lens[(g.random(n) < empty_p) | null] = 0
    offs = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    values = pa.array(g.integers(0, 1000, int(offs[-1])).astype(np.int32))
    mask = pa.array(null) if null_p else None
    return _col(pa.ListArray.from_arrays(pa.array(offs), values, mask=mask))


def _fsl(item_nulls: bool, row_nulls: bool) -> pa.Table:
    g = rng(2)
    n = 5000
    items = pa.array(
        g.integers(0, 1000, n * 3).astype(np.int32), mask=(g.random(n * 3) < 0.1) if item_nulls else None
    )
    mask = pa.array(g.random(n) < 0.1) if row_nulls else None
    return _col(pa.FixedSizeListArray.from_arrays(items, 3, mask=mask))


def _packed() -> pa.Table:
    g = rng(3)
    n = 5000
    st = pa.StructArray.from_arrays(
        [
            pa.array(g.integers(0, 10, n).astype(np.int32)),
            pa.array(g.random(n)),
            pa.array(g.integers(0, 10, n).astype(np.int16)),
        ],
        names=["a", "b", "c"],
    )
    return pa.table(
        [st], schema=pa.schema([pa.field("s", st.type, metadata={"lance-encoding:packed": "true"})])
    )


@dataclass
class Case:
    name: str
    build: Callable[[], pa.Table]
    encoder: Callable
    # oneof names expected in the layout (per version), checked on pylance's own page too
    expect: dict[str, tuple[str, ...]] | None = None


def both(*names: str) -> dict[str, tuple[str, ...]]:
    return {"2.1": names, "2.2": names}


CASES = [
    Case("int8_full", lambda: _ints("int8", -128, 127), FLAT, both("flat")),
    Case("uint16_full", lambda: _ints("uint16", 0, 2**16 - 1), FLAT, both("flat")),
    Case("int32_full", lambda: _ints("int32", -(2**31), 2**31 - 1), FLAT, both("flat")),
    Case("uint64_full", lambda: _ints("uint64", 0, 2**64 - 1), FLAT, both("flat")),
    Case("int64_exact_chunks", lambda: _ints("int64", -(2**62), 2**62, n=8192), FLAT, both("flat")),
    Case("uint8_small", lambda: _ints("uint8", 0, 5), BP, both("inline_bitpacking")),
    Case("int16_small", lambda: _ints("int16", 0, 100), BP, both("inline_bitpacking")),
    Case("int32_small", lambda: _ints("int32", 0, 3000), BP, both("inline_bitpacking")),
    Case("int32_full_last_chunk", lambda: _ints("int32", 0, 3000, n=4096), BP, both("inline_bitpacking")),
    Case(
        "int64_growing_widths",
        lambda: _col(pa.array(np.concatenate([rng(4).integers(0, 2**k, 1024) for k in range(0, 40, 3)]))),
        BP,
        both("inline_bitpacking"),
    ),
    Case(
        "float32", lambda: _col(pa.array(rng(5).random(N).astype(np.float32))), BP, both("inline_bitpacking")
    ),
    Case("float64", lambda: _col(pa.array(rng(5).random(N))), BP, both("inline_bitpacking")),
    Case(
        "timestamp",
        lambda: _col(pa.array(np.arange(N) * 1_000_003 + 1_700_000_000_000_000, pa.timestamp("us"))),
        BP,
        both("inline_bitpacking"),
    ),
    Case("bool", lambda: _col(pa.array(rng(6).random(N) < 0.5)), FLAT, both("flat")),
    Case(
        "bool_nullable",
        lambda: _col(pa.array(rng(6).random(N) < 0.5, mask=rng(7).random(N) < 0.2)),
        FLAT,
        both("out_of_line_bitpacking", "flat"),
    ),
    Case(
        "runs_of_100",
        lambda: _col(pa.array(np.repeat(np.arange(N // 100), 100).astype(np.int32))),
        RLE,
        both("rle"),
    ),
    Case(
        "runs_of_3_int64",  # 4096 values overflow 8186 bytes: 2048-value chunks
        lambda: _col(pa.array(np.repeat(rng(8).integers(0, 2**62, N // 3 + 1), 3)[:N])),
        RLE,
        both("rle"),
    ),
    Case(
        "nullable_10pct",
        lambda: _col(pa.array(rng(9).integers(0, 3000, N).astype(np.int32), mask=rng(10).random(N) < 0.1)),
        BP,
        both("out_of_line_bitpacking", "inline_bitpacking"),
    ),
    Case(
        "nullable_3_nulls",  # 2.2 stores the def levels as RLE
        lambda: _col(
            pa.array(
                rng(9).integers(0, 3000, N).astype(np.int32), mask=np.isin(np.arange(N), [7, 5000, 19999])
            )
        ),
        BP,
        {"2.1": ("out_of_line_bitpacking",), "2.2": ("rle", "inline_bitpacking")},
    ),
    Case("tiny_nullable", lambda: _col(pa.array([1, None, 3], pa.int32())), FLAT, both("flat")),
    Case("lists_null_and_empty", lambda: _lists(3000, 10, 0.1, 0.1), BP, both("out_of_line_bitpacking")),
    Case("lists_mostly_empty", lambda: _lists(20_000, 3, 0.0, 0.7), BP, None),
    Case("lists_long_rows", lambda: _lists(12, 3000, 0.1, 0.1), BP, None),  # rows span chunks
    Case("lists_few_levels", lambda: _lists(50, 5, 0.2, 0.2), FLAT, None),
    Case(
        "zstd_bss_int64",
        lambda: table_with_meta(pa.array(rng(11).integers(0, 10**9, N)), compression="zstd"),
        _general("zstd", functools.partial(encode_byte_stream_split_miniblock)),
        both("general", "byte_stream_split"),
    ),
    Case(
        "zstd9_bss_int64",
        lambda: table_with_meta(
            pa.array(rng(11).integers(0, 10**9, N)), compression="zstd", compression_level="9"
        ),
        _general("zstd", encode_byte_stream_split_miniblock, 9),
        both("general", "level", "byte_stream_split"),
    ),
    Case(
        "lz4_bitpacked_int32",
        lambda: table_with_meta(pa.array(rng(12).integers(0, 10**9, N).astype(np.int32)), compression="lz4"),
        _general("lz4", BP),
        both("general", "inline_bitpacking"),
    ),
    Case(
        "zstd_bss_float32_on",
        lambda: table_with_meta(pa.array(rng(13).random(N).astype(np.float32)), compression="zstd", bss="on"),
        _general("zstd", encode_byte_stream_split_miniblock),
        both("general", "byte_stream_split"),
    ),
    Case(
        "zstd_small_page_not_compressed",  # < 4 KiB of values: General is skipped
        lambda: table_with_meta(
            pa.array(rng(14).integers(0, 10**9, 500).astype(np.int32)), compression="zstd"
        ),
        _general("zstd", FLAT),
        both("flat"),
    ),
    Case(
        "fsl_item_nulls", lambda: _fsl(True, True), encode_fixed_size_list_miniblock, both("fixed_size_list")
    ),
    Case("fsl_plain", lambda: _fsl(False, False), encode_fixed_size_list_miniblock, both("fixed_size_list")),
    Case(
        "fsl_bool",
        lambda: _col(pa.FixedSizeListArray.from_arrays(pa.array(rng(15).random(5000 * 5) < 0.5), 5)),
        encode_fixed_size_list_miniblock,
        both("fixed_size_list"),
    ),
    Case("packed_struct", _packed, encode_packed_struct_miniblock, both("packed_struct")),
]


def _oneofs(msg) -> set[str]:
    return set(oneof_names(msg))


@pytest.mark.parametrize("case,version", [pytest.param(c, v, id=f"{c.name}-{v}") for c in CASES for v in V])
def test_page_matches_pylance(case: Case, version: str, tmp_path) -> None:
    table = case.build()
    ours = write_file(tmp_path / "ours.lance", table, version, case.encoder)
    assert pylance_read(ours).equals(table)

    theirs = pylance_write(tmp_path / "theirs.lance", table, version)
    assert os.path.getsize(ours) <= 1.05 * os.path.getsize(theirs)
    (ref,) = raw_pages(theirs)
    page = encode_column(table.column(0).combine_chunks(), table.schema.field(0), version, case.encoder)
    assert page.encoding == ref.layout
    mine = page_bytes(page)
    assert [len(b) for b in mine] == [len(b) for b in ref.buffers]
    assert mine == ref.buffers
    for name in (case.expect or {}).get(version, ()):
        assert name in _oneofs(page.encoding), f"{name} not in {page.encoding}"


@pytest.mark.parametrize("version", V)
def test_dictionary_page_matches_pylance(version: str, tmp_path) -> None:
    """2.2 dictionary-encodes low-cardinality int64 (items under General lz4); rebuild its
    page from the decoded indices and items."""
    table = _col(pa.array(rng(16).integers(0, 100, 5000), mask=rng(17).random(5000) < 0.2))
    w = Written(pylance_write(tmp_path / "d.lance", table, version))
    (ref,) = raw_pages(w.path)
    layout = ref.layout.mini_block_layout
    if not layout.HasField("dictionary"):
        assert version == "2.1"
        return
    pd = w.pages[0].decode()
    data, enc = encode_general_block(pd.dictionary, CompressionParams(compression="lz4"))
    kind = layout.value_compression.WhichOneof("compression")
    values = {"rle": RLE, "inline_bitpacking": BP, "flat": FLAT}[kind](pd.values)
    page = encode_miniblock_page(
        5000, values, pd.rep, pd.def_, pd.layers, version, (data, enc, pd.dictionary.num_values),
        **level_codecs(pd.rep, pd.def_, version),
    )
    assert page.encoding == ref.layout
    assert page_bytes(page) == ref.buffers


def test_dictionary_inline_bitpacked_block(tmp_path) -> None:
    """2.2 with zstd asked: a dictionary of <= 1024 items is an InlineBitpacking block."""
    table = table_with_meta(
        pa.array(rng(18).integers(0, 1000, 5000)), compression="zstd", compression_level="9"
    )
    w = Written(pylance_write(tmp_path / "d.lance", table, "2.2"))
    (ref,) = raw_pages(w.path)
    layout = ref.layout.mini_block_layout
    assert layout.dictionary.WhichOneof("compression") == "inline_bitpacking"
    data, enc = encode_inline_bitpacking_block(w.pages[0].decode().dictionary)
    assert enc == layout.dictionary
    assert bytes(data) == ref.buffers[2]


# ------------------------------------------------------------------------------ units


def test_worked_example() -> None:
    """The example in ``miniblock_encode``'s docstring (identical to pylance's page)."""
    table = _col(pa.array([1, None, 3], pa.int32()))
    page = encode_column(table.column(0).combine_chunks(), table.schema.field(0), "2.1", FLAT)
    meta, chunks = page_bytes(page)
    assert meta == bytes.fromhex("3000")
    assert chunks == bytes.fromhex("03000600 0c00fefe 00000100 0000fefe 01000000 00000000 03000000 fefefefe")


def test_invisible_levels_go_to_the_next_chunk() -> None:
    # 3 visible items per chunk; levels 3 and 4 are empty lists after the 3rd item
    def_ = np.array([0, 0, 0, 2, 2, 0, 0, 0], np.uint16)
    counts = level_counts(np.array([3, 3]), len(def_), def_, 0)
    assert counts.tolist() == [3, 5]


def test_repetition_index_rows_and_leftovers() -> None:
    # rows: [a b c] [d] [e f g h] ; chunks of levels 2 | 3 | 3
    rep = np.array([1, 0, 0, 1, 1, 0, 0, 0], np.uint16)
    index = repetition_index(rep, np.array([2, 3, 3]), 1)
    # chunk 0 finishes no row (2 left over), chunk 1 finishes rows 0 and 1, the last row
    # starts in chunk 1 (1 level left over) and finishes in chunk 2
    assert index.tolist() == [[0, 2], [2, 1], [1, 0]]
    # a chunk ending right before a row start: the leftover becomes a finished row
    index = repetition_index(rep, np.array([3, 5]), 1)
    assert index.tolist() == [[1, 0], [2, 0]]


@pytest.mark.parametrize(
    "levels,version,kind",
    [
        (np.array([0, 1, 0], np.uint16), "2.1", "flat"),
        (np.zeros(3, np.uint16), "2.1", "inline_bitpacking"),  # width 0 packs to 2 bytes
        (np.r_[np.zeros(2000, np.uint16), 1], "2.1", "out_of_line_bitpacking"),
        (np.r_[np.zeros(2000, np.uint16), 1], "2.2", "rle"),
        (np.r_[np.zeros(500, np.uint16), 1], "2.1", "inline_bitpacking"),
        (np.arange(3000, dtype=np.uint16) % 2, "2.2", "out_of_line_bitpacking"),
    ],
)
def test_level_codec_choice(levels: np.ndarray, version: str, kind: str) -> None:
    assert level_codec(levels, version).kind == kind


def test_errors() -> None:
    values = encode_flat_miniblock(FixedWidthBlock(np.zeros(40, np.uint8), 32, 10))
    with pytest.raises(UnsupportedError):
        encode_miniblock_page(10, values, None, None, [pb.REPDEF_ALL_VALID_ITEM], "2.0")
    with pytest.raises(InvalidInputError):
        encode_miniblock_page(11, values, None, None, [pb.REPDEF_ALL_VALID_ITEM], "2.1")
    with pytest.raises(InvalidInputError):
        encode_miniblock_page(10, values, None, np.zeros(9, np.uint16), [pb.REPDEF_NULLABLE_ITEM], "2.1",
                              **level_codecs(None, np.zeros(9, np.uint16), "2.1"))
    with pytest.raises(InvalidInputError):
        encode_miniblock_page(10, values, np.zeros(10, np.uint16), None, [pb.REPDEF_ALL_VALID_ITEM], "2.1",
                              **level_codecs(np.zeros(10, np.uint16), None, "2.1"))
