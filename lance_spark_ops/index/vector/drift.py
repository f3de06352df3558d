"""How far new rows drifted from a vector index's model (no I/O; ``optimize_indices(retrain_if_drift=R)``):
which rows are scored (``spread``, ``stride``) and the ratio of the two sides' mean squared
distance to their nearest centroid (``drift``). The Spark side: ``spark.indices.vector_drift``."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

SAMPLE_ROWS = 16_384  # rows scored per side: the mean's error is well under 1 % from here


def spread(physical: Mapping[int, int], n: int) -> np.ndarray:
    """About ``n`` row addresses spread evenly over fragments of ``physical`` rows (by id; sorted)."""
    total = sum(physical.values())
    if not total:
        return np.zeros(0, np.uint64)
    out = []
    for fid in sorted(physical):
        k = min(physical[fid], math.ceil(n * physical[fid] / total))
        if k:
            offs = np.unique(np.linspace(0, physical[fid] - 1, k).astype(np.int64)).astype(np.uint64)
            out.append((np.uint64(fid) << np.uint64(32)) | offs)
    return np.concatenate(out) if out else np.zeros(0, np.uint64)


def stride(rows: int, n: int = SAMPLE_ROWS) -> int:
    """Every how many rows one is scored when whole fragments of ``rows`` rows are read."""
    return max(1, rows // (2 * n))


def drift(old_sum: float, old_rows: int, new_sum: float, new_rows: int) -> float | None:
    """The new rows' mean distance over the indexed rows'; None when a side has no rows."""
    if not old_rows or not new_rows:
        return None
    old_mean, new_mean = old_sum / old_rows, new_sum / new_rows
    if old_mean <= 0:
        return math.inf if new_mean > 0 else 1.0
    return new_mean / old_mean
