"""Rle: run-length encoding (``Rle { values: Flat(bits), run_lengths: Flat(8) }``).

A run is one value plus a u8 repeat count (runs longer than 255 are split: 1000 equal values
are runs 255, 255, 255, 235).

Mini-block: every chunk has two buffers, ``[run values, T bits each][run lengths, u8 each]``;
both hold the same number of runs. A chunk's runs must cover at least its value count (extra
values beyond the count are dropped, as Lance does).

Block context (2.2 rep/def levels, ConstantLayout levels): one buffer
``[u64 LE byte length L of the values][L bytes of run values][u8 run lengths]``.

Worked example (int32 ``[1, 1, 1, 2, 2, 3, 3, 3, 3]``, one mini-block chunk): buffer 0 is
``01 00 00 00 02 00 00 00 03 00 00 00`` and buffer 1 is ``03 02 04``. As a block the same data
is ``0c 00 00 00 00 00 00 00`` followed by those 12 + 3 bytes.

Mini-block chunking (Lance 14's ``RleEncoder``): from each chunk start, if the rest of the
page (at most 4096 values) encodes into at most 8186 bytes it is the last chunk (log 0);
otherwise the chunk is the largest power-of-two prefix (at most 4096 values) that does.
Runs are cut at chunk boundaries, so a chunk's runs cover exactly its values.

pylance picks Rle for mini-block values when its estimated size beats both raw and
bitpacking (``lance-encoding:rle-threshold`` adds a runs < threshold x values guard), for
constant numbers in 2.1, and (2.2) for levels that are mostly one value (e.g. the def levels
of a mostly-null column).

Encoding is vectorised over runs: runs are found with one comparison pass, cut at chunk
boundaries and split into 255-value entries with ``np.repeat``. Only the choice of chunk
boundaries walks the page, one step per chunk (each step a few binary searches).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import DataBlock, FixedWidthBlock
from lance_spark_ops.encoding.compression._arrays import (
    as_u8,
    check_chunk_counts,
    check_range_counts,
    check_ranges,
    exclusive_cumsum,
    gather_ranges,
    item_dtype,
    join_with_starts,
    ragged_arange,
    uint_view,
)
from lance_spark_ops.encoding.compression.contexts import CodecEncoders
from lance_spark_ops.encoding.compression.encoded import CodecLookup, CompressionParams, MiniBlockCompressed
from lance_spark_ops.encoding.compression.strategy import Codec
from lance_spark_ops.errors import CorruptFileError, InvalidInputError, UnsupportedError

MAX_RUN = 255
MAX_CHUNK_BYTES = 8 * 1024 - 6  # MAX_MINIBLOCK_BYTES
MAX_CHUNK_VALUES = 4096  # MAX_MINIBLOCK_VALUES


def _value_bits(msg: pb.Rle) -> int:
    if msg.values.WhichOneof("compression") != "flat":
        raise UnsupportedError("rle: only Flat run values are supported")
    if msg.HasField("run_lengths"):
        if msg.run_lengths.WhichOneof("compression") != "flat" or msg.run_lengths.flat.bits_per_value != 8:
            raise UnsupportedError("rle: only Flat 8-bit run lengths are supported")
    bits = int(msg.values.flat.bits_per_value)
    if bits <= 0 or bits % 8:
        raise UnsupportedError(f"rle: {bits}-bit run values are not supported")
    return bits


def expand_runs(
    values: np.ndarray,
    lengths: np.ndarray,
    runs_per_part: np.ndarray,
    counts: np.ndarray,
    bits: int,
    what: str,
) -> FixedWidthBlock:
    """Expand runs of several independent parts (chunks / blocks); part i has
    ``runs_per_part[i]`` runs and must yield ``counts[i]`` values."""
    dt = item_dtype(bits, what)
    vals = values.view(dt) if len(values) else np.zeros(0, dt)
    lens = lengths.astype(np.int64)
    run_starts = exclusive_cumsum(runs_per_part)
    produced = np.zeros(len(counts), dtype=np.int64)
    nonempty = runs_per_part > 0
    if len(lens):
        produced[nonempty] = np.add.reduceat(lens, run_starts[nonempty])
    if (produced < counts).any():
        i = int(np.argmax(produced < counts))
        raise CorruptFileError(
            f"{what}: part {i} runs cover {int(produced[i])} values, expected {int(counts[i])}"
        )
    expanded = np.repeat(vals, lens)
    if not (produced == counts).all():
        expanded = expanded[ragged_arange(exclusive_cumsum(produced), counts)]
    return FixedWidthBlock(expanded.view(np.uint8), bits, int(counts.sum()))


def decode_rle_miniblock(
    msg: pb.Rle, chunks: Sequence[Sequence[memoryview]], counts: np.ndarray, codecs: CodecLookup | None = None
) -> FixedWidthBlock:
    counts = check_chunk_counts(chunks, counts, 2, "rle mini-block")
    vdata, vstarts, vsizes = join_with_starts([c[0] for c in chunks])
    ldata, lstarts, lsizes = join_with_starts([c[1] for c in chunks])
    return _rle_miniblock(msg, vdata, vstarts, vsizes, ldata, lstarts, lsizes, counts)


def decode_rle_miniblock_ranges(
    msg: pb.Rle, data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, counts: np.ndarray,
    codecs: CodecLookup | None = None
) -> FixedWidthBlock:
    """Mini-block chunks given as ``(k, 2)`` byte ranges of ``data``."""
    counts = check_range_counts(starts, sizes, counts, 2, "rle mini-block")
    return _rle_miniblock(msg, data, starts[:, 0], sizes[:, 0], data, starts[:, 1], sizes[:, 1], counts)


def _rle_miniblock(
    msg: pb.Rle,
    vdata: np.ndarray, vstarts: np.ndarray, vsizes: np.ndarray,
    ldata: np.ndarray, lstarts: np.ndarray, nruns: np.ndarray,
    counts: np.ndarray,
) -> FixedWidthBlock:
    bits = _value_bits(msg)
    if (vsizes != nruns * (bits // 8)).any():
        i = int(np.argmax(vsizes != nruns * (bits // 8)))
        raise CorruptFileError(
            f"rle mini-block: chunk {i} has {int(vsizes[i])} bytes of {bits}-bit run values "
            f"but {int(nruns[i])} run lengths"
        )
    return expand_runs(
        gather_ranges(vdata, vstarts, vsizes),
        gather_ranges(ldata, lstarts, nruns),
        nruns,
        counts,
        bits,
        "rle mini-block",
    )


def decode_rle_blocks(msg: pb.Rle, buffers: Sequence[memoryview], counts: np.ndarray) -> FixedWidthBlock:
    """Decode many block-context RLE buffers at once (e.g. levels of all mini-block chunks)."""
    data, starts, sizes = join_with_starts(buffers)
    return decode_rle_blocks_ranges(msg, data, starts, sizes, counts)


def decode_rle_blocks_ranges(
    msg: pb.Rle, data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, counts: np.ndarray,
    codecs: CodecLookup | None = None
) -> FixedWidthBlock:
    """``decode_rle_blocks`` over byte ranges of ``data``."""
    bits = _value_bits(msg)
    vbytes = bits // 8
    counts = np.asarray(counts, dtype=np.int64)
    starts = np.asarray(starts, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    if len(counts) != len(starts):
        raise CorruptFileError(f"rle block: {len(starts)} buffers but {len(counts)} value counts")
    if (sizes < 8).any():
        raise CorruptFileError(f"rle block: buffer of {int(sizes.min())} bytes has no 8-byte header")
    check_ranges(data, starts, sizes, "rle block")
    header_idx = starts[:, None] + np.arange(8, dtype=np.int64)[None, :]
    value_bytes = np.ascontiguousarray(data[header_idx]).view("<u8").reshape(-1)
    if len(value_bytes) and int(value_bytes.max()) > int(sizes.max()):
        raise CorruptFileError(f"rle block: a buffer declares {int(value_bytes.max())} bytes of run values")
    value_bytes = value_bytes.astype(np.int64)
    nruns = value_bytes // vbytes
    if (
        ((value_bytes % vbytes) != 0).any()
        or (value_bytes < 0).any()
        or (8 + value_bytes + nruns != sizes).any()
    ):
        i = int(np.argmax((value_bytes % vbytes != 0) | (8 + value_bytes + nruns != sizes)))
        raise CorruptFileError(
            f"rle block: buffer {i} of {int(sizes[i])} bytes declares {int(value_bytes[i])} "
            f"bytes of {bits}-bit run values (expected 8 + values + one length per run)"
        )
    values = gather_ranges(data, starts + 8, value_bytes)
    lengths = gather_ranges(data, starts + 8 + value_bytes, nruns)
    return expand_runs(values, lengths, nruns, counts, bits, "rle block")


def decode_rle_block(
    msg: pb.Rle, buffer: memoryview, num_values: int, codecs: CodecLookup | None = None
) -> FixedWidthBlock:
    if num_values == 0 and len(buffer) == 0:
        return FixedWidthBlock(as_u8(b""), _value_bits(msg), 0)
    return decode_rle_blocks(msg, [buffer], np.array([num_values], dtype=np.int64))


# ---------------------------------------------------------------------------- encoders


def rle_encoding(bits: int) -> pb.CompressiveEncoding:
    return pb.CompressiveEncoding(
        rle=pb.Rle(
            values=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=int(bits))),
            run_lengths=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=8)),
        )
    )


def _rle_values(block: DataBlock, what: str) -> np.ndarray:
    if not isinstance(block, FixedWidthBlock):
        raise InvalidInputError(f"{what} needs fixed-width values, got a {type(block).__name__}")
    if block.bits_per_value not in (8, 16, 32, 64):
        raise UnsupportedError(f"{what}: {block.bits_per_value}-bit values (8, 16, 32 or 64 expected)")
    return uint_view(block.data, block.bits_per_value, block.num_values, what)


def run_starts(values: np.ndarray) -> np.ndarray:
    """Start index of every run of equal consecutive values (int64)."""
    if len(values) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.concatenate([[0], np.flatnonzero(values[1:] != values[:-1]) + 1]).astype(np.int64)


def runs_to_entries(values: np.ndarray, cuts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """RLE entries of ``values`` with runs also cut at the part boundaries ``cuts`` (sorted
    part starts, first 0). Returns entry values, u8 entry lengths and the number of entries
    of each part."""
    n = len(values)
    mark = np.empty(n, dtype=bool)
    mark[0] = True
    np.not_equal(values[1:], values[:-1], out=mark[1:])
    mark[cuts[cuts < n]] = True
    seg = np.flatnonzero(mark)
    seg_len = np.diff(np.append(seg, n))
    pieces = (seg_len + MAX_RUN - 1) // MAX_RUN
    if (pieces == 1).all():
        entry_vals, lengths = values[seg], seg_len.astype(np.uint8)
        part_first = np.searchsorted(seg, cuts)
    else:
        entry_vals = np.repeat(values[seg], pieces)
        lengths = np.full(int(pieces.sum()), MAX_RUN, dtype=np.uint8)
        lengths[np.cumsum(pieces) - 1] = (seg_len - MAX_RUN * (pieces - 1)).astype(np.uint8)
        part_first = exclusive_cumsum(pieces)[np.searchsorted(seg, cuts)]
    per_part = np.diff(np.append(part_first, len(lengths)))
    return entry_vals, lengths, per_part


class _RunIndex:
    """Encoded size of any range of values in O(log runs), from prefix sums over runs."""

    def __init__(self, values: np.ndarray) -> None:
        self.n = len(values)
        self.starts = run_starts(values)
        self.ends = np.append(self.starts[1:], self.n)
        entries = (self.ends - self.starts + MAX_RUN - 1) // MAX_RUN
        self.prefix = np.concatenate([[0], np.cumsum(entries)])
        self.entry_bytes = values.dtype.itemsize + 1

    def size(self, a: int, b: int) -> int:
        """Bytes of the RLE entries of values ``[a, b)``."""
        i0 = int(np.searchsorted(self.starts, a, "right")) - 1
        i1 = int(np.searchsorted(self.starts, b - 1, "right")) - 1
        if i0 == i1:
            entries = -(-(b - a) // MAX_RUN)
        else:
            first = -(-(int(self.ends[i0]) - a) // MAX_RUN)
            last = -(-(b - int(self.starts[i1])) // MAX_RUN)
            entries = first + int(self.prefix[i1] - self.prefix[i0 + 1]) + last
        return entries * self.entry_bytes


def rle_chunk_bounds(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Chunk starts and log2 values (0 for the last chunk) of a mini-block RLE page."""
    index = _RunIndex(values)
    n = len(values)
    starts: list[int] = []
    logs: list[int] = []
    pos = 0
    while pos < n:
        rem = n - pos
        starts.append(pos)
        if rem <= MAX_CHUNK_VALUES and index.size(pos, n) <= MAX_CHUNK_BYTES:
            logs.append(0)
            break
        prefix = 1 << (min(rem, MAX_CHUNK_VALUES).bit_length() - 1)
        while prefix > 1 and index.size(pos, pos + prefix) > MAX_CHUNK_BYTES:
            prefix >>= 1
        if prefix <= 1:
            raise UnsupportedError(f"rle: values at {pos} cannot form a chunk under {MAX_CHUNK_BYTES} bytes")
        logs.append(prefix.bit_length() - 1)
        pos += prefix
    return np.array(starts, dtype=np.int64), np.array(logs, dtype=np.uint8)


def encode_rle_miniblock(
    block: DataBlock, params: CompressionParams | None = None,
    codec: Codec | None = None, codecs: CodecEncoders | None = None
) -> MiniBlockCompressed:
    """Chunks of ``[run values][u8 run lengths]`` (module doc)."""
    values = _rle_values(block, "rle mini-block")
    cuts, logs = rle_chunk_bounds(values)
    vals, lengths, per_chunk = runs_to_entries(values, cuts)
    sizes = np.stack([per_chunk * values.dtype.itemsize, per_chunk], axis=1)
    return MiniBlockCompressed(
        [vals.view(np.uint8), lengths], sizes, logs, len(values), rle_encoding(values.dtype.itemsize * 8)
    )


def encode_rle_blocks(
    values: np.ndarray, counts: np.ndarray, codec: Codec | None = None
) -> tuple[np.ndarray, np.ndarray, pb.CompressiveEncoding]:
    """Many block buffers at once (levels of every mini-block chunk), each
    ``[u64 value bytes][run values][u8 run lengths]``; returns them back to back, their byte
    sizes and their encoding."""
    counts = np.asarray(counts, dtype=np.int64)
    if (counts <= 0).any():
        raise InvalidInputError("rle blocks: every part needs at least one value")
    cuts = exclusive_cumsum(counts)
    vals, lengths, per_part = runs_to_entries(values, cuts)
    wsize = values.dtype.itemsize
    value_bytes = per_part * wsize
    sizes = 8 + value_bytes + per_part
    out = np.empty(int(sizes.sum()), dtype=np.uint8)
    starts = exclusive_cumsum(sizes)
    out[starts[:, None] + np.arange(8)[None, :]] = value_bytes.astype("<u8").view(np.uint8).reshape(-1, 8)
    out[ragged_arange(starts + 8, value_bytes)] = vals.view(np.uint8)
    out[ragged_arange(starts + 8 + value_bytes, per_part)] = lengths
    return out, sizes, rle_encoding(values.dtype.itemsize * 8)


def encode_rle_block(
    block: DataBlock, params: CompressionParams | None = None,
    codec: Codec | None = None, codecs: CodecEncoders | None = None
) -> tuple[np.ndarray, pb.CompressiveEncoding]:
    """One buffer ``[u64 value bytes][run values][u8 run lengths]`` (module doc)."""
    values = _rle_values(block, "rle block")
    enc = rle_encoding(values.dtype.itemsize * 8)
    if len(values) == 0:
        return np.zeros(0, dtype=np.uint8), enc
    data, _, _ = encode_rle_blocks(values, np.array([len(values)]))
    return data, enc
