"""RaBitQ's per-row work compiled with numba (``rabitq``): the fast rotation and the ex-code
rescale search, row by row in float32 as Lance runs them (no fastmath: every sum keeps
Lance's order, so the results equal the numpy code's and pylance's bit for bit).

The numpy search walks all d x 2^ex_bits possible events of every row; here only the live
ones (typically a fifth) are collected - each dimension's count found first, the dimensions
grouped by it, so that the loops emitting them run fixed trip counts - and sorted by one
counting pass over buckets of the threshold bits then an insertion pass within the buckets
(a radix pass per threshold byte, as before, cost ~1.3x the search's time as a whole).
Compiled once per machine (``cache=True``), loaded lazily by ``rabitq.compiled_kernels``.
"""

from __future__ import annotations

import numba
import numpy as np

_EPS = np.float32(1.0e-5)
_F0 = np.float32(0.0)
_HALF = np.float32(0.5)
_QUARTER = np.float32(0.25)
_TWO = np.float32(2.0)


BLOCK = 64  # rows rotated together: each butterfly runs over a block's rows at once (SIMD)
# built ahead of time by ``compile_kernels`` (``kernels_aot``: arrays only, so the scalars travel
# in small ``fp`` (float32) / ``ip`` (int64) arrays): a worker then loads them in about a
# millisecond without importing numba (1.5-3 s per fresh worker under load)
AOT_EXPORTS = {
    "rotate_fast": "void(f4[:, ::1], f4[:, ::1], f4[::1], i8[::1], f4[:, ::1])",
    "ex_codes": "void(f4[:, ::1], f4[::1], i8[::1], u1[:, ::1], f4[::1])",
    "factors": "void(f4[:, ::1], f4[:, ::1], f4[::1], u1[:, ::1], i8[::1], f4[:, ::1])",
    "encode_rows": "void(f4[:, ::1], i8[::1], f4[:, ::1], f4[:, ::1], f4[:, ::1], f4[::1], i8[::1], "
                   "u1[:, ::1], u1[:, ::1], f4[:, ::1])",
}


@numba.njit(inline="always")
def _butterfly(p: np.ndarray, q: np.ndarray, nb: int) -> None:
    """One Walsh-Hadamard butterfly over a block's ``nb`` rows: ``p, q = p + q, p - q``."""
    for r in range(nb):
        x = p[r]
        y = q[r]
        p[r] = x + y
        q[r] = x - y


@numba.njit(cache=True, nogil=True)
def _fwht_block(t: np.ndarray, lo: int, n: int, scale: np.float32, nb: int) -> None:
    """Lance's Walsh-Hadamard butterflies over dims ``lo .. lo + n`` of a transposed block
    ``t`` (dims x rows, the first ``nb`` rows live), then the rescale; per value the same float32
    operations as Lance's row by row."""
    half = 1
    while half < n:
        step = half * 2
        for b in range(lo, lo + n, step):
            for i in range(b, b + half):
                _butterfly(t[i], t[i + half], nb)
        half = step
    for i in range(lo, lo + n):
        p = t[i]
        for r in range(nb):
            p[r] = p[r] * scale


@numba.njit(cache=True, nogil=True)
def _flip_block(t: np.ndarray, signs: np.ndarray, nb: int) -> None:
    for j in range(t.shape[0]):
        m = signs[j]
        p = t[j]
        for r in range(nb):
            p[r] = p[r] * m


@numba.njit(cache=True, nogil=True)
def rotate_block(t: np.ndarray, nb: int, masks: np.ndarray, trunc: int, scale: np.float32) -> None:
    """Lance's fast rotation of the ``nb`` rows of a transposed block ``t`` (d x BLOCK) in
    place; ``masks`` (rounds, d) float32 of +-1. Dimensions that are not a power of two: the
    transform alternates over the head and the tail, the halves mixed after each round."""
    d = t.shape[0]
    rounds = masks.shape[0]
    if trunc == d:
        for k in range(rounds):
            _flip_block(t, masks[k], nb)
            _fwht_block(t, 0, d, scale, nb)
        return
    start = d - trunc
    half = d // 2
    for k in range(rounds):
        _flip_block(t, masks[k], nb)
        if k % 2 == 0:
            _fwht_block(t, 0, trunc, scale, nb)
        else:
            _fwht_block(t, start, trunc, scale, nb)
        for j in range(half):
            _butterfly(t[j], t[j + half], nb)
    for j in range(d):
        p = t[j]
        for r in range(nb):
            p[r] = p[r] * _QUARTER


@numba.njit(cache=True, nogil=True)
def rotate_fast(x: np.ndarray, masks: np.ndarray, fp: np.ndarray, ip: np.ndarray, out: np.ndarray) -> None:
    """Each row of ``x`` (n, d) float32 rotated into ``out``, BLOCK rows at a time; ``fp``:
    [scale], ``ip``: [trunc] (the transform's length)."""
    scale = fp[0]
    trunc = ip[0]
    n, d = x.shape
    t = np.empty((d, BLOCK), np.float32)
    for r0 in range(0, n, BLOCK):
        nb = min(BLOCK, n - r0)
        for r in range(nb):
            for j in range(d):
                t[j, r] = x[r0 + r, j]
        rotate_block(t, nb, masks, trunc, scale)
        for r in range(nb):
            for j in range(d):
                out[r0 + r, j] = t[j, r]


@numba.njit(cache=True, nogil=True)
def _sort_keys(keys: np.ndarray, m: int, tmp: np.ndarray, count: np.ndarray, lo: np.uint64) -> np.ndarray:
    """``keys[:m]`` in ascending order; returns the buffer holding them. Keys are distinct (the
    threshold's bits, then dimension and code), thresholds at least ``lo``'s bits. One counting
    pass into at least 2m buckets of the threshold bits (a monotone map, so the buckets are in
    key order), then an insertion pass that only moves keys within a bucket (few share one)."""
    if m < 2:
        return keys
    nb = 2
    while nb < m:
        nb <<= 1
    nb <<= 1
    hi = lo
    for i in range(m):
        k = keys[i] >> np.uint64(32)
        if k > hi:
            hi = k
    span = hi - lo
    shift = np.uint64(0)
    while (span >> shift) >= np.uint64(nb):
        shift += np.uint64(1)
    for b in range(nb + 1):
        count[b] = 0
    for i in range(m):
        k = keys[i] >> np.uint64(32)
        b = np.int64((k - lo) >> shift) if k > lo else 0
        count[b + 1] += 1
    for b in range(nb):
        count[b + 1] += count[b]
    for i in range(m):
        k = keys[i] >> np.uint64(32)
        b = np.int64((k - lo) >> shift) if k > lo else 0
        tmp[count[b]] = keys[i]
        count[b] += 1
    for i in range(1, m):
        key = tmp[i]
        j = i - 1
        while j >= 0 and tmp[j] > key:
            tmp[j + 1] = tmp[j]
            j -= 1
        tmp[j + 1] = key
    return tmp


@numba.njit(cache=True, nogil=True)
def _ex_row(v: np.ndarray, ex_bits: int, tight: np.float32, a: np.ndarray, keys: np.ndarray,
            tmp: np.ndarray, count: np.ndarray, cur: np.ndarray, nev: np.ndarray, order: np.ndarray,
            values: np.ndarray) -> np.float32:
    """One rotated row's ex codes (into ``values``) and ``<v, full code + bias>``; scratch:
    ``a`` (d), ``keys`` / ``tmp`` (d x (2^ex_bits - 1) + 2^ex_bits), ``count`` (``count_size``),
    ``cur`` / ``nev`` / ``order`` (d). Lance's event scan: each code above a dimension's start
    code is an event at threshold ``code / a``; the events in threshold order (then dimension)
    update the sums and the best threshold. Each dimension's event count is found first (two
    divisions at its end), the dimensions are grouped by it and every group emits its events
    in loops of a fixed trip count (a loop per dimension, ending on a data-dependent branch,
    mispredicted most of the time, cost more than the divisions)."""
    d = v.shape[0]
    max_code = (1 << ex_bits) - 1
    mask = np.uint8(max_code)
    bias = -np.float32((1 << ex_bits) - 0.5)
    fmax = np.float32(max_code)
    eps32 = np.float32(np.finfo(np.float32).eps)
    thr32 = np.empty(1, np.float32)
    thr_bits = thr32.view(np.uint32)
    norm_sq = _F0
    for j in range(d):
        norm_sq = norm_sq + v[j] * v[j]
    if not (norm_sq > eps32) or not np.isfinite(norm_sq):
        for j in range(d):
            values[j] = 0
        return _F0
    norm = np.sqrt(norm_sq)
    max_value = _F0
    for j in range(d):
        a[j] = np.abs(v[j]) / norm
        if np.isfinite(a[j]) and a[j] > max_value:
            max_value = a[j]
    t = _F0
    if max_value > _F0:
        t_end = np.float32(max_code + 10) / max_value
        t_start = t_end * tight
        den = np.float32(d) * _QUARTER
        num = _F0
        for g in range(max_code + 2):
            count[g] = 0
        for j in range(d):
            aj = a[j]
            if not (aj > _F0) or not np.isfinite(aj):
                cur[j] = 0
                nev[j] = 0
                count[1] += 1
                continue
            c = np.floor(t_start * aj + _EPS)
            c = min(max(c, _F0), fmax)
            ci = np.int64(c)
            den = den + np.float32(ci * ci + ci)
            num = num + (np.float32(ci) + _HALF) * aj
            # the last code whose threshold is below t_end: t_end * a, give or take one
            h = np.int64(min(t_end * aj, fmax))
            if h < max_code and np.float32(h + 1) / aj < t_end:
                h += 1
            elif h > ci and not (np.float32(h) / aj < t_end):
                h -= 1
            k = max(h - ci, 0)
            cur[j] = ci
            nev[j] = k
            count[k + 1] += 1
        for g in range(max_code + 1):
            count[g + 1] += count[g]
        for j in range(d):
            k = nev[j]
            order[count[k]] = j
            count[k] += 1
        m = 0
        lo = 0
        for g in range(max_code + 1):
            hi = count[g]
            for q in range(lo, hi):
                j = order[q]
                aj = a[j]
                base = cur[j] + 1
                jj = np.uint64(j) << np.uint64(8)
                for kk in range(g):
                    nx = base + kk
                    thr32[0] = np.float32(nx) / aj
                    keys[m + kk] = (np.uint64(thr_bits[0]) << np.uint64(32)) | jj | np.uint64(nx)
                m += g
            lo = hi
        thr32[0] = t_start
        ks = _sort_keys(keys, m, tmp, count, np.uint64(thr_bits[0]))
        best = num / np.sqrt(den)
        t = t_start
        for e in range(m):
            key = ks[e]
            j = np.int64((key >> np.uint64(8)) & np.uint64(0xFFFFFF))
            nx = np.int64(key & np.uint64(0xFF))
            den = den + np.float32(2 * nx)
            num = num + a[j]
            ip = num / np.sqrt(den)
            if ip > best:
                best = ip
                thr_bits[0] = np.uint32(key >> np.uint64(32))
                t = thr32[0]
    acc = _F0
    for j in range(d):
        c = np.floor(t * a[j] + _EPS)
        c = min(max(c, _F0), fmax)
        code = np.uint8(np.int64(c))
        if np.signbit(v[j]):
            code = (~code) & mask
            full = np.int64(code)
        else:
            full = (np.int64(1) << ex_bits) + np.int64(code)
        values[j] = code
        acc = acc + v[j] * (np.float32(full) + bias)
    return acc


@numba.njit(cache=True, nogil=True)
def _key_space(d: int, ex_bits: int) -> int:
    """Length of the ``keys`` / ``tmp`` scratch: every event, and a group's last loop may write
    up to 2^ex_bits past the events before it."""
    max_code = (1 << ex_bits) - 1
    return d * max_code + max_code + 1


@numba.njit(cache=True, nogil=True)
def _count_space(d: int, ex_bits: int) -> int:
    """Length of the ``count`` scratch: 4 x the events rounded up to a power of two, + 1."""
    nb = 2
    while nb < d * ((1 << ex_bits) - 1):
        nb <<= 1
    return max(4 * nb, (1 << ex_bits) + 1) + 2


@numba.njit(cache=True, nogil=True)
def ex_codes(rot: np.ndarray, fp: np.ndarray, ip: np.ndarray, values: np.ndarray, dots: np.ndarray) -> None:
    """Per rotated row: the ex code of each dimension (``values``) and ``<v, full code + bias>``
    (``dots``), with Lance's rescale search (events sorted by threshold, then dimension);
    ``fp``: [tight start], ``ip``: [ex_bits]."""
    tight = fp[0]
    ex_bits = ip[0]
    n, d = rot.shape
    a = np.empty(d, np.float32)
    keys = np.empty(_key_space(d, ex_bits), np.uint64)
    tmp = np.empty(_key_space(d, ex_bits), np.uint64)
    count = np.zeros(_count_space(d, ex_bits), np.int64)
    cur = np.empty(d, np.int64)
    nev = np.empty(d, np.int64)
    order = np.empty(d, np.int64)
    for r in range(n):
        dots[r] = _ex_row(rot[r], ex_bits, tight, a, keys, tmp, count, cur, nev, order, values[r])


@numba.njit(cache=True, nogil=True)
def _finish_factors(d: int, ns: np.float32, bin_res: np.float32, bin_cent: np.float32, ex_cent: np.float32,
                    res_cent: np.float32, ex_res: np.float32, dot: bool, out: np.ndarray) -> None:
    """A row's five factors (``out``) from its sums over the dimensions."""
    code_norm = np.float32(d) * _QUARTER
    eps = np.float32(1.9)
    one = np.float32(1.0)
    bin_corr = _F0 if bin_res == _F0 else (ns * bin_cent) / bin_res
    ex_corr = _F0 if ex_res == _F0 else (ns * ex_cent) / ex_res
    err = _F0
    if d > 1 and ns > _F0 and bin_res != _F0:
        align = ns * code_norm / (bin_res * bin_res)
        ang = np.sqrt(max(align - one, _F0) / np.float32(d - 1))
        err = np.sqrt(ns) * eps * ang
    if dot:
        base = one - res_cent
        out[0] = base + bin_corr
        out[1] = _F0 if bin_res == _F0 else (-ns) / bin_res
        out[2] = err
        out[3] = base + ex_corr
        out[4] = _F0 if ex_res == _F0 else (-ns) / ex_res
    else:
        out[0] = ns + _TWO * bin_corr
        out[1] = _F0 if bin_res == _F0 else (-_TWO * ns) / bin_res
        out[2] = _TWO * err
        out[3] = ns + _TWO * ex_corr
        out[4] = _F0 if ex_res == _F0 else (-_TWO * ns) / ex_res


@numba.njit(cache=True, nogil=True)
def _factors_row(x: np.ndarray, c: np.ndarray, ns: np.float32, values: np.ndarray, ex_bits: int,
                 dot: bool, ex_res: np.float32, out: np.ndarray) -> None:
    """add, scale, error, ex add, ex scale of one row (``out``, 5) from its rotated residual,
    rotated centroid, |r|^2, ex codes and ex dot, each sum over the dimensions in Lance's order."""
    d = x.shape[0]
    bias = -np.float32((1 << ex_bits) - 0.5)
    bin_res = _F0
    bin_cent = _F0
    ex_cent = _F0
    res_cent = _F0
    for j in range(d):
        xj = x[j]
        cj = c[j]
        pos = not np.signbit(xj)
        h = _HALF if pos else -_HALF
        bin_res = bin_res + xj * h
        bin_cent = bin_cent + cj * h
        if ex_bits > 0:
            full = (np.int64(1) << ex_bits) + np.int64(values[j]) if pos else np.int64(values[j])
            ex_cent = ex_cent + cj * (np.float32(full) + bias)
        res_cent = res_cent + xj * cj
    _finish_factors(d, ns, bin_res, bin_cent, ex_cent, res_cent, ex_res, dot, out)


@numba.njit(cache=True, nogil=True)
def factors(rot: np.ndarray, cent: np.ndarray, norm_sq: np.ndarray, values: np.ndarray, ip: np.ndarray,
            out: np.ndarray) -> None:
    """Per row: add, scale, error, ex add, ex scale (``out`` (n, 5); ``out[:, 3]`` holds the ex
    dot on entry); ``ip``: [ex_bits, dot (0 / 1)]."""
    ex_bits = ip[0]
    dot = ip[1] != 0
    for r in range(rot.shape[0]):
        _factors_row(rot[r], cent[r], norm_sq[r], values[r], ex_bits, dot, out[r, 3], out[r])


@numba.njit(cache=True, nogil=True)
def encode_rows(x: np.ndarray, parts: np.ndarray, cents: np.ndarray, cents_rot: np.ndarray,
                masks: np.ndarray, fp: np.ndarray, ip: np.ndarray, codes: np.ndarray, values: np.ndarray,
                out: np.ndarray) -> None:
    """Everything per row, BLOCK rows at a time: the residuals against their partitions'
    centroids, |r|^2 (l2: Lance's 16-lane distance; dot: in order) and the rotation over the
    block's rows at once (transposed: the sums and butterflies run across rows, each row's in
    Lance's order), then per row its sign bits (``codes``), ex codes (``values``) and factors
    (``out`` (n, 5)). ``fp``: [scale, tight start], ``ip``: [trunc, ex_bits, dot (0 / 1)]."""
    scale = fp[0]
    tight = fp[1]
    trunc = ip[0]
    ex_bits = ip[1]
    dot = ip[2] != 0
    n, d = x.shape
    t = np.empty((d, BLOCK), np.float32)
    ns = np.empty(BLOCK, np.float32)
    rest = np.empty(BLOCK, np.float32)
    lanes = np.empty((16, BLOCK), np.float32)
    res = np.empty(d, np.float32)
    ct = np.empty((d, BLOCK), np.float32)
    sums = np.empty((5, BLOCK), np.float32)
    bias = -np.float32((1 << ex_bits) - 0.5)
    a = np.empty(d, np.float32)
    keys = np.empty(_key_space(d, ex_bits), np.uint64)
    tmp = np.empty(_key_space(d, ex_bits), np.uint64)
    count = np.zeros(_count_space(d, ex_bits), np.int64)
    cur = np.empty(d, np.int64)
    nev = np.empty(d, np.int64)
    order = np.empty(d, np.int64)
    full16 = d // 16 * 16
    for r0 in range(0, n, BLOCK):
        nb = min(BLOCK, n - r0)
        for r in range(nb):
            p = parts[r0 + r]
            for j in range(d):
                t[j, r] = x[r0 + r, j] - cents[p, j]
        for r in range(nb):
            ns[r] = _F0
        if dot:
            for j in range(d):
                q = t[j]
                for r in range(nb):
                    ns[r] = ns[r] + q[r] * q[r]
        else:
            for r in range(nb):
                rest[r] = _F0
            for j in range(full16, d):
                q = t[j]
                for r in range(nb):
                    rest[r] = rest[r] + q[r] * q[r]
            for i in range(16):
                li = lanes[i]
                for r in range(nb):
                    li[r] = _F0
                for j0 in range(0, full16, 16):
                    q = t[j0 + i]
                    for r in range(nb):
                        li[r] = li[r] + q[r] * q[r]
            for i in range(16):
                li = lanes[i]
                for r in range(nb):
                    ns[r] = ns[r] + li[r]
            for r in range(nb):
                ns[r] = rest[r] + ns[r]
        rotate_block(t, nb, masks, trunc, scale)
        for r in range(nb):
            for j in range(d):
                res[j] = t[j, r]
            row = codes[r0 + r]
            for b in range(row.shape[0]):
                row[b] = 0
            for j in range(d):
                if not np.signbit(res[j]):
                    row[j >> 3] |= np.uint8(1 << (j & 7))
            sums[4, r] = _F0
            if ex_bits > 0:
                sums[4, r] = _ex_row(res, ex_bits, tight, a, keys, tmp, count, cur, nev, order,
                                     values[r0 + r])
        # the factors' sums over the dimensions, across the block's rows (each in Lance's order)
        for r in range(nb):
            p = parts[r0 + r]
            for j in range(d):
                ct[j, r] = cents_rot[p, j]
        for i in range(4):
            for r in range(nb):
                sums[i, r] = _F0
        bin_res, bin_cent, ex_cent, res_cent = sums[0], sums[1], sums[2], sums[3]
        for j in range(d):
            xs = t[j]
            cs = ct[j]
            for r in range(nb):
                xj = xs[r]
                cj = cs[r]
                pos = not np.signbit(xj)
                h = _HALF if pos else -_HALF
                bin_res[r] = bin_res[r] + xj * h
                bin_cent[r] = bin_cent[r] + cj * h
                res_cent[r] = res_cent[r] + xj * cj
            if ex_bits > 0:
                for r in range(nb):
                    c = values[r0 + r, j]
                    full = (np.int64(1) << ex_bits) + np.int64(c) if not np.signbit(xs[r]) else np.int64(c)
                    ex_cent[r] = ex_cent[r] + cs[r] * (np.float32(full) + bias)
        for r in range(nb):
            _finish_factors(d, ns[r], bin_res[r], bin_cent[r], ex_cent[r], res_cent[r], sums[4, r], dot,
                            out[r0 + r])
