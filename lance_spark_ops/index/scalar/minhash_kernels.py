"""MinHash kernels compiled with numba: per document, the minimum of every permutation
``a * x + b`` (wrapping u64) over its shingle hashes, compressed to 16 bits, in one pass over
the hashes (``minhash.signatures``; the numpy form materialises a hashes x shingles matrix and
reduces it per document, several times slower), and XXH64 of many byte ranges (shingles,
bands). Compiled once per machine (``cache=True``), loaded lazily by
``minhash.compiled_kernels``; the results are the numpy code's, bit for bit.
"""

from __future__ import annotations

import numba
import numpy as np


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
            for j in range(k):
                v = a[j] * x + b[j]
                m = mins[j]
                mins[j] = v if v < m else m
        for j in range(k):
            out[d, j] = np.uint16((c[j] * mins[j]) >> np.uint64(48))


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


@numba.njit(cache=True, nogil=True)
def xxh64_many(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, seed: np.uint64,
               out: np.ndarray) -> None:
    """XXH64 with ``seed`` of every ``data[starts[i]:starts[i] + lengths[i]]`` (as
    ``bloomfilter.xxh64``)."""
    for i in range(starts.shape[0]):
        p = starts[i]
        n = lengths[i]
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
        out[i] = h
