"""Nearest-centroid search for narrow vectors (PQ sub-vectors) compiled with numba
(``kmeans._assign``).

With a few dimensions a distance is a few flops, so the GEMM form (x.c for every pair, then
an argmin pass) spends its time writing and re-reading the n x k distance matrix. Here each
row's k scores (|c|^2 - 2 x.c, as the GEMM form) stay in a k-float buffer, built dimension by
dimension (vectorised over the centroids), and the best two are taken from it at once (the
exact assignment's doubt test needs both).
Compiled once per machine (``cache=True``), loaded lazily by ``kmeans.compiled_kernels``.
"""

from __future__ import annotations

import numba
import numpy as np


# reassociation lets the loops over centroids vectorise; no "nnan" / "ninf" (the second best
# masks the best with inf)
@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract", "nsz", "arcp"})
def nearest2(x: np.ndarray, ct: np.ndarray, c_sq: np.ndarray, ids: np.ndarray, best: np.ndarray,
             second: np.ndarray) -> None:
    """Per row of ``x`` (n, d) float32: the lowest score's centroid (first of equals), that
    score and the second lowest; ``ct`` (d, k) the centroids transposed, ``c_sq`` their
    squared norms."""
    n, d = x.shape
    k = ct.shape[1]
    acc = np.empty(k, np.float32)
    for i in range(n):
        for j in range(k):
            acc[j] = c_sq[j]
        for t in range(d):
            v = np.float32(-2.0) * x[i, t]
            for j in range(k):
                acc[j] += v * ct[t, j]
        lo = acc[0]
        for j in range(k):
            lo = min(lo, acc[j])
        b = 0
        while acc[b] != lo and b < k - 1:
            b += 1
        ids[i] = b
        best[i] = lo
        acc[b] = np.inf
        nxt = acc[0]
        for j in range(k):
            nxt = min(nxt, acc[j])
        second[i] = nxt
