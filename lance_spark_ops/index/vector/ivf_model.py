"""A trained IVF model (centroids and quantizer) and what it does to vectors (no I/O).

``prepare`` is Lance's transform chain before a vector reaches the model: null rows and rows
with NaN or infinity dropped (they are not indexed), cosine vectors normalised (Lance then
treats cosine as L2). ``encode`` assigns each vector its partition (squared L2, or ``1 - x.c``
for dot) and its storage row: the vector (FLAT), PQ codes of its residual (l2, cosine) or of
itself (dot), or SQ codes (``quantizers``), or RaBitQ codes and factors of its residual as
opaque bytes (``rabitq``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lance_spark_ops.index.kinds import VectorKind
from lance_spark_ops.index.vector import rabitq, rabitq_storage
from lance_spark_ops.index.vector.kmeans import assign, finite_rows, normalize
from lance_spark_ops.index.vector.quantizers import pq_encode, pq_uses_residual, residuals, sq_encode


@dataclass(frozen=True)
class Model:
    """Centroids (k x dim float32), the k-means loss, and the quantizer's state: PQ
    ``codebook`` (m x 2^nbits x dim/m), ``m``, ``nbits``; SQ ``bounds``; RQ ``rabit``."""

    kind: str
    metric: str  # l2, cosine or dot
    centroids: np.ndarray
    loss: float | None = None
    codebook: np.ndarray | None = None
    m: int = 0
    nbits: int = 8
    bounds: tuple[float, float] | None = None
    rabit: rabitq.RabitModel | None = None

    @property
    def quantizer(self) -> str:
        return VectorKind.parse(self.kind).quantizer

    @property
    def num_partitions(self) -> int:
        return int(self.centroids.shape[0])

    @property
    def dim(self) -> int:
        return int(self.centroids.shape[1])

    @property
    def width(self) -> int:
        """Storage values per row."""
        if self.quantizer == "PQ":
            return self.m * self.nbits // 8
        if self.quantizer == "RQ":
            return rabitq_storage.row_width(self.rabit)
        return self.dim

    @property
    def storage_dtype(self) -> np.dtype:
        return np.dtype(np.float32) if self.quantizer == "FLAT" else np.dtype(np.uint8)

    def storage_meta(self) -> dict:
        return {"m": self.m, "nbits": self.nbits, "bounds": self.bounds, "codebook": self.codebook,
                "rabit": self.rabit}


def assign_metric(metric: str) -> str:
    return "dot" if metric == "dot" else "l2"


def prepare(x: np.ndarray, valid: np.ndarray | None, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """(rows kept, their vectors as float32, normalised for cosine)."""
    keep = finite_rows(x)
    if valid is not None:
        keep &= valid
    kept = np.flatnonzero(keep)
    # every row kept (the usual case): the vectors as they are, not a gathered copy
    v = np.ascontiguousarray(x if kept.size == x.shape[0] else x[kept], dtype=np.float32)
    return kept, (normalize(v) if metric == "cosine" else v)


def prepare_for(model: Model, x: np.ndarray, valid: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """``prepare`` for ``model``'s rows; IVF_RQ normalises cosine vectors in Lance's float32
    order (its stored factors keep the rounding of the normalised vector)."""
    if model.quantizer != "RQ" or model.metric != "cosine":
        return prepare(x, valid, model.metric)
    kept, v = prepare(x, valid, "l2")
    return kept, rabitq.normalize(v)


def encode(model: Model, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(partition of each prepared row, its storage row)."""
    parts, _ = assign(x, model.centroids, assign_metric(model.metric))
    return parts, encode_in(model, x, parts)


def encode_in(model: Model, x: np.ndarray, parts: np.ndarray) -> np.ndarray:
    """The storage rows of prepared rows ``x`` placed in partitions ``parts``."""
    q = model.quantizer
    if q == "FLAT":
        return x
    if q == "SQ":
        lo, hi = model.bounds
        return sq_encode(x, lo, hi)
    if q == "RQ":
        return rq_encode(model, x, parts)
    r = residuals(x, model.centroids, parts) if pq_uses_residual(model.metric) else x
    return pq_encode(r, model.codebook, model.m, model.nbits)


def rq_encode(model: Model, x: np.ndarray, parts: np.ndarray) -> np.ndarray:
    """RaBitQ storage rows of prepared rows in ``parts``: their residuals' codes and factors
    (cosine as l2 on the normalised vectors)."""
    rb = model.rabit
    enc = rabitq.encode_assigned(rb, x, model.centroids, parts, "dot" if model.metric == "dot" else "l2")
    return rabitq_storage.to_rows(rb, enc)
