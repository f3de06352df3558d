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

Writing, byte for byte as pylance 14 (2.1 and 2.2 alike): a mini-block chunk holds the
largest power-of-two count of values (at least 2) whose ``(count + 1)`` offsets plus bytes
fit in 4 KiB (``LANCE_BINARY_MINIBLOCK_CHUNK_SIZE`` / ``minichunk-size`` override it); once
the doubling passes the values left, the rest is the last chunk if it fits. Chunks are
padded to 4 (32-bit) / 8 (64-bit) bytes with 0x48 and the padded size is the chunk's buffer
size; the last chunk's log is 0. Example: 5000 random 0..59-byte values (32-bit) give
chunks of 128 values (~3.9 KiB). The block form rebases the offsets to 0.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import DataBlock, VariableWidthBlock
from lance_spark_ops.encoding.compression._arrays import (
    as_u8,
    check_chunk_counts,
    check_range_counts,
    check_ranges,
    exclusive_cumsum,
    join_with_starts,
    ragged_arange,
    scatter_ragged,
)
from lance_spark_ops.encoding.compression.contexts import CodecEncoders
from lance_spark_ops.encoding.compression.encoded import CodecLookup, CompressionParams, MiniBlockCompressed
from lance_spark_ops.encoding.compression.strategy import Codec
from lance_spark_ops.errors import CorruptFileError, InvalidInputError, UnsupportedError


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
    bounds-checked segments. Long segments (>= 64 bytes on average) are joined as slices
    (memcpy speed, one step per segment); many short ones with a +1/-1 mask over ``buf``."""
    keep = np.asarray(lengths) > 0
    s = np.asarray(starts, dtype=np.int64)[keep]
    e = s + np.asarray(lengths, dtype=np.int64)[keep]
    if s.size == 0:
        return np.zeros(0, dtype=np.uint8)
    if s.size == 1 or bool((s[1:] == e[:-1]).all()):
        return buf[s[0] : e[-1]]
    if s.size <= 32 or int((e - s).sum()) >= 64 * s.size:
        return np.concatenate([buf[a:b] for a, b in zip(s.tolist(), e.tolist(), strict=True)])
    delta = np.zeros(buf.size + 1, dtype=np.int8)
    delta[s] += 1
    delta[e] -= 1
    return buf[np.cumsum(delta[:-1], dtype=np.int8).view(bool)]


def decode_variable_miniblock(
    msg: pb.Variable, chunks: Sequence[Sequence[memoryview]], counts: np.ndarray,
    codecs: CodecLookup | None = None
) -> DataBlock:
    bits = offset_bits(msg)
    counts = check_chunk_counts(chunks, counts, 1, "variable")
    bufs = [c[0] for c in chunks]
    if not bufs:
        return VariableWidthBlock(np.zeros(1, dtype=_offset_dtype(bits)), np.zeros(0, np.uint8), 0)
    data, bases, sizes = join_with_starts(bufs)
    return _decode_chunks(bits, data, bases, sizes, counts)


def _range_chunks(msg: pb.Variable, data: np.ndarray, starts: np.ndarray, sizes: np.ndarray,
                  counts: np.ndarray) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Chunks given as ``(k, 1)`` byte ranges of ``data``, checked: (offset bits, the page as
    bytes, each chunk's start and size, value counts)."""
    bits = offset_bits(msg)
    counts = check_range_counts(starts, sizes, counts, 1, "variable")
    bases, sizes = starts[:, 0].astype(np.int64), sizes[:, 0].astype(np.int64)
    if len(counts):
        check_ranges(data, bases, sizes, "variable")
    return bits, as_u8(data), bases, sizes, counts


def decode_variable_miniblock_ranges(
    msg: pb.Variable, data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, counts: np.ndarray,
    codecs: CodecLookup | None = None
) -> DataBlock:
    """Mini-block chunks given as ``(k, 1)`` byte ranges of ``data`` (no per-chunk views or
    copies: the value bytes are cut straight from the page)."""
    bits, data, bases, sizes, counts = _range_chunks(msg, data, starts, sizes, counts)
    if not len(counts):
        return VariableWidthBlock(np.zeros(1, dtype=_offset_dtype(bits)), np.zeros(0, np.uint8), 0)
    return _decode_chunks(bits, data, bases, sizes, counts)


def _chunk_offsets(bits: int, data: np.ndarray, bases: np.ndarray, sizes: np.ndarray, counts: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The ``counts[i] + 1`` offsets at the head of each chunk (relative to the chunk's
    start, joined), where each chunk's run of them begins, and each chunk's first and last
    offset, checked: the offsets fit their chunk and rise within its value bytes."""
    w = bits // 8
    need = (counts + 1) * w
    if (sizes < need).any():
        i = int(np.argmax(sizes < need))
        raise CorruptFileError(
            f"variable: chunk {i} has {int(sizes[i])} bytes, too few for {int(counts[i])} offsets"
        )
    raw = gather_segments(data, bases, need).view(_offset_dtype(bits))
    first = np.cumsum(counts + 1) - (counts + 1)
    o_first = raw[first].astype(np.int64)
    o_last = raw[first + counts].astype(np.int64)
    if (o_first < need).any() or (o_last > sizes).any() or (o_last < o_first).any():
        raise CorruptFileError("variable: mini-block offsets point outside their chunk's value bytes")
    if raw.size > 1:
        rises = raw[1:] >= raw[:-1]
        rises[first[1:] - 1] = True  # a chunk's first offset follows the previous chunk's last
        if not rises.all():
            raise CorruptFileError("variable: mini-block offsets are not monotonic")
    return raw, first, o_first, o_last


def value_bounds(msg: pb.Variable, data: np.ndarray, starts: np.ndarray, sizes: np.ndarray,
                 counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Where each value of mini-block chunks given as byte ranges of ``data`` lies in
    ``data``: (starts, ends, number of values), checked as ``decode_variable_miniblock_ranges``
    checks them, without joining the value bytes (for a decoder that reads them in place)."""
    bits, data, bases, sizes, counts = _range_chunks(msg, data, starts, sizes, counts)
    if not len(counts):
        return np.zeros(0, np.int64), np.zeros(0, np.int64), 0
    raw, first, _, _ = _chunk_offsets(bits, data, bases, sizes, counts)
    at = raw.astype(np.int64) + np.repeat(bases, counts + 1)
    return np.delete(at, first + counts), np.delete(at, first), int(counts.sum())


def _decode_chunks(bits: int, data: np.ndarray, bases: np.ndarray, sizes: np.ndarray,
                   counts: np.ndarray) -> VariableWidthBlock:
    """Chunk i is ``data[bases[i]:+sizes[i]]`` (in order, not overlapping): ``counts[i] + 1``
    offsets relative to the chunk's start, then its value bytes."""
    raw, first, o_first, o_last = _chunk_offsets(bits, data, bases, sizes, counts)
    # Values of a chunk are contiguous: one byte segment per chunk.
    seg_len = o_last - o_first
    values = gather_segments(data, bases + o_first, seg_len)
    # Offsets relative to the joined value bytes: shift each chunk by (its first offset -
    # where its bytes land), and drop each chunk's first entry but the first chunk's.
    it = np.int64 if bits == 64 or values.size >= 2**31 or int(sizes.max()) >= 2**31 else np.int32
    shift = (o_first - exclusive_cumsum(seg_len)).astype(it)
    rel = raw.astype(it) - np.repeat(shift, counts + 1)
    rel = np.delete(rel, first[1:]) if len(first) > 1 else rel
    total = int(counts.sum())
    offsets = rel.astype(np.uint32 if values.size < 2**32 and bits == 32 else np.uint64)
    return VariableWidthBlock(offsets, values, total)


def decode_variable_block(
    msg: pb.Variable, buffer: memoryview, num_values: int, codecs: CodecLookup | None = None
) -> DataBlock:
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


def decode_variable_per_value(
    msg: pb.Variable, block: DataBlock, codecs: CodecLookup | None = None
) -> DataBlock:
    offset_bits(msg)
    if not isinstance(block, VariableWidthBlock):
        raise CorruptFileError(f"variable: expected variable-width values, got {type(block).__name__}")
    return block


# ----------------------------------------------------------------------------- encoders

MINICHUNK_SIZE = 4 * 1024  # Lance's AIM_MINICHUNK_SIZE (2.1 and 2.2 alike, as pylance 14 writes)
MAX_MINIBLOCK_VALUES = 4096
PAD_BYTE = 72  # Lance pads variable mini-block chunks with b"H"


def variable_encoding(bits: int) -> pb.CompressiveEncoding:
    """``Variable { offsets: Flat(bits) }``."""
    return pb.CompressiveEncoding(
        variable=pb.Variable(offsets=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=bits)))
    )


def _variable_input(block: DataBlock, what: str) -> tuple[np.ndarray, np.ndarray, int]:
    """(offsets as int64 from 0, value bytes, offset width in bits) of a variable block."""
    if not isinstance(block, VariableWidthBlock):
        raise InvalidInputError(f"{what} needs variable-width values, got a {type(block).__name__}")
    raw = np.asarray(block.offsets)
    bits = raw.dtype.itemsize * 8
    if bits not in (32, 64):
        raise UnsupportedError(f"{what}: {bits}-bit offsets (expected 32 or 64)")
    offs = raw.astype(np.int64)
    if offs.size != block.num_values + 1:
        raise InvalidInputError(f"{what}: {offs.size} offsets for {block.num_values} values")
    data = as_u8(block.data)
    if offs.size and (int(offs[0]) < 0 or int(offs[-1]) > data.size or (np.diff(offs) < 0).any()):
        raise InvalidInputError(f"{what}: offsets are not monotonic within the {data.size} value bytes")
    base = int(offs[0]) if offs.size else 0
    end = int(offs[-1]) if offs.size else 0
    return offs - base, data[base:end], bits


def _minichunk_size(params: CompressionParams | None) -> int:
    raw = (params.extra.get("minichunk-size") if params is not None else None) or os.environ.get(
        "LANCE_BINARY_MINIBLOCK_CHUNK_SIZE"
    )
    try:
        return int(raw) if raw is not None else MINICHUNK_SIZE
    except ValueError:
        return MINICHUNK_SIZE


def chunk_ends(offsets: np.ndarray, width: int, limit: int = MINICHUNK_SIZE) -> np.ndarray:
    """Value index where each mini-block chunk ends (Lance's ``search_next_offset_idx``).

    From a chunk start s, the count doubles from 2 while ``2k`` values still fit (``(k + 1)``
    offsets plus their bytes <= ``limit``) and stay within the values left; a chunk holds
    at least 2 values. When the doubling passes the values left, the rest becomes the final
    chunk if it fits. With ``g[i] = offsets[i] + i * width`` the chunk ``[s, s + k)`` takes
    ``g[s + k] - g[s] + width`` bytes, so the largest fitting k is one ``searchsorted`` on
    the monotonic ``g``. The chunks are found in vectorised runs: after a chunk of k values
    the next ones are guessed to hold k values too, all guesses are checked at once, and
    the run of correct guesses is kept (homogeneous data: a few steps per page).
    """
    n = len(offsets) - 1
    if n <= 0:
        return np.zeros(1, np.int64)
    g = np.asarray(offsets, dtype=np.int64) + np.arange(n + 1, dtype=np.int64) * width
    ends: list[np.ndarray] = []
    s, guesses = 0, 16
    while s < n:
        e = int(_chunk_end(g, n, np.array([s]), limit, width)[0])
        ends.append(np.array([e]))
        num, m = e - s, min(guesses, (n - e) // max(e - s, 1))
        s = e
        if m < 2:
            continue
        cand = e + num * np.arange(m, dtype=np.int64)  # guessed chunk starts
        good = _chunk_end(g, n, cand, limit, width) == cand + num
        k = m if good.all() else int(np.argmin(good))
        if k:
            ends.append(cand[:k] + num)
            s = int(cand[k - 1] + num)
        guesses = guesses * 2 if k == m else 16
    return np.concatenate(ends)


def _chunk_end(g: np.ndarray, n: int, starts: np.ndarray, limit: int, width: int) -> np.ndarray:
    """End of the chunk beginning at each of ``starts`` (``chunk_ends``' rule, vectorised)."""
    rest = n - starts
    kmax = np.searchsorted(g, g[starts] + (limit - width), side="right") - 1 - starts
    span = np.minimum(np.minimum(kmax, rest), MAX_MINIBLOCK_VALUES // 2)
    # the largest power of two <= span (span >= 2), else 2
    num = np.where(span >= 2, np.left_shift(1, np.frexp(np.maximum(span, 1))[1] - 1), 2)
    end = np.where((2 * num > rest) & (kmax >= rest), n, np.minimum(starts + num, n))
    return np.where(rest <= 1, n, end).astype(np.int64)


def encode_variable_miniblock(
    block: DataBlock, params: CompressionParams | None = None,
    codec: Codec | None = None, codecs: CodecEncoders | None = None
) -> MiniBlockCompressed:
    """Chunks of ``offsets | bytes | pad`` (see the module docstring), byte for byte as
    Lance's ``BinaryMiniBlockEncoder``: offsets relative to the chunk start, padding to 4
    (32-bit) or 8 (64-bit) bytes with 0x48, the last chunk's log 0."""
    offs, data, bits = _variable_input(block, "variable mini-block")
    w = bits // 8
    n = len(offs) - 1
    ends = chunk_ends(offs, w, _minichunk_size(params))
    starts = np.concatenate(([0], ends[:-1]))
    counts = ends - starts
    head = (counts + 1) * w
    nbytes = offs[ends] - offs[starts]
    sizes = -(-(head + nbytes) // w) * w
    base = exclusive_cumsum(sizes)
    out = np.empty(int(sizes.sum()), dtype=np.uint8)  # offsets, bytes, then PAD_BYTE (below)
    # offsets: chunk c's entries j = 0..count (of value starts_c + j) sit at base + j * w
    # (base is a multiple of w), each ``offs[starts_c + j] + adj_c``. Entries j < count are
    # one per value, in value order (value i -> slot i + base_c / w - starts_c); the last
    # entry of each chunk is its end offset.
    ov = out.view(_offset_dtype(bits))
    adj = head - offs[starts]
    slots = np.repeat(base // w - starts, counts)
    slots += np.arange(len(slots), dtype=np.int64)
    ov[slots] = offs[:-1] + np.repeat(adj, counts)
    ov[base // w + counts] = offs[ends] + adj
    # value bytes: chunk c's bytes follow its offsets
    dst = base + head
    if len(counts) == 1 or nbytes.sum() == 0:
        out[int(dst[0]) : int(dst[0]) + int(nbytes[0])] = data[: int(nbytes[0])]
    else:
        scatter_ragged(out, dst, data, offs[starts], nbytes)
    pad = sizes - head - nbytes
    if pad.any():
        out[ragged_arange(dst + nbytes, pad)] = PAD_BYTE
    logs = np.where(counts > 0, np.log2(np.maximum(counts, 1)), 0).astype(np.uint8)
    logs[-1] = 0
    del n
    return MiniBlockCompressed([out], sizes[:, None].astype(np.int64), logs, int(block.num_values),
                               variable_encoding(bits))


def encode_variable_block(
    block: DataBlock, params: CompressionParams | None = None,
    codec: Codec | None = None, codecs: CodecEncoders | None = None
) -> tuple[np.ndarray, pb.CompressiveEncoding]:
    """``u32 32, u32 bytes_start`` (``u64 64, u64 bytes_start``), offsets from 0, bytes."""
    offs, data, bits = _variable_input(block, "variable block")
    w = bits // 8
    dt = _offset_dtype(bits)
    header = np.array([bits, 2 * w + offs.size * w], dtype=dt)
    out = np.concatenate((header.view(np.uint8), offs.astype(dt).view(np.uint8), data))
    return out, variable_encoding(bits)


def encode_variable_per_value(
    block: DataBlock, params: CompressionParams | None = None,
    codec: Codec | None = None, codecs: CodecEncoders | None = None
) -> tuple[DataBlock, pb.CompressiveEncoding]:
    """Full-zip values: Variable is the identity (the layout writes length prefixes)."""
    offs, data, bits = _variable_input(block, "variable per-value")
    values = VariableWidthBlock(offs.astype(_offset_dtype(bits)), data, int(block.num_values))
    return values, variable_encoding(bits)
