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
    starts = rel[:-1][np.diff(rel) > 0]
    ends = rel[1:][np.diff(rel) > 0]
    is_ff = src == FSST_ESC
    # A run of 0xFF bytes begins at a code position (after a non-0xFF byte or at a string start);
    # inside it escapes and their 0xFF literals alternate.
    mark = np.empty(size, dtype=bool)
    mark[0] = True
    np.logical_not(is_ff[:-1], out=mark[1:])
    mark[starts] = True
    idx = np.arange(size, dtype=np.int64)
    run_start = np.maximum.accumulate(np.where(mark, idx, 0))
    is_esc = is_ff & (((idx - run_start) & 1) == 0)
    if is_esc[ends - 1].any():
        raise CorruptFileError("fsst: a compressed string ends inside an escape")
    is_lit = np.zeros(size, dtype=bool)
    is_lit[1:] = is_esc[:-1]
    unit = np.flatnonzero(~is_esc)  # codes that expand to symbols, and literals
    u_byte = src[unit]
    u_lit = is_lit[unit]
    u_len = table.lens[u_byte].astype(np.int64)
    u_len[u_lit] = 1
    bad = (u_len == 0) & ~u_lit
    if bad.any():
        code = int(u_byte[np.argmax(bad)])
        raise CorruptFileError(f"fsst: code {code} is not in the symbol table ({table.n_symbols} symbols)")
    mat = table.symbols[u_byte]
    mat[u_lit, 0] = u_byte[u_lit]
    out = mat[np.arange(8) < u_len[:, None]]
    per_byte = np.zeros(size + 1, dtype=np.int64)
    per_byte[unit + 1] = u_len
    cum = np.cumsum(per_byte)
    new_offsets = cum[rel]
    if out.size >= 2**32 and out_dtype == np.uint32:
        out_dtype = np.dtype(np.uint64)
    return out, new_offsets.astype(out_dtype)


def _expand(msg: pb.Fsst, block: DataBlock) -> DataBlock:
    if not isinstance(block, VariableWidthBlock):
        raise CorruptFileError(f"fsst: inner encoding produced {type(block).__name__}, expected variable width")
    table = parse_symbol_table(msg.symbol_table)
    data, offsets = fsst_decompress(table, np.asarray(block.data, dtype=np.uint8), block.offsets)
    return VariableWidthBlock(offsets, data, block.num_values)


def decode_fsst_miniblock(msg: pb.Fsst, chunks: Sequence[Sequence[memoryview]], counts: np.ndarray) -> DataBlock:
    from lance_spark_ops.encoding.compression.decompress import decompress_miniblock_chunks

    return _expand(msg, decompress_miniblock_chunks(msg.values, chunks, counts))


def decode_fsst_block(msg: pb.Fsst, buffer: memoryview, num_values: int) -> DataBlock:
    from lance_spark_ops.encoding.compression.decompress import decompress_block

    return _expand(msg, decompress_block(msg.values, buffer, num_values))


def decode_fsst_per_value(msg: pb.Fsst, block: DataBlock) -> DataBlock:
    from lance_spark_ops.encoding.layout.fullzip import per_value

    return _expand(msg, per_value(msg.values, block))
