"""The task shapes of a vector build (``index.vector.ivf_plan``, ``bin_packing``) and what a fresh
build trains on how many rows (``index.vector.ivf_train``), without Spark: expected values worked
out by hand from the rules (pylance 14's sample sizes: ``sample_rate`` x partitions, 2^bits x
``sample_rate`` for the quantizer; partitions: rows // target, 1..4 096)."""

from __future__ import annotations

import numpy as np
import pytest

from lance_spark_ops.bin_packing import largest_first
from lance_spark_ops.errors import InvalidInputError
from lance_spark_ops.index.vector import ivf_plan, ivf_train
from lance_spark_ops.index.vector.vector_params import VectorParams


def test_largest_first() -> None:
    # 9 first onto bin 0, 7 onto bin 1, then 5 onto bin 1 (7 < 9), 2 onto bin 0 (9 < 12), 2 (the
    # later one) onto bin 0 again (11 < 12)
    shares, load = largest_first([2, 9, 5, 7, 2], 2)
    assert shares == [[1, 0, 4], [3, 2]] and load == [13.0, 12.0]
    # a per-item overhead counts like cost: three items of 1 + 1 overhead over two bins
    assert largest_first([1, 1, 1], 2, overhead=1.0) == ([[0, 2], [1]], [4.0, 2.0])
    # zero-cost items never move a bin off the minimum: bins left empty stay in the answer
    assert largest_first([0, 0], 3) == ([[0, 1], [], []], [0.0, 0.0, 0.0])


def test_pieces_plan() -> None:
    counts = np.array([5, 30, 2, 2, 12, 0, 3])
    got = ivf_plan.pieces([(0, 4), (4, 7)], counts, 10)
    assert got == [(0, 1, None), (1, 2, (0, 10)), (1, 2, (10, 20)), (1, 2, (20, 30)), (2, 4, None),
                   (4, 5, (0, 10)), (4, 5, (10, 12)), (5, 7, None)]
    assert ivf_plan.pieces([(0, 7)], counts, 100) == [(0, 7, None)]


def test_partition_ranges_equal_rows() -> None:
    # 40 rows in 4 tasks: cuts after 10, 20, 30 cumulative rows
    assert ivf_plan.partition_ranges(np.array([10, 10, 10, 10]), 4) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    # cuts where the cumulative rows pass half of 34: after partition 3 (4 rows) ...
    assert ivf_plan.partition_ranges(np.array([1, 1, 1, 1, 30]), 2) == [(0, 4), (4, 5)]
    # ... or nowhere when the first partition already passes it (pieces cut such a range later)
    assert ivf_plan.partition_ranges(np.array([30, 1, 1, 1, 1]), 2) == [(0, 5)]
    assert ivf_plan.partition_ranges(np.array([3, 4]), 8) == [(0, 1), (1, 2)]  # at most one per partition
    assert ivf_plan.partition_ranges(np.array([7]), 1) == [(0, 1)]


def test_range_tasks() -> None:
    counts = np.array([100, 100, 100, 100])
    # 16-byte rows, 1 KiB tasks: 64 rows a task, ceil(6400 / 1024) = 7 tasks > 2 slots
    got = ivf_plan.range_tasks(counts, 16, 2, False, 1024)
    assert got == [(p, p + 1, (a, min(a + 64, 100))) for p in range(4) for a in (0, 64)]
    # HNSW: two tasks per slot, never a partition cut (a graph needs its whole partition)
    assert ivf_plan.range_tasks(counts, 16, 1, True, 1024) == [(0, 1, None), (1, 2, None), (2, 3, None),
                                                               (3, 4, None)]
    # a row cap instead of the bytes
    assert ivf_plan.range_tasks(np.array([5, 5]), 16, 1, False, 1 << 30, piece_rows=6) == [(0, 1, None),
                                                                                          (1, 2, None)]
    assert ivf_plan.whole_segment(64, 16, False, 1024) and not ivf_plan.whole_segment(65, 16, False, 1024)
    assert not ivf_plan.whole_segment(1, 16, True, 1024)
    assert ivf_plan.whole_segment(6, 16, False, 1 << 30, piece_rows=6)
    assert ivf_plan.storage_row_bytes(16, 4) == 72  # row id + 16 float32


def test_fragment_groups_and_rows_per_task() -> None:
    live = {3: 50, 1: 50, 2: 0, 7: 120}
    # in id order, empty fragments out, at most 100 rows a group where a fragment allows
    assert ivf_plan.fragment_groups(live, 1, 100) == [(1, 3), (7,)]
    # more slots than the rows call for: the rows spread over min(slots, fragments) groups
    assert ivf_plan.fragment_groups(live, 8, 1000) == [(1,), (3,), (7,)]
    assert ivf_plan.fragment_groups({1: 0}, 4, 10) == []
    assert ivf_plan.rows_per_task(512, 128 << 20) == 262_144
    assert ivf_plan.rows_per_task(512, 128 << 20, rows_cap=700) == 700


def test_encode_spans_cut_a_big_fragment_over_the_slots() -> None:
    n = 4 * ivf_plan.MIN_RANGE_ROWS
    # one fragment, two slots: two row ranges of it, in row order
    assert ivf_plan.encode_spans({5: n}, {5: n}, 2, 10 * n) == [((5, 0, n // 2),), ((5, n // 2, n),)]
    # deleted rows: ranges over the physical rows
    half = n // 2 + 5
    assert ivf_plan.encode_spans({5: n}, {5: n + 10}, 2, 10 * n) == [((5, 0, half),), ((5, half, n + 10),)]
    # fragments as small as a task's share stay whole, grouped as fragment_groups does
    live = {3: 50, 1: 50, 2: 0, 7: 120}
    assert ivf_plan.encode_spans(live, live, 1, 100) == [((1, 0, None), (3, 0, None)), ((7, 0, None),)]
    # too few rows to be worth a range each: whole
    small = ivf_plan.MIN_RANGE_ROWS + 1
    assert ivf_plan.encode_spans({1: small}, {1: small}, 2, 10 * small) == [((1, 0, None),)]
    # a big fragment among small ones: cut to the per-task cap, the others grouped around it
    spans = ivf_plan.encode_spans({1: 10, 2: n, 3: 10}, {1: 10, 2: n, 3: 10}, 2, n // 4)
    assert spans[0] == ((1, 0, None),) and spans[-1] == ((3, 0, None),)
    assert [s for (s,) in spans[1:-1]] == [(2, i * n // 4, (i + 1) * n // 4) for i in range(4)]
    assert ivf_plan.encode_spans({1: 0}, {1: 0}, 4, 10) == []


def test_segment_and_partition_shares() -> None:
    # four segments, 2 slots -> 4 tasks: one each
    assert ivf_plan.segment_shares([4.0, 3.0, 2.0, 1.0], [10, 10, 10, 10], 2, 1 << 20) == [[0], [1], [2], [3]]
    # five segments over 1 slot -> 2 tasks, costliest first to the least loaded (+1 a segment):
    # 0 loads task 0 with 6, segments 1-3 task 1 with 2, 4, 6, segment 4 the first of equals
    assert ivf_plan.segment_shares([5.0, 1.0, 1.0, 1.0, 1.0], [1] * 5, 1, 1 << 20) == [[0, 4], [1, 2, 3]]
    # more rows than 2 tasks may hold: ceil(30 / 10) = 3 tasks
    assert ivf_plan.segment_shares([1.0] * 4, [10, 10, 5, 5], 1, 10) == [[0, 3], [1], [2]]
    sizes = np.array([0, 40, 10, 30, 20])
    shares, load = ivf_plan.partition_shares([1, 2, 3, 4], sizes, 2)
    assert shares == [[1, 2], [3, 4]] and load == [50.0, 50.0]
    # 100 rows of partitions [1, 3] at 30 rows a task: ceil(70 / 30) = 3 tasks, but only 2 partitions
    assert ivf_plan.move_tasks([1, 3], sizes, 1, 30) == 2
    assert ivf_plan.move_tasks([1, 2, 3, 4], sizes, 1, 30) == 4
    assert ivf_plan.move_tasks([1, 2, 3, 4], sizes, 2, 1000) == 2


def _params(**kw: object) -> VectorParams:
    return VectorParams(**kw)


def test_training_plan() -> None:
    # IVF_PQ, 100 000 rows, default target 8 192: 12 partitions; IVF on 12 x 256 rows, PQ on
    # 256 codes x 256
    plan = ivf_train.training_plan("IVF_PQ", _params(num_sub_vectors=4), 100_000)
    assert (plan.k, plan.quantizer, plan.m, plan.nbits) == (12, "PQ", 4, 8)
    assert (plan.need_ivf, plan.need_q, plan.ivf_rows, plan.q_rows) == (True, True, 3072, 65_536)
    assert plan.sample_rows == 65_536 and plan.sampled
    # given centroids and codebook: nothing trained, nothing sampled
    given = _params(num_partitions=4, num_sub_vectors=4, ivf_centroids=np.zeros((4, 8)),
                    pq_codebook=np.zeros((4, 256, 2)))
    plan = ivf_train.training_plan("IVF_PQ", given, 1000)
    assert not plan.sampled and plan.sample_rows == 0
    # SQ: bounds always from a sample of 2^8 x sample_rate rows; IVF_FLAT: IVF only
    plan = ivf_train.training_plan("IVF_HNSW_SQ", _params(sample_rate=2, num_partitions=3), 50)
    assert (plan.k, plan.ivf_rows, plan.q_rows, plan.sample_rows) == (3, 6, 512, 512)
    plan = ivf_train.training_plan("IVF_FLAT", _params(target_partition_size=10), 10_000_000)
    assert (plan.k, plan.need_q, plan.sample_rows) == (4096, False, 4096 * 256)  # capped at 4 096
    assert ivf_train.training_plan("IVF_FLAT", _params(), 10).k == 1


def test_training_plan_refuses() -> None:
    with pytest.raises(InvalidInputError, match="10 partitions for 9 rows"):
        ivf_train.training_plan("IVF_FLAT", _params(num_partitions=10), 9)
    with pytest.raises(InvalidInputError, match="not enough rows to train PQ: 256 needed, 255"):
        ivf_train.training_plan("IVF_PQ", _params(num_partitions=1, num_sub_vectors=2), 255)
    with pytest.raises(InvalidInputError, match="3 partitions but only 2 valid vectors"):
        ivf_train.check_trainable(3, 2)


def test_sample_sizes() -> None:
    live = {1: 300, 2: 100, 3: 0}
    # 100 of 400 rows: each fragment's share by live rows, rounded up
    assert ivf_train.sample_shares(live, 400, 100) == {1: 75, 2: 25}
    assert ivf_train.sample_shares(live, 400, 7) == {1: 6, 2: 2}
    assert ivf_train.sample_shares(live, 400, 400) == {1: -1, 2: -1}  # every row
    files = [("a", 30), ("b", 10)]
    assert ivf_train.sample_takes(files, 20) == (("a", 15), ("b", 5))
    assert ivf_train.sample_takes(files, 50) == (("a", 30), ("b", 10))
    assert ivf_train.pq_shares(5, 2) == [(0, 1, 2), (3, 4)]
    assert ivf_train.pq_shares(2, 8) == [(0,), (1,)]
    assert ivf_train.kmeans_in_one_task(1 << 20, 16, 1 << 24)
    assert not ivf_train.kmeans_in_one_task((1 << 20) + 1, 16, 1 << 24)
