"""All-null (2.1 / 2.2) and constant (2.2) pages written by our encoder are byte for byte
pylance's pages, and pylance and our reader read them back equal to the input."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.layout.constant import encode_constant_page, scalar_block
from lance_spark_ops.encoding.plan import constant_value, leaf_validity
from lance_spark_ops.errors import InvalidInputError, UnsupportedError
from tests.encoding._fz import oneofs
from tests.encoding._mbw import level_codecs
from tests.encoding._write import leaf_levels, page_bytes, pylance_page, roundtrip, size_ratio

N = 1000
RNG = np.random.default_rng(2)

ALL_NULL = {
    "int": lambda: pa.array([None] * N, pa.int32()),
    "string": lambda: pa.array([None] * N, pa.string()),
    "list_null_empty_nullitem": lambda: pa.array(
        [None if i % 3 == 0 else [] if i % 3 == 1 else [None] for i in range(N)], pa.list_(pa.int32())
    ),
    "list_null_empty": lambda: pa.array([None if i % 2 == 0 else [] for i in range(N)], pa.list_(pa.int32())),
    "list_tiny": lambda: pa.array([None, [], None], pa.list_(pa.int32())),
    "list_big": lambda: pa.array(
        [None if RNG.random() < 0.5 else [] for _ in range(100_000)], pa.list_(pa.string())
    ),
    "list_runs": lambda: pa.array(
        [None if (i // 300) % 2 else [] for i in range(5000)], pa.list_(pa.int64())
    ),
    "struct": lambda: pa.array([None] * N, pa.struct([("a", pa.int32())])),
}

CONSTANT = {  # 2.2 only
    "int": lambda: pa.array([7] * N, pa.int32()),
    "int_with_nulls": lambda: pa.array([None if i % 5 == 0 else 7 for i in range(N)], pa.int32()),
    "string": lambda: pa.array(["hello"] * N),
    "large_string": lambda: pa.array(["hello"] * N, pa.large_string()),
    "string_40k": lambda: pa.array(["x" * 40_000] * 50),
    "fixed_binary64": lambda: pa.array([b"a" * 64] * N, pa.binary(64)),
    "fixed_binary32": lambda: pa.array([b"a" * 32] * N, pa.binary(32)),
    "bool": lambda: pa.array([True] * N),
    "decimal": lambda: pa.array([1] * N, pa.decimal128(20, 2)),
    "binary_with_nulls": lambda: pa.array([None if i % 3 else b"\x00\x01" for i in range(N)], pa.binary()),
}


def our_page(arr: pa.Array, version: str):
    """Our page for a one-leaf array, with the plan's value / simple all-null decisions."""
    lv = leaf_levels(arr)
    valid = leaf_validity(lv)
    value, variable = None, False
    if not pa.types.is_null(lv.values.type) and len(lv.values) and (valid is None or valid.any()):
        value, variable = constant_value(lv.values, valid)
    rep, def_, layers = lv.rep, lv.def_, lv.layers
    if value is None and rep is None and len(layers) == 1:
        rep, def_, layers = None, None, [pb.REPDEF_NULLABLE_ITEM]
    bits = 64 if pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type) else 32
    codecs = level_codecs(rep, def_, version) if value is None and version != "2.1" else {}
    return encode_constant_page(lv.num_rows, value, variable, rep, def_, layers, version, offset_bits=bits,
                                **codecs)


def _check(tmp_path, arr: pa.Array, version: str) -> None:
    table = pa.table({"v": arr})
    theirs, layout = pylance_page(tmp_path, table, version)
    assert layout.WhichOneof("layout") == "constant_layout"
    page = our_page(arr, version)
    assert page.encoding == layout
    assert page_bytes(page) == theirs
    path, _, _ = roundtrip(tmp_path, table, [[page]], version)
    assert size_ratio(tmp_path, table, path, version) <= 1.05


@pytest.mark.parametrize("version", ["2.1", "2.2"])
@pytest.mark.parametrize("name", list(ALL_NULL))
def test_all_null_pages_match_pylance(tmp_path, name: str, version: str) -> None:
    _check(tmp_path, ALL_NULL[name](), version)


@pytest.mark.parametrize("name", list(CONSTANT))
def test_constant_pages_match_pylance(tmp_path, name: str) -> None:
    _check(tmp_path, CONSTANT[name](), "2.2")


def test_all_null_levels_are_compressed_in_2_2() -> None:
    """Rle for the run-heavy rep levels, bitpacking / flat for def; counts recorded."""
    arr = ALL_NULL["list_null_empty"]()
    msg = our_page(arr, "2.2").encoding.constant_layout
    assert msg.rep_compression.WhichOneof("compression") == "rle"
    assert msg.def_compression.WhichOneof("compression") == "inline_bitpacking"
    assert (msg.num_rep_values, msg.num_def_values) == (N, N)
    old = our_page(arr, "2.1")
    assert [len(b) for b in page_bytes(old)] == [2 * N, 2 * N]
    assert not old.encoding.constant_layout.HasField("rep_compression")


def test_scalar_block_examples() -> None:
    assert scalar_block(b"hello", True) == bytes.fromhex("020000000800000005000000000000000500000068656c6c6f")
    assert scalar_block(b"hello", True, 64)[:12] == bytes.fromhex("020000001000000005000000")
    assert scalar_block(b"\x07" * 40, False) == bytes.fromhex("0100000028000000") + b"\x07" * 40
    page = encode_constant_page(3, b"\x07\x00\x00\x00", False, None, None, [pb.REPDEF_ALL_VALID_ITEM], "2.2")
    assert page.buffers == [] and page.encoding.constant_layout.inline_value == b"\x07\x00\x00\x00"
    assert "constant_layout" in oneofs(page.encoding)


def test_constant_page_refusals() -> None:
    layers = [pb.REPDEF_ALL_VALID_ITEM]
    with pytest.raises(UnsupportedError):  # 2.1 has no constant layout
        encode_constant_page(3, b"\x01", False, None, None, layers, "2.1")
    with pytest.raises(UnsupportedError):
        encode_constant_page(3, None, False, None, None, layers, "2.0")
    with pytest.raises(InvalidInputError):  # 2 def levels for 3 rows
        encode_constant_page(
            3, None, False, None, np.array([1, 1], np.uint16), [pb.REPDEF_NULLABLE_ITEM], "2.2"
        )
    with pytest.raises(InvalidInputError):  # list layers without rep levels
        encode_constant_page(
            2,
            None,
            False,
            None,
            np.array([1, 2], np.uint16),
            [pb.REPDEF_ALL_VALID_ITEM, pb.REPDEF_NULL_AND_EMPTY_LIST],
            "2.2",
        )
