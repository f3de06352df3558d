"""MinHash kernels compiled with numba: per document, the minimum of every permutation
``a * x + b`` (wrapping u64) over its shingle hashes, compressed to 16 bits, in one pass over
the hashes (``minhash.signatures``; the numpy form materialises a hashes x shingles matrix and
reduces it per document, several times slower), and XXH64 of many byte ranges (shingles,
bands; the bands sorted by a radix sort; a document's shingles hashed and reduced straight
from its tokens). Compiled once per machine (``cache=True``), loaded lazily by
``minhash.compiled_kernels``; the results are the numpy code's, bit for bit.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(inline="always")
def _fold(mins: np.ndarray, a: np.ndarray, b: np.ndarray, x: np.uint64) -> None:
    """Each permutation's running minimum takes ``a[k] * x + b[k]`` (wrapping u64)."""
    for j in range(a.shape[0]):
        v = a[j] * x + b[j]
        m = mins[j]
        mins[j] = v if v < m else m


@numba.njit(inline="always")
def _finish(out: np.ndarray, d: int, c: np.ndarray, mins: np.ndarray) -> None:
    """Document ``d``'s signature: each minimum compressed to 16 bits, ``(c[k] * m) >> 48``."""
    for j in range(c.shape[0]):
        out[d, j] = np.uint16((c[j] * mins[j]) >> np.uint64(48))


@numba.njit(cache=True, nogil=True)
def doc_signatures(hashes: np.ndarray, bounds: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray,
                   out: np.ndarray) -> None:
    """``out[d, k]`` (uint16) = ``(c[k] * m) >> 48`` of ``m``, the minimum over
    ``hashes[bounds[d]:bounds[d + 1]]`` of ``a[k] * x + b[k]`` (wrapping u64)."""
    k = a.shape[0]
    mins = np.empty(k, np.uint64)
    for d in range(bounds.shape[0] - 1):
        for j in range(k):
            mins[j] = np.uint64(0xFFFFFFFFFFFFFFFF)
        for s in range(bounds[d], bounds[d + 1]):
            x = hashes[s]
            _fold(mins, a, b, x)
        _finish(out, d, c, mins)


_P1 = np.uint64(11400714785074694791)  # the XXH64 primes (as bloomfilter)
_P2 = np.uint64(14029467366897019727)
_P3 = np.uint64(1609587929392839161)
_P4 = np.uint64(9650029242287828579)
_P5 = np.uint64(2870177450012600261)


@numba.njit(inline="always")
def _rotl(x: np.uint64, r: int) -> np.uint64:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@numba.njit(inline="always")
def _u64(data: np.ndarray, p: int) -> np.uint64:
    v = np.uint64(0)
    for i in range(8):
        v |= np.uint64(data[p + i]) << np.uint64(8 * i)
    return v


@numba.njit(inline="always")
def _u32(data: np.ndarray, p: int) -> np.uint64:
    v = np.uint64(0)
    for i in range(4):
        v |= np.uint64(data[p + i]) << np.uint64(8 * i)
    return v


@numba.njit(inline="always")
def _round(acc: np.uint64, lane: np.uint64) -> np.uint64:
    return _rotl(acc + lane * _P2, 31) * _P1


@numba.njit(inline="always")
def _xxh64(data: np.ndarray, p: int, n: int, seed: np.uint64) -> np.uint64:
    """XXH64 with ``seed`` of ``data[p:p + n]``."""
    end = p + n
    if n >= 32:
        v1 = seed + _P1 + _P2
        v2 = seed + _P2
        v3 = seed
        v4 = seed - _P1
        while p + 32 <= end:
            v1 = _round(v1, _u64(data, p))
            v2 = _round(v2, _u64(data, p + 8))
            v3 = _round(v3, _u64(data, p + 16))
            v4 = _round(v4, _u64(data, p + 24))
            p += 32
        h = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
        h = (h ^ _round(np.uint64(0), v1)) * _P1 + _P4
        h = (h ^ _round(np.uint64(0), v2)) * _P1 + _P4
        h = (h ^ _round(np.uint64(0), v3)) * _P1 + _P4
        h = (h ^ _round(np.uint64(0), v4)) * _P1 + _P4
    else:
        h = seed + _P5
    h += np.uint64(n)
    while p + 8 <= end:
        h = _rotl(h ^ _round(np.uint64(0), _u64(data, p)), 27) * _P1 + _P4
        p += 8
    if p + 4 <= end:
        h = _rotl(h ^ (_u32(data, p) * _P1), 23) * _P2 + _P3
        p += 4
    while p < end:
        h = _rotl(h ^ (np.uint64(data[p]) * _P5), 11) * _P1
        p += 1
    h ^= h >> np.uint64(33)
    h *= _P2
    h ^= h >> np.uint64(29)
    h *= _P3
    h ^= h >> np.uint64(32)
    return h


@numba.njit(cache=True, nogil=True)
def xxh64_many(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, seed: np.uint64,
               out: np.ndarray) -> None:
    """XXH64 with ``seed`` of every ``data[starts[i]:starts[i] + lengths[i]]`` (as
    ``bloomfilter.xxh64``)."""
    for i in range(starts.shape[0]):
        out[i] = _xxh64(data, starts[i], lengths[i], seed)


@numba.njit(cache=True, nogil=True)
def token_signatures(vocab: np.ndarray, vocab_offsets: np.ndarray, tokens: np.ndarray, bounds: np.ndarray,
                     shingle_size: int, seed: np.uint64, a: np.ndarray, b: np.ndarray, c: np.ndarray,
                     out: np.ndarray) -> None:
    """``out[d]`` (uint16 [num_hashes]): the signature of document ``d``, whose tokens (ids into
    the vocabulary ``vocab[vocab_offsets[t]:vocab_offsets[t + 1]]``) are
    ``tokens[bounds[d]:bounds[d + 1]]`` (at least one): its shingles of ``shingle_size``
    consecutive tokens (all when fewer), bytes joined by 0x1F, hashed with XXH64 ``seed``,
    permuted and reduced as ``doc_signatures`` - without the shingles' bytes or hashes ever
    stored for the whole batch."""
    k = a.shape[0]
    mins = np.empty(k, np.uint64)
    longest = 0
    for t in range(vocab_offsets.shape[0] - 1):
        longest = max(longest, vocab_offsets[t + 1] - vocab_offsets[t])
    buf = np.empty(max(1, shingle_size * (longest + 1)), np.uint8)
    for d in range(bounds.shape[0] - 1):
        lo = bounds[d]
        hi = bounds[d + 1]
        w = min(shingle_size, hi - lo)
        for j in range(k):
            mins[j] = np.uint64(0xFFFFFFFFFFFFFFFF)
        for s in range(lo, hi - w + 1):
            p = 0
            for t in range(s, s + w):
                if t > s:
                    buf[p] = 0x1F
                    p += 1
                tok = tokens[t]
                for q in range(vocab_offsets[tok], vocab_offsets[tok + 1]):
                    buf[p] = vocab[q]
                    p += 1
            x = _xxh64(buf, 0, p, seed)
            _fold(mins, a, b, x)
        _finish(out, d, c, mins)


@numba.njit(cache=True, nogil=True)
def band_keys(sig: np.ndarray, num_bands: int, seed: np.uint64, out: np.ndarray) -> None:
    """``out[d, i]`` = ``i << 56`` | the low 56 bits of XXH64 ``seed`` of band ``i`` of
    ``sig[d]`` (its uint16 values little-endian), as ``minhash.band_keys``."""
    n, k = sig.shape
    w = k // num_bands
    buf = np.empty(2 * w, np.uint8)
    low = np.uint64((1 << 56) - 1)
    for d in range(n):
        for i in range(num_bands):
            for j in range(w):
                v = sig[d, i * w + j]
                buf[2 * j] = np.uint8(v & 0xFF)
                buf[2 * j + 1] = np.uint8(v >> 8)
            out[d, i] = (np.uint64(i) << np.uint64(56)) | (_xxh64(buf, 0, 2 * w, seed) & low)


@numba.njit(cache=True, nogil=True)
def sort_bands(keys: np.ndarray, out_keys: np.ndarray, out_docs: np.ndarray) -> None:
    """The (key, doc) rows of ``keys`` (uint64 [docs, bands], band ``i``'s keys in column ``i``
    with ``i`` in their top 8 bits) sorted by key, ties in doc order: band after band (each band
    one block of ``docs`` rows). A band's keys are bucketed by bits 42..55 (hashes: a handful
    per bucket), in doc order; a bucket is then sorted by an insertion sort, or, past
    ``_SMALL`` keys (many equal or clustered keys), by a stable radix sort of its low 42 bits."""
    n, nb = keys.shape
    starts = np.empty((1 << _DIGIT) + 1, np.int64)
    fill = np.empty(1 << _DIGIT, np.int64)
    scratch_k = np.empty(n, np.uint64)
    scratch_d = np.empty(n, np.uint32)
    counts = np.empty(1 << _DIGIT, np.int64)
    mask = np.uint64((1 << _DIGIT) - 1)
    top = np.uint64(3 * _DIGIT)
    for band in range(nb):
        base = band * n
        starts[:] = 0
        for i in range(n):
            starts[((keys[i, band] >> top) & mask) + 1] += 1
        for g in range(1 << _DIGIT):
            starts[g + 1] += starts[g]
        fill[:] = starts[:-1]
        for i in range(n):
            x = keys[i, band]
            g = (x >> top) & mask
            pos = base + fill[g]
            fill[g] += 1
            out_keys[pos] = x
            out_docs[pos] = i
        for g in range(1 << _DIGIT):
            lo = base + starts[g]
            hi = base + starts[g + 1]
            if hi - lo <= _SMALL:
                for i in range(lo + 1, hi):
                    x = out_keys[i]
                    d = out_docs[i]
                    j = i - 1
                    while j >= lo and out_keys[j] > x:
                        out_keys[j + 1] = out_keys[j]
                        out_docs[j + 1] = out_docs[j]
                        j -= 1
                    out_keys[j + 1] = x
                    out_docs[j + 1] = d
            else:
                _radix_run(out_keys, out_docs, lo, hi, scratch_k, scratch_d, counts)


_DIGIT = 14  # bits per radix digit (4 digits: the 56 bits under a band id)
_SMALL = 48  # buckets up to this many keys are insertion-sorted


@numba.njit(nogil=True)
def _radix_run(k: np.ndarray, d: np.ndarray, lo: int, hi: int, k2: np.ndarray, d2: np.ndarray,
               counts: np.ndarray) -> None:
    """``k[lo:hi]`` (and ``d`` alongside) sorted stably by their low 42 bits: an LSD radix sort
    of three digits (a digit the same for every key skipped)."""
    mask = np.uint64((1 << _DIGIT) - 1)
    m = hi - lo
    for p in range(3):
        sh = np.uint64(_DIGIT * p)
        counts[:] = 0
        for i in range(lo, hi):
            counts[(k[i] >> sh) & mask] += 1
        if counts[(k[lo] >> sh) & mask] == m:
            continue
        at = 0
        for g in range(1 << _DIGIT):
            c = counts[g]
            counts[g] = at
            at += c
        for i in range(lo, hi):
            g = (k[i] >> sh) & mask
            pos = counts[g]
            counts[g] = pos + 1
            k2[pos] = k[i]
            d2[pos] = d[i]
        k[lo:hi] = k2[:m]
        d[lo:hi] = d2[:m]
