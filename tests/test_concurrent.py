"""The thread helper the driver runs side-by-side Spark jobs with: results in order, the calls
really at once (a barrier only two simultaneous calls pass), one call on the caller's thread,
the first error raised to the caller."""

from __future__ import annotations

import threading

import pytest

from lance_spark_ops._concurrent import map_concurrently


def test_results_in_order_and_at_once() -> None:
    both = threading.Barrier(2, timeout=30)

    def meet(x: int) -> int:
        both.wait()  # would time out (BrokenBarrierError) if the calls ran one after the other
        return x * 10

    assert map_concurrently(meet, [1, 2]) == [10, 20]


def test_one_item_or_one_thread_runs_here() -> None:
    here = threading.get_ident()
    assert map_concurrently(lambda _: threading.get_ident(), [0]) == [here]
    assert map_concurrently(lambda _: threading.get_ident(), [0, 1, 2], max_threads=1) == [here] * 3
    assert map_concurrently(lambda x: x, []) == []


def test_error_reaches_the_caller() -> None:
    def boom(x: int) -> int:
        if x == 3:
            raise ValueError("three")
        return x

    with pytest.raises(ValueError, match="three"):
        map_concurrently(boom, list(range(6)))
