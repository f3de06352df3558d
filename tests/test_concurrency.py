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


def test_read_ahead_threads_serve_later_calls() -> None:
    """``read_ahead`` runs on the process's ``io_pool``: a second scan starts no thread of its own
    (a thread start took ~1 ms under a busy GIL, 32 a scan); a read ahead within a read ahead
    does not wait on a full pool."""
    from lance_spark_ops import concurrency

    def names() -> set[str]:
        return {t.name for t in threading.enumerate() if t.name.startswith("lso-io")}

    gate = threading.Barrier(4, timeout=30)  # four calls of a window of four in flight together

    def fn(x: int) -> int:
        gate.wait()
        return x * 2

    assert list(concurrency.read_ahead(fn, range(8), 4)) == [x * 2 for x in range(8)]
    first = names()
    assert len(first) >= 4
    assert list(concurrency.read_ahead(fn, range(8), 4)) == [x * 2 for x in range(8)]
    assert names() == first

    def outer(x: int) -> list[int]:
        return list(concurrency.read_ahead(lambda y: x + y, range(3), 3))

    assert list(concurrency.read_ahead(outer, range(4), 4)) == [[x, x + 1, x + 2] for x in range(4)]


def test_io_pool_is_made_again_in_a_forked_child(monkeypatch: pytest.MonkeyPatch) -> None:
    """A forked child (a Spark Python worker) has none of its parent's threads: a pool made by
    another process id is not used."""
    import os

    from lance_spark_ops import concurrency

    mine = concurrency.io_pool()
    assert concurrency.io_pool() is mine
    monkeypatch.setattr(os, "getpid", lambda: -1)
    child = concurrency.io_pool()
    assert child is not mine
    monkeypatch.undo()
    again = concurrency.io_pool()
    assert again is not child and again is not mine
    child.shutdown()
