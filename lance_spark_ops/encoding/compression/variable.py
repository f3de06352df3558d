"""Variable: the uncompressed form of variable-width data (strings, binary), ``Variable``
message = ``offsets`` (a nested encoding, always ``Flat`` of 32 or 64 bits) + optional
``values`` buffer compression (never written by Lance; refused here).

On-disk layouts, by context:

- mini-block chunk (one buffer per chunk): ``num_values + 1`` offsets (u32 / u64) measured
  from the start of the chunk buffer, then the value bytes, then padding to 4 / 8 bytes.
  Value i is ``chunk[offsets[i]:offsets[i + 1]]``, so ``offsets[0]`` is the size of the offsets
  array itself. Example, chunk of ``["ab", "c"]`` (32-bit)::

      0c 00 00 00 | 0e 00 00 00 | 0f 00 00 00 | 61 62 63 | 48   (pad byte 72)

- block (a dictionary, or the payload of General): ``u32 32, u32 bytes_start`` (or ``u64 64,
  u64 bytes_start``), then the offsets, then the bytes from ``bytes_start`` on; offsets index
  those bytes. A legacy form (``u8 bits, u32/u64 num_values, u32/u64 bytes_start``) is
  recognised by non-zero bytes 1..3. Example ``["ab", "c"]``: ``20000000 14000000 00000000
  02000000 03000000 616263``.
- per value (full-zip): the full-zip layout already produced offsets + bytes; nothing to undo.

pylance picks Variable for binary data in mini-block pages (random bytes, or with
``lance-encoding:compression=none``), under Fsst for text, under General for zstd / lz4
and, in block form, for string dictionaries.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import DataBlock, VariableWidthBlock
from lance_spark_ops.encoding.compression._arrays import (
    as_u8,
    check_chunk_counts,
    exclusive_cumsum,
    join,
    ragged_arange,
)
from lance_spark_ops.errors import CorruptFileError, UnsupportedError


def offset_bits(msg: pb.Variable) -> int:
    """The offset width (32 / 64) of a ``Variable`` message; refuses what Lance never writes."""
    if msg.HasField("values"):
        raise UnsupportedError("variable: buffer compression of the value bytes is not supported")
    kind = msg.offsets.WhichOneof("compression")
    if kind != "flat":
        raise UnsupportedError(f"variable: offsets encoded as {kind} (only flat offsets are supported)")
    if msg.offsets.flat.HasField("data"):
        raise UnsupportedError("variable: buffer compression of the offsets is not supported")
    bits = int(msg.offsets.flat.bits_per_value)
    if bits not in (32, 64):
        raise UnsupportedError(f"variable: {bits}-bit offsets (expected 32 or 64)")
    return bits


def _offset_dtype(bits: int) -> np.dtype:
    return np.dtype("<u4") if bits == 32 else np.dtype("<u8")


def gather_segments(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenate ``buf[starts[i]:starts[i] + lengths[i]]`` for sorted, non-overlapping,
    bounds-checked segments, without a per-segment Python loop (a +1/-1 mask over ``buf``)."""
    keep = np.asarray(lengths) > 0
    s = np.asarray(starts, dtype=np.int64)[keep]
    e = s + np.asarray(lengths, dtype=np.int64)[keep]
    if s.size == 0:
        return np.zeros(0, dtype=np.uint8)
    if s.size == 1 or bool((s[1:] == e[:-1]).all()):
        return buf[s[0] : e[-1]]
    if s.size <= 32:
        return np.concatenate([buf[a:b] for a, b in zip(s.tolist(), e.tolist(), strict=False)])
    delta = np.zeros(buf.size + 1, dtype=np.int8)
    delta[s] += 1
    delta[e] -= 1
    return buf[np.cumsum(delta[:-1], dtype=np.int8).view(bool)]


def decode_variable_miniblock(
    msg: pb.Variable, chunks: Sequence[Sequence[memoryview]], counts: np.ndarray
) -> DataBlock:
    bits = offset_bits(msg)
    w = bits // 8
    counts = check_chunk_counts(chunks, counts, 1, "variable")
    bufs = [c[0] for c in chunks]
    if not bufs:
        return VariableWidthBlock(np.zeros(1, dtype=_offset_dtype(bits)), np.zeros(0, np.uint8), 0)
    sizes = np.fromiter((len(b) for b in bufs), dtype=np.int64, count=len(bufs))
    need = (counts + 1) * w
    if (sizes < need).any():
        i = int(np.argmax(sizes < need))
        raise CorruptFileError(
            f"variable: chunk {i} has {int(sizes[i])} bytes, too few for {int(counts[i])} offsets"
        )
    # Chunks are joined; each chunk's offsets become absolute positions in the joined bytes.
    data = join(bufs)
    bases = exclusive_cumsum(sizes)
    raw = data[ragged_arange(bases, need)].view(_offset_dtype(bits)).astype(np.int64)
    chunk_of = np.repeat(np.arange(len(bufs)), counts + 1)
    if raw.size and ((raw < 0).any() or (raw > sizes[chunk_of]).any()):
        raise CorruptFileError("variable: a mini-block offset points outside its chunk")
    first = np.concatenate(([0], np.cumsum(counts + 1)[:-1])).astype(np.int64)
    last = first + counts
    steps = np.diff(raw)
    inner = np.ones(steps.size, dtype=bool)
    inner[last[:-1]] = False  # steps that cross from one chunk to the next
    if (steps[inner] < 0).any():
        raise CorruptFileError("variable: mini-block offsets are not monotonic")
    if (raw[first] < need).any():
        raise CorruptFileError("variable: mini-block value bytes overlap the offsets")
    absolute = raw + bases[chunk_of]
    # Values of a chunk are contiguous: gather one byte segment per chunk.
    seg_start, seg_end = absolute[first], absolute[last]
    values = gather_segments(data, seg_start, seg_end - seg_start)
    # Offsets of each value relative to the joined value bytes.
    seg_base = exclusive_cumsum(seg_end - seg_start)
    keep = np.ones(raw.size, dtype=bool)
    keep[first[1:]] = False  # a chunk's first offset equals the previous chunk's last
    rel = (absolute - seg_start[chunk_of] + seg_base[chunk_of])[keep]
    total = int(counts.sum())
    offsets = rel.astype(np.uint32 if values.size < 2**32 and bits == 32 else np.uint64)
    return VariableWidthBlock(offsets, values, total)


def decode_variable_block(msg: pb.Variable, buffer: memoryview, num_values: int) -> DataBlock:
    offset_bits(msg)
    data = as_u8(buffer)
    if data.size < 8:
        raise CorruptFileError(f"variable block: {data.size} bytes, too small for its header")
    legacy = bool(data[1] or data[2] or data[3])
    if legacy:
        bits = int(data[0])
        if bits not in (32, 64):
            raise CorruptFileError(f"variable block: bad offset width {bits}")
        w = bits // 8
        header = 1 + 2 * w
        if data.size < header:
            raise CorruptFileError("variable block: truncated legacy header")
        bytes_start = int(data[1 + w : header].view(_offset_dtype(bits))[0])
    else:
        bits = int(data[:4].view("<u4")[0])
        if bits == 32:
            header, bytes_start = 8, int(data[4:8].view("<u4")[0])
        elif bits == 64:
            if data.size < 16:
                raise CorruptFileError("variable block: truncated 64-bit header")
            header, bytes_start = 16, int(data[8:16].view("<u8")[0])
        else:
            raise CorruptFileError(f"variable block: bad offset width {bits}")
    w = bits // 8
    if bytes_start > data.size or bytes_start < header or (bytes_start - header) % w:
        raise CorruptFileError(f"variable block: value bytes start at {bytes_start}, buffer has {data.size}")
    n_off = (bytes_start - header) // w
    if n_off < num_values + 1:
        raise CorruptFileError(f"variable block: {n_off} offsets for {num_values} values")
    offsets = np.frombuffer(data[header : header + (num_values + 1) * w].tobytes(), dtype=_offset_dtype(bits))
    values = data[bytes_start:]
    if offsets.size and ((np.diff(offsets.astype(np.int64)) < 0).any() or int(offsets[-1]) > values.size):
        raise CorruptFileError("variable block: offsets are not monotonic within the value bytes")
    return VariableWidthBlock(offsets, values, num_values)


def decode_variable_per_value(msg: pb.Variable, block: DataBlock) -> DataBlock:
    offset_bits(msg)
    if not isinstance(block, VariableWidthBlock):
        raise CorruptFileError(f"variable: expected variable-width values, got {type(block).__name__}")
    return block
