"""``concurrency.map_concurrently``: results in order, calls really overlapping (a barrier only
two concurrent calls pass), one worker or one call in the calling thread, errors propagated."""

from __future__ import annotations

import threading

import pytest

from lance_spark_ops.concurrency import map_concurrently


def test_overlapping_in_order() -> None:
    barrier = threading.Barrier(2, timeout=30)

    def f(x: int) -> int:
        barrier.wait()  # passes only when both calls run at once
        return x * 10

    assert map_concurrently(f, [1, 2]) == [10, 20]


def test_one_worker_or_one_call_in_this_thread() -> None:
    me = threading.get_ident()
    assert map_concurrently(lambda _: threading.get_ident(), [1, 2, 3], max_workers=1) == [me] * 3
    assert map_concurrently(lambda _: threading.get_ident(), [1]) == [me]
    assert map_concurrently(lambda x: x, []) == []


def test_error_propagates() -> None:
    def f(x: int) -> int:
        if x == 2:
            raise ValueError("two")
        return x

    with pytest.raises(ValueError, match="two"):
        map_concurrently(f, [1, 2, 3])
