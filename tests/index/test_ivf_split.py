"""An optimize's splits and joins as pure decisions (``index.vector.ivf_split``, ``ivf_join``'s
order and destinations) and the drift measure's sample and ratio (``index.vector.drift``),
without Spark. The end-to-end equality with pylance 14 is ``test_vector_default_optimize``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from lance_spark_ops.index.vector import drift, ivf_join, ivf_split
from lance_spark_ops.index.vector.ivf_model import Model
from lance_spark_ops.index.vector.kmeans import assign


def _line(k: int, dim: int = 4) -> Model:
    """k centroids at 0, 100, 200, ... along the first axis."""
    c = np.zeros((k, dim), np.float32)
    c[:, 0] = np.arange(k) * 100
    return Model("IVF_FLAT", "l2", c)


def test_split_steps() -> None:
    # 256 sampled rows per new centroid: 5 000 rows in 2 ways -> every 9th; too few rows -> every row
    assert ivf_split.split_steps([(0, 2), (1, 3)], np.array([5000, 600])) == (9, 1)


def test_split_centroids_keeps_winners() -> None:
    model = _line(3)
    rng = np.random.default_rng(0)
    two = np.zeros((200, 4), np.float32)
    two[:100, 0], two[100:, 0] = -10, 10  # partition 0's rows: two clusters around it
    two += rng.standard_normal(two.shape).astype(np.float32) * 0.1
    got = ivf_split.split_centroids(model, [(0, 2)], [two])
    assert got is not None
    centroids, applied = got
    assert applied == [0] and centroids.shape == (4, 4) and centroids.dtype == np.float32
    np.testing.assert_array_equal(centroids[1:3], model.centroids[1:3])  # the others unchanged
    assert sorted(np.round(centroids[[0, 3], 0]).tolist()) == [-10.0, 10.0]
    # rows sitting on a neighbour's centroid: no new centroid beats it (a tie stays), no split
    on_neighbour = np.repeat(model.centroids[1:2], 10, axis=0)
    assert ivf_split.split_centroids(model, [(0, 2)], [on_neighbour]) is None
    # fewer than two sampled rows: not split
    assert ivf_split.split_centroids(model, [(0, 4)], [two[:1]]) is None


def test_sample_ids_as_pylance() -> None:
    # sorted without repeats, then 256 x ways at a stride of rows // (256 x ways)
    ids = np.arange(1300, dtype=np.uint64)[::-1]
    got = ivf_split.sample_ids(np.concatenate([ids, ids[:7]]), 2)  # 1 300 rows, 512 wanted: every 2nd
    assert got.tolist() == list(range(0, 1024, 2))
    assert ivf_split.sample_ids(ids[:300], 2).tolist() == list(range(1000, 1300))  # fewer: every row
    assert ivf_split.sample_ids(np.zeros(0, np.uint64), 3).size == 0


@pytest.mark.parametrize("metric", ["l2", "dot"])
def test_split_destinations_equal_a_full_assignment(metric: str) -> None:
    # 40 partitions; 3 split (their centroid replaced, 5 appended): a row stored in its nearest
    # unchanged partition is ranked against its own and the new centroids only, the others
    # against all - the result is the nearest of every centroid for every row
    rng = np.random.default_rng(4)
    old = Model("IVF_FLAT", metric, rng.standard_normal((40, 8)).astype(np.float32))
    c = np.concatenate([old.centroids, rng.standard_normal((5, 8)).astype(np.float32)])
    c[[3, 17, 30]] = rng.standard_normal((3, 8)).astype(np.float32)
    new = Model("IVF_FLAT", metric, c)
    v = rng.standard_normal((3000, 8)).astype(np.float32)
    stored, _ = assign(v, old.centroids, "dot" if metric == "dot" else "l2")
    home = np.where(np.isin(stored, [3, 17, 30]) | (rng.random(3000) < 0.1), -1, stored)
    want, _ = assign(v, new.centroids, "dot" if metric == "dot" else "l2")
    got = ivf_split.split_destinations(old, new, v, home)
    assert got.tolist() == want.tolist()
    assert (got != stored).sum() > 100  # rows did move (to new centroids and from split ones)


def test_out_of_reach_rows_stay() -> None:
    # partition 1 (at 100) keeps its centroid; partition 0 splits into 0 and 3 (at -30, 30):
    # rows of 1 within 35 of it are out of the new centroids' reach (gap 70 > 2 x 35), rows
    # farther may not be; every row marked is the nearest of every centroid after the split
    old = _line(3)
    c = old.centroids.copy()
    c[0, 0] = -30
    new = Model("IVF_FLAT", "l2", np.concatenate([c, [[30, 0, 0, 0]]]).astype(np.float32))
    rng = np.random.default_rng(2)
    v = (old.centroids[1] + rng.standard_normal((500, 4)) * np.array([20, 1, 1, 1])).astype(np.float32)
    d2 = ((v - old.centroids[1]) ** 2).sum(axis=1)
    out = ivf_split.out_of_reach(old, new, 1, d2)
    assert out.tolist() == (2 * np.sqrt(d2) * (1 + 1e-4) < 70).tolist() and 0 < out.sum() < 500
    assert (assign(v[out], new.centroids, "l2")[0] == 1).all()
    assert not ivf_split.out_of_reach(old, new, 1, np.array([np.nan, 1e9])).any()


def test_affected_partitions() -> None:
    # 70 centroids on a line: partition 0's 64 nearest are 1..64; 70 is the one appended
    assert ivf_split.affected(_line(70), [0], 71) == [*range(65), 70]
    assert ivf_split.affected(_line(70), [], 70) == []


@dataclass
class _Run:
    counts: np.ndarray


def test_in_place_split_counts() -> None:
    split = ivf_split.InPlaceSplit((_Run(np.array([0, 2, 0, 1])),), 3, (1,))
    assert split.counts(np.array([5, 6, 7]), 4).tolist() == [5, 2, 7, 1]


def test_join_room_order_and_destinations() -> None:
    assert ivf_join.join_room(np.array([10, 50, 3]), [2], 40).tolist() == [30, 0, 0]
    windows = {5: np.array([7, 8]), 2: np.array([3, 4]), 9: np.array([1, 6])}
    ranked = [((5,), (2,), np.array([[1, 0], [0, 1]])),
              ((2, 9), (1, 2), np.array([[0, 1], [1, 0], [0, 0]]))]
    pref, task_of, local = ivf_join.join_order(ranked, windows, [9, 2, 5])
    # pylance's order: partition 2's row, then 5's two, then 9's two
    assert pref.tolist() == [[3, 4], [8, 7], [7, 8], [6, 1], [1, 1]]
    assert task_of.tolist() == [1, 0, 0, 1, 1] and local.tolist() == [0, 0, 1, 1, 2]
    d, unmoved = ivf_join.task_destinations(3, task_of == 1, local, np.array([4, 8, 7, 6, 1]), pref)
    assert d.tolist() == [4, 6, 1] and not unmoved  # partition 2's row went to its second choice
    d, unmoved = ivf_join.task_destinations(2, task_of == 0, local, np.array([4, 8, 7, 6, 1]), pref)
    assert d.tolist() == [8, 7] and unmoved
    empty = ivf_join.join_order([((3,), (0,), np.zeros((0, 2), np.int64))], {3: np.array([1, 2])}, [3])
    assert [a.shape[0] for a in empty] == [0, 0, 0]


def test_drift_sample_and_ratio() -> None:
    got = drift.spread({1: 30, 0: 10}, 8)
    # 2 of fragment 0's 10 rows (first and last), 6 of fragment 1's 30 (evenly, rounded down)
    assert got.tolist() == [0, 9, *((1 << 32) + np.array([0, 5, 11, 17, 23, 29])).tolist()]
    assert drift.spread({0: 0}, 8).size == 0
    assert drift.stride(100_000) == 3 and drift.stride(10) == 1
    assert drift.drift(10.0, 5, 12.0, 3) == 2.0
    assert drift.drift(10.0, 0, 12.0, 3) is None and drift.drift(1.0, 5, 0.0, 0) is None
    assert drift.drift(0.0, 5, 1.0, 1) == np.inf and drift.drift(0.0, 5, 0.0, 1) == 1.0
