"""``io.tails.TailFetcher``: tails read ahead on threads, each handed out once; a failed read is
not handed out (the caller's own read names the error); ``close`` drops what is held."""

from __future__ import annotations

import threading

from lance_spark_ops.io.tails import TailFetcher


def test_tails_are_read_together_and_taken_once() -> None:
    started = threading.Barrier(3, timeout=30)  # the three reads are in flight at once

    def read(name: str, start: int, length: int) -> bytes:
        started.wait()
        return f"{name}:{start}:{length}".encode()

    t = TailFetcher(read, in_flight=8)
    t.schedule([("k1", "a", 10, 5), ("k2", "b", 0, 3), ("k3", "c", 7, 1), ("k4", "d", 0, 0)])
    assert t.take("k1") == (10, b"a:10:5")
    assert t.take("k2") == (0, b"b:0:3")
    assert t.take("k3") == (7, b"c:7:1")
    assert t.take("k1") is None  # once
    assert t.take("k4") is None  # nothing to read: not scheduled
    t.close()


def test_a_failed_read_is_not_handed_out() -> None:
    def read(name: str, start: int, length: int) -> bytes:
        raise OSError("gone")

    t = TailFetcher(read, in_flight=2)
    t.schedule([("k", "a", 0, 4)])
    assert t.take("k") is None
    t.close()


def test_close_drops_what_is_held() -> None:
    release = threading.Event()

    def read(name: str, start: int, length: int) -> bytes:
        release.wait(30)
        return b"x"

    t = TailFetcher(read, in_flight=1)
    t.schedule([("k1", "a", 0, 1), ("k2", "b", 0, 1)])
    t.close()
    release.set()
    assert t.take("k1") is None and t.take("k2") is None


def test_at_most_in_flight_reads_at_once_and_close_stops_the_queue() -> None:
    """Two of five in flight: the third waits for a slot; closed, the queued ones are never read."""
    gate = threading.Event()
    both = threading.Barrier(3, timeout=30)  # the two first reads and this test
    lock = threading.Lock()
    running, most, names = [0], [0], []

    def read(name: str, start: int, length: int) -> bytes:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            names.append(name)
        if name in ("a", "b"):
            both.wait()
        gate.wait(30)
        with lock:
            running[0] -= 1
        return name.encode()

    t = TailFetcher(read, in_flight=2)
    t.schedule([(k, k, 0, 1) for k in "abcde"])
    both.wait()  # a and b in flight; c, d, e queued behind them
    assert sorted(names) == ["a", "b"]
    t.close()
    gate.set()
    assert all(t.take(k) is None for k in "abcde")
    assert most[0] == 2
    u = TailFetcher(read, in_flight=2)  # a new one reads (the pool's threads are not held)
    u.schedule([("x", "x", 0, 1)])
    assert u.take("x") == (0, b"x")
    assert sorted(names) == ["a", "b", "x"]  # c, d and e never read
