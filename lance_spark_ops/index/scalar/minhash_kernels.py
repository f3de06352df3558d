"""MinHash minima compiled with numba (``minhash.signatures``): per document, the minimum of
every permutation ``a * x + b`` (wrapping u64) over its shingle hashes, in one pass over the
hashes - the numpy form materialises a hashes x shingles matrix and reduces it per document
(several times slower). Compiled once per machine (``cache=True``), loaded lazily by
``minhash.compiled_kernels``; the results are the numpy code's, bit for bit.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def doc_mins(hashes: np.ndarray, bounds: np.ndarray, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out[d, k]`` = min over ``hashes[bounds[d]:bounds[d + 1]]`` of ``a[k] * x + b[k]``."""
    k = a.shape[0]
    for d in range(bounds.shape[0] - 1):
        row = out[d]
        for j in range(k):
            row[j] = np.uint64(0xFFFFFFFFFFFFFFFF)
        for s in range(bounds[d], bounds[d + 1]):
            x = hashes[s]
            for j in range(k):
                v = a[j] * x + b[j]
                if v < row[j]:
                    row[j] = v
