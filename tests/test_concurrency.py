"""``concurrency.map_concurrently``: results in order, calls really overlapping (a barrier only
two concurrent calls pass), one worker or one call in the calling thread, errors propagated.
``beside``: the call runs while the block does, and the block's end waits for it."""

from __future__ import annotations

import threading

import pytest

from lance_spark_ops.concurrency import beside, map_concurrently


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


def test_beside_runs_with_the_block_and_is_joined_at_its_end() -> None:
    barrier = threading.Barrier(2, timeout=30)
    finished = threading.Event()

    def call(x: int) -> int:
        barrier.wait()  # passes only while the block runs too
        finished.wait(30)
        return x + 1

    with beside(call, 1) as fut:
        barrier.wait()
        finished.set()
    assert fut.done() and fut.result() == 2


def test_beside_keeps_its_error_in_the_future_and_waits_when_the_block_fails() -> None:
    release = threading.Event()

    def fails() -> None:
        release.wait(30)
        raise OSError("the call's")

    with pytest.raises(ValueError, match="the block's"):
        with beside(fails) as fut:
            release.set()
            raise ValueError("the block's")
    assert fut.done() and isinstance(fut.exception(), OSError)
