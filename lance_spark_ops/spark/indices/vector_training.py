"""The model of a fresh vector build, trained on executors (``spark.indices.vector_index``'s
first phase): sample tasks spread over the fragments by live rows, IVF k-means in one task or
in rounds of tasks (the driver averages each round's sums), PQ codebooks with the sub-vectors
split over the task slots, SQ bounds from the sample tasks' min / max, RQ's rotation given or
drawn (nothing to train). What is trained on how
many rows: ``index.vector.ivf_train``."""

from __future__ import annotations

from typing import Any

import numpy as np

from lance_spark_ops.index.vector import rabitq
from lance_spark_ops.index.vector.ivf_model import Model, assign_metric
from lance_spark_ops.index.vector.ivf_plan import fragment_groups
from lance_spark_ops.index.vector.ivf_train import (
    SEED,
    TrainingPlan,
    check_trainable,
    kmeans_in_one_task,
    pq_shares,
    sample_shares,
    sample_takes,
    training_plan,
)
from lance_spark_ops.index.vector.kmeans import BALANCE_FACTOR, Partial, Training, init_centroids
from lance_spark_ops.index.vector.quantizers import merge_bounds
from lance_spark_ops.index.vector.vector_params import VectorParams
from lance_spark_ops.spark.indices.vector_index_tasks import (
    KMeansSpec,
    PqTrainSpec,
    RoundSpec,
    SampleSpec,
    Source,
    run_kmeans,
    run_pq_train,
    run_round,
    run_sample,
)
from lance_spark_ops.spark.runtime.job import Job


def train_model(
    job: Job,
    kind: str,
    p: VectorParams,
    src: Source,
    live: dict[int, int],
    work_dir: str,
    fan: tuple[int, int],  # (task slots, rows an encode or sample task reads at most)
    local_values: int,  # sample values (rows x dim) IVF k-means trains on in one task at most
) -> Model:
    """The centroids (given or trained) and the quantizer (given PQ codebook, trained PQ
    codebook or SQ bounds) of a ``kind`` build over fragments of ``live`` rows."""
    total = sum(live.values())
    plan = training_plan(kind, p, total)
    metric = p.metric
    samples = []
    if plan.sampled:
        with job.phase("sample"):
            samples = _sample(job, src, live, total, plan.sample_rows, metric, work_dir, fan, plan.k)
    centroids, loss = (
        (p.ivf_centroids, None)
        if not plan.need_ivf
        else _kmeans(job, src, samples, plan.k, plan.ivf_rows, metric, p.max_iterations, local_values, fan[0])
    )
    m, nbits = plan.m, plan.nbits
    model = Model(kind, metric, np.asarray(centroids, np.float32), loss, m=m, nbits=nbits)
    if plan.quantizer == "PQ":
        book = p.pq_codebook
        if book is None:
            with job.phase("train_pq"):
                book = _pq_codebook(job, src, samples, model, plan, p.max_iterations, fan[0])
        model = Model(
            kind, metric, model.centroids, loss, codebook=np.asarray(book, np.float32), m=m, nbits=nbits
        )
    elif plan.quantizer == "SQ":
        model = Model(kind, metric, model.centroids, loss, bounds=merge_bounds([s.bounds for s in samples]))
    elif plan.quantizer == "RQ":  # a random rotation as pylance's, unless given (seeded: builds repeat)
        rb = p.rabitq_model or rabitq.new_model(model.dim, nbits, seed=SEED + plan.k)
        model = Model(kind, metric, model.centroids, loss, nbits=nbits, rabit=rb)
    return model


def _takes(samples: list[Any], rows: int) -> tuple[tuple[str, int], ...]:
    return sample_takes([(s.file, s.rows) for s in samples], rows)


def _sample(
    job: Job,
    src: Source,
    live: dict[int, int],
    total: int,
    want: int,
    metric: str,
    work_dir: str,
    fan: tuple[int, int],
    k: int,
) -> list[Any]:
    shares = sample_shares(live, total, want)
    groups = fragment_groups({f: (n if shares.get(f, 0) else 0) for f, n in live.items()}, *fan)
    specs = [
        SampleSpec(src, tuple((f, shares[f]) for f in g if f in shares), metric, work_dir, SEED, k)
        for g in groups
    ]
    return [s for s in job.run_tasks(specs, run_sample) if s.rows]


def _kmeans(
    job: Job,
    src: Source,
    samples: list[Any],
    k: int,
    rows: int,
    metric: str,
    max_iters: int,
    local_values: int,
    slots: int = 1,
) -> tuple[np.ndarray, float]:
    files = _takes(samples, rows)
    n = sum(t for _, t in files)
    check_trainable(k, n)
    pool = np.concatenate([s.candidates for s in samples])
    init = init_centroids(pool, k, np.random.default_rng(SEED))
    km_metric = assign_metric(metric)
    with job.phase("kmeans", detail=f"k={k}, {n} vectors"):
        if kmeans_in_one_task(n, init.shape[1], local_values):
            spec = KMeansSpec(
                src.uri, files, init, km_metric, max_iters, SEED, BALANCE_FACTOR, src.storage_options, slots
            )
            (out,) = job.run_tasks([spec], run_kmeans)
            return out
        t = Training(init, BALANCE_FACTOR, SEED)
        for _ in range(max_iters):
            out = job.run_tasks(
                [
                    RoundSpec(src.uri, f, n_rows, t.centroids, km_metric, t.bias(), src.storage_options)
                    for f, n_rows in files
                ],
                run_round,
            )
            if t.update(Partial.total(out)):
                break
    return t.centroids, float(t.loss or 0.0)


def _pq_codebook(
    job: Job, src: Source, samples: list[Any], model: Model, plan: TrainingPlan, max_iters: int, slots: int
) -> np.ndarray:
    """The PQ codebook trained on the first ``plan.q_rows`` sampled rows, sub-vectors split over
    the slots (each task computes the residuals once)."""
    files = _takes(samples, plan.q_rows)
    books = job.run_tasks(
        [
            PqTrainSpec(
                src.uri, files, model.centroids, model.metric, share, plan.m, plan.nbits, max_iters, SEED,
                src.storage_options,
            )
            for share in pq_shares(plan.m, slots)
        ],
        run_pq_train,
    )
    return np.stack([b for part in books for b in part])
