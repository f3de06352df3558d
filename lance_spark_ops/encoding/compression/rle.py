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

pylance picks Rle for mini-block values when the number of runs is below half the number of
values (``lance-encoding:rle-threshold``), for constant numbers in 2.1, and (2.2) for levels
that are mostly one value (e.g. the def levels of a mostly-null column).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import FixedWidthBlock
from lance_spark_ops.encoding.compression._arrays import (
    as_u8,
    buffer_sizes,
    check_chunk_counts,
    exclusive_cumsum,
    item_dtype,
    join,
    ragged_arange,
)
from lance_spark_ops.errors import CorruptFileError, UnsupportedError


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
    msg: pb.Rle, chunks: Sequence[Sequence[memoryview]], counts: np.ndarray
) -> FixedWidthBlock:
    bits = _value_bits(msg)
    counts = check_chunk_counts(chunks, counts, 2, "rle mini-block")
    vbufs = [c[0] for c in chunks]
    lbufs = [c[1] for c in chunks]
    vsizes, nruns = buffer_sizes(vbufs), buffer_sizes(lbufs)
    if (vsizes != nruns * (bits // 8)).any():
        i = int(np.argmax(vsizes != nruns * (bits // 8)))
        raise CorruptFileError(
            f"rle mini-block: chunk {i} has {int(vsizes[i])} bytes of {bits}-bit run values "
            f"but {int(nruns[i])} run lengths"
        )
    return expand_runs(
        join(vbufs) if vbufs else np.zeros(0, np.uint8),
        join(lbufs) if lbufs else np.zeros(0, np.uint8),
        nruns,
        counts,
        bits,
        "rle mini-block",
    )


def decode_rle_blocks(msg: pb.Rle, buffers: Sequence[memoryview], counts: np.ndarray) -> FixedWidthBlock:
    """Decode many block-context RLE buffers at once (e.g. levels of all mini-block chunks)."""
    bits = _value_bits(msg)
    vbytes = bits // 8
    counts = np.asarray(counts, dtype=np.int64)
    sizes = buffer_sizes(buffers)
    if (sizes < 8).any():
        raise CorruptFileError(f"rle block: buffer of {int(sizes.min())} bytes has no 8-byte header")
    data = join(buffers) if buffers else np.zeros(0, np.uint8)
    starts = exclusive_cumsum(sizes)
    header_idx = starts[:, None] + np.arange(8, dtype=np.int64)[None, :]
    value_bytes = np.ascontiguousarray(data[header_idx]).view("<u8").reshape(-1).astype(np.int64)
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
    values = data[ragged_arange(starts + 8, value_bytes)]
    lengths = data[ragged_arange(starts + 8 + value_bytes, nruns)]
    return expand_runs(values, lengths, nruns, counts, bits, "rle block")


def decode_rle_block(msg: pb.Rle, buffer: memoryview, num_values: int) -> FixedWidthBlock:
    if num_values == 0 and len(buffer) == 0:
        return FixedWidthBlock(as_u8(b""), _value_bits(msg), 0)
    return decode_rle_blocks(msg, [buffer], np.array([num_values], dtype=np.int64))
