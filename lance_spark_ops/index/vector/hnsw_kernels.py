"""HNSW's neighbour selection heuristic compiled with numba (``hnsw.select_neighbors``).

The numpy form walks the candidate columns of a block of rows together, gathering each row's
kept vectors into a (rows, m, d) block per column: ~0.06 s a block, most of an IVF_HNSW
build. Here each row runs on its own: a candidate is compared with the kept ones by id (no
copies) and stops at the first kept neighbour closer to it than the node. Same rule, same
float32 formula as ``Space._finish``; the numpy code stays the reference (the tests compare
the two) and the path without numba (``LSO_NO_COMPILED=1``).

Compiled once per machine (``cache=True``), loaded lazily by ``hnsw.compiled_kernels``.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def select(x: np.ndarray, sq: np.ndarray, l2: bool, ids: np.ndarray, dist: np.ndarray, k_max: int,
           k_fill: int, sel: np.ndarray) -> None:
    """``select_neighbors`` into ``sel`` (B, K) bool, all False on entry; ``sq``: the squared
    norms (l2) or an empty array."""
    b, k = ids.shape
    d = x.shape[1]
    kept = np.empty(max(k_max, 1), np.int64)
    for r in range(b):
        count = 0
        for j in range(k):
            if count >= k_max:
                break
            c = ids[r, j]
            if c < 0:
                continue
            limit = dist[r, j]
            ok = True
            for t in range(count):
                o = kept[t]
                dot = np.float32(0.0)
                for e in range(d):
                    dot += x[o, e] * x[c, e]
                if l2:
                    dd = dot * np.float32(-2.0) + sq[c] + sq[o]
                    if dd < 0:
                        dd = np.float32(0.0)
                else:
                    dd = np.float32(1.0) - dot
                if dd <= limit:
                    ok = False
                    break
            if ok:
                sel[r, j] = True
                kept[count] = c
                count += 1
        room = k_fill - count
        for j in range(k):
            if room <= 0:
                break
            if ids[r, j] >= 0 and not sel[r, j]:
                sel[r, j] = True
                room -= 1
