"""Variable encoders: mini-block chunking equals Lance's ``search_next_offset_idx`` rule and
pylance's pages byte for byte; block and per-value forms."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import FixedWidthBlock, VariableWidthBlock
from lance_spark_ops.encoding.blocks_from_arrow import arrow_to_block
from lance_spark_ops.encoding.compression.variable import (
    chunk_ends,
    decode_variable_block,
    encode_variable_block,
    encode_variable_miniblock,
    encode_variable_per_value,
)
from lance_spark_ops.encoding.layout.miniblock_encode import encode_miniblock_page
from lance_spark_ops.errors import InvalidInputError
from tests.encoding._write import page_bytes, pylance_page, roundtrip


def reference_chunk_ends(off: list[int], w: int, limit: int = 4096, max_values: int = 4096) -> list[int]:
    """Lance's ``search_next_offset_idx`` walk, as pylance 14 chunks (at least 2 values)."""
    size = len(off)
    ends, last = [], 0
    while True:
        remaining = size - (last + 1)
        if remaining <= 1:
            end = size - 1
        else:
            num, new, end = 2, 4, None
            while True:
                if last + new >= size:
                    rest = off[-1] - off[last] + (size - last) * w
                    end = size - 1 if rest <= limit else last + num
                    break
                if off[last + new] - off[last] + (new + 1) * w <= limit:
                    if new * 2 > max_values:
                        break
                    num, new = new, new * 2
                else:
                    break
            end = last + num if end is None else end
        ends.append(end)
        if end == size - 1:
            return ends
        last = end


@settings(max_examples=30, deadline=None)
@given(
    lens=st.lists(st.integers(0, 3000), max_size=300)
    | st.lists(st.integers(0, 3), min_size=1500, max_size=2500),
    w=st.sampled_from([4, 8]),
    limit=st.sampled_from([4096, 64, 20_000, 100_000]),
)
def test_chunk_ends_match_lance(lens: list[int], w: int, limit: int) -> None:
    off = np.concatenate(([0], np.cumsum(lens, dtype=np.int64)))
    want = reference_chunk_ends(off.tolist(), w, limit) if lens else [0]
    assert chunk_ends(off, w, limit).tolist() == want


@pytest.mark.parametrize("version", ["2.1", "2.2"])
@pytest.mark.parametrize("typ", [pa.binary(), pa.large_binary()])
def test_variable_miniblock_page_matches_pylance(tmp_path, version: str, typ: pa.DataType) -> None:
    rng = np.random.default_rng(3)
    arr = pa.array([rng.bytes(int(rng.integers(0, 60))) for _ in range(5000)], typ)
    table = pa.table({"v": arr})
    theirs, layout = pylance_page(tmp_path, table, version)
    mc = encode_variable_miniblock(arrow_to_block(arr))
    assert mc.chunk_log_values[-1] == 0 and set(mc.chunk_log_values[:-1].tolist()) <= {6, 7}
    page = encode_miniblock_page(len(arr), mc, None, None, [pb.REPDEF_ALL_VALID_ITEM], version)
    assert page.encoding == layout
    assert page_bytes(page) == theirs
    roundtrip(tmp_path, table, [[page]], version)


def test_chunk_layout_example() -> None:
    """``["ab", "c"]`` in one 32-bit chunk: offsets 12 14 15, bytes, one pad byte 0x48."""
    block = VariableWidthBlock(np.array([0, 2, 3], np.uint32), np.frombuffer(b"abc", np.uint8), 2)
    mc = encode_variable_miniblock(block)
    assert mc.buffers[0].tobytes() == bytes.fromhex("0c0000000e0000000f00000061626348")
    assert mc.chunk_buffer_sizes.tolist() == [[16]] and mc.chunk_log_values.tolist() == [0]


def test_variable_block_and_per_value() -> None:
    block = VariableWidthBlock(np.array([5, 7, 8], np.uint32), np.frombuffer(b"xxxxxabc", np.uint8), 2)
    data, enc = encode_variable_block(block)
    assert data.tobytes() == bytes.fromhex("2000000014000000000000000200000003000000616263")
    assert enc.variable.offsets.flat.bits_per_value == 32
    back = decode_variable_block(enc.variable, memoryview(data.tobytes()), 2)
    assert back.data.tobytes() == b"abc" and back.offsets.tolist() == [0, 2, 3]
    big = VariableWidthBlock(np.array([0, 1], np.uint64), np.frombuffer(b"z", np.uint8), 1)
    data64, enc64 = encode_variable_block(big)
    assert data64[:16].view("<u8").tolist() == [64, 32] and enc64.variable.offsets.flat.bits_per_value == 64
    values, enc = encode_variable_per_value(block)
    assert values.offsets.tolist() == [0, 2, 3] and values.data.tobytes() == b"abc"
    with pytest.raises(InvalidInputError):
        encode_variable_miniblock(FixedWidthBlock(np.zeros(4, np.uint8), 32, 1))
    with pytest.raises(InvalidInputError):
        encode_variable_block(VariableWidthBlock(np.array([0, 9], np.uint32), np.zeros(2, np.uint8), 1))


@pytest.mark.parametrize("w", [4, 8])
def test_chunk_ends_runs_of_guesses_match_lance(w: int) -> None:
    """Long homogeneous runs (chunk sizes guessed and checked in bulk) broken by a few
    outliers still chunk exactly as Lance's walk."""
    lens = np.full(60_000, 23, np.int64)
    lens[[5_000, 5_001, 31_337]] = [5_000, 0, 900]
    lens[40_000:41_000] = 1
    off = np.concatenate(([0], np.cumsum(lens)))
    assert chunk_ends(off, w).tolist() == reference_chunk_ends(off.tolist(), w)


def _chunks(strings: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, pb.Variable]:
    """(page bytes, chunk starts (k, 1), sizes (k, 1), value counts, encoding) of the
    Variable mini-block chunks of ``strings``, placed 3 bytes into the page."""
    comp = encode_variable_miniblock(arrow_to_block(pa.array(strings, pa.binary())))
    sizes = comp.chunk_buffer_sizes[:, :1].astype(np.int64)
    starts = 3 + np.concatenate(([0], np.cumsum(sizes[:-1, 0])))[:, None]
    counts = np.full(len(sizes), 0, np.int64)
    counts[:-1] = 2 ** comp.chunk_log_values[:-1].astype(np.int64)
    counts[-1] = comp.num_values - counts[:-1].sum()
    data = np.concatenate((np.full(3, 7, np.uint8), comp.buffers[0]))
    return data, starts, sizes, counts, comp.encoding.variable


def test_value_bounds_find_the_values_in_place_and_check_like_the_joined_decode() -> None:
    """``value_bounds`` (values left where they lie, for the compiled FSST decoder) gives
    every value's bytes, and refuses corrupt chunks with the joined decoder's errors."""
    from lance_spark_ops.encoding.compression.variable import decode_variable_miniblock_ranges, value_bounds
    from lance_spark_ops.errors import CorruptFileError

    rng = np.random.default_rng(3)
    strings = [bytes(rng.integers(97, 123, int(rng.integers(0, 30)), dtype=np.uint8)) for _ in range(3000)]
    data, starts, sizes, counts, msg = _chunks(strings)
    assert len(counts) > 5
    lo, hi, n = value_bounds(msg, data, starts, sizes, counts)
    assert n == len(strings) and [data[a:b].tobytes() for a, b in zip(lo, hi, strict=True)] == strings
    o = 4 * (int(counts[1]) + 1)  # chunk 1's value bytes start after its offsets
    base = int(starts[1, 0])
    cases = {"too few for": lambda d, s: s.__setitem__((1, 0), 8),
             "outside their chunk": lambda d, s: d[base : base + 4].view("<u4").__setitem__(0, o - 4),
             "not monotonic": lambda d, s: d[base + 4 : base + 8].view("<u4").__setitem__(0, o + 10**4)}
    for message, corrupt in cases.items():
        d, s = data.copy(), sizes.copy()
        corrupt(d, s)
        for decode in (value_bounds, decode_variable_miniblock_ranges):
            with pytest.raises(CorruptFileError, match=message):
                decode(msg, d, starts, s, counts)
