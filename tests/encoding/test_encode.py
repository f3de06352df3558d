"""The encode pipeline: plans run through the codec encoders decode back to the values,
and ``encode_field`` hands each layout encoder what its contract asks for (one page per
leaf column, in leaf order)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops.encoding import encode as encode_mod
from lance_spark_ops.encoding.arrow import block_to_arrow
from lance_spark_ops.encoding.codecs import compress_block, compress_miniblock, compress_per_value
from lance_spark_ops.encoding.compression.registry import (
    decompress_block,
    decompress_miniblock_chunks,
    decompress_per_value,
)
from lance_spark_ops.encoding.encode import encode_field, plan_field
from lance_spark_ops.encoding.page import EncodedPage
from lance_spark_ops.encoding.structural import field_leaf_count
from lance_spark_ops.errors import InvalidInputError, SchemaError
from tests.file.cases import CASES

PLANS = [pytest.param(c.name, v, id=f"{c.name}-{v}") for c in CASES for v in c.versions if v != "2.0"]
_BY_NAME = {c.name: c for c in CASES}


def _chunks(values) -> tuple[list[list[memoryview]], np.ndarray]:
    sizes = np.asarray(values.chunk_buffer_sizes, dtype=np.int64)
    starts = np.vstack([np.zeros((1, sizes.shape[1]), np.int64), np.cumsum(sizes, axis=0)[:-1]])
    chunks = [[memoryview(np.asarray(values.buffers[j])[starts[i, j]:starts[i, j] + sizes[i, j]])
               for j in range(sizes.shape[1])] for i in range(len(sizes))]
    counts = np.left_shift(1, np.asarray(values.chunk_log_values, dtype=np.int64))
    if len(counts):
        counts[-1] = values.num_values - int(counts[:-1].sum())
    return chunks, counts


def _same(got, want, arrow_type: pa.DataType) -> None:
    a = block_to_arrow(got, arrow_type)
    b = block_to_arrow(want, arrow_type)
    assert a.equals(b), (a, b)


def _arrow_type_of(block) -> pa.DataType:
    from lance_spark_ops.encoding.blocks import FixedWidthBlock, VariableWidthBlock

    if isinstance(block, VariableWidthBlock):
        return pa.large_binary() if block.offsets.dtype.itemsize == 8 else pa.binary()
    if isinstance(block, FixedWidthBlock) and block.bits_per_value == 1:
        return pa.bool_()
    return pa.binary(block.bits_per_value // 8)


@pytest.mark.parametrize("name,version", PLANS)
def test_plan_codecs_round_trip(name, version):
    """Every buffer a plan compresses decodes back to the plan's block."""
    table = _BY_NAME[name].build()
    for f in table.schema:
        for plan in plan_field(f, table.column(f.name), version):
            if plan.layout == "mini_block" and plan.values.kind not in ("packed_struct", "fixed_size_list"):
                values = compress_miniblock(plan.values, plan.block, plan.params)
                chunks, counts = _chunks(values)
                back = decompress_miniblock_chunks(values.encoding, chunks, counts)
                _same(back, plan.block, _arrow_type_of(plan.block))
            if plan.dictionary is not None:
                buf, enc = compress_block(plan.dictionary_codec, plan.dictionary, plan.dictionary_params)
                back = decompress_block(enc, memoryview(np.asarray(buf)), plan.dictionary.num_values)
                _same(back, plan.dictionary, _arrow_type_of(plan.dictionary))
            if plan.layout == "full_zip" and plan.values.kind in ("flat", "general", "variable", "fsst"):
                data, enc = compress_per_value(plan.values, plan.block, plan.params)
                back = decompress_per_value(enc, data)
                _same(back, plan.block, _arrow_type_of(plan.block))


class _Recorder:
    """Stand-in layout encoders recording their arguments."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object, tuple]] = []

    def make(self, name: str):
        def fn(plan, *args):
            self.calls.append((name, plan, args))
            return EncodedPage(num_rows=plan.num_rows, buffers=[], encoding=name)
        return fn


@pytest.fixture
def recorder(monkeypatch):
    rec = _Recorder()
    monkeypatch.setattr(encode_mod, "_miniblock_page", rec.make("mini_block"))
    monkeypatch.setattr(encode_mod, "_fullzip_page", rec.make("full_zip"))
    monkeypatch.setattr(encode_mod, "_constant_page", rec.make("constant"))
    monkeypatch.setattr(encode_mod, "_blob_page", rec.make("blob"))
    return rec


def test_one_page_per_leaf_in_leaf_order(recorder):
    arr = pa.array([{"a": 1, "l": [1, 2], "s": {"x": "p", "y": None}}, None] * 10,
                   pa.struct([("a", pa.int64()), ("l", pa.list_(pa.int32())),
                              ("s", pa.struct([("x", pa.string()), ("y", pa.float32())]))]))
    f = pa.field("st", arr.type)
    pages = encode_field(f, arr, "2.1")
    assert len(pages) == field_leaf_count(f) == 4
    assert [p.encoding for p in pages] == ["mini_block", "mini_block", "mini_block", "constant"]
    assert all(p.num_rows == 20 for p in pages)


def test_sliced_input_plans_the_slice():
    arr = pa.array(np.arange(100, dtype=np.int64)).slice(10, 50)
    (plan,) = plan_field(pa.field("v", arr.type), arr, "2.2")
    assert plan.num_rows == 50 and plan.block.num_values == 50
    assert np.asarray(plan.block.data).view(np.int64)[0] == 10


def test_version_and_schema_errors():
    with pytest.raises(InvalidInputError, match="2.1 / 2.2"):
        plan_field(pa.field("v", pa.int32()), pa.array([1], pa.int32()), "2.0")
    bad = pa.field("v", pa.int32(), metadata={"lance-encoding:structural-encoding": "sparse"})
    with pytest.raises(SchemaError, match="structural-encoding"):
        plan_field(bad, pa.array(np.arange(10, dtype=np.int32)), "2.2")
    for t in (pa.list_(pa.struct([("a", pa.int32())]), 2), pa.list_(pa.string(), 2)):
        with pytest.raises(SchemaError, match="fixed_size_list"):
            plan_field(pa.field("f", t), pa.array([None], t), "2.2")
    empty = pa.array([{}, None], pa.struct([]))
    with pytest.raises(SchemaError, match="empty structs"):
        plan_field(pa.field("e", empty.type), empty, "2.1")
