"""IVF k-means with each round's assignment on several threads (the one-task training of a
build, ``run_kmeans``): the same centroids and loss as on one thread."""

from __future__ import annotations

import numpy as np
import pytest

from lance_spark_ops.index.vector.kmeans import BALANCE_FACTOR, fit, init_centroids


@pytest.mark.parametrize("metric", ["l2", "dot"])
def test_threads_train_the_same_centroids(metric: str) -> None:
    rng = np.random.default_rng(7)
    blobs = 4 * rng.normal(size=(12, 24))
    x = (rng.normal(size=(3001, 24)) + blobs[rng.integers(0, 12, 3001)]).astype(np.float32)
    init = init_centroids(x, 16, np.random.default_rng(1))
    one = fit(x, init, metric, 8, 3, BALANCE_FACTOR)
    many = fit(x, init, metric, 8, 3, BALANCE_FACTOR, threads=3)
    np.testing.assert_array_equal(one[0], many[0])
    assert one[1] == many[1]
