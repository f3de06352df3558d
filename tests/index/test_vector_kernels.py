"""The compiled kernels against the code they replace. HNSW neighbour selection
(``index.vector.hnsw_kernels``) against the numpy rule (``hnsw.select_neighbors``), mask for mask, on
every metric, with missing candidates (-1), rows that run out of candidates and a fill below
and above what the heuristic keeps; the vectors are small integers (cosine: +-1, unit after
scaling by 1/4) so every distance is exact in float32 whatever the summation order and the two
must agree on every candidate, ties on the "<=" rule included. The exact PQ assignment
(``index.vector.kmeans_kernels``) against float64 and the GEMM path."""

from __future__ import annotations

import numpy as np
import pytest

from lance_spark_ops.index.vector import hnsw, kmeans


@pytest.mark.parametrize("metric", ["l2", "cosine", "dot"])
@pytest.mark.parametrize("k_max,k_fill", [(20, 20), (8, 0), (40, 40), (5, 12)])
def test_compiled_selection_equals_numpy(metric: str, k_max: int, k_fill: int) -> None:
    assert hnsw.compiled_kernels() is not None, "numba is a dependency: the kernels must load"
    rng = np.random.default_rng(7)
    if metric == "cosine":
        x = rng.choice([-1.0, 1.0], size=(800, 16)).astype(np.float32)
    else:
        x = rng.integers(-3, 4, size=(800, 16)).astype(np.float32)
    x[5] = x[6]  # a duplicate: zero distances, ties on the "<=" rule
    sp = hnsw.Space(x, metric)
    ids = np.stack([rng.permutation(800)[:60] for _ in range(300)]).astype(np.int64)
    ids[:10, 30:] = -1
    ids[10:20, ::3] = -1
    ids[20, :] = -1
    ids[21, :3] = [5, 6, 7]
    q = sp.x[rng.integers(0, 800, 300)]
    if metric == "l2":
        dist = ((q[:, None, :] - sp.x[ids]) ** 2).sum(axis=2)
    else:
        dist = 1 - np.einsum("bd,bkd->bk", q, sp.x[ids])
    dist = np.where(ids < 0, np.inf, dist).astype(np.float32)
    order = np.argsort(dist, axis=1, kind="stable")
    ids, dist = np.take_along_axis(ids, order, 1), np.take_along_axis(dist, order, 1)
    want = hnsw.select_neighbors(sp, ids, dist, k_max, k_fill)
    got = hnsw._select_blocks(sp, ids, dist, k_max, k_fill)
    assert want.any() and got.dtype == bool
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dim", [4, 8, 16])
def test_compiled_exact_assignment(dim: int) -> None:
    """The exact nearest centroid of narrow rows (``kmeans_kernels.nearest2``, as PQ codes
    are assigned) equals the float64 argmin (ties: the lowest id) and the GEMM path's, on
    rows at equal distance from two centroids and rows on a centroid."""
    assert kmeans.compiled_kernels() is not None
    rng = np.random.default_rng(dim)
    c = rng.normal(size=(256, dim)).astype(np.float32)
    c[9] = c[3]  # duplicate centroid: the lower id wins
    x = rng.normal(size=(4000, dim)).astype(np.float32)
    x[:50] = c[rng.integers(0, 256, 50)]
    x[50:100] = (c[10] + c[11]) / 2  # equidistant (up to rounding) from 10 and 11
    x[100] = c[3]
    d64 = ((x[:, None, :].astype(np.float64) - c[None].astype(np.float64)) ** 2).sum(axis=2)
    ids, dist = kmeans.assign(x, c, "l2")
    np.testing.assert_array_equal(ids, np.argmin(d64, axis=1))
    np.testing.assert_allclose(dist, d64.min(axis=1), rtol=1e-4, atol=1e-4)
    assert ids[100] == 3
    gemm_ids, gemm_dist = kmeans.assign(x, c, "l2", kernel_max_dim=0)
    np.testing.assert_array_equal(ids, gemm_ids)
    np.testing.assert_allclose(dist, gemm_dist, rtol=1e-4, atol=1e-4)
