"""PQ and SQ as Lance 14 trains and applies them (no I/O).

PQ (``lance-index/src/vector/pq``): the vector (for l2 and cosine: its residual against its
IVF centroid; dot: the vector itself) is cut into ``m`` sub-vectors; sub-vector j is coded as
its nearest (squared L2, whatever the metric) of ``2^nbits`` centroids trained by k-means on
the sample's sub-vectors j. The codebook is laid out sub-vector, centroid, sub-dimension (a
``Tensor`` of shape [2^nbits, dim] in the storage file). 4-bit codes pack two sub-vectors per
byte, the even one in the low nibble.

SQ (``lance-index/src/vector/sq.rs``): ``bounds`` = min and max over every value of the
training sample (after normalisation for cosine; no residual); a value v is coded as
``trunc((v - start) * 255 / (end - start))`` computed in float64, saturated to 0..255 (NaN
gives 0); equal bounds code everything 0.
"""

from __future__ import annotations

import numpy as np

from lance_spark_ops.index.vector.kmeans import assign, train


def residuals(x: np.ndarray, centroids: np.ndarray, parts: np.ndarray) -> np.ndarray:
    return (x - centroids[parts]).astype(np.float32)


def pq_uses_residual(metric: str) -> bool:
    return metric in ("l2", "cosine")


def pq_train_sub(x: np.ndarray, j: int, m: int, nbits: int, max_iters: int, seed: int) -> np.ndarray:
    """Sub-vector j's 2^nbits centroids (2^nbits x sub_dim) trained on ``x``'s sub-vectors."""
    sub = x.shape[1] // m
    block = np.ascontiguousarray(x[:, j * sub : (j + 1) * sub])
    centroids, _ = train(block, 1 << nbits, "l2", max_iters, seed + j)
    return centroids.astype(np.float32)


def pq_encode(x: np.ndarray, codebook: np.ndarray, m: int, nbits: int) -> np.ndarray:
    """Codes of the rows of ``x`` (n x m for 8 bits, n x m/2 for 4 bits, uint8)."""
    n, dim = x.shape
    k, sub = 1 << nbits, dim // m
    book = codebook.reshape(m, k, sub)
    codes = np.empty((n, m), dtype=np.uint8)
    for j in range(m):
        codes[:, j] = assign(x[:, j * sub : (j + 1) * sub], book[j], "l2")[0]
    if nbits == 4:
        codes = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    return codes


def sq_bounds(x: np.ndarray) -> tuple[float, float]:
    """(min, max) of every value, as float64 (no value: Lance's empty range)."""
    if x.size == 0:
        return float(np.finfo(np.float64).max), float(np.finfo(np.float64).min)
    return float(np.min(x)), float(np.max(x))


def merge_bounds(bounds: list[tuple[float, float]]) -> tuple[float, float]:
    lo = min((b[0] for b in bounds), default=float(np.finfo(np.float64).max))
    hi = max((b[1] for b in bounds), default=float(np.finfo(np.float64).min))
    return lo, hi


def sq_encode(x: np.ndarray, start: float, end: float) -> np.ndarray:
    if start == end:
        return np.zeros(x.shape, dtype=np.uint8)
    v = (x.astype(np.float64) - start) * 255.0 / (end - start)
    v = np.nan_to_num(v, nan=0.0, posinf=255.0, neginf=0.0)
    return np.clip(np.trunc(v), 0, 255).astype(np.uint8)
