"""The compression strategy and layout decision pick what pylance 14 picks.

For the reader/writer case matrix, extra probes of every configuration key, and random
data (hypothesis), the plan for each leaf column must have the same signature (layout +
codec chain of values, dictionary, def and rep) as the page pylance writes for the same
data. Mini-block General may be skipped at run time (it declines when it would not
shrink a chunk), so a plan's leading General is optional in the comparison.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lance_spark_ops.encoding.blocks import FixedWidthBlock, VariableWidthBlock
from lance_spark_ops.encoding.compression import stats
from lance_spark_ops.encoding.compression.strategy import (
    block_codec,
    inline_bitpacking_estimate,
    level_codec,
    params_from_metadata,
)
from lance_spark_ops.encoding.encode import encode_plan, plan_field, plan_field_pages
from lance_spark_ops.errors import SchemaError
from lance_spark_ops.file.columns import page_layout
from lance_spark_ops.file.metadata import load_metadata
from lance_spark_ops.io import ObjectStore
from tests.conftest import pylance_write
from tests.encoding._strategies import flat_columns
from tests.file._signature import drop_general, page_signature, plan_signature
from tests.file.cases import CASES

N = 5000


def _meta(arr: pa.Array, name: str = "c", **meta: str) -> pa.Table:
    md = {f"lance-encoding:{k.replace('_', '-')}": v for k, v in meta.items()} or None
    return pa.table([arr], schema=pa.schema([pa.field(name, arr.type, True, md)]))


def pylance_signatures(path: str) -> list[list[tuple]]:
    meta = load_metadata(*ObjectStore.for_file(path))
    return [[page_signature(page_layout(p, path, "")) for p in meta.column(c).pages]
            for c in range(meta.num_columns)]


def emitted_signature(plan) -> tuple:
    """The signature of the page our writer emits for ``plan``."""
    page = encode_plan(plan)
    if page.encoding is None:  # blob: descriptors are laid out once the payload has an offset
        page.finalize([0])
    return page_signature(page.encoding)


def mismatches(table: pa.Table, version: str, tmp_path) -> list[str]:
    """Leaf columns whose plan differs from pylance's single page for the same data, or
    whose written page differs from the plan (the writer must emit what the plan chose)."""
    path = pylance_write(tmp_path / f"t-{version}.lance", table, version)
    theirs = pylance_signatures(path)
    out, col = [], 0
    for f in table.schema:
        for plan in plan_field(f, table.column(f.name), version):
            assert len(theirs[col]) == 1, (
                f"the case must fit one pylance page; column {col} has {len(theirs[col])}"
            )
            ours = plan_signature(plan)
            want = theirs[col][0]
            if ours != want and drop_general(ours) != want:
                out.append(f"{f.name} col {col}: ours {ours} pylance {want}")
            emitted = emitted_signature(plan)
            if emitted != ours and emitted != drop_general(ours):
                out.append(f"{f.name} col {col}: plan {ours} but the writer emitted {emitted}")
            col += 1
    return out


@pytest.mark.parametrize("case,version", [pytest.param(c, v, id=f"{c.name}-{v}")
                                          for c in CASES for v in c.versions if v != "2.0"])
def test_matrix_matches_pylance(case, version, tmp_path):
    assert mismatches(case.build(), version, tmp_path) == []


def _strings(n: int, card: int, width: int = 6) -> pa.Array:
    return pa.array([f"{i % card:0{width}d}" for i in range(n)])


PROBES = {
    "dict_int8_keys": lambda: pa.table({"d": pa.array([f"d{i % 7}" for i in range(N)]).dictionary_encode()
                                        .cast(pa.dictionary(pa.int8(), pa.string()))}),
    "dict_value_nulls": lambda: pa.table({"d": pa.DictionaryArray.from_arrays(
        pa.array(np.arange(N) % 4, pa.int32()), pa.array(["a", None, "c", "d"]))}),
    "general_on_ignored": lambda: _meta(_strings(N, 4000), general="on"),
    "fullzip_forced_low_card": lambda: _meta(_strings(N, 10), structural_encoding="fullzip"),
    "miniblock_forced_long": lambda: _meta(pa.array(["x" * 300 + str(i) for i in range(300)]),
                                           structural_encoding="miniblock"),
    "lz4_low_card_long": lambda: _meta(pa.array(["".join(chr(97 + (i * j) % 26) for j in range(400))
                                                 for i in range(300)]), compression="lz4"),
    "lz4_long_unique": lambda: _meta(pa.array([f"{i:05d}" * 80 for i in range(300)]), compression="lz4"),
    "zstd_long_unique_level": lambda: _meta(pa.array([f"{i:05d}" * 80 for i in range(300)]),
                                            compression="zstd", compression_level="7"),
    "fsst_requested_short": lambda: _meta(pa.array([f"{i}" for i in range(N)]), compression="fsst"),
    "const_bool": lambda: pa.table({"t": pa.array([True] * N), "f": pa.array([False] * N)}),
    "const_strings_nulls": lambda: pa.table({"s": pa.array(["abc" if i % 3 else None for i in range(N)])}),
    "const_decimal": lambda: pa.table({"d": pa.array([7] * N, pa.decimal128(20, 2))}),
    "const_in_struct": lambda: pa.table({"st": pa.StructArray.from_arrays(
        [pa.array([5] * N, pa.int16())], names=["x"], mask=pa.array(np.arange(N) % 3 == 0))}),
    "const_list_items": lambda: pa.table({"l": pa.array([[1, 1] if i % 4 else None for i in range(N)],
                                                        pa.list_(pa.int32()))}),
    "empty_lists_only": lambda: pa.table({"l": pa.array([[] if i % 2 else None for i in range(N)],
                                                        pa.list_(pa.int64()))}),
    "empty_struct": lambda: pa.table({"e": pa.array([{}] * 10, pa.struct([]))}),
    "bool_fullzip": lambda: _meta(pa.array(np.arange(N) % 3 == 0), structural_encoding="fullzip"),
    "bss_off_zstd": lambda: _meta(pa.array(np.arange(N, dtype=np.float64) * 0.5), compression="zstd",
                                  bss="off"),
    "bss_auto_zstd_f32": lambda: _meta(pa.array(np.arange(N, dtype=np.float32)), compression="zstd"),
    "bss_on_lz4_int32": lambda: _meta(pa.array(np.arange(N, dtype=np.int32) * 7), compression="lz4",
                                      bss="on"),
    "none_ints": lambda: _meta(pa.array(np.repeat(np.arange(10, dtype=np.int64), 500)), compression="none"),
    "rle_threshold_low": lambda: _meta(pa.array(np.repeat(np.arange(100, dtype=np.int32), 50)),
                                       rle_threshold="0.001"),
    "rle_vs_bitpack_int8": lambda: pa.table({"v": pa.array(np.repeat(np.arange(50, dtype=np.int8), 100))}),
    "dict_size_ratio_low": lambda: _meta(_strings(N, 100, 12), dict_size_ratio="0.05"),
    "dict_values_zstd": lambda: _meta(_strings(N, 100, 12), dict_values_compression="zstd",
                                      dict_values_compression_level="5"),
    "dict_decimal128": lambda: pa.table({"d": pa.array([i % 30 for i in range(N)], pa.decimal128(30, 0))}),
    "dict_timestamps_2_2": lambda: pa.table({"t": pa.array(np.arange(N) % 40 * 10**12, pa.timestamp("ns"))}),
    "near_unique_strings": lambda: pa.table({"s": _strings(N, N - 50)}),
    "ints_negative": lambda: pa.table({"v": pa.array(np.arange(N, dtype=np.int32) - 2500)}),
    "packed_struct_nulls": lambda: pa.table([pa.StructArray.from_arrays(
        [pa.array(np.arange(N, dtype=np.int32)), pa.array(np.arange(N, dtype=np.float32))], names=["a", "b"],
        mask=pa.array(np.arange(N) % 5 == 0))], schema=pa.schema([pa.field(
            "p", pa.struct([("a", pa.int32()), ("b", pa.float32())]), True, {"packed": "true"})])),
    "large_list_of_fsl": lambda: pa.table({"l": pa.array([[[i, i + 1]] * (i % 3) for i in range(N)],
                                                         pa.large_list(pa.list_(pa.int16(), 2)))}),
    "levels_rle_2_2": lambda: pa.table({"v": pa.array(np.arange(N), mask=np.arange(N) >= 100)}),
}


@pytest.mark.parametrize("version", ["2.1", "2.2"])
@pytest.mark.parametrize("name", sorted(PROBES))
def test_probes_match_pylance(name, version, tmp_path):
    assert mismatches(PROBES[name](), version, tmp_path) == []


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(table=flat_columns(), version=st.sampled_from(["2.1", "2.2"]))
def test_random_columns_match_pylance(table, version, tmp_path_factory):
    assert mismatches(table, version, tmp_path_factory.mktemp("h")) == []


SPLITS = {
    "nulls_then_lists": lambda: pa.array([None] * 70000 + [[1, 2]] * 10, pa.list_(pa.int32())),
    "empty_then_lists": lambda: pa.array([[]] * 70000 + [[i] for i in range(5000)], pa.list_(pa.int64())),
    "visible_run_then_nulls": lambda: pa.array([[i] for i in range(70000)] + [None] * 10
                                               + [[i] for i in range(70000)], pa.list_(pa.int32())),
    "alternating_two_levels": lambda: pa.array([[1, 2] if i % 2 else None for i in range(100000)],
                                               pa.list_(pa.int32())),
    "big_row_then_null": lambda: pa.array([list(range(70000)), None], pa.list_(pa.int32())),
    "nested_budget": lambda: pa.array([None] * 50000 + [[[1]]], pa.list_(pa.list_(pa.int32()))),
    "row_over_budget": lambda: pa.array([[None] * 70000 + [["a"], ["b"]], None],
                                        pa.list_(pa.list_(pa.string()))),
}


@pytest.mark.parametrize("version", ["2.1", "2.2"])
@pytest.mark.parametrize("name", sorted(SPLITS))
def test_page_splits_match_pylance(name, version, tmp_path):
    """Null / empty lists that would overflow a mini-block chunk split the page by rows
    exactly where pylance splits it (or send a single huge row to full-zip)."""
    arr = SPLITS[name]()
    table = pa.table({"l": arr})
    path = pylance_write(tmp_path / "p.lance", table, version)
    meta = load_metadata(*ObjectStore.for_file(path))
    theirs = [(int(p.length), page_signature(page_layout(p, path, ""))) for p in meta.column(0).pages]
    (ours,) = plan_field_pages(table.schema.field(0), arr, version)
    assert [(plan.num_rows, plan_signature(plan)) for _, plan in ours] == theirs
    assert [row for row, _ in ours] == list(np.cumsum([0] + [n for n, _ in theirs[:-1]]))


# ----------------------------------------------------------------------------------------
# unit checks of the pieces
# ----------------------------------------------------------------------------------------


def _fixed(values: np.ndarray) -> FixedWidthBlock:
    return FixedWidthBlock(values.view(np.uint8), values.dtype.itemsize * 8, len(values))


def test_bit_widths_per_chunk():
    assert stats.bit_widths(_fixed(np.arange(2048, dtype=np.uint32))).tolist() == [10, 11]
    assert stats.bit_widths(_fixed(np.array([-1], np.int16))).tolist() == [16]
    assert stats.bit_widths(_fixed(np.zeros(5, np.uint64))).tolist() == [0]


def test_rle_entries_split_long_runs():
    runs = np.array([5000, 3])
    assert stats.rle_entries(runs, None) == 20 + 1
    assert stats.rle_entries(runs, 4096) == 17 + 4 + 1


def test_inline_bitpacking_estimate():
    # one chunk of 7-bit values in int64: (1 + 1024 * 7 / 64) words of 8 bytes
    assert inline_bitpacking_estimate(_fixed(np.arange(100, dtype=np.int64) % 100)) is None  # 904 >= 800
    assert inline_bitpacking_estimate(_fixed(np.arange(1000, dtype=np.int64) % 100)) == 113 * 8


def test_level_codecs_per_version():
    levels = np.zeros(5000, np.uint16)
    levels[::500] = 1
    assert level_codec(levels, "2.1").chain() == ("out_of_line_bitpacking", "flat")
    assert level_codec(1 - levels, "2.2").chain() == ("rle", "flat")
    assert level_codec(levels[:50], "2.1").chain() == ("flat",)  # too small to bitpack


def test_dictionary_items_general_only_in_2_2():
    items = VariableWidthBlock(np.array([0, 1, 2], np.uint32), np.frombuffer(b"ab", np.uint8), 2)
    p = params_from_metadata(None)
    assert block_codec(items, p, "2.1").chain() == ("variable", "flat")
    p.compression = "lz4"
    assert block_codec(items, p, "2.2").chain() == ("general", "variable", "flat")


def test_params_parsing():
    f = pa.field("x", pa.int32(), metadata={"lance-encoding:compression": "zstd",
                                            "lance-encoding:compression-level": "bad",
                                            "lance-encoding:rle-threshold": "0.25",
                                            "lance-encoding:bss": "ON", "packed": "True"})
    p = params_from_metadata(f)
    got = (p.compression, p.compression_level, p.rle_threshold, p.bss, p.packed)
    assert got == ("zstd", None, 0.25, "on", True)
    root = pa.field("r", pa.struct([f]), metadata={"lance-encoding:structural-encoding": "FullZip"})
    assert params_from_metadata(f, root).structural_encoding == "fullzip"
    with pytest.raises(SchemaError, match="unknown compression scheme 'snappy'"):
        params_from_metadata(pa.field("x", pa.int32(), metadata={"lance-encoding:compression": "snappy"}))
