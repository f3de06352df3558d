"""Executor side of the drift measure (``spark.indices.vector_drift``): a sample of rows, taken by
address, scored against an index's centroids - how far rows sit from their nearest centroid.
Only two sums and two counts travel back."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lance_spark_ops.index.vector.ivf_model import Model, prepare
from lance_spark_ops.index.vector.kmeans import assign
from lance_spark_ops.spark.indices.vector_index_tasks import Source, fragment_vectors, take_vectors
from lance_spark_ops.spark.runtime.runner import TaskContext


@dataclass(frozen=True)
class DriftSpec:
    """Sampled rows of the indexed fragments (``old``) and of the new ones (``new``): row
    addresses (sorted) when the column can be taken by address, else whole fragments
    (``old_fragments`` / ``new_fragments``, every ``stride``-th live row)."""

    source: Source
    field_id: int
    model: Model
    old: np.ndarray
    new: np.ndarray
    old_fragments: tuple[int, ...] = ()
    new_fragments: tuple[int, ...] = ()
    stride: int = 1


@dataclass(frozen=True)
class DriftSums:
    """Squared L2 distances to the nearest centroid, summed, and rows scored, per side."""

    old_sum: float
    old_rows: int
    new_sum: float
    new_rows: int


def _score(x: np.ndarray, valid: np.ndarray | None, model: Model) -> tuple[float, int]:
    # cosine: on normalised rows, as the index assigns them; dot scored by L2 too (a distance
    # whose mean means something, unlike 1 - x.c)
    _, v = prepare(x, valid, model.metric)
    if not v.shape[0]:
        return 0.0, 0
    _, dist = assign(v, model.centroids, "l2", exact=False)
    return float(dist.sum()), int(v.shape[0])


def run_drift(spec: DriftSpec, ctx: TaskContext) -> DriftSums:
    ds = spec.source.dataset()
    out = []
    for addrs, frags in ((spec.old, spec.old_fragments), (spec.new, spec.new_fragments)):
        total, rows = 0.0, 0
        if addrs.size:
            _, x, valid = take_vectors(ds, spec.source.column, spec.field_id, addrs)
            if x.size:
                total, rows = _score(x, valid, spec.model)
        for fid in frags:
            _, x, valid = fragment_vectors(ds, fid, spec.source)
            s, n = _score(x[:: spec.stride], None if valid is None else valid[:: spec.stride], spec.model)
            total, rows = total + s, rows + n
        out.append((total, rows))
    (os_, on), (ns, nn) = out
    return DriftSums(os_, on, ns, nn)
