"""Full-zip pages written by our encoder (2.1 / 2.2): pylance and our reader read them back
equal to the input; where pylance's choice is deterministic (no FSST table), the page is
byte for byte pylance's own; file sizes stay within 5% of pylance's."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import FixedWidthBlock, VariableWidthBlock
from lance_spark_ops.encoding.codecs import compress_per_value
from lance_spark_ops.encoding.compression.encoded import CompressionParams
from lance_spark_ops.encoding.compression.fixed_size_list import encode_fixed_size_list_per_value
from lance_spark_ops.encoding.compression.fsst import encode_fsst_per_value
from lance_spark_ops.encoding.compression.general import encode_general_per_value
from lance_spark_ops.encoding.compression.strategy import per_value_codec
from lance_spark_ops.encoding.compression.variable import encode_variable_per_value
from lance_spark_ops.encoding.layout.fullzip_encode import bytepack_width, encode_fullzip_page
from lance_spark_ops.errors import InvalidInputError, UnsupportedError
from tests.encoding._fz import oneofs
from tests.encoding._write import fullzip_page, page_bytes, pylance_page, roundtrip, size_ratio, text

VERSIONS = ["2.1", "2.2"]
N = 300
RNG = np.random.default_rng(11)
S500 = text(N, 500, 3)


def _vps_per_value(block):
    """VariablePackedStruct per value as the writer runs it: the strategy's codec tree
    (each field's per-value choice) through ``codecs.compress_per_value``."""
    params = CompressionParams()
    return compress_per_value(per_value_codec(block, params), block, params)


def zstd_per_value(block):
    return encode_general_per_value(block, CompressionParams(compression="zstd", compression_level=0))


def fsl(item_nulls: float = 0.0, row_nulls: bool = False) -> pa.Array:
    r = np.random.default_rng(128)
    mask = r.random(N * 128) < item_nulls if item_nulls else None
    items = pa.array(r.random(N * 128).astype(np.float32), mask=mask)
    rows = pa.array(np.arange(N) % 5 == 0) if row_nulls else None
    return pa.FixedSizeListArray.from_arrays(items, 128, mask=rows)


def list_rows(values: list, pattern: int = 5) -> list:
    """Null list, empty list and lists of 1..3 values (some null), cycling."""
    out, k = [], 0
    for i in range(N):
        m = i % pattern
        if m == 1:
            out.append(None)
        elif m == 2:
            out.append([])
        else:
            out.append([None if (i + j) % 7 == 0 else v for j, v in enumerate(values[k : k + m])])
            k += m
    return out


# (array, per-value encoder, oneofs that must occur) -- compared with pylance by size
CASES = {
    "string500": (pa.array(S500), encode_fsst_per_value, {"fsst"}),
    "string500_nulls": (
        pa.array([None if i % 7 == 0 else s for i, s in enumerate(S500)]),
        encode_fsst_per_value,
        {"fsst"},
    ),
    "large_string500": (pa.array(S500, pa.large_string()), encode_fsst_per_value, {"fsst"}),
    "binary40k_zstd": (
        pa.array([RNG.bytes(100) * 400 if i % 9 else None for i in range(24)], pa.binary()),
        zstd_per_value,
        {"general"},
    ),
    "list_string300": (
        pa.array(list_rows([s[:300] for s in text(4 * N, 300, 4)]), pa.list_(pa.string())),
        encode_fsst_per_value,
        {"fsst"},
    ),
}

# byte-identical to pylance's page (values stored as they are)
IDENTICAL = {
    "fsl128": lambda: fsl(),
    "fsl128_item_nulls": lambda: fsl(item_nulls=0.1),
    "fsl128_row_nulls": lambda: fsl(row_nulls=True),
    "list_binary300": lambda: pa.array(
        list_rows([RNG.bytes(300) for _ in range(4 * N)]), pa.list_(pa.binary())
    ),
    "large_list_large_binary300": lambda: pa.array(
        list_rows([RNG.bytes(300) for _ in range(4 * N)]), pa.large_list(pa.large_binary())
    ),
    "struct_list_binary300": lambda: pa.StructArray.from_arrays(
        [pa.array(list_rows([RNG.bytes(300) for _ in range(4 * N)]), pa.list_(pa.binary()))],
        names=["l"],
        mask=pa.array(np.arange(N) % 6 == 5),
    ),
    "binary300_nulls": lambda: pa.array(
        [None if i % 3 == 0 else RNG.bytes(300) for i in range(N)], pa.binary()
    ),
}


def _encoder_for(arr: pa.Array):
    t = arr.type
    while pa.types.is_struct(t) or pa.types.is_list(t) or pa.types.is_large_list(t):
        t = t.field(0).type if pa.types.is_struct(t) else t.value_type
    return encode_fixed_size_list_per_value if pa.types.is_fixed_size_list(t) else encode_variable_per_value


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", list(CASES))
def test_fullzip_roundtrip_and_size(tmp_path, name: str, version: str) -> None:
    arr, encoder, wanted = CASES[name]
    table = pa.table({"v": arr})
    page = fullzip_page(arr, encoder, version)
    assert {"full_zip_layout", *wanted} <= set(oneofs(page.encoding)), oneofs(page.encoding)
    path, _, _ = roundtrip(tmp_path, table, [[page]], version)
    assert size_ratio(tmp_path, table, path, version) <= 1.05


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", list(IDENTICAL))
def test_fullzip_matches_pylance_bytes(tmp_path, name: str, version: str) -> None:
    arr = IDENTICAL[name]()
    table = pa.table({"v": arr})
    theirs, layout = pylance_page(tmp_path, table, version)
    assert layout.WhichOneof("layout") == "full_zip_layout"
    page = fullzip_page(arr, _encoder_for(arr), version)
    assert page.encoding == layout
    assert page_bytes(page) == theirs
    roundtrip(tmp_path, table, [[page]], version)


def _packed(arr: pa.StructArray) -> pa.Table:
    return pa.table(
        [arr], schema=pa.schema([pa.field("v", arr.type, True, {"lance-encoding:packed": "true"})])
    )


def test_variable_packed_struct_matches_pylance(tmp_path) -> None:
    """2.2 packed struct with a string child: full-zip VariablePackedStruct, byte for byte
    (small strings stay Variable), null rows included."""
    words = text(N, 12, 8)
    for arr in (
        pa.StructArray.from_arrays(
            [pa.array(np.arange(N, dtype=np.int32)), pa.array(words)], names=["x", "s"]
        ),
        pa.StructArray.from_arrays(
            [
                pa.array(np.arange(N, dtype=np.int64)),
                pa.array(words, pa.large_string()),
                pa.array(RNG.random(N)),
            ],
            names=["x", "s", "f"],
            mask=pa.array(np.arange(N) % 5 == 0),
        ),
    ):
        table = _packed(arr)
        theirs, layout = pylance_page(tmp_path, table, "2.2")
        page = fullzip_page(arr, _vps_per_value, "2.2", table.schema.field(0))
        assert page.encoding == layout
        assert page_bytes(page) == theirs
        roundtrip(tmp_path, table, [[page]], "2.2")


def test_variable_packed_struct_compressed_children(tmp_path) -> None:
    """Children compressed per value (FSST text, zstd 40 KiB binary) read back by pylance."""
    arr = pa.StructArray.from_arrays(
        [
            pa.array(np.arange(40, dtype=np.int32)),
            pa.array(text(40, 1500, 9)),
            pa.array([RNG.bytes(80) * 500 for _ in range(40)]),
        ],
        names=["x", "s", "b"],
    )
    table = _packed(arr)
    page = fullzip_page(arr, _vps_per_value, "2.2", table.schema.field(0))
    assert {"variable_packed_struct", "fsst", "general"} <= set(oneofs(page.encoding))
    path, _, _ = roundtrip(tmp_path, table, [[page]], "2.2")
    assert size_ratio(tmp_path, table, path, "2.2") <= 1.05


def test_repetition_index_width_follows_the_bound() -> None:
    """Entries are byte-packed by an upper bound of the zipped size (u8 .. u64)."""
    assert [bytepack_width(x) for x in (0, 1, 255, 256, 65535, 65536, 2**32 - 1, 2**32)] == [
        0,
        1,
        1,
        2,
        2,
        4,
        4,
        8,
    ]
    small = fullzip_page(pa.array([b"ab", None, b"c"], pa.binary()), encode_variable_per_value, "2.1")
    fz = small.encoding.full_zip_layout
    assert (fz.bits_def, fz.bits_per_offset) == (1, 32)
    # cw 00 + len 2 + "ab" | cw 01 | cw 00 + len 1 + "c"; bound 3 + 3 + 12 = 18 -> u8 entries
    assert page_bytes(small) == [bytes.fromhex("0002000000616201000100000063"), bytes([0, 7, 8, 14])]


def test_docstring_example() -> None:
    """``[["ab"], None]`` as list<string> (layers ALL_VALID_ITEM, NULLABLE_LIST)."""
    arr = pa.array([["ab"], None], pa.list_(pa.string()))
    page = fullzip_page(arr, encode_variable_per_value, "2.2")
    fz = page.encoding.full_zip_layout
    assert (fz.bits_rep, fz.bits_def, fz.num_items, fz.num_visible_items) == (1, 1, 2, 1)
    assert page_bytes(page) == [bytes.fromhex("02020000006162") + b"\x03", bytes([0, 7, 8])]


def test_fullzip_refuses_bad_input() -> None:
    block = VariableWidthBlock(np.array([0, 1, 2], np.uint32), np.frombuffer(b"ab", np.uint8), 2)
    enc = pb.CompressiveEncoding()
    layers = [pb.REPDEF_ALL_VALID_ITEM]
    with pytest.raises(UnsupportedError):
        encode_fullzip_page(2, block, enc, None, None, layers, 2, 2, "2.0")
    with pytest.raises(InvalidInputError):
        encode_fullzip_page(3, block, enc, None, None, layers, 2, 2, "2.2")  # rows != items
    with pytest.raises(InvalidInputError):
        encode_fullzip_page(2, block, enc, None, None, layers, 5, 2, "2.2")  # told counts disagree
    with pytest.raises(UnsupportedError):
        encode_fullzip_page(
            2, FixedWidthBlock(np.zeros(1, np.uint8), 4, 2), enc, None, None, layers, 2, 2, "2.2"
        )


@st.composite
def list_arrays(draw):
    n = draw(st.integers(1, 40))
    rows = []
    for _ in range(n):
        kind = draw(st.sampled_from(["null", "empty", "items"]))
        if kind == "null":
            rows.append(None)
        elif kind == "empty":
            rows.append([])
        else:
            rows.append(draw(st.lists(st.one_of(st.none(), st.binary(max_size=400)), min_size=1, max_size=4)))
    large = draw(st.booleans())
    return pa.array(rows, pa.large_list(pa.large_binary()) if large else pa.list_(pa.binary()))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arr=list_arrays(), version=st.sampled_from(VERSIONS))
def test_fullzip_property_roundtrip(tmp_path, arr: pa.Array, version: str) -> None:
    if arr.null_count == len(arr) or all(v is None or len(v) == 0 for v in arr.to_pylist()):
        return  # no visible values: an all-null page, not full-zip
    page = fullzip_page(arr, encode_variable_per_value, version)
    roundtrip(tmp_path, pa.table({"v": arr}), [[page]], version, name=f"h{abs(hash(str(arr))) % 10**6}")
