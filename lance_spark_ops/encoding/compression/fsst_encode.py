"""FSST symbol-table construction and compression, vectorised with numpy.

The design (why there is no Python loop per byte) is described in ``fsst.py``'s module
docstring; this module holds the machinery:

- ``Table``: up to 255 symbols plus the lookup structures of FSST's compressor: a
  ``short`` table over the first two bytes (a 2-byte symbol, else the first byte's 1-byte
  symbol, else an escape) and a 4096-slot hash table over the first three bytes holding at
  most one symbol of 3..8 bytes per slot (a colliding, lower-gain candidate is dropped, as
  in FSST).
- ``walk``: the greedy parse of many strings at once (the final compression). Strings are
  cut into pieces of at most ``PIECE`` bytes (FSST's own 511-byte pieces); each step
  matches one token at the cursor of every unfinished piece, so the number of Python steps
  is bounded by the piece length, never by the data size. Each token is left at the input
  byte where it starts, so reading those bytes in order gives the output.
- ``build_table``: FSST's rounds (count tokens and adjacent token pairs, rank candidates
  by gain, keep the 255 best) done with ``np.unique`` / sorting on a sample, which is
  parsed by matching at every byte at once and following the token chains
  (``_sample_parse``: cheaper than ``walk`` on small inputs, where steps cost more than
  bytes).
- ``compress``: the final parse of the page and the output assembly; when a sample shows
  many repeated strings, only the distinct ones are parsed.

Token ids: 0..254 are symbol codes, ``256 + b`` is byte ``b`` escaped (code 255 + b).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, partial
from types import ModuleType

import numpy as np
import pyarrow as pa

from lance_spark_ops.encoding.compression import compiled, kernel_threads
from lance_spark_ops.encoding.compression._arrays import ragged_arange
from lance_spark_ops.encoding.tuning import CodecTuning

PIECE = 511  # FSST compresses strings in pieces of at most 511 bytes
SAMPLE_PIECE = 64  # sample strings are cut shorter: fewer parse steps per round
SAMPLE_TARGET = 16 * 1024  # Lance's FSST_SAMPLETARGET: half the table rounds' work of 32 KiB, ~same tables
MAX_SYMBOLS = 255
HASH_BITS = 12
HASH_MUL = np.uint32(0x9E3779B1)
ESC = 255
ROUNDS = (8, 38, 68, 98, 128)  # FSST's sample fractions: count thresholds, last has no pairs
REPEAT_SAMPLE = 4096  # strings sampled to decide whether to compress distinct strings only
REPEAT_SHARE = 0.1  # ... which pays when at least this share of the sample are repeats

_U64_MASK = np.array([0] + [(1 << (8 * k)) - 1 for k in range(1, 8)] + [2**64 - 1, 0], dtype=np.uint64)
_EMPTY_LEN = 9  # hash slots without a symbol (mask 0 never equals their value 1)
NO_TOKEN = 0xFFFF  # walk's mark for input bytes where no token starts


def _slot(w: np.ndarray) -> np.ndarray:
    """Hash slot (intp) of the first three bytes of each LE u64 window: multiplicative
    hashing in 32-bit arithmetic on the low word."""
    low = np.ascontiguousarray(w, dtype=np.uint64).view(np.uint32)[::2]
    return (((low & np.uint32(0xFFFFFF)) * HASH_MUL) >> np.uint32(32 - HASH_BITS)).astype(np.intp)


@dataclass
class Table:
    """Symbols (``vals`` little endian, ``lens`` 1..8) in code order and their lookups."""

    vals: np.ndarray  # (n,) uint64
    lens: np.ndarray  # (n,) uint8

    def __post_init__(self) -> None:
        n = len(self.vals)
        # token id -> (value, length) for symbols and escaped bytes
        self.tok_val = np.zeros(512, np.uint64)
        self.tok_len = np.zeros(512, np.int64)
        self.tok_val[:n], self.tok_len[:n] = self.vals, self.lens
        self.tok_val[256:] = np.arange(256, dtype=np.uint64)
        self.tok_len[256:] = 1
        codes = np.arange(n, dtype=np.uint16)
        single = np.arange(256, 512, dtype=np.uint16)
        one = self.lens == 1
        single[self.vals[one].astype(np.int64)] = codes[one]
        self.single = single
        # ``short`` is indexed by the first two bytes (LE u16); it is kept as the compiled
        # parse reads it (``packed``), which is built as cheaply as the plain one
        short = np.tile(single | (self.tok_len[single].astype(np.uint16) << 12), 256)
        two = self.lens == 2
        short[self.vals[two].astype(np.int64)] = codes[two] | np.uint16(2 << 12)
        self._short_packed = short
        self.ht_val = np.ones(1 << HASH_BITS, np.uint64)  # never equals (w & mask 0)
        self.ht_mask = np.zeros(1 << HASH_BITS, np.uint64)
        self.ht_len = np.full(1 << HASH_BITS, _EMPTY_LEN, np.int8)
        self.ht_tok = np.zeros(1 << HASH_BITS, np.uint16)
        long_ = np.flatnonzero(self.lens >= 3)
        slots = _slot(self.vals[long_])
        self.ht_val[slots] = self.vals[long_]
        self.ht_mask[slots] = _U64_MASK[self.lens[long_]]
        self.ht_len[slots] = self.lens[long_]
        self.ht_tok[slots] = long_

    @property
    def n(self) -> int:
        return len(self.vals)

    @cached_property
    def short(self) -> np.ndarray:
        """Token id (uint16) of the 2-byte symbol of the first two bytes (LE u16), else
        of their first byte's 1-byte symbol, else that byte escaped."""
        return self._short_packed & np.uint16(0x1FF)

    def packed(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``short``, ``single`` and the hash slots' tokens as the compiled parse reads
        them: token id | length << 12 (an empty slot's length 9 never fits)."""
        single = self.single | (self.tok_len[self.single].astype(np.uint16) << 12)
        return self._short_packed, single, self.ht_tok | (self.ht_len.astype(np.uint16) << 12)

    def match(self, w: np.ndarray, rem: np.ndarray) -> np.ndarray:
        """Token id (uint16) of the symbol FSST's compressor picks at each cursor: the hash
        slot's symbol if it matches (3..8 bytes), else the 2-byte symbol, else the 1-byte
        symbol, else an escape. ``w``: the next 8 bytes (LE u64), ``rem``: bytes left.

        Where one byte is left a 2-byte symbol may come out (its second byte lies past the
        cursor's piece); ``walk`` sees it overshoot and replaces it (``single``)."""
        slot = _slot(w)
        hit = (self.ht_len[slot] <= rem) & ((w & self.ht_mask[slot]) == self.ht_val[slot])
        tok = np.take(self.short, w.view(np.uint16)[::4])
        np.copyto(tok, np.take(self.ht_tok, slot), where=hit)
        return tok


def windows(data: np.ndarray) -> np.ndarray:
    """A zero-copy (unaligned) uint64 view: element p holds ``data[p:p + 8]`` LE."""
    padded = np.zeros(len(data) + 8, np.uint8)
    padded[: len(data)] = data
    return np.ndarray((len(data),), dtype="<u8", buffer=padded, strides=(1,))


def pieces(offsets: np.ndarray, piece: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cut strings ``[offsets[i], offsets[i + 1])`` into pieces of at most ``piece`` bytes;
    returns (start, end, string index) per non-empty piece."""
    o = np.asarray(offsets, dtype=np.int64)
    lens = np.diff(o)
    if not len(lens) or int(lens.max()) <= piece:  # every string is one piece
        owner = np.flatnonzero(lens)
        return o[:-1][owner], o[1:][owner], owner
    count = (lens + piece - 1) // piece
    owner = np.repeat(np.arange(len(lens), dtype=np.int64), count)
    starts_idx = np.cumsum(count) - count
    k = np.arange(len(owner), dtype=np.int64) - np.repeat(starts_idx, count)
    start = o[:-1][owner] + k * piece
    end = np.minimum(start + piece, o[1:][owner])
    return start, end, owner


@dataclass
class Parse:
    """A parse of the table sample: its tokens (data order), the token before each (-1 at a
    piece start) and the output size in bytes."""

    tok: np.ndarray
    prev: np.ndarray
    out_size: int


def walk(table: Table, w_all: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Greedy FSST parse of every piece at once (one step = one token per open piece);
    returns, per input byte, the token starting there (``NO_TOKEN`` inside a token). Only
    each open piece's cursor and bytes left are carried from step to step."""
    it = np.intp  # cursors index w_all and tok_at every step: no conversion to intp
    tok_at = np.full(len(w_all), NO_TOKEN, np.uint16)
    pos, rem = start.astype(it), (end - start).astype(it)
    tok_len = table.tok_len.astype(it)
    while len(pos):
        tok = table.match(w_all[pos], rem)
        ln = np.take(tok_len, tok)
        rem -= ln
        finished = rem <= 0
        if finished.any():
            over = np.flatnonzero(rem < 0)  # a 2-byte symbol where one byte was left
            if over.size:
                tok[over] = table.single[w_all[pos[over]] & np.uint64(0xFF)]
            tok_at[pos] = tok
            keep = ~finished
            pos, rem, ln = np.compress(keep, pos), np.compress(keep, rem), np.compress(keep, ln)
        else:
            tok_at[pos] = tok
        pos += ln
    return tok_at


# ----------------------------------------------------------------------------- table building


def sample(
    data: np.ndarray, offsets: np.ndarray, target: int = SAMPLE_TARGET
) -> tuple[np.ndarray, np.ndarray]:
    """Strings drawn at random (fixed seed, with replacement, as FSST does) until about
    ``target`` bytes, each cut to ``target`` bytes; returns (bytes, offsets). Small inputs
    are used whole."""
    o = np.asarray(offsets, dtype=np.int64)
    total = int(o[-1] - o[0])
    if total <= target:
        return data[int(o[0]) : int(o[-1])], o - o[0]
    n = len(o) - 1
    lens = np.minimum(np.diff(o), target)
    rng = np.random.default_rng(n ^ total)
    picks = rng.integers(0, n, max(16, int(2.5 * target * n / total)))
    got = np.cumsum(lens[picks])
    picks = np.sort(picks[: int(np.searchsorted(got, target)) + 1])
    buf = data[ragged_arange(o[:-1][picks], lens[picks])]
    so = np.zeros(len(picks) + 1, np.int64)
    np.cumsum(lens[picks], out=so[1:])
    return buf, so


def _concat(av: np.ndarray, al: np.ndarray, bv: np.ndarray, bl: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symbol a followed by symbol b, cut to 8 bytes."""
    shift = (8 * al).astype(np.uint64)
    val = av | np.where(al < 8, bv << np.minimum(shift, np.uint64(63)), np.uint64(0))
    ln = np.minimum(al + bl, 8)
    return val & _U64_MASK[ln], ln


def _merge(key: np.ndarray, gain: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``key`` values (ascending) with the sum of their gains."""
    if not len(key):
        return key, gain
    order = np.argsort(key, kind="stable")
    key, gain = key[order], gain[order]
    starts = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
    return key[starts], np.add.reduceat(gain, starts)


def _sum_gains(
    val: np.ndarray, ln: np.ndarray, gain: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge duplicate candidates (same bytes and length), summing their gains; candidates
    come out ordered by length, then value (``_pick`` relies on a value's shorter candidate
    coming first). Below 8 bytes a value fits 56 bits, so length and value sort as one key."""
    short = ln < 8
    k_short, g_short = _merge(val[short] | (ln[short].astype(np.uint64) << np.uint64(56)), gain[short])
    v_long, g_long = _merge(val[~short], gain[~short])
    vals = np.concatenate((k_short & np.uint64((1 << 56) - 1), v_long))
    lens = np.concatenate(((k_short >> np.uint64(56)).astype(ln.dtype), np.full(len(v_long), 8, ln.dtype)))
    return vals, lens, np.concatenate((g_short, g_long))


_PICK_PREFIX = 1024  # candidates ranked in full by _pick when there are many (the best ones)


def _pick(val: np.ndarray, ln: np.ndarray, gain: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The <= 255 best candidates by gain (ties: smaller value first, then shorter),
    dropping a 3+-byte candidate whose hash slot a better one already holds. Among many
    candidates only those with one of the ``_PICK_PREFIX`` highest gains (ties included) are
    ranked: a prefix of the full ranking, which decides the result whenever it keeps 255."""
    if len(val) > 2 * _PICK_PREFIX:
        floor = np.partition(gain, len(gain) - _PICK_PREFIX)[len(gain) - _PICK_PREFIX]
        sub = np.flatnonzero(gain >= floor)
        picked = _rank(val[sub], ln[sub], gain[sub])
        if len(picked[0]) == MAX_SYMBOLS:
            return picked
    return _rank(val, ln, gain)


def _rank(val: np.ndarray, ln: np.ndarray, gain: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``_pick`` over all of the given candidates (in ``_sum_gains``' order)."""
    order = np.lexsort((val, -gain))
    val, ln = val[order], ln[order]
    keep = np.ones(len(val), bool)
    long_ = np.flatnonzero(ln >= 3)
    if len(long_):
        _, first = np.unique(_slot(val[long_]), return_index=True)
        dup = np.ones(len(long_), bool)
        dup[first] = False
        keep[long_[dup]] = False
    val, ln = val[keep][:MAX_SYMBOLS], ln[keep][:MAX_SYMBOLS]
    return val, ln


PAIR_KEYS = 512 * 512  # pair keys: first token * 512 + second; first-byte pairs follow


def _count_numpy(table: Table, p: Parse, pairs: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``count_tokens`` of the compiled kernels, with numpy: token counts and the distinct
    pair keys with their counts (keys in any order; ``_sum_gains`` orders candidates)."""
    first_bytes = (table.tok_val[p.tok] & np.uint64(0xFF)).astype(np.int64)
    counts = np.bincount(p.tok, minlength=512)
    # a multi-byte token's first byte also counts as a single-byte candidate
    multi = table.tok_len[p.tok] > 1
    counts[256:] += np.bincount(first_bytes[multi], minlength=256)
    if not pairs:
        return counts, np.zeros(0, np.int64), np.zeros(0, np.int64)
    has = (p.prev >= 0) & (table.tok_len[np.maximum(p.prev, 0)] < 8)
    a, b = p.prev[has], p.tok[has].astype(np.int64)
    fb_pair = table.tok_len[b] > 1
    keys = np.concatenate([a * 512 + b, PAIR_KEYS + a[fb_pair] * 512 + 256 + first_bytes[has][fb_pair]])
    uk, cnt = np.unique(keys, return_counts=True)
    return counts, uk, cnt


def _candidates(table: Table, p: Parse, frac: int, kernels: ModuleType | None = None,
                scratch: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One round of FSST's ``makeTable``: candidates from the counts of tokens, of adjacent
    token pairs and of (token, first byte of the next multi-byte token) pairs, the two
    kinds of pairs counted apart (a pair key of each kind can name the same bytes).
    ``kernels`` counts with the compiled loop, in ``scratch`` (``count_tokens``)."""
    min_count = 5 * frac // 128
    pairs = frac < 128
    if kernels is None:
        counts, keys, cnt = _count_numpy(table, p, pairs)
    else:
        counts, keys, cnt = kernels.count_tokens(p.tok, p.prev, table.tok_val, table.tok_len, pairs,
                                                   scratch)
    ids = np.flatnonzero(counts > max(min_count, 0))
    ln = table.tok_len[ids]
    vals, lens, gains = [table.tok_val[ids]], [ln], [counts[ids] * ln * np.where(ln == 1, 8, 1)]
    sel = cnt > min_count
    keys, cnt = keys[sel] % PAIR_KEYS, cnt[sel]
    first, second = keys // 512, keys % 512
    v, ln2 = _concat(table.tok_val[first], table.tok_len[first], table.tok_val[second], table.tok_len[second])
    vals.append(v)
    lens.append(ln2)
    gains.append(cnt * ln2)
    val, ln, gain = _sum_gains(np.concatenate(vals), np.concatenate(lens), np.concatenate(gains))
    return _pick(val, ln, gain)


def build_table(data: np.ndarray, offsets: np.ndarray,
                tuning: CodecTuning | None = None) -> tuple[Table, int]:
    """FSST table construction on a sample of the strings; returns (table, terminator).

    Each round parses the sample with the current table, keeps the table if it gives the
    smallest sample so far, and builds the next table from the counts. The terminator is
    the rarest byte of the sample (written in the header like FSST, unused by decoders).
    """
    sbuf, soffs = sample(data, offsets)
    terminator = int(np.argmin(np.bincount(sbuf, minlength=256)))
    start, end, _ = pieces(soffs, SAMPLE_PIECE)
    kernels = compiled.fsst_kernels(int(offsets[-1] - offsets[0]), tuning)
    parse = _sample_parse if kernels is None else partial(_compiled_parse, kernels)
    scratch = None if kernels is None else np.zeros(2 * PAIR_KEYS, np.int32)
    table = Table(np.zeros(0, np.uint64), np.zeros(0, np.uint8))
    best, best_size = table, None
    for frac in ROUNDS:
        p = parse(table, sbuf, start, end)
        size = p.out_size
        if best_size is None or size < best_size:
            best, best_size = table, size
        val, ln = _candidates(table, p, frac, kernels, scratch)
        table = Table(val, ln.astype(np.uint8))
    size = parse(table, sbuf, start, end).out_size
    if best_size is None or size < best_size:
        best = table
    return best, terminator


def _compiled_parse(kernels: ModuleType, table: Table, data: np.ndarray, start: np.ndarray,
                    end: np.ndarray) -> Parse:
    """``_sample_parse`` by the compiled parse (the same tokens, in data order)."""
    short, single, ht = table.packed()
    toks, prev = kernels.parse_pieces(np.ascontiguousarray(data, np.uint8), start.astype(np.int64),
                                      end.astype(np.int64), short, single, table.ht_val, table.ht_mask, ht)
    return Parse(toks, prev, len(toks) + int(np.count_nonzero(toks >= 256)))


def _sample_parse(table: Table, data: np.ndarray, start: np.ndarray, end: np.ndarray) -> Parse:
    """The parse ``build_table`` needs of the sample (pieces ``[start, end)`` tiling
    ``data``): its tokens with the token before each (-1 at a piece start) and, as one
    number, the output size. Tokens come in data order (``walk`` gives step order; the
    table rounds only count them).

    A token depends only on its cursor, so it is matched at every byte at once
    (``_match_all``); a piece's parse is then the chain start, start + len, ... which ends
    exactly where the next piece starts: all chains are followed in step, one gather per
    step, a chain dropping out when it reaches a position already seen."""
    size = len(data)
    if size == 0:
        return Parse(np.zeros(0, np.uint16), np.zeros(0, np.int64), 0)
    tok = _match_all(table, data, start, end)
    nxt = np.arange(size, dtype=np.intp)
    nxt += table.tok_len[tok]
    seen = np.zeros(size + 1, bool)
    seen[size] = True
    pos = start.astype(np.intp)
    seen[pos] = True
    while len(pos):
        pos = nxt[pos]
        pos = pos[~seen[pos]]
        seen[pos] = True
    at = np.flatnonzero(seen[:size])
    toks = tok[at]
    prev = np.empty(len(toks), np.int64)
    prev[0] = -1
    prev[1:] = toks[:-1]
    piece_start = np.zeros(size, bool)
    piece_start[start] = True
    prev[piece_start[at]] = -1
    out_size = len(toks) + int(np.count_nonzero(toks >= 256))
    return Parse(toks, prev, out_size)


_MATCH_BLOCK = 1 << 16  # positions matched per numpy pass (temporaries stay in cache)


def _match_all(table: Table, data: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The token id ``walk`` would pick with its cursor at each byte of ``data`` (pieces
    ``[start, end)`` tile it): bytes left in the piece are capped at 8, as no symbol is
    longer, and a 2-byte symbol where one byte is left becomes the 1-byte choice."""
    size = len(data)
    rem = np.full(size, 8, np.int8)
    for k in range(1, 8):  # the last 7 bytes of each piece
        idx = end - k
        rem[idx[idx >= start]] = k
    w_all = windows(data)
    tok = np.empty(size, np.uint16)
    for a in range(0, size, _MATCH_BLOCK):
        b = min(a + _MATCH_BLOCK, size)
        tok[a:b] = table.match(np.ascontiguousarray(w_all[a:b]), rem[a:b])
    over = np.flatnonzero(rem == 1)
    over = over[table.tok_len[tok[over]] == 2]
    tok[over] = table.single[data[over]]
    return tok


# ----------------------------------------------------------------------------- compression


def compress(table: Table, data: np.ndarray, offsets: np.ndarray,
             tuning: CodecTuning | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Compress the strings ``data[offsets[i]:offsets[i + 1]]``; returns (bytes, offsets
    from 0 as int64). A string compresses the same wherever it stands, so when a sample
    shows many repeats only the distinct strings are parsed and their codes copied out."""
    o = np.asarray(offsets, dtype=np.int64)
    distinct = _distinct(data, o)
    if distinct is None:
        return _compress_all(table, data, o, tuning)
    u_data, u_offs, which = distinct
    u_out, u_new = _compress_all(table, u_data, u_offs, tuning)
    codes = _binary(u_out, u_new).take(which)  # Arrow copies each string's codes
    new_offsets = np.frombuffer(codes.buffers()[1], np.int64)[: len(o)]
    return np.frombuffer(codes.buffers()[2], np.uint8)[: int(new_offsets[-1])], new_offsets


def _binary(data: np.ndarray, offsets: np.ndarray) -> pa.LargeBinaryArray:
    """The strings ``data[offsets[i]:offsets[i + 1]]`` as an Arrow array (no copy)."""
    buffers = [None, pa.py_buffer(np.ascontiguousarray(offsets)), pa.py_buffer(np.ascontiguousarray(data))]
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(offsets) - 1, buffers)


def _distinct(data: np.ndarray, o: np.ndarray) -> tuple[np.ndarray, np.ndarray, pa.Array] | None:
    """(bytes, offsets, index of each string's distinct value) when at least
    ``REPEAT_SHARE`` of an evenly spaced sample of ``REPEAT_SAMPLE`` strings are repeats
    (so the page holds at most ~20 000 distinct strings); else None."""
    n = len(o) - 1
    if n < 4 * REPEAT_SAMPLE:
        return None
    strings = _binary(data, o)
    sample = strings.take(pa.array(np.linspace(0, n - 1, REPEAT_SAMPLE).astype(np.int64)))
    if len(sample.unique()) > (1 - REPEAT_SHARE) * REPEAT_SAMPLE:
        return None
    encoded = strings.dictionary_encode()
    values = encoded.dictionary
    first = values.offset
    u_offs = np.frombuffer(values.buffers()[1], np.int64)[first : first + len(values) + 1]
    u_data = np.frombuffer(values.buffers()[2], np.uint8) if len(values) else np.zeros(0, np.uint8)
    return u_data, u_offs, encoded.indices


def _compress_all(table: Table, data: np.ndarray, o: np.ndarray,
                  tuning: CodecTuning | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``compress`` of every string: ``walk`` leaves each token at the input position where
    it starts, so the tokens in data order are the output (each string's codes follow the
    previous string's); escapes then take two bytes."""
    o = np.asarray(o, dtype=np.int64)
    if len(o) < 2 or int(o[-1]) == int(o[0]):
        return np.zeros(0, np.uint8), np.zeros(len(o), np.int64)
    base = int(o[0])
    kernels = compiled.fsst_kernels(int(o[-1]) - base, tuning)
    if kernels is not None:
        short, single, ht = table.packed()
        data = np.ascontiguousarray(data, np.uint8)

        def run(part: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            return kernels.compress(data, part, PIECE, short, single, table.ht_val, table.ht_mask, ht)

        h = int(np.searchsorted(o, base + (int(o[-1]) - base) // 2))  # a string boundary mid-way
        if not (kernel_threads.worth_splitting(int(o[-1]) - base, tuning) and 0 < h < len(o) - 1):
            return run(o)
        (a, a_off), (b, b_off) = kernel_threads.both(lambda: run(o[: h + 1]), lambda: run(o[h:]))
        return np.concatenate([a, b]), np.concatenate([a_off, b_off[1:] + len(a)])
    rel = o - base
    d = data[base : int(o[-1])]
    start, end, _ = pieces(rel, PIECE)
    tok_at = walk(table, windows(d), start, end)
    is_tok = tok_at != NO_TOKEN
    toks = np.compress(is_tok, tok_at)  # measured ~3x faster than tok_at[is_tok] here
    # tokens per non-empty string (their bytes tile the input), then before each string
    nonempty = rel[1:] > rel[:-1]
    per_string = np.zeros(len(rel) - 1, np.int64)
    per_string[nonempty] = np.add.reduceat(is_tok, rel[:-1][nonempty], dtype=np.int64)
    ks = np.zeros(len(rel), np.int64)
    np.cumsum(per_string, out=ks[1:])
    code = toks.astype(np.uint8)  # escapes (256 + b) wrap to b
    esc = np.flatnonzero(toks >= 256)
    if not len(esc):
        return code, ks
    before = np.zeros(len(toks) + 1, np.int64)  # escapes before each token
    before[esc + 1] = 1
    np.cumsum(before, out=before)
    dest = np.arange(len(toks), dtype=np.int64) + before[:-1]
    out = np.empty(len(toks) + len(esc), np.uint8)
    out[dest] = code
    out[dest[esc]] = ESC
    out[dest[esc] + 1] = code[esc]
    return out, ks + before[ks]