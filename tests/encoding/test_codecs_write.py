"""Codec encoders: round trips through our decoders (mini-block, block and per-value
contexts), the chunking rules Lance uses, hypothesis properties for bitpacking and RLE, and
a few random examples read back by pylance. Byte-level agreement with pylance's own pages
is in ``test_miniblock_write.py``."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lance_spark_ops.encoding.blocks import (
    FixedSizeListBlock,
    FixedWidthBlock,
    StructBlock,
    VariableWidthBlock,
)
from lance_spark_ops.encoding.compression.bitpacking import (
    decode_out_of_line_bitpacking_blocks,
    encode_inline_bitpacking_block,
    encode_inline_bitpacking_blocks,
    encode_inline_bitpacking_miniblock,
    encode_out_of_line_bitpacking_block,
    encode_out_of_line_bitpacking_blocks,
    fastlanes_pack,
    fastlanes_unpack,
    inline_bitpacking_encoding,
    out_of_line_bitpacking_encoding,
)
from lance_spark_ops.encoding.compression.byte_stream_split import encode_byte_stream_split_miniblock
from lance_spark_ops.encoding.compression.encoded import CompressionParams, MiniBlockCompressed
from lance_spark_ops.encoding.compression.fixed_size_list import (
    encode_fixed_size_list_block,
    encode_fixed_size_list_miniblock,
    encode_fixed_size_list_per_value,
)
from lance_spark_ops.encoding.compression.general import (
    compress_buffer,
    decompress_buffer,
    encode_general_block,
    encode_general_miniblock,
    encode_general_per_value,
)
from lance_spark_ops.encoding.compression.packed_struct import (
    encode_packed_struct_block,
    encode_packed_struct_miniblock,
)
from lance_spark_ops.encoding.compression.registry import (
    decompress_block,
    decompress_miniblock_chunks,
    decompress_per_value,
)
from lance_spark_ops.encoding.compression.rle import (
    decode_rle_blocks,
    encode_rle_block,
    encode_rle_blocks,
    encode_rle_miniblock,
    rle_encoding,
)
from lance_spark_ops.encoding.compression.value import (
    encode_flat_block,
    encode_flat_miniblock,
    encode_flat_per_value,
)
from lance_spark_ops.errors import InvalidInputError, UnsupportedError
from tests.conftest import pylance_read
from tests.encoding._mbw import write_file

UINTS = [np.uint8, np.uint16, np.uint32, np.uint64]


def fixed(values: np.ndarray) -> FixedWidthBlock:
    values = np.ascontiguousarray(values)
    return FixedWidthBlock(values.view(np.uint8).reshape(-1), values.dtype.itemsize * 8, len(values))


def bools(values: np.ndarray) -> FixedWidthBlock:
    return FixedWidthBlock(np.packbits(values, bitorder="little"), 1, len(values))


def chunks_of(mb: MiniBlockCompressed) -> tuple[list[list[memoryview]], np.ndarray]:
    """Per-chunk buffer views and value counts of a compressed page."""
    sizes = np.asarray(mb.chunk_buffer_sizes, dtype=np.int64)
    offsets = np.zeros_like(sizes)
    offsets[1:] = np.cumsum(sizes, axis=0)[:-1]
    bufs = [memoryview(np.ascontiguousarray(b, dtype=np.uint8).tobytes()) for b in mb.buffers]
    chunks = [
        [bufs[j][int(offsets[i, j]) : int(offsets[i, j] + sizes[i, j])] for j in range(len(bufs))]
        for i in range(len(sizes))
    ]
    counts = np.left_shift(1, np.asarray(mb.chunk_log_values, dtype=np.int64))
    counts[-1] = mb.num_values - counts[:-1].sum()
    return chunks, counts


def roundtrip(mb: MiniBlockCompressed):
    chunks, counts = chunks_of(mb)
    assert (counts[:-1] > 1).all() and counts[-1] > 0
    return decompress_miniblock_chunks(mb.encoding, chunks, counts)


def as_values(block, dtype) -> np.ndarray:
    return np.asarray(block.data).view(np.uint8)[: block.num_values * np.dtype(dtype).itemsize].view(dtype)


# ------------------------------------------------------------------------------ flat


@pytest.mark.parametrize(
    "dtype,per_chunk", [(np.int8, 4096), (np.int16, 2048), (np.int32, 1024), (np.int64, 512)]
)
@pytest.mark.parametrize("n", [1, 511, 4096, 4097, 10_000])
def test_flat_miniblock(dtype, per_chunk: int, n: int) -> None:
    values = np.random.default_rng(n).integers(-100, 100, n).astype(dtype)
    mb = encode_flat_miniblock(fixed(values))
    assert mb.encoding.WhichOneof("compression") == "flat"
    logs = mb.chunk_log_values
    full = n // per_chunk
    assert (logs[:full] == per_chunk.bit_length() - 1).all()
    assert len(logs) == full + (n % per_chunk > 0) and (n % per_chunk == 0 or logs[-1] == 0)
    np.testing.assert_array_equal(as_values(roundtrip(mb), dtype), values)


def test_flat_bool_block_and_per_value() -> None:
    values = np.random.default_rng(0).random(9000) < 0.3
    mb = encode_flat_miniblock(bools(values))
    assert mb.chunk_log_values.tolist() == [12, 12, 0]
    got = roundtrip(mb)
    np.testing.assert_array_equal(np.unpackbits(got.data, count=9000, bitorder="little").astype(bool), values)
    data, enc = encode_flat_block(fixed(np.arange(10, dtype=np.int32)))
    np.testing.assert_array_equal(
        as_values(decompress_block(enc, memoryview(data), 10), np.int32), np.arange(10)
    )
    block, enc = encode_flat_per_value(fixed(np.arange(10, dtype=np.int64)))
    assert decompress_per_value(enc, block) is block


# ------------------------------------------------------------------------------ bitpacking


@st.composite
def packable(draw, max_n: int = 3000):
    dtype = draw(st.sampled_from(UINTS))
    bits = np.dtype(dtype).itemsize * 8
    n = draw(st.integers(1, max_n))
    width = draw(st.integers(0, bits))
    seed = draw(st.integers(0, 2**32 - 1))
    raw = np.random.default_rng(seed).integers(0, 2**63, n, dtype=np.uint64, endpoint=True)
    mask = np.uint64(2**64 - 1) if width == 64 else np.uint64((1 << width) - 1)
    return (raw & mask).astype(dtype)


@settings(max_examples=60, deadline=None)
@given(packable())
def test_inline_bitpacking_roundtrip(values: np.ndarray) -> None:
    mb = encode_inline_bitpacking_miniblock(fixed(values))
    assert (mb.chunk_log_values[:-1] == 10).all() and mb.chunk_log_values[-1] == 0
    np.testing.assert_array_equal(as_values(roundtrip(mb), values.dtype), values)
    data, enc = encode_inline_bitpacking_block(fixed(values))
    got = decompress_block(enc, memoryview(data.tobytes()), len(values))
    np.testing.assert_array_equal(as_values(got, values.dtype), values)


@settings(max_examples=60, deadline=None)
@given(packable(), st.lists(st.integers(1, 2500), min_size=1, max_size=6))
def test_bitpacked_blocks_roundtrip(values: np.ndarray, cuts: list[int]) -> None:
    """Many parts at once (levels of many chunks): out-of-line at the max width, inline."""
    bounds = np.unique(np.clip(np.cumsum(cuts), 0, len(values)))
    counts = np.diff(np.concatenate([[0], bounds[bounds < len(values)], [len(values)]]))
    bits = values.dtype.itemsize * 8
    width = int(values.max()).bit_length()
    data, sizes, wrote = encode_out_of_line_bitpacking_blocks(values, counts, width)
    assert wrote == out_of_line_bitpacking_encoding(bits, width)
    bufs = np.split(data, np.cumsum(sizes)[:-1])
    msg = out_of_line_bitpacking_encoding(bits, width).out_of_line_bitpacking
    got = decode_out_of_line_bitpacking_blocks(msg, [memoryview(b.tobytes()) for b in bufs], counts)
    np.testing.assert_array_equal(as_values(got, values.dtype), values)
    data, sizes, wrote = encode_inline_bitpacking_blocks(values, counts)
    bufs = np.split(data, np.cumsum(sizes)[:-1])
    enc = inline_bitpacking_encoding(bits)
    assert wrote == enc
    for b, c, start in zip(bufs, counts, np.cumsum(counts) - counts, strict=True):
        got = decompress_block(enc, memoryview(b.tobytes()), int(c))
        np.testing.assert_array_equal(as_values(got, values.dtype), values[start : start + c])


@pytest.mark.parametrize("dtype", UINTS)
def test_fastlanes_pack_inverts_unpack(dtype) -> None:
    bits = np.dtype(dtype).itemsize * 8
    rng = np.random.default_rng(bits)
    for width in range(1, bits + 1):
        values = (rng.integers(0, 2**63, (2, 1024), dtype=np.uint64) % (1 << min(width, 63))).astype(dtype)
        np.testing.assert_array_equal(fastlanes_unpack(fastlanes_pack(values, width), width), values)


@pytest.mark.parametrize("dtype", UINTS)
def test_fastlanes_pack_matches_reference(dtype) -> None:
    """Every width against the packer written from the layout description (test_codecs)."""
    from tests.encoding.test_codecs import ref_pack

    bits = np.dtype(dtype).itemsize * 8
    rng = np.random.default_rng(bits + 1)
    for width in range(bits + 1):
        raw = rng.integers(0, 2**64, (2, 1024), dtype=np.uint64, endpoint=False)
        values = (raw & np.uint64((1 << width) - 1)).astype(dtype)
        want = np.stack([ref_pack(row, width) if width else np.zeros(0, dtype) for row in values])
        np.testing.assert_array_equal(fastlanes_pack(values, width), want, err_msg=f"width {width}")


@pytest.mark.parametrize("max_runs", [0, 10**9])
def test_inline_bitpacking_chunks_match_reference(max_runs: int) -> None:
    """Chunks ``[W][packed]`` with W per 1024 values, whether equal-width runs are packed in
    place or each width once over all its chunks (``CodecTuning.bitpack_max_runs``)."""
    from lance_spark_ops.encoding.tuning import CodecTuning, codecs_tuned
    from tests.encoding.test_codecs import ref_pack

    rng = np.random.default_rng(7)
    widths = [5, 5, 12, 5, 0, 31, 31, 12]
    values = np.concatenate(
        [rng.integers(0, 1 << w, 1024, dtype=np.uint64).astype(np.uint32) | np.uint32((1 << w) >> 1)
         for w in widths]
    )[: 7 * 1024 + 300]  # last chunk partial: zero padded
    padded = np.zeros(8 * 1024, np.uint32)
    padded[: len(values)] = values
    want = np.concatenate(
        [np.concatenate([[w], ref_pack(padded[i * 1024 : (i + 1) * 1024], w)]).astype(np.uint32)
         for i, w in enumerate(widths)]
    )
    with codecs_tuned(CodecTuning(bitpack_max_runs=max_runs)):
        mb = encode_inline_bitpacking_miniblock(fixed(values))
    np.testing.assert_array_equal(mb.buffers[0].view(np.uint32), want)


def test_out_of_line_tail_raw_or_packed() -> None:
    """Lance packs the tail iff padding costs less than packing saves."""
    values = np.zeros(1068, np.uint16)
    values[5] = 1
    data, _ = encode_out_of_line_bitpacking_block(fixed(values))  # 44-value tail: raw
    assert len(data) == 128 + 44 * 2
    data, _ = encode_out_of_line_bitpacking_block(fixed(values[:544]))  # packed, padded
    assert len(data) == 128


# ------------------------------------------------------------------------------ rle


@st.composite
def runs(draw):
    dtype = draw(st.sampled_from(UINTS))
    lengths = draw(st.lists(st.integers(1, 700), min_size=1, max_size=80))
    seed = draw(st.integers(0, 2**32 - 1))
    vals = np.random.default_rng(seed).integers(0, draw(st.sampled_from([2, 50, 2**30])), len(lengths))
    return np.repeat(vals, lengths).astype(dtype)


@settings(max_examples=80, deadline=None)
@given(runs())
def test_rle_miniblock_roundtrip(values: np.ndarray) -> None:
    mb = encode_rle_miniblock(fixed(values))
    chunks, counts = chunks_of(mb)
    assert (counts <= 4096).all()
    assert (np.asarray(mb.chunk_buffer_sizes).sum(axis=1) <= 8186).all()
    assert all(c & (c - 1) == 0 for c in counts[:-1].tolist())
    assert (np.asarray(mb.chunk_buffer_sizes)[:, 1] > 0).all()
    np.testing.assert_array_equal(as_values(roundtrip(mb), values.dtype), values)


@settings(max_examples=50, deadline=None)
@given(runs(), st.lists(st.integers(1, 3000), min_size=1, max_size=5))
def test_rle_blocks_roundtrip(values: np.ndarray, cuts: list[int]) -> None:
    bounds = np.unique(np.clip(np.cumsum(cuts), 0, len(values)))
    counts = np.diff(np.concatenate([[0], bounds[bounds < len(values)], [len(values)]]))
    data, sizes, wrote = encode_rle_blocks(values, counts)
    assert wrote == rle_encoding(values.dtype.itemsize * 8)
    bufs = [memoryview(b.tobytes()) for b in np.split(data, np.cumsum(sizes)[:-1])]
    got = decode_rle_blocks(rle_encoding(values.dtype.itemsize * 8).rle, bufs, counts)
    np.testing.assert_array_equal(as_values(got, values.dtype), values)
    data, enc = encode_rle_block(fixed(values))
    np.testing.assert_array_equal(
        as_values(decompress_block(enc, memoryview(data.tobytes()), len(values)), values.dtype), values
    )


def test_rle_runs_split_at_255() -> None:
    data, _ = encode_rle_block(fixed(np.full(1000, 7, np.int32)))
    assert bytes(data[:8]) == (16).to_bytes(8, "little")
    assert data[8 + 16 :].tolist() == [255, 255, 255, 235]


# ------------------------------------------------------------------------------ bss / general


@pytest.mark.parametrize("dtype,per", [(np.float32, 1024), (np.float64, 512)])
@pytest.mark.parametrize("n", [1, 512, 1024, 3000])
def test_byte_stream_split(dtype, per: int, n: int) -> None:
    values = np.random.default_rng(n).random(n).astype(dtype)
    mb = encode_byte_stream_split_miniblock(fixed(values))
    assert mb.chunk_log_values[-1] == 0 and (mb.chunk_log_values[:-1] == per.bit_length() - 1).all()
    np.testing.assert_array_equal(as_values(roundtrip(mb), dtype), values)


def test_byte_stream_split_worked_example() -> None:
    mb = encode_byte_stream_split_miniblock(fixed(np.array([1.0, 2.0], np.float32)))
    assert bytes(mb.buffers[0]) == bytes.fromhex("0000 0000 8000 3f40")


@pytest.mark.parametrize("scheme,level", [("zstd", None), ("zstd", 9), ("lz4", None)])
def test_general_miniblock(scheme: str, level: int | None) -> None:
    values = np.random.default_rng(1).integers(0, 1000, 20_000).astype(np.int64)
    params = CompressionParams(compression=scheme, compression_level=level)
    mb = encode_general_miniblock(fixed(values), params, encode_flat_miniblock)
    general = mb.encoding.general
    assert mb.encoding.WhichOneof("compression") == "general"
    assert general.compression.HasField("level") == (level is not None)
    assert sum(len(b) for b in mb.buffers) < values.nbytes
    np.testing.assert_array_equal(as_values(roundtrip(mb), np.int64), values)


def test_general_miniblock_skips_small_or_incompressible() -> None:
    params = CompressionParams(compression="zstd")
    small = encode_general_miniblock(fixed(np.arange(100, dtype=np.int32)), params, encode_flat_miniblock)
    assert small.encoding.WhichOneof("compression") == "flat"
    noise = np.random.default_rng(2).integers(0, 2**63, 5000, dtype=np.uint64)
    mb = encode_general_miniblock(fixed(noise), params, encode_flat_miniblock)
    assert mb.encoding.WhichOneof("compression") == "flat"


def test_general_block_and_per_value() -> None:
    values = np.arange(5000, dtype=np.int64) % 7
    data, enc = encode_general_block(fixed(values), CompressionParams(compression="lz4"))
    assert enc.general.values.WhichOneof("compression") == "flat"
    np.testing.assert_array_equal(
        as_values(decompress_block(enc, memoryview(bytes(data)), 5000), np.int64), values
    )
    offsets = np.array([0, 40_000, 40_000, 90_000], np.uint32)
    block = VariableWidthBlock(offsets, np.zeros(90_000, np.uint8), 3)
    packed, enc = encode_general_per_value(block, CompressionParams(compression="zstd"))
    assert enc.general.compression.level == 0 and packed.offsets.dtype == np.uint32
    back = decompress_per_value(enc, packed)
    np.testing.assert_array_equal(np.asarray(back.offsets, np.int64), offsets)
    assert compress_buffer(b"", "lz4")[:4] == b"\0\0\0\0"
    assert (
        decompress_buffer(enc.general.compression, compress_buffer(b"abc" * 50, "zstd", 0), "x")
        == b"abc" * 50
    )


# ------------------------------------------------------------------------------ fsl / packed


def _fsl_block(rows: int, dims: list[int], validity: list[bool], leaf_bits: int = 32) -> FixedSizeListBlock:
    rng = np.random.default_rng(rows)
    cum = int(np.prod(dims))
    if leaf_bits == 1:
        leaf = bools(rng.random(rows * cum) < 0.5)
    else:
        leaf = fixed(rng.integers(0, 100, rows * cum).astype(f"<u{leaf_bits // 8}"))
    block = leaf
    c = cum
    for dim, has in zip(reversed(dims), reversed(validity), strict=True):
        c //= dim
        valid = rng.random(rows * c * dim) < 0.8 if has else None
        block = FixedSizeListBlock(block, dim, rows * c, valid)
    return block


def _same_fsl(a, b) -> None:
    while isinstance(a, FixedSizeListBlock):
        assert (
            isinstance(b, FixedSizeListBlock) and a.dimension == b.dimension and a.num_values == b.num_values
        )
        if a.item_validity is None:
            assert b.item_validity is None
        else:
            np.testing.assert_array_equal(np.asarray(a.item_validity), np.asarray(b.item_validity))
        a, b = a.items, b.items
    n = (a.num_values * a.bits_per_value + 7) // 8
    assert bytes(np.asarray(a.data)[:n]) == bytes(np.asarray(b.data)[:n])


@pytest.mark.parametrize(
    "dims,validity,leaf_bits",
    [([3], [True], 32), ([4], [False], 64), ([2, 3], [True, True], 16), ([5], [False], 1), ([3], [True], 1)],
)
@pytest.mark.parametrize("rows", [1, 700, 5000])
def test_fixed_size_list_roundtrip(dims, validity, leaf_bits: int, rows: int) -> None:
    block = _fsl_block(rows, dims, validity, leaf_bits)
    _same_fsl(block, roundtrip(encode_fixed_size_list_miniblock(block)))
    if not any(validity):
        data, enc = encode_fixed_size_list_block(block)
        _same_fsl(block, decompress_block(enc, memoryview(bytes(data)), rows))
    if leaf_bits % 8 == 0 or not any(validity):
        packed, enc = encode_fixed_size_list_per_value(block)
        _same_fsl(block, decompress_per_value(enc, packed))


def test_fixed_size_list_chunk_rows() -> None:
    """13 bytes a row (1 validity byte + 3 int32) -> 512 rows per chunk, as pylance."""
    mb = encode_fixed_size_list_miniblock(_fsl_block(5000, [3], [True]))
    assert mb.chunk_log_values.tolist() == [9] * 9 + [0]
    assert mb.chunk_buffer_sizes[0].tolist() == [192, 6144]


def test_packed_struct_roundtrip() -> None:
    rng = np.random.default_rng(3)
    kids = [
        fixed(rng.integers(0, 9, 3000).astype(np.int32)),
        fixed(rng.random(3000)),
        fixed(np.arange(3000, dtype=np.int16)),
    ]
    block = StructBlock(kids, 3000)
    mb = encode_packed_struct_miniblock(block)
    assert list(mb.encoding.packed_struct.bits_per_value) == [32, 64, 16]
    got = roundtrip(mb)
    for a, b in zip(kids, got.children, strict=True):
        assert bytes(a.data) == bytes(np.asarray(b.data))
    data, enc = encode_packed_struct_block(block)
    got = decompress_block(enc, memoryview(bytes(data)), 3000)
    assert bytes(got.children[1].data) == bytes(kids[1].data)


def test_encoder_errors() -> None:
    with pytest.raises(InvalidInputError):
        encode_flat_miniblock(VariableWidthBlock(np.zeros(1, np.uint32), np.zeros(0, np.uint8), 0))
    with pytest.raises(UnsupportedError):
        encode_rle_miniblock(FixedWidthBlock(np.zeros(32, np.uint8), 128, 2))
    with pytest.raises(UnsupportedError):
        encode_byte_stream_split_miniblock(fixed(np.zeros(4, np.int16)))
    with pytest.raises(InvalidInputError):
        encode_general_miniblock(
            fixed(np.zeros(4, np.int32)), CompressionParams(compression="gzip"), encode_flat_miniblock
        )
    with pytest.raises(InvalidInputError):
        encode_inline_bitpacking_miniblock(FixedWidthBlock(np.zeros(3, np.uint8), 32, 4))


# ------------------------------------------------------------------------------ through pylance


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(packable(max_n=6000), st.sampled_from(["2.1", "2.2"]), st.booleans())
def test_bitpacked_pages_read_by_pylance(tmp_path, values: np.ndarray, version: str, nulls: bool) -> None:
    mask = (np.arange(len(values)) % 7 == 3) if nulls else None
    table = pa.table({"x": pa.array(values, mask=mask)})
    path = write_file(tmp_path / f"bp-{version}.lance", table, version, encode_inline_bitpacking_miniblock)
    assert pylance_read(path).equals(table)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(runs(), st.sampled_from(["2.1", "2.2"]))
def test_rle_pages_read_by_pylance(tmp_path, values: np.ndarray, version: str) -> None:
    table = pa.table({"x": pa.array(values)})
    path = write_file(tmp_path / f"rle-{version}.lance", table, version, encode_rle_miniblock)
    assert pylance_read(path).equals(table)
