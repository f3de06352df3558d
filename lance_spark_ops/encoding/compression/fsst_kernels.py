"""FSST's two inner loops compiled with numba: the greedy parse and the code expansion.

Both are sequential per string (a token's end is the next token's start), so numpy can
only run them one token per step over many strings (``fsst_encode.walk``: ~25 ns a token).
Compiled, they cost a few ns a token. The rules are exactly those of the numpy code,
which stays the reference (tests compare the two byte for byte) and the path for small
pages, where loading the compiled code would cost more than it saves.

Kernels are compiled once per machine (``cache=True`` keeps them beside this module, or in
numba's user cache when that is read-only) and loaded lazily by ``load()``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_MASK24 = np.uint64(0xFFFFFF)
_MASK32 = np.uint64(0xFFFFFFFF)
_HASH_MUL = np.uint64(0x9E3779B1)
_HASH_SHIFT = np.uint64(32 - 12)
_ESC = 255


@njit(cache=True, nogil=True, boundscheck=False)
def _window(data: np.ndarray, pos: int) -> np.uint64:
    """The 8 bytes at ``pos`` as a little-endian u64, zero past the end of ``data``."""
    if pos + 8 <= data.shape[0]:  # written out so that LLVM makes it one load
        return (np.uint64(data[pos]) | (np.uint64(data[pos + 1]) << np.uint64(8))
                | (np.uint64(data[pos + 2]) << np.uint64(16)) | (np.uint64(data[pos + 3]) << np.uint64(24))
                | (np.uint64(data[pos + 4]) << np.uint64(32)) | (np.uint64(data[pos + 5]) << np.uint64(40))
                | (np.uint64(data[pos + 6]) << np.uint64(48)) | (np.uint64(data[pos + 7]) << np.uint64(56)))
    w = np.uint64(0)
    for j in range(data.shape[0] - 1, pos - 1, -1):
        w = (w << np.uint64(8)) | np.uint64(data[j])
    return w


LANES = 4  # strings parsed in step: their token chains are independent, so they overlap


@njit(cache=True, nogil=True, boundscheck=False)
def compress(data, offsets, piece, short, single, ht_val, ht_mask, ht_len, ht_tok, tok_len):  # noqa: ANN001, ANN201
    """Greedy FSST parse of ``data[offsets[i]:offsets[i + 1]]`` in pieces of ``piece``
    bytes, as ``fsst_encode.Table.match`` picks tokens; returns (codes, offsets from 0).
    Token ids: < 256 a code, 256 + b the escaped byte b (two output bytes).

    One token is a chain of dependent loads (window, hash slot, table, length), so the
    strings are cut into ``LANES`` runs of about equal bytes that are parsed in step, each
    writing at twice its input position (no token takes more); the runs are then moved
    together."""
    n = offsets.shape[0] - 1
    base = offsets[0]
    size = offsets[n] - base
    out = np.empty(2 * size + 2, np.uint8)
    out_off = np.empty(n + 1, np.int64)
    out_off[0] = 0
    # lane l covers strings [first[l], first[l + 1])
    first = np.empty(LANES + 1, np.int64)
    for lane in range(LANES):
        first[lane] = np.searchsorted(offsets, base + size * lane // LANES)
    first[LANES] = n
    for lane in range(LANES):
        first[lane] = min(first[lane], n)
    cur = np.empty(LANES, np.int64)  # string being parsed
    pos = np.empty(LANES, np.int64)  # cursor in data
    pend = np.empty(LANES, np.int64)  # end of the cursor's piece
    k = np.empty(LANES, np.int64)  # next output byte
    live = 0
    for lane in range(LANES):
        cur[lane] = first[lane] - 1
        pos[lane] = 0
        pend[lane] = 0
        k[lane] = 2 * (offsets[min(first[lane], n)] - base)
    while True:
        live = 0
        for lane in range(LANES):
            if cur[lane] >= first[lane + 1]:
                continue
            p = pos[lane]
            if p >= pend[lane]:  # piece done: the next piece, string or lane end
                i = cur[lane]
                while True:
                    if i >= first[lane] and p < offsets[i + 1]:
                        pend[lane] = min(p + piece, offsets[i + 1])
                        break
                    if i >= first[lane]:
                        out_off[i + 1] = k[lane]
                    i += 1
                    if i >= first[lane + 1]:
                        break
                    p = offsets[i]
                cur[lane] = i
                pos[lane] = p
                if i >= first[lane + 1]:
                    continue
            live += 1
            rem = pend[lane] - p
            if rem == 1:
                tok = single[data[p]]
            else:
                w = _window(data, p)
                slot = (((w & _MASK24) * _HASH_MUL) & _MASK32) >> _HASH_SHIFT
                if ht_len[slot] <= rem and (w & ht_mask[slot]) == ht_val[slot]:
                    tok = ht_tok[slot]
                else:
                    tok = short[w & np.uint64(0xFFFF)]
            kk = k[lane]
            if tok >= 256:
                out[kk] = _ESC
                out[kk + 1] = tok - 256
                k[lane] = kk + 2
            else:
                out[kk] = tok
                k[lane] = kk + 1
            pos[lane] = p + tok_len[tok]
        if live == 0:
            break
    # offsets so far are positions in ``out``: move each lane's run down behind the last
    end = 0
    for lane in range(LANES):
        a = first[lane]
        b = first[lane + 1]
        if a >= b:
            continue
        start = 2 * (offsets[a] - base)
        shift = start - end
        if shift:
            for j in range(start, out_off[b]):
                out[j - shift] = out[j]
            for i in range(a + 1, b + 1):
                out_off[i] -= shift
        end = out_off[b]
    return out[: out_off[n]], out_off


@njit(cache=True, nogil=True, boundscheck=False)
def decompress(src, rel, symbols, lens, n_symbols):  # noqa: ANN001, ANN201
    """Expand the compressed strings ``src[rel[i]:rel[i + 1]]`` (``rel`` from 0, checked
    monotonic by the caller). ``symbols``: (256,) u64, bytes past a symbol's length zero.
    Returns (bytes, offsets from 0, error, position): error 0 is success, 1 a code that is
    not a symbol (at ``position``), 2 a string ending inside an escape (at ``position``)."""
    n = rel.shape[0] - 1
    total = 0
    for i in range(n):  # pass 1: validate and size the output
        p = rel[i]
        e = rel[i + 1]
        while p < e:
            c = src[p]
            if c == _ESC:
                if p + 1 >= e:
                    return src[:0], rel[:0], 2, p
                total += 1
                p += 2
            elif c < n_symbols:
                total += lens[c]
                p += 1
            else:
                return src[:0], rel[:0], 1, p
    out = np.empty(total + 8, np.uint8)  # every symbol is stored as 8 bytes: room past the end
    out_off = np.empty(n + 1, np.int64)
    out_off[0] = 0
    k = 0
    for i in range(n):  # pass 2: expand
        p = rel[i]
        e = rel[i + 1]
        while p < e:
            c = src[p]
            if c == _ESC:
                out[k] = src[p + 1]
                k += 1
                p += 2
            else:
                _store8(out, k, symbols[c])
                k += lens[c]
                p += 1
        out_off[i + 1] = k
    return out[:total], out_off, 0, 0


@njit(cache=True, nogil=True, boundscheck=False)
def _store8(out, k, v):  # noqa: ANN001, ANN202
    """``out[k:k + 8]`` = the little-endian bytes of ``v`` (LLVM merges the stores)."""
    out[k] = v & np.uint64(0xFF)
    out[k + 1] = (v >> np.uint64(8)) & np.uint64(0xFF)
    out[k + 2] = (v >> np.uint64(16)) & np.uint64(0xFF)
    out[k + 3] = (v >> np.uint64(24)) & np.uint64(0xFF)
    out[k + 4] = (v >> np.uint64(32)) & np.uint64(0xFF)
    out[k + 5] = (v >> np.uint64(40)) & np.uint64(0xFF)
    out[k + 6] = (v >> np.uint64(48)) & np.uint64(0xFF)
    out[k + 7] = v >> np.uint64(56)
