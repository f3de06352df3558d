"""Nearest-centroid search for narrow vectors (PQ sub-vectors) compiled with numba
(``kmeans._assign``).

With a few dimensions a distance is a few flops, so the GEMM form (x.c for every pair, then
an argmin pass) spends its time writing and re-reading the n x k distance matrix. Here each
row's k scores (|c|^2 - 2 x.c, as the GEMM form) stay in a k-float buffer, built dimension by
dimension (vectorised over the centroids) for a block of rows at once, and the best two are
taken from it in one pass (the exact assignment's doubt test needs both).
Compiled once per machine (``cache=True``), loaded lazily by ``kmeans.compiled_kernels``.
"""

from __future__ import annotations

import numba
import numpy as np

ROWS = 32  # rows scored together: each centroid row of ``ct`` is loaded once per block


# reassociation lets the loops over centroids vectorise; no "nnan" / "ninf" (scores start at inf)
@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract", "nsz", "arcp"})
def nearest2(x: np.ndarray, ct: np.ndarray, c_sq: np.ndarray, ids: np.ndarray, best: np.ndarray,
             second: np.ndarray) -> None:
    """Per row of ``x`` (n, d) float32: the lowest score's centroid (first of equals), that
    score and the second lowest (equal to it on a tie); ``ct`` (d, k) the centroids
    transposed, ``c_sq`` their squared norms. Rows go in blocks of ``ROWS``, so a dimension's
    centroid values serve the whole block (the per-row loop was bound by reloading them)."""
    n, d = x.shape
    k = ct.shape[1]
    acc = np.empty((ROWS, k), np.float32)
    for i0 in range(0, n, ROWS):
        m = min(ROWS, n - i0)
        for r in range(m):
            for j in range(k):
                acc[r, j] = c_sq[j]
        for t in range(d):
            row = ct[t]
            for r in range(m):
                v = np.float32(-2.0) * x[i0 + r, t]
                a = acc[r]
                for j in range(k):
                    a[j] += v * row[j]
        for r in range(m):
            a = acc[r]
            lo, nxt, b = np.float32(np.inf), np.float32(np.inf), 0
            for j in range(k):  # strictly lower: the first of equals wins, an equal is second
                s = a[j]
                if s < lo:
                    nxt, lo, b = lo, s, j
                elif s < nxt:
                    nxt = s
            ids[i0 + r] = b
            best[i0 + r] = lo
            second[i0 + r] = nxt
