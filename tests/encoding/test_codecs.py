"""Codec unit tests on hand-built bytes: fastlanes against an independent reference packer,
bitpacking tails, RLE / BSS / General framing, FSL / packed struct splitting, take_block,
and corrupt input -> CorruptFileError."""

from __future__ import annotations

import numpy as np
import pytest
import zstandard

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.block_ops import take_block
from lance_spark_ops.encoding.blocks import FixedSizeListBlock, FixedWidthBlock, VariableWidthBlock
from lance_spark_ops.encoding.compression.bitpacking import (
    decode_inline_bitpacking_block,
    decode_inline_bitpacking_miniblock,
    decode_out_of_line_bitpacking_block,
    decode_out_of_line_bitpacking_blocks,
    fastlanes_unpack,
)
from lance_spark_ops.encoding.compression.byte_stream_split import decode_byte_stream_split_miniblock
from lance_spark_ops.encoding.compression.fixed_size_list import decode_fixed_size_list_per_value
from lance_spark_ops.encoding.compression.general import decompress_buffer
from lance_spark_ops.encoding.compression.registry import decompress_block, decompress_miniblock_chunks
from lance_spark_ops.encoding.compression.rle import decode_rle_block, decode_rle_miniblock
from lance_spark_ops.errors import CorruptFileError

FL_ORDER = [0, 4, 2, 6, 1, 5, 3, 7]


def ref_pack(values: np.ndarray, width: int) -> np.ndarray:
    """Fastlanes packing written from the layout description (one Python int per lane)."""
    dt = values.dtype
    t = dt.itemsize * 8
    lanes = 1024 // t
    out = np.zeros(width * lanes, dtype=dt)
    mask = (1 << width) - 1
    for lane in range(lanes):
        stream = 0
        for row in range(t):
            stream |= (int(values[FL_ORDER[row // 8] * 16 + (row % 8) * 128 + lane]) & mask) << (row * width)
        for k in range(width):
            out[k * lanes + lane] = (stream >> (k * t)) & ((1 << t) - 1)
    return out


def _rand(dt: np.dtype, width: int, n: int, seed: int) -> np.ndarray:
    r = np.random.default_rng(seed)
    return (
        r.integers(0, 2**63, n, dtype=np.uint64) & np.uint64((1 << width) - 1 if width < 64 else 2**64 - 1)
    ).astype(dt)


@pytest.mark.parametrize("dt", ["<u1", "<u2", "<u4", "<u8"])
def test_fastlanes_matches_reference(dt: str) -> None:
    t = np.dtype(dt).itemsize * 8
    for width in sorted({0, 1, 3, t // 2 + 1, t - 1, t}):
        vals = _rand(np.dtype(dt), width, 1024, width)
        packed = ref_pack(vals, width) if width else np.zeros(0, dt)
        got = fastlanes_unpack(packed.reshape(1, -1), width)
        np.testing.assert_array_equal(got[0], vals)


def _inline_chunk(vals: np.ndarray, width: int) -> bytes:
    full = np.zeros(1024, vals.dtype)
    full[: len(vals)] = vals
    return np.array([width], vals.dtype).tobytes() + ref_pack(full, width).tobytes()


def test_inline_chunks_of_mixed_widths() -> None:
    dt = np.dtype("<u4")
    parts = [_rand(dt, w, 1024, w) for w in (5, 0, 17, 5)] + [_rand(dt, 9, 100, 99)]
    chunks = [[memoryview(_inline_chunk(p, w))] for p, w in zip(parts, (5, 0, 17, 5, 9), strict=True)]
    msg = pb.InlineBitpacking(uncompressed_bits_per_value=32)
    blk = decode_inline_bitpacking_miniblock(msg, chunks, np.array([1024] * 4 + [100]))
    np.testing.assert_array_equal(np.asarray(blk.data).view(dt), np.concatenate(parts))
    one = decode_inline_bitpacking_block(msg, memoryview(_inline_chunk(parts[-1], 9)), 100)
    np.testing.assert_array_equal(np.asarray(one.data).view(dt), parts[-1])


def _ool(dt: str, width: int) -> pb.OutOfLineBitpacking:
    return pb.OutOfLineBitpacking(
        uncompressed_bits_per_value=np.dtype(dt).itemsize * 8,
        values=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=width)),
    )


@pytest.mark.parametrize("raw_tail", [False, True])
def test_out_of_line_tails(raw_tail: bool) -> None:
    dt, width = np.dtype("<u2"), 3
    vals = _rand(dt, width, 1024 + 300, 1)
    tail = np.zeros(1024, dt)
    tail[:300] = vals[1024:]
    buf = ref_pack(vals[:1024], width).tobytes() + (
        vals[1024:].tobytes() if raw_tail else ref_pack(tail, width).tobytes()
    )
    blk = decode_out_of_line_bitpacking_block(_ool("<u2", width), memoryview(buf), len(vals))
    np.testing.assert_array_equal(np.asarray(blk.data).view(dt), vals)
    # many buffers at once: mixed raw / padded tails and exact multiples
    bufs = [
        memoryview(buf),
        memoryview(ref_pack(vals[:1024], width).tobytes()),
        memoryview(vals[:5].tobytes()),
    ]
    many = decode_out_of_line_bitpacking_blocks(_ool("<u2", width), bufs, np.array([len(vals), 1024, 5]))
    np.testing.assert_array_equal(
        np.asarray(many.data).view(dt), np.concatenate([vals, vals[:1024], vals[:5]])
    )
    with pytest.raises(CorruptFileError):
        decode_out_of_line_bitpacking_block(_ool("<u2", width), memoryview(buf[:-2]), len(vals))


def _rle(bits: int) -> pb.Rle:
    return pb.Rle(
        values=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=bits)),
        run_lengths=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=8)),
    )


def test_rle_miniblock_and_block() -> None:
    v1, l1 = np.array([1, 2, 3], "<i4"), np.array([3, 2, 4], np.uint8)
    v2, l2 = np.array([7], "<i4"), np.array([255], np.uint8)
    chunks = [
        [memoryview(v1.tobytes()), memoryview(l1.tobytes())],
        [memoryview(v2.tobytes()), memoryview(l2.tobytes())],
    ]
    blk = decode_rle_miniblock(_rle(32), chunks, np.array([9, 200]))  # extra run values are dropped
    assert np.asarray(blk.data).view("<i4").tolist() == [1, 1, 1, 2, 2, 3, 3, 3, 3] + [7] * 200
    block = np.array([12], "<u8").tobytes() + v1.tobytes() + l1.tobytes()
    out = decode_rle_block(_rle(32), memoryview(block), 9)
    assert np.asarray(out.data).view("<i4").tolist() == [1, 1, 1, 2, 2, 3, 3, 3, 3]
    with pytest.raises(CorruptFileError):
        decode_rle_block(_rle(32), memoryview(block), 10)  # runs cover only 9
    with pytest.raises(CorruptFileError):
        decode_rle_block(_rle(32), memoryview(block[:-1]), 9)


def test_byte_stream_split_chunks_of_two_sizes() -> None:
    vals = np.random.default_rng(0).random(1024 + 10).astype("<f4")

    def split(v: np.ndarray) -> bytes:
        return v.view(np.uint8).reshape(-1, 4).T.tobytes()

    msg = pb.ByteStreamSplit(values=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=32)))
    chunks = [[memoryview(split(vals[:1024]))], [memoryview(split(vals[1024:]))]]
    blk = decode_byte_stream_split_miniblock(msg, chunks, np.array([1024, 10]))
    np.testing.assert_array_equal(np.asarray(blk.data).view("<f4"), vals)


def test_general_framings() -> None:
    raw = bytes(range(256)) * 40
    zc = zstandard.ZstdCompressor().compress(raw)
    zstd = pb.BufferCompression(scheme=pb.COMPRESSION_ALGORITHM_ZSTD)
    assert decompress_buffer(zstd, len(raw).to_bytes(8, "little") + zc, "t") == raw
    assert decompress_buffer(zstd, zc, "t") == raw  # legacy bare frame
    import pyarrow as pa

    lz = pa.Codec("lz4_raw").compress(raw, asbytes=True)
    lz4 = pb.BufferCompression(scheme=pb.COMPRESSION_ALGORITHM_LZ4)
    assert decompress_buffer(lz4, len(raw).to_bytes(4, "little") + lz, "t") == raw
    with pytest.raises(CorruptFileError):
        decompress_buffer(lz4, (len(raw) + 5).to_bytes(4, "little") + lz, "t")
    with pytest.raises(CorruptFileError):
        decompress_buffer(zstd, len(raw).to_bytes(8, "little") + zc[:-4], "t")
    # General over Flat in a block context (2.2 dictionaries)
    enc = pb.CompressiveEncoding(
        general=pb.General(compression=lz4, values=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=64)))
    )
    vals = np.arange(100, dtype="<i8")
    payload = len(vals.tobytes()).to_bytes(4, "little") + pa.Codec("lz4_raw").compress(
        vals.tobytes(), asbytes=True
    )
    out = decompress_block(enc, memoryview(payload), 100)
    np.testing.assert_array_equal(np.asarray(out.data).view("<i8"), vals)


def test_fixed_size_list_per_value_unzips_validity() -> None:
    rows = 3
    valid = np.array([[1, 0, 1], [1, 1, 1], [0, 0, 1]], bool)
    items = np.arange(9, dtype="<i4").reshape(3, 3)
    zipped = np.concatenate([np.packbits(valid, axis=1, bitorder="little"), items.view(np.uint8)], axis=1)
    msg = pb.FixedSizeList(
        items_per_value=3, has_validity=True, values=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=32))
    )
    out = decode_fixed_size_list_per_value(msg, FixedWidthBlock(zipped.reshape(-1), 13 * 8, rows))
    assert isinstance(out, FixedSizeListBlock) and out.num_values == rows
    np.testing.assert_array_equal(out.item_validity, valid.reshape(-1))
    np.testing.assert_array_equal(np.asarray(out.items.data).view("<i4"), items.reshape(-1))


def test_flat_bool_chunks_not_byte_aligned() -> None:
    bits = np.random.default_rng(1).random(30) < 0.5
    parts = [bits[:5], bits[5:30]]
    chunks = [[memoryview(np.packbits(p, bitorder="little").tobytes())] for p in parts]
    enc = pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=1))
    blk = decompress_miniblock_chunks(enc, chunks, np.array([5, 25]))
    np.testing.assert_array_equal(np.unpackbits(blk.data, count=30, bitorder="little").astype(bool), bits)


def test_take_block_kinds() -> None:
    idx = np.array([2, 0, 2])
    fw = take_block(FixedWidthBlock(np.arange(4, dtype="<i2").view(np.uint8), 16, 4), idx)
    assert np.asarray(fw.data).view("<i2").tolist() == [2, 0, 2]
    bools = take_block(
        FixedWidthBlock(np.packbits([1, 0, 0, 1], bitorder="little"), 1, 4), np.array([3, 1, 0])
    )
    assert np.unpackbits(bools.data, count=3, bitorder="little").tolist() == [1, 0, 1]
    var = take_block(
        VariableWidthBlock(np.array([0, 2, 2, 5], np.uint32), np.frombuffer(b"abcde", np.uint8), 3), idx
    )
    assert var.offsets.tolist() == [0, 3, 5, 8] and bytes(var.data) == b"cdeabcde"
    fsl = FixedSizeListBlock(
        FixedWidthBlock(np.arange(6, dtype=np.uint8), 8, 6), 2, 3, np.array([1, 0, 1, 1, 0, 0], bool)
    )
    got = take_block(fsl, np.array([1]))
    assert got.items.data.tolist() == [2, 3] and got.item_validity.tolist() == [True, True]
    with pytest.raises(CorruptFileError):
        take_block(fsl, np.array([3]))
