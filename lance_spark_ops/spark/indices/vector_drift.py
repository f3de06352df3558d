"""How well a vector index's model still fits the data (``optimize_indices(retrain_if_drift=R)``).

Drift = the mean squared L2 distance of the rows added since the index was built (the
fragments no segment covers) to their nearest centroid, over the same mean for the indexed
rows - both from a sample of up to ``SAMPLE_ROWS`` rows a side, spread evenly over the
fragments, scored on executors (cosine rows normalised, as the index assigns them). About 1
while new rows come from the data the centroids were trained on; it grows as they drift away
from it (new clusters, a shifted distribution), which is when a delta or merge keeps an
outdated partitioning and a retrain pays. The newest segment's model is the one scored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from lance_spark_ops.index.vector.drift import SAMPLE_ROWS, drift, spread, stride
from lance_spark_ops.spark.indices.index_segment import SegmentRequest
from lance_spark_ops.spark.indices.vector_drift_tasks import DriftSpec, DriftSums, run_drift
from lance_spark_ops.spark.indices.vector_index_tasks import Source, takeable
from lance_spark_ops.spark.indices.vector_models import read_model
from lance_spark_ops.spark.runtime.job import Job
from lance_spark_ops.spark.runtime.session import default_parallelism
from lance_spark_ops.table.dataset import Dataset


def measure_drift(job: Job, ds: Dataset, req: SegmentRequest, newest: Any, old_fragments: Sequence[int],
                  new_fragments: Sequence[int]) -> float | None:
    """The drift of the new fragments' rows against the indexed ones' under ``newest``'s
    model; None when either side has no rows to score."""
    if not old_fragments or not new_fragments:
        return None
    model = read_model(ds, req.kind, newest)
    src = Source(req.uri, req.read_version, req.column, req.row_ids, dict(req.storage_options), ds.timestamp)
    slots = max(1, default_parallelism(job.spark))
    if takeable(ds, req.column, req.field_id):
        old, new = _spread(ds, old_fragments), _spread(ds, new_fragments)
        specs = [DriftSpec(src, req.field_id, model, o, n)
                 for o, n in zip(np.array_split(old, slots), np.array_split(new, slots), strict=True)]
    else:  # whole fragments, every stride-th row (nested columns, several data files)
        rows = sum(int(f.physical_rows or 0) for f in ds.fragments)
        every = stride(rows, SAMPLE_ROWS)
        specs = [DriftSpec(src, req.field_id, model, np.zeros(0, np.uint64), np.zeros(0, np.uint64),
                           tuple(old_fragments[i::slots]), tuple(new_fragments[i::slots]), every)
                 for i in range(slots)]
    got: list[DriftSums] = job.run_tasks(specs, run_drift)
    return drift(sum(g.old_sum for g in got), sum(g.old_rows for g in got),
                 sum(g.new_sum for g in got), sum(g.new_rows for g in got))


def _spread(ds: Dataset, fragment_ids: Sequence[int]) -> np.ndarray:
    """About ``SAMPLE_ROWS`` row addresses spread evenly over the fragments' physical rows."""
    frags = ds.fragments_with_ids(list(fragment_ids))
    return spread({fid: int(f.physical_rows or 0) for fid, f in frags.items()}, SAMPLE_ROWS)
