"""FSST's two inner loops compiled with numba: the greedy parse and the code expansion.

Both are sequential per string (a token's end is the next token's start), so numpy can
only run them one token per step over many strings (``fsst_encode.walk``: ~25 ns a token).
Compiled, they cost ~2.6 ns (parse) and ~1.3 ns (expand) a token. The rules are exactly
those of the numpy code, which stays the reference (tests compare the two byte for byte)
and the path for small pages, where loading the compiled code would cost more than it
saves.

The token step (window, hash slot, table, length) is written out where it runs - twice in
``compress``'s two-run loop, in ``_parse`` and in ``parse_pieces`` - rather than called:
numba compiles a jitted helper that takes arrays as a real call per token (measured 10x
slower), and its IR inliner changed results here. The tests hold all four to the numpy rule.

Kernels are compiled once per machine (``cache=True`` keeps them beside this module, or in
numba's user cache when that is read-only) and loaded lazily by ``compiled.fsst_kernels``.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

_MASK24 = np.uint64(0xFFFFFF)
_MASK32 = np.uint64(0xFFFFFFFF)
_HASH_MUL = np.uint64(0x9E3779B1)
_HASH_SHIFT = np.uint64(32 - 12)
_ESC = 255


@intrinsic
def _load8(typingctx, arr, idx):  # noqa: ANN001, ANN202, ARG001
    """``arr[idx:idx + 8]`` (uint8) as one unaligned little-endian u64 load, inline: numba
    does not inline a jitted helper with an array argument (a call per token) and LLVM
    does not merge eight byte loads."""
    if not (isinstance(arr, types.Array) and arr.dtype == types.uint8):
        return None

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        i = context.cast(builder, args[1], signature.args[1], types.intp)
        ptr = builder.bitcast(builder.gep(ary.data, [i]), ir.IntType(64).as_pointer())
        return builder.load(ptr, align=1)

    return types.uint64(arr, idx), codegen


@intrinsic
def _store8(typingctx, arr, idx, val):  # noqa: ANN001, ANN202, ARG001
    """``arr[idx:idx + 8]`` = the little-endian bytes of the u64 ``val``: one unaligned store."""
    if not (isinstance(arr, types.Array) and arr.dtype == types.uint8):
        return None

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        i = context.cast(builder, args[1], signature.args[1], types.intp)
        v = context.cast(builder, args[2], signature.args[2], types.uint64)
        ptr = builder.bitcast(builder.gep(ary.data, [i]), ir.IntType(64).as_pointer())
        builder.store(v, ptr, align=1)
        return context.get_dummy_value()

    return types.void(arr, idx, val), codegen


@njit(cache=True, nogil=True, boundscheck=False)
def _tail_window(data: np.ndarray, pos: int) -> np.uint64:
    """The bytes from ``pos`` to the end of ``data`` (fewer than 8) as a little-endian u64."""
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

    A token is a chain of dependent loads (window, table, length), so when every string is
    one piece the strings are parsed as two runs in step (A from the first string, B from
    the middle byte), whose chains overlap in the CPU (~1.4x one run). B writes at twice
    its input position (no token takes more) and is moved down behind A at the end.
    int64 throughout: numba's uint16 arithmetic is several times slower."""
    n = offsets.shape[0] - 1
    size = data.shape[0]
    base = offsets[0]
    out = np.empty(2 * (offsets[n] - base), np.uint8)
    out_off = np.empty(n + 1, np.int64)
    out_off[0] = 0
    longest = 0
    for i in range(n):
        longest = max(longest, offsets[i + 1] - offsets[i])
    h = np.searchsorted(offsets, base + (offsets[n] - base) // 2)  # B's first string
    if longest > piece or not 0 < h < n:
        k = _parse(data, offsets, 0, n, offsets[0], 0, out, out_off, piece, short, single, ht_val, ht_mask,
                   ht_packed)
        return out[:k], out_off
    ia, pa, ea, ka = 0, offsets[0], offsets[1], 0
    ib, pb, eb, kb = h, offsets[h], offsets[h + 1], 2 * (offsets[h] - base)
    kb_first = kb
    while True:  # both runs in step until one runs out
        if pa >= ea or pb >= eb:
            if pa >= ea:
                out_off[ia + 1] = ka
                ia += 1
                if ia == h:
                    break
                pa, ea = offsets[ia], offsets[ia + 1]
            if pb >= eb:
                out_off[ib + 1] = kb
                ib += 1
                if ib == n:
                    break
                pb, eb = offsets[ib], offsets[ib + 1]
            continue
        rem = ea - pa
        if rem == 1:
            tok = np.int64(single[data[pa]])
        else:
            w = _load8(data, pa) if pa + 8 <= size else _tail_window(data, pa)
            slot = (((w & _MASK24) * _HASH_MUL) & _MASK32) >> _HASH_SHIFT
            hit = np.int64(ht_packed[slot])
            if (hit >> 12) <= rem and (w & ht_mask[slot]) == ht_val[slot]:
                tok = hit
            else:
                tok = np.int64(short[w & np.uint64(0xFFFF)])
        code = tok & 0x1FF
        if code >= 256:
            out[ka] = _ESC
            out[ka + 1] = code - 256
            ka += 2
        else:
            out[ka] = code
            ka += 1
        pa += tok >> 12
        rem_b = eb - pb
        if rem_b == 1:
            tok_b = np.int64(single[data[pb]])
        else:
            w_b = _load8(data, pb) if pb + 8 <= size else _tail_window(data, pb)
            slot_b = (((w_b & _MASK24) * _HASH_MUL) & _MASK32) >> _HASH_SHIFT
            hit_b = np.int64(ht_packed[slot_b])
            if (hit_b >> 12) <= rem_b and (w_b & ht_mask[slot_b]) == ht_val[slot_b]:
                tok_b = hit_b
            else:
                tok_b = np.int64(short[w_b & np.uint64(0xFFFF)])
        code_b = tok_b & 0x1FF
        if code_b >= 256:
            out[kb] = _ESC
            out[kb + 1] = code_b - 256
            kb += 2
        else:
            out[kb] = code_b
            kb += 1
        pb += tok_b >> 12
    ka = _parse(data, offsets, ia, h, pa, ka, out, out_off, piece, short, single, ht_val, ht_mask, ht_packed)
    kb = _parse(data, offsets, ib, n, pb, kb, out, out_off, piece, short, single, ht_val, ht_mask, ht_packed)
    shift = kb_first - ka  # B's output moves down to follow A's
    if shift:
        for x in range(kb_first, kb):
            out[x - shift] = out[x]
        for i in range(h + 1, n + 1):
            out_off[i] -= shift
    return out[: kb - shift], out_off


@njit(cache=True, nogil=True, boundscheck=False)
def _parse(data, offsets, first, last, p, k, out, out_off, piece, short, single, ht_val, ht_mask,  # noqa: ANN001, ANN202
           ht_packed):
    """``compress``'s parse of strings ``first..last - 1`` alone, from cursor ``p`` in string
    ``first`` (a string's pieces start at its start) and output position ``k``; sets their
    ``out_off`` entries and returns the output position."""
    size = data.shape[0]
    for i in range(first, last):
        e = offsets[i + 1]
        if i > first:
            p = offsets[i]
        while p < e:
            pe = min(offsets[i] + ((p - offsets[i]) // piece + 1) * piece, e)
            while p < pe:
                rem = pe - p
                if rem == 1:
                    tok = np.int64(single[data[p]])
                else:
                    w = _load8(data, p) if p + 8 <= size else _tail_window(data, p)
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
        out_off[i + 1] = k
    return k


@njit(cache=True, nogil=True, boundscheck=False)
def parse_pieces(data, start, end, short, single, ht_val, ht_mask, ht_packed):  # noqa: ANN001, ANN201
    """The greedy parse of the pieces ``data[start[j]:end[j]]`` (in order, tiling ``data``)
    with ``compress``'s rule, for the table rounds: token ids (256 + b: escaped byte b) in
    data order and the token before each (-1 at a piece start)."""
    size = data.shape[0]
    toks = np.empty(size, np.uint16)
    prev = np.empty(size, np.int64)
    t = 0
    for j in range(start.shape[0]):
        p = start[j]
        e = end[j]
        last = -1
        while p < e:
            rem = e - p
            if rem == 1:
                tok = np.int64(single[data[p]])
            else:
                w = _load8(data, p) if p + 8 <= size else _tail_window(data, p)
                slot = (((w & _MASK24) * _HASH_MUL) & _MASK32) >> _HASH_SHIFT
                hit = np.int64(ht_packed[slot])
                if (hit >> 12) <= rem and (w & ht_mask[slot]) == ht_val[slot]:
                    tok = hit
                else:
                    tok = np.int64(short[w & np.uint64(0xFFFF)])
            code = tok & 0x1FF
            toks[t] = code
            prev[t] = last
            last = code
            t += 1
            p += tok >> 12
    return toks[:t], prev[:t]


@njit(cache=True, nogil=True, boundscheck=False)
def count_tokens(toks, prev, tok_val, tok_len, pairs, table):  # noqa: ANN001, ANN201
    """The counts of one table round (``fsst_encode._count_numpy``): per token id (512),
    a multi-byte token's first byte counted as well; with ``pairs``, each pair key
    (first * 512 + second, and ``PAIR_KEYS`` + first * 512 + 256 + first byte of a
    multi-byte second) once with its count, in first-seen order. ``table``: int32 zeros,
    one per pair key (2 * ``PAIR_KEYS``), counted in and left zeroed again."""
    counts = np.zeros(512, np.int64)
    n = toks.shape[0]
    keys = np.empty(2 * n if pairs else 0, np.int64)
    nk = 0
    for t in range(n):
        b = np.int64(toks[t])
        counts[b] += 1
        multi = tok_len[b] > 1
        fb = 256 + np.int64(tok_val[b] & np.uint64(0xFF))
        if multi:
            counts[fb] += 1
        if pairs:
            a = prev[t]
            if a >= 0 and tok_len[a] < 8:
                key = a * 512 + b
                if table[key] == 0:
                    keys[nk] = key
                    nk += 1
                table[key] += 1
                if multi:
                    key = 512 * 512 + a * 512 + fb
                    if table[key] == 0:
                        keys[nk] = key
                        nk += 1
                    table[key] += 1
    keys = keys[:nk]
    cnt = np.empty(nk, np.int64)
    for j in range(nk):
        cnt[j] = table[keys[j]]
        table[keys[j]] = 0
    return counts, keys, cnt


@njit(cache=True, nogil=True, boundscheck=False)
def expanded_size(src, lo, hi, lens, n_symbols):  # noqa: ANN001, ANN201
    """The bytes ``decompress`` writes for the strings ``src[lo[i]:hi[i]]``, with its error
    and position (0, 0 when the codes are valid)."""
    total = 0
    for i in range(lo.shape[0]):
        p = lo[i]
        e = hi[i]
        while p < e:
            c = np.int64(src[p])
            if c < n_symbols:
                total += np.int64(lens[c])
                p += 1
            elif c == _ESC:
                if p + 1 >= e:
                    return total, 2, p
                total += 1
                p += 2
            else:
                return total, 1, p
    return total, 0, 0


@njit(cache=True, nogil=True, boundscheck=False)
def decompress(src, lo, hi, symbols, lens, n_symbols, capacity):  # noqa: ANN001, ANN201
    """Expand the compressed strings ``src[lo[i]:hi[i]]`` (in bounds and ``lo <= hi``,
    checked by the caller; they need not be adjacent: mini-block chunks are read in place)
    in one pass into ``capacity`` bytes, at least what they expand to (8 per code bounds
    it). ``n_symbols`` <= 255, so code 255 is always the escape; ``symbols``: (256,) u64,
    bytes past a symbol's length zero. Returns (bytes, offsets from 0, error, position):
    error 0 is success, 1 a code that is not a symbol (at ``position``), 2 a string ending
    inside an escape (at ``position``)."""
    n = lo.shape[0]
    out = np.empty(capacity + 8, np.uint8)  # every symbol is stored as 8 bytes: room past the end
    out_off = np.empty(n + 1, np.int64)
    out_off[0] = 0
    k = 0
    for i in range(n):
        p = lo[i]
        e = hi[i]
        while p < e:
            c = np.int64(src[p])
            if c < n_symbols:  # all 8 bytes of the symbol (zero-padded past its length)
                _store8(out, k, symbols[c])
                k += np.int64(lens[c])
                p += 1
            elif c == _ESC:
                if p + 1 >= e:
                    return src[:0], out_off[:0], 2, p
                out[k] = src[p + 1]
                k += 1
                p += 2
            else:
                return src[:0], out_off[:0], 1, p
        out_off[i + 1] = k
    return out[:k], out_off, 0, 0
