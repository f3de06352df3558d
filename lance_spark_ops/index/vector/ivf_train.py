"""What a fresh vector build trains and on how many rows (no I/O): the partition count, which
models need a sample (IVF centroids unless given, a PQ codebook unless given, SQ bounds), the
sample sizes (pylance 14: ``sample_rate`` x partitions, and 2^bits x ``sample_rate`` for the
quantizer), each fragment's and each sample file's share, the PQ sub-vectors per task."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from lance_spark_ops.errors import InvalidInputError
from lance_spark_ops.index.vector.ivf_build import quantizer_of
from lance_spark_ops.index.vector.ivf_params import recommended_partitions, target_size
from lance_spark_ops.index.vector.vector_params import VectorParams

SEED = 0x49564621  # "IVF!"


@dataclass(frozen=True)
class TrainingPlan:
    """``k`` partitions; the quantizer (FLAT, PQ, SQ) with PQ's ``m`` sub-vectors of ``nbits``;
    whether the IVF centroids and the quantizer are trained, on ``ivf_rows`` / ``q_rows`` rows."""

    k: int
    quantizer: str
    m: int
    nbits: int
    need_ivf: bool
    need_q: bool
    ivf_rows: int
    q_rows: int

    @property
    def sample_rows(self) -> int:
        """Rows the sample tasks draw: enough for both models."""
        return max(self.ivf_rows if self.need_ivf else 0, self.q_rows)

    @property
    def sampled(self) -> bool:
        return self.need_ivf or self.need_q


def training_plan(kind: str, p: VectorParams, total: int) -> TrainingPlan:
    """The plan for ``total`` live rows under checked parameters ``p``; typed errors when the
    rows cannot train it (more partitions than rows, fewer rows than PQ codes)."""
    k = p.num_partitions or recommended_partitions(total, target_size(kind, p))
    if k > total:
        raise InvalidInputError(f"{k} partitions for {total} rows: num_partitions must not exceed the rows")
    q = quantizer_of(kind)
    nbits, m = p.num_bits, p.num_sub_vectors or 0
    if q == "PQ" and p.pq_codebook is None and total < (1 << nbits):
        raise InvalidInputError(f"not enough rows to train PQ: {1 << nbits} needed, {total} available")
    need_q = (q == "PQ" and p.pq_codebook is None) or q == "SQ"
    q_rows = (1 << (nbits if q == "PQ" else 8)) * p.sample_rate if need_q else 0
    return TrainingPlan(k, q, m, nbits, p.ivf_centroids is None, need_q, k * p.sample_rate, q_rows)


def sample_shares(live: Mapping[int, int], total: int, want: int) -> dict[int, int]:
    """Per fragment with live rows, its share of a ``want``-row sample spread by live rows
    (rounded up); -1 (every row) when the fragments hold no more than ``want``."""
    if total > want:
        return {f: min(n, math.ceil(want * n / total)) for f, n in live.items() if n}
    return {f: -1 for f, n in live.items() if n}


def sample_takes(files: Sequence[tuple[str, int]], rows: int) -> tuple[tuple[str, int], ...]:
    """Each sample file's (path, rows) share of ``rows``: its first rows, all when the files hold fewer."""
    total = sum(n for _, n in files)
    if total <= rows:
        return tuple((f, n) for f, n in files)
    return tuple((f, min(n, math.ceil(rows * n / total))) for f, n in files)


def check_trainable(k: int, n: int) -> None:
    """``k`` partitions need at least ``k`` valid sample vectors."""
    if n < k:
        raise InvalidInputError(f"{k} partitions but only {n} valid vectors to train them")


def kmeans_in_one_task(n: int, dim: int, limit: int) -> bool:
    """The IVF k-means of ``n`` x ``dim`` sample values runs in one task up to ``limit`` values,
    else in rounds of tasks (one per sample file)."""
    return n * dim <= limit


def pq_shares(m: int, slots: int) -> list[tuple[int, ...]]:
    """The PQ sub-vectors split over the task slots (each task computes the residuals once)."""
    return [tuple(int(j) for j in g) for g in np.array_split(np.arange(m), min(m, slots))]
