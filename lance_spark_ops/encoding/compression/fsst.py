"""Fsst: FSST string compression (Lance's own FSST implementation, ``rust/compression/fsst``).

``Fsst`` message = ``symbol_table`` (bytes, one table per page) + ``values`` (the nested
encoding of the *compressed* strings, always ``Variable``). The compressed strings keep
their own offsets, so the codec is transparent and works per value.

Symbol table bytes (always 2312 bytes as written; only the first 8 + 9 * n matter)::

    u64 header (little endian): bits 32..63 = 0x46535354 ("FSST"), bit 24 = encoder switch,
                                bits 16..23 suffix limit, bits 8..15 terminator,
                                bits 0..7 n = number of symbols (< 256)
    n x u64  symbol i, its bytes little endian in the low bytes (zero past its length)
    n x u8   length of symbol i (1..8)
    zeros up to 2312 bytes

Symbols are numbered as FSST's ``finalize`` numbers them: 2-byte symbols first (those that
are a prefix of a longer symbol from 0 up - their count is the suffix limit - the others
from the top of the 2-byte range down), then 3-, 4-, ... 8-byte symbols, 1-byte symbols
last; within a group in the order they were chosen (gain, then value). The terminator is
the sample's rarest byte. Decoders only use n, the symbols and their lengths.

When the encoder switch is 0 (inputs under 32 KiB) the strings are stored as is and the
header is just the magic.

Compressed string: a sequence of codes. Code c < n expands to symbol c (``len[c]`` bytes);
code 255 (escape) is followed by one literal byte. A string never ends inside an escape.
Example with symbol 0 = "ab" (len 2): ``00 ff 21 00`` decodes to ``ab!ab``; its table
is ``0100000154535346 | 6162000000000000 | 02`` + zeros.

Encoder design (``fsst_encode.py``; no Python loop per byte or per string):

1. Sample: strings drawn at random (fixed seed) until ~16 KiB (Lance's own sample target),
   cut into 64-byte pieces.
2. Table construction, FSST's five rounds but batched: each round parses the whole sample
   with the current table (step 3), then counts with ``np.bincount`` / ``np.unique`` every
   token and every adjacent token pair (and token + next token's first byte). Candidates are
   the tokens themselves (gain = count x length, x8 for single bytes) and the pair
   concatenations cut to 8 bytes (gain = count x length); duplicates are merged with one
   ``lexsort`` + ``add.reduceat``, the 255 highest gains kept (a 3+-byte candidate whose
   hash slot a better one holds is dropped, as FSST's hash insert drops it). The round
   whose table gives the smallest sample wins.
3. Parsing is FSST's compressor rule, evaluated for many cursors at once: the next 8 bytes
   at each cursor are one unaligned ``uint64`` gather from a zero-copy stride-1 view of the
   data; the 3-byte prefix is hashed (multiply-shift) into a 4096-slot table holding at most
   one symbol of 3..8 bytes, compared under a length mask; otherwise a 65536-entry table on
   the first two bytes gives the 2-byte symbol, else the 1-byte symbol, else an escape.
   Strings are cut into pieces of at most 511 bytes (FSST does the same); one step matches
   one token at the cursor of every unfinished piece and advances it by the token's length,
   so the number of steps is bounded by the longest piece's token count (<= 511), each step
   vectorised over all pieces.
4. Output: a token's position in its piece is its step number plus the escapes before it;
   piece sizes give piece starts (``cumsum``), and every code byte (and escaped literal) is
   written with one scatter. String offsets follow from the piece sizes.
5. Repeats: a string compresses the same wherever it stands, so when >= 10% of an evenly
   spaced 4096-string sample are repeats, only the distinct strings (Arrow
   ``dictionary_encode``) are parsed and an Arrow ``take`` copies their codes out.

Vectorised decode: escapes are found with a run-parity rule (in a run of 0xFF bytes that
starts at a code position, even positions are escapes and odd ones their literals; runs
restart at every string start). Codes become tokens (an escape and its literal fold into
token ``256 + literal``) and one Arrow ``take`` from a 512-entry binary array of the
symbols and the 256 single bytes writes the output and every token's output offset (a
memcpy of 1..8 bytes per token in C++); string offsets are those offsets at the tokens that
start the strings. No pass over the output in Python.

Compiled kernels (``fsst_kernels.py``, numba): the parse of steps 3-4 and the decode are
sequential per string, so the numpy forms above pay ~25 ns a token in Python steps; the
kernels run the same rules at ~2.6 / ~1.3 ns a token, byte for byte the same output. They
take over once a process meets a page of 1 MiB (``compiled.py``); the numpy code stays the
reference and the path for small pages, or when numba is unavailable.

pylance picks Fsst for text-like strings: mini-block ``Fsst(Variable)`` for short strings
(~20 B) and full-zip ``Fsst(Variable)`` per value for strings of 256 B+, when the page holds
at least 32 KiB and a value of at least 5 bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from types import ModuleType

import numpy as np
import pyarrow as pa

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import DataBlock, VariableWidthBlock
from lance_spark_ops.encoding.compression import compiled
from lance_spark_ops.encoding.compression.contexts import CodecEncoders
from lance_spark_ops.encoding.compression.encoded import CodecLookup, CompressionParams, MiniBlockCompressed
from lance_spark_ops.encoding.compression.strategy import Codec
from lance_spark_ops.encoding.compression.variable import offset_bits, value_bounds
from lance_spark_ops.encoding.tuning import CodecTuning, codec_tuning
from lance_spark_ops.errors import CorruptFileError, InvalidInputError

FSST_MAGIC = 0x46535354
FSST_ESC = 255
SYMBOL_TABLE_SIZE = 8 + 256 * 8 + 256
FSST_LEAST_INPUT_SIZE = 32 * 1024  # smaller inputs are stored as is (encoder switch off)


@dataclass(frozen=True)
class SymbolTable:
    enabled: bool  # encoder switch: False means the strings are stored uncompressed
    n_symbols: int
    symbols: np.ndarray  # (256, 8) uint8; rows >= n_symbols are zero
    lens: np.ndarray  # (256,) uint8; 0 for codes that are not symbols

    @cached_property
    def symbols64(self) -> np.ndarray:
        """Each symbol as one little-endian u64 (the compiled decoder's table)."""
        return np.ascontiguousarray(self.symbols).view("<u8").reshape(256)

    @cached_property
    def expansions(self) -> pa.Array:
        """What each token expands to, as an Arrow binary array of 512 entries: codes
        0..255 (empty when not a symbol; the escape code 255 is one placeholder byte, patched
        afterwards), then 256 + b = the byte b (escapes folded into one token)."""
        lens = np.concatenate((self.lens.astype(np.int32), np.ones(256, np.int32)))
        lens[FSST_ESC] = 1
        offsets = np.zeros(513, np.int32)
        np.cumsum(lens, out=offsets[1:])
        keep = np.arange(8) < self.lens[:, None]
        data = np.concatenate((self.symbols[: FSST_ESC][keep[:FSST_ESC]], np.zeros(1, np.uint8),
                               np.arange(256, dtype=np.uint8)))
        return pa.Array.from_buffers(pa.binary(), 512, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


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
    symbols[np.arange(8) >= lens[:, None]] = 0  # bytes past a symbol's length are not part of it
    return SymbolTable(bool(header & (1 << 24)), n, symbols, lens)


def _expand_compiled(kernels: ModuleType, table: SymbolTable, src: np.ndarray, lo: np.ndarray,
                     hi: np.ndarray, tuning: CodecTuning | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The strings ``src[lo[i]:hi[i]]`` expanded by the compiled decoder: (bytes, int64
    offsets from 0), with its errors raised. It expands into 8 bytes per code (untouched
    pages cost no memory) up to ``fsst_one_pass_max_bytes``, and sizes its output in a first
    pass beyond it."""
    capacity = 8 * int((hi - lo).sum())  # no code expands to more than 8 bytes
    if capacity > codec_tuning(tuning).fsst_one_pass_max_bytes:  # size the output exactly first
        capacity, _, _ = kernels.expanded_size(src, lo, hi, table.lens, table.n_symbols)
    out, offsets, err, at = kernels.decompress(src, lo, hi, table.symbols64, table.lens, table.n_symbols,
                                               capacity)
    if err == 1:
        raise CorruptFileError(f"fsst: code {int(src[at])} is not in the symbol table "
                               f"({table.n_symbols} symbols)")
    if err:
        raise CorruptFileError("fsst: a compressed string ends inside an escape")
    return out, offsets


def _escapes(src: np.ndarray, rel: np.ndarray) -> tuple[np.ndarray, int]:
    """(positions of escape codes, number of 0xFF bytes). In a run of 0xFF bytes that begins
    at a code position (after a non-0xFF byte or at a string start), escapes and their 0xFF
    literals alternate."""
    ff = np.flatnonzero(src == FSST_ESC)
    if not ff.size:
        return ff, 0
    new_run = np.ones(ff.size, dtype=bool)
    new_run[1:] = ff[1:] != ff[:-1] + 1
    new_run |= _member(ff, rel[:-1][np.diff(rel) > 0])
    run_first = ff[new_run][np.cumsum(new_run) - 1]
    return ff[((ff - run_first) & 1) == 0], int(ff.size)


def _member(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Whether each of ``values`` is in the sorted array ``sorted_set``."""
    if not sorted_set.size:
        return np.zeros(values.size, bool)
    idx = np.minimum(np.searchsorted(sorted_set, values), sorted_set.size - 1)
    return sorted_set[idx] == values


def fsst_decompress(
    table: SymbolTable, data: np.ndarray, offsets: np.ndarray, tuning: CodecTuning | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Decode the strings ``data[offsets[i]:offsets[i + 1]]``; returns (bytes, offsets from 0)
    (``tuning``: the compiled decoder's thresholds; None: the process's).

    Codes become tokens (an escape and its literal fold into token 256 + literal); one
    Arrow ``take`` of the tokens from the 512-entry ``expansions`` array writes the output
    bytes and each token's output offset, from which the string offsets are read.
    """
    o = np.asarray(offsets).astype(np.int64)
    if o.size == 0:
        raise CorruptFileError("fsst: empty offsets array")
    if (np.diff(o) < 0).any() or int(o[0]) < 0 or int(o[-1]) > data.size:
        raise CorruptFileError("fsst: offsets are not monotonic within the compressed bytes")
    src = np.ascontiguousarray(data[int(o[0]) : int(o[-1])], dtype=np.uint8)
    rel = o - o[0]
    out_dtype = np.asarray(offsets).dtype if np.asarray(offsets).dtype.kind == "u" else np.dtype(np.uint64)
    if not table.enabled or src.size == 0:
        return src, rel.astype(out_dtype)
    kernels = compiled.fsst_kernels(src.size, tuning)
    if kernels is not None:
        out, new_offsets = _expand_compiled(kernels, table, src, rel[:-1], rel[1:], tuning)
        if out.size >= 2**32 and out_dtype == np.uint32:
            out_dtype = np.dtype(np.uint64)
        return out, new_offsets.astype(out_dtype)
    esc, num_ff = _escapes(src, rel)
    tokens, tok_rel, n = src, rel, table.n_symbols
    bad = np.count_nonzero(src >= n) - num_ff if n < FSST_ESC else 0
    patch = None
    if esc.size:
        lit = esc + 1
        if _member(esc, rel[1:][np.diff(rel) > 0] - 1).any():
            raise CorruptFileError("fsst: a compressed string ends inside an escape")
        lv = src[lit]
        bad -= int(np.count_nonzero(lv >= n) - np.count_nonzero(lv == FSST_ESC))
        if n < FSST_ESC:
            # code n is free: the literal positions expand to nothing, each escape code to
            # one placeholder byte that is then overwritten with its literal
            tokens = src.copy()
            tokens[lit] = n
            patch = (esc, lv)
        else:  # every code is a symbol: fold escape + literal into token 256 + literal
            tokens = src.astype(np.uint16)
            tokens[esc] = lv.astype(np.uint16) + 256
            tokens = np.delete(tokens, lit)
            per_gap = np.bincount(np.searchsorted(rel, lit, side="right"), minlength=rel.size + 1)
            tok_rel = rel - np.cumsum(per_gap)[: rel.size]  # literals before each boundary
    if bad:
        is_bad = (src >= n) & (src != FSST_ESC)
        if esc.size:
            is_bad[esc + 1] = False
        code = int(src[np.argmax(is_bad)])
        raise CorruptFileError(f"fsst: code {code} is not in the symbol table ({n} symbols)")
    expansions = table.expansions
    if src.size * 8 >= 2**31:
        expansions = expansions.cast(pa.large_binary())
    res = expansions.take(pa.array(tokens))
    off_dt = np.int32 if res.type == pa.binary() else np.int64
    res_offsets = np.frombuffer(res.buffers()[1], off_dt)[res.offset : res.offset + len(res) + 1]
    out = np.frombuffer(res.buffers()[2], np.uint8)[int(res_offsets[0]) : int(res_offsets[-1])]
    if patch is not None:
        out = out.copy()
        out[res_offsets[patch[0]] - res_offsets[0]] = patch[1]
    new_offsets = res_offsets[tok_rel] - res_offsets[0]
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
    msg: pb.Fsst, chunks: Sequence[Sequence[memoryview]], counts: np.ndarray, codecs: CodecLookup
) -> DataBlock:
    return _expand(msg, codecs.decompress_miniblock_chunks(msg.values, chunks, counts))


def decode_fsst_miniblock_ranges(
    msg: pb.Fsst, data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, counts: np.ndarray,
    codecs: CodecLookup,
) -> DataBlock:
    """Mini-block chunks given as byte ranges of ``data``: the inner codec's ranges path, or,
    for Variable values and the compiled decoder, the strings expanded where they lie in
    ``data`` (no copy joining the chunks' bytes first)."""
    variable = msg.values.WhichOneof("compression") == "variable"
    kernels = compiled.fsst_kernels(int(np.asarray(sizes).sum())) if variable else None
    table = parse_symbol_table(msg.symbol_table) if kernels is not None else None
    if table is not None and table.enabled:
        lo, hi, n = value_bounds(msg.values.variable, data, starts, sizes, counts)
        u8 = np.asarray(data, dtype=np.uint8)
        out, offsets = _expand_compiled(kernels, table, u8, lo, hi)
        small = offset_bits(msg.values.variable) == 32 and out.size < 2**32
        return VariableWidthBlock(offsets.astype(np.uint32 if small else np.uint64), out, n)
    return _expand(msg, codecs.decode_miniblock_ranges(msg.values, data, starts, sizes, counts))


def decode_fsst_block(msg: pb.Fsst, buffer: memoryview, num_values: int, codecs: CodecLookup) -> DataBlock:
    return _expand(msg, codecs.decompress_block(msg.values, buffer, num_values))


def decode_fsst_per_value(msg: pb.Fsst, block: DataBlock, codecs: CodecLookup) -> DataBlock:
    return _expand(msg, codecs.decompress_per_value(msg.values, block))


# ----------------------------------------------------------------------------- encoders


def serialize_symbol_table(
    vals: np.ndarray, lens: np.ndarray, terminator: int = 0, enabled: bool = True
) -> bytes:
    """The 2312-byte table FSST exports, symbols renumbered as its ``finalize`` does.

    ``vals`` / ``lens`` are the chosen symbols in choice order; returns the bytes and the
    symbols in code order are recovered by ``parse_symbol_table``.
    """
    order, suffix_lim = finalize_order(np.asarray(vals, np.uint64), np.asarray(lens, np.uint8))
    n = len(order)
    header = (FSST_MAGIC << 32) | (int(enabled) << 24)
    if enabled:
        header |= ((suffix_lim & 255) << 16) | ((terminator & 255) << 8) | n
    out = np.zeros(SYMBOL_TABLE_SIZE, np.uint8)
    out[:8] = np.frombuffer(header.to_bytes(8, "little"), np.uint8)
    if enabled and n:
        out[8 : 8 + 8 * n] = np.asarray(vals, np.uint64)[order].astype("<u8").view(np.uint8)
        out[8 + 8 * n : 8 + 9 * n] = np.asarray(lens, np.uint8)[order]
    return out.tobytes()


def finalize_order(vals: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, int]:
    """FSST ``finalize``: the choice-order index of each code, and the suffix limit.

    2-byte symbols that are the first two bytes of a longer symbol get codes 0, 1, ...;
    the other 2-byte symbols fill the 2-byte range from its top down; then lengths 3..8 and
    finally 1, each in choice order.
    """
    n = len(vals)
    if n == 0:
        return np.zeros(0, np.int64), 0
    lens = lens.astype(np.int64)
    first2 = vals & np.uint64(0xFFFF)
    long_first2 = np.unique(first2[lens > 2])
    two = np.flatnonzero(lens == 2)
    has_suffix = np.isin(first2[two], long_first2)
    code = np.zeros(n, np.int64)
    code[two[has_suffix]] = np.arange(int(has_suffix.sum()))
    code[two[~has_suffix]] = len(two) - 1 - np.arange(int((~has_suffix).sum()))
    nxt = len(two)
    for length in (3, 4, 5, 6, 7, 8, 1):
        idx = np.flatnonzero(lens == length)
        code[idx] = nxt + np.arange(len(idx))
        nxt += len(idx)
    order = np.empty(n, np.int64)
    order[code] = np.arange(n)
    return order, int(has_suffix.sum())


def fsst_compress(data: np.ndarray, offsets: np.ndarray,
                  tuning: CodecTuning | None = None) -> tuple[bytes, np.ndarray, np.ndarray]:
    """FSST-compress the strings ``data[offsets[i]:offsets[i + 1]]`` (``tuning``: the compiled
    kernels' thresholds; None: the process's).

    Returns (2312-byte symbol table, compressed bytes, offsets from 0 as int64). Inputs
    under 32 KiB are stored as is with the encoder switch off, as Lance does.
    """
    from lance_spark_ops.encoding.compression import fsst_encode

    o = np.asarray(offsets, dtype=np.int64)
    src = np.ascontiguousarray(data[int(o[0]) : int(o[-1])]) if o.size else np.zeros(0, np.uint8)
    rel = o - o[0] if o.size else o
    if src.size < FSST_LEAST_INPUT_SIZE:
        return serialize_symbol_table(np.zeros(0, np.uint64), np.zeros(0, np.uint8), enabled=False), src, rel
    table, terminator = fsst_encode.build_table(src, rel, tuning)
    raw = serialize_symbol_table(table.vals, table.lens, terminator)
    order, _ = finalize_order(table.vals, table.lens)
    final = fsst_encode.Table(table.vals[order], table.lens[order])  # token id = code
    out, new_offsets = fsst_encode.compress(final, src, rel, tuning)
    return raw, out, new_offsets


def _fsst_input(block: DataBlock, what: str) -> tuple[np.ndarray, np.ndarray, np.dtype]:
    if not isinstance(block, VariableWidthBlock):
        raise InvalidInputError(f"{what} needs variable-width values, got a {type(block).__name__}")
    dtype = np.asarray(block.offsets).dtype
    if dtype.itemsize not in (4, 8):
        raise InvalidInputError(f"{what}: {dtype.itemsize * 8}-bit offsets (expected 32 or 64)")
    return np.asarray(block.data, dtype=np.uint8), np.asarray(block.offsets), dtype


def _compressed_block(block: DataBlock, what: str) -> tuple[bytes, VariableWidthBlock]:
    data, offsets, dtype = _fsst_input(block, what)
    raw, out, new_offsets = fsst_compress(data, offsets)
    if dtype.itemsize == 4 and new_offsets.size and int(new_offsets[-1]) >= 2**31:
        raise InvalidInputError(f"{what}: compressed strings overflow 32-bit offsets")
    return raw, VariableWidthBlock(new_offsets.astype(dtype), out, int(block.num_values))


def fsst_encoding(symbol_table: bytes, inner: pb.CompressiveEncoding) -> pb.CompressiveEncoding:
    return pb.CompressiveEncoding(fsst=pb.Fsst(symbol_table=symbol_table, values=inner))


def encode_fsst_miniblock(
    block: DataBlock, params: CompressionParams | None = None,
    codec: Codec | None = None, codecs: CodecEncoders | None = None
) -> MiniBlockCompressed:
    """``Fsst(Variable)``: the page's strings FSST-compressed with one table, then chunked
    by the Variable mini-block encoder (chunk sizes count the compressed bytes)."""
    from lance_spark_ops.encoding.compression.variable import encode_variable_miniblock

    raw, compressed = _compressed_block(block, "fsst mini-block")
    inner = encode_variable_miniblock(compressed, params)
    return MiniBlockCompressed(inner.buffers, inner.chunk_buffer_sizes, inner.chunk_log_values,
                               inner.num_values, fsst_encoding(raw, inner.encoding))


def encode_fsst_per_value(
    block: DataBlock, params: CompressionParams | None = None,
    codec: Codec | None = None, codecs: CodecEncoders | None = None
) -> tuple[DataBlock, pb.CompressiveEncoding]:
    """Full-zip ``Fsst(Variable)``: every value compressed with the page's one table."""
    from lance_spark_ops.encoding.compression.variable import encode_variable_per_value

    raw, compressed = _compressed_block(block, "fsst per-value")
    values, inner = encode_variable_per_value(compressed, params)
    return values, fsst_encoding(raw, inner)
