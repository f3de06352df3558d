"""Fsst: FSST string compression (Lance's own FSST implementation, ``rust/compression/fsst``).

``Fsst`` message = ``symbol_table`` (bytes, one table per page) + ``values`` (the nested
encoding of the *compressed* strings, always ``Variable``). The compressed strings keep
their own offsets, so the codec is transparent and works per value.

Symbol table bytes (2312 bytes as written; only the first 8 + 9 * n matter)::

    u64 header (little endian): bits 32..63 = 0x46535354 ("FSST"), bit 24 = encoder switch,
                                bits 16..23 suffix limit, bits 8..15 terminator,
                                bits 0..7 n = number of symbols (< 256)
    n x u64  symbol i, its bytes little endian in the low bytes
    n x u8   length of symbol i (1..8)

When the encoder switch is 0 (inputs under 32 KiB) the strings were stored as is.

Compressed string: a sequence of codes. Code c < n expands to symbol c (``len[c]`` bytes);
code 255 (escape) is followed by one literal byte. A string never ends inside an escape.
Example with symbol 0 = "ab" (len 2): ``00 ff 21 00`` decodes to ``ab!ab``.

Vectorised decode: escapes are found with a run-parity rule (in a run of 0xFF bytes that
starts at a code position, even positions are escapes and odd ones their literals; runs
restart at every string start), then every output-producing byte gathers its row of a
(256, 8) symbol matrix and a length mask keeps the first ``len`` bytes of each row.

pylance picks Fsst for text-like strings: mini-block ``Fsst(Variable)`` for short strings
(~20 B) and full-zip ``Fsst(Variable)`` per value for strings of 256 B+, when the page holds
enough bytes for FSST to pay off.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import DataBlock, VariableWidthBlock
from lance_spark_ops.errors import CorruptFileError

FSST_MAGIC = 0x46535354
FSST_ESC = 255
SYMBOL_TABLE_SIZE = 8 + 256 * 8 + 256


@dataclass(frozen=True)
class SymbolTable:
    enabled: bool  # encoder switch: False means the strings are stored uncompressed
    n_symbols: int
    symbols: np.ndarray  # (256, 8) uint8; rows >= n_symbols are zero
    lens: np.ndarray  # (256,) uint8; 0 for codes that are not symbols


def parse_symbol_table(raw: bytes) -> SymbolTable:
    raw = bytes(raw)
    if len(raw) < 8:
        raise CorruptFileError(f"fsst: symbol table of {len(raw)} bytes is shorter than its header")
    header = int.from_bytes(raw[:8], "little")
    if header >> 32 != FSST_MAGIC:
        raise CorruptFileError(f"fsst: symbol table magic {header >> 32:#x}, expected {FSST_MAGIC:#x}")
    n = header & 0xFF
    if len(raw) < 8 + 9 * n:
        raise CorruptFileError(f"fsst: symbol table of {len(raw)} bytes cannot hold {n} symbols")
    symbols = np.zeros((256, 8), dtype=np.uint8)
    lens = np.zeros(256, dtype=np.uint8)
    symbols[:n] = np.frombuffer(raw, dtype=np.uint8, count=8 * n, offset=8).reshape(n, 8)
    lens[:n] = np.frombuffer(raw, dtype=np.uint8, count=n, offset=8 + 8 * n)
    if n and (lens[:n].min() < 1 or lens[:n].max() > 8):
        raise CorruptFileError("fsst: symbol lengths must be 1..8")
    return SymbolTable(bool(header & (1 << 24)), n, symbols, lens)


def fsst_decompress(
    table: SymbolTable, data: np.ndarray, offsets: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Decode the strings ``data[offsets[i]:offsets[i + 1]]``; returns (bytes, offsets from 0)."""
    o = np.asarray(offsets).astype(np.int64)
    if o.size == 0:
        raise CorruptFileError("fsst: empty offsets array")
    if (np.diff(o) < 0).any() or int(o[0]) < 0 or int(o[-1]) > data.size:
        raise CorruptFileError("fsst: offsets are not monotonic within the compressed bytes")
    src = data[int(o[0]) : int(o[-1])]
    rel = o - o[0]
    out_dtype = np.asarray(offsets).dtype if np.asarray(offsets).dtype.kind == "u" else np.dtype(np.uint64)
    if not table.enabled:
        return src, rel.astype(out_dtype)
    size = src.size
    if size == 0:
        return src, rel.astype(out_dtype)
    nonempty = np.diff(rel) > 0
    per_byte = table.lens[src].astype(np.int64)  # output bytes produced by each input byte
    ff = np.flatnonzero(src == FSST_ESC)
    esc = lit = None
    if ff.size:
        # A run of 0xFF bytes begins at a code position (after a non-0xFF byte or at a string
        # start); inside it escapes and their 0xFF literals alternate.
        is_start = np.zeros(size, dtype=bool)
        is_start[rel[:-1][nonempty]] = True
        new_run = np.ones(ff.size, dtype=bool)
        new_run[1:] = ff[1:] != ff[:-1] + 1
        new_run |= is_start[ff]
        run_first = ff[new_run][np.cumsum(new_run) - 1]
        esc = ff[((ff - run_first) & 1) == 0]
        is_end = np.zeros(size, dtype=bool)
        is_end[rel[1:][nonempty] - 1] = True
        if is_end[esc].any():
            raise CorruptFileError("fsst: a compressed string ends inside an escape")
        lit = esc + 1
        per_byte[esc] = 0
        per_byte[lit] = 1
    bad = per_byte == 0  # a code that is not a symbol (escapes excepted)
    if esc is not None:
        bad[esc] = False
    if bad.any():
        code = int(src[np.argmax(bad)])
        raise CorruptFileError(f"fsst: code {code} is not in the symbol table ({table.n_symbols} symbols)")
    cum = np.zeros(size + 1, dtype=np.int64)
    np.cumsum(per_byte, out=cum[1:])
    total = int(cum[-1])
    # Output byte j copies flat[first[u] + (j - start[u])] for the unit u (a symbol code or a
    # literal) covering j: symbol bytes live at code * 8 of the flattened (256, 8) matrix,
    # literals after it. The index runs are built as a cumulative sum of +1 steps with a jump
    # at each unit start.
    flat = table.symbols.reshape(-1)
    first = src.astype(np.int64) * 8
    if esc is not None:
        first[lit] = flat.size + np.arange(lit.size, dtype=np.int64)
        flat = np.concatenate((flat, src[lit]))
        keep = per_byte > 0
        first, ulen, ustart = first[keep], per_byte[keep], cum[:-1][keep]
    else:
        ulen, ustart = per_byte, cum[:-1]
    dt = np.int32 if total < 2**31 and flat.size < 2**31 else np.int64
    jump = first.copy()
    jump[1:] -= first[:-1] + ulen[:-1] - 1
    steps = np.ones(total, dtype=dt)
    steps[ustart] = jump
    out = flat[np.cumsum(steps, dtype=dt)]
    new_offsets = cum[rel]
    if out.size >= 2**32 and out_dtype == np.uint32:
        out_dtype = np.dtype(np.uint64)
    return out, new_offsets.astype(out_dtype)


def _expand(msg: pb.Fsst, block: DataBlock) -> DataBlock:
    if not isinstance(block, VariableWidthBlock):
        raise CorruptFileError(
            f"fsst: inner encoding produced {type(block).__name__}, expected variable width"
        )
    table = parse_symbol_table(msg.symbol_table)
    data, offsets = fsst_decompress(table, np.asarray(block.data, dtype=np.uint8), block.offsets)
    return VariableWidthBlock(offsets, data, block.num_values)


def decode_fsst_miniblock(
    msg: pb.Fsst, chunks: Sequence[Sequence[memoryview]], counts: np.ndarray
) -> DataBlock:
    from lance_spark_ops.encoding.compression.decompress import decompress_miniblock_chunks

    return _expand(msg, decompress_miniblock_chunks(msg.values, chunks, counts))


def decode_fsst_block(msg: pb.Fsst, buffer: memoryview, num_values: int) -> DataBlock:
    from lance_spark_ops.encoding.compression.decompress import decompress_block

    return _expand(msg, decompress_block(msg.values, buffer, num_values))


def decode_fsst_per_value(msg: pb.Fsst, block: DataBlock) -> DataBlock:
    from lance_spark_ops.encoding.layout.fullzip import per_value

    return _expand(msg, per_value(msg.values, block))
