"""The typed parameters of an IVF_* build (no I/O): what ``ivf_params.check_params`` parses
pylance's keyword arguments into once, and what builders, planners and the details writer read."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lance_spark_ops.index.params import IndexParams
from lance_spark_ops.index.vector import rabitq


@dataclass(frozen=True, eq=False)
class VectorParams(IndexParams):
    """An IVF_* build's parameters under pylance's names (its IvfBuildParams, PQBuildParams,
    SQBuildParams, RQ and HnswBuildParams in one set, as ``create_index`` takes them), checked:
    the metric lower case, ints as ints, given centroids / codebook as float32 arrays, a given
    RaBitQ model parsed. ``num_partitions`` None: from the rows and the target size."""

    metric: str = "l2"
    num_partitions: int | None = None
    num_sub_vectors: int | None = None
    num_bits: int = 8
    ivf_centroids: np.ndarray | None = None  # (partitions, dim)
    pq_codebook: np.ndarray | None = None    # (num_sub_vectors, 2^num_bits, dim / num_sub_vectors)
    rabitq_model: rabitq.RabitModel | None = None
    target_partition_size: int | None = None
    max_iterations: int = 50
    sample_rate: int = 256
    m: int = 20
    ef_construction: int = 150
    max_level: int = 7
