"""FSST's two inner loops compiled with numba: the greedy parse and the code expansion.

Both are sequential per string (a token's end is the next token's start), so numpy can
only run them one token per step over many strings (``fsst_encode.walk``: ~25 ns a token).
Compiled, they cost ~7 ns (parse) and ~4 ns (expand) a token. The rules are exactly those of the numpy code,
which stays the reference (tests compare the two byte for byte) and the path for small
pages, where loading the compiled code would cost more than it saves.

Kernels are compiled once per machine (``cache=True`` keeps them beside this module, or in
numba's user cache when that is read-only) and loaded lazily by ``compiled.fsst_kernels``.
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


@njit(cache=True, nogil=True, boundscheck=False)
def compress(data, offsets, piece, short, single, ht_val, ht_mask, ht_packed):  # noqa: ANN001, ANN201
    """Greedy FSST parse of ``data[offsets[i]:offsets[i + 1]]`` in pieces of ``piece``
    bytes, as ``fsst_encode.Table.match`` picks tokens; returns (codes, offsets from 0).
    ``short`` / ``single`` / ``ht_packed`` hold token ids (256 + b: the escaped byte b,
    two output bytes) with their lengths in bits 12..15 (``fsst_encode.Table.packed``).

    int64 throughout: numba's uint16 arithmetic is several times slower. (Parsing two
    runs of strings in step, so that their load chains overlap, measured only ~10%.)"""
    n = offsets.shape[0] - 1
    out = np.empty(2 * (offsets[n] - offsets[0]), np.uint8)
    out_off = np.empty(n + 1, np.int64)
    out_off[0] = 0
    k = 0
    for i in range(n):
        s = offsets[i]
        e = offsets[i + 1]
        while s < e:
            pe = min(s + piece, e)
            p = s
            while p < pe:
                rem = pe - p
                if rem == 1:
                    tok = np.int64(single[data[p]])
                else:
                    w = _window(data, p)
                    slot = (((w & _MASK24) * _HASH_MUL) & _MASK32) >> _HASH_SHIFT
                    hit = np.int64(ht_packed[slot])
                    if (hit >> 12) <= rem and (w & ht_mask[slot]) == ht_val[slot]:
                        tok = hit
                    else:
                        tok = np.int64(short[w & np.uint64(0xFFFF)])
                code = tok & 0x1FF
                if code >= 256:
                    out[k] = _ESC
                    out[k + 1] = code - 256
                    k += 2
                else:
                    out[k] = code
                    k += 1
                p += tok >> 12
            s = pe
        out_off[i + 1] = k
    return out[:k], out_off


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
            c = np.int64(src[p])
            if c == _ESC:
                if p + 1 >= e:
                    return src[:0], rel[:0], 2, p
                total += 1
                p += 2
            elif c < n_symbols:
                total += np.int64(lens[c])
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
            c = np.int64(src[p])
            if c == _ESC:
                out[k] = src[p + 1]
                k += 1
                p += 2
            else:  # all 8 bytes of the symbol (zero-padded); LLVM merges the stores
                v = symbols[c]
                out[k] = v & np.uint64(0xFF)
                out[k + 1] = (v >> np.uint64(8)) & np.uint64(0xFF)
                out[k + 2] = (v >> np.uint64(16)) & np.uint64(0xFF)
                out[k + 3] = (v >> np.uint64(24)) & np.uint64(0xFF)
                out[k + 4] = (v >> np.uint64(32)) & np.uint64(0xFF)
                out[k + 5] = (v >> np.uint64(40)) & np.uint64(0xFF)
                out[k + 6] = (v >> np.uint64(48)) & np.uint64(0xFF)
                out[k + 7] = v >> np.uint64(56)
                k += np.int64(lens[c])
                p += 1
        out_off[i + 1] = k
    return out[:total], out_off, 0, 0
