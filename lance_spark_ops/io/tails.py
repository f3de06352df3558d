"""Object tails fetched ahead: the footer reads of a task's larger files in flight together.

A task that reads a few columns of files too big to fetch whole (``ObjectStore.prefetch`` takes
those) opens each file with a read of its tail and then reads the columns' pages: two round
trips, one after the other, per file. With the tails of the task's files requested together
up front, opening a file takes what was fetched and only the page reads wait their turn.
What was fetched is held until ``take`` hands it out or ``close`` drops it; a tail whose read
failed is not handed out (the file's own read then names what is wrong).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

__all__ = ["TailFetcher"]


class TailFetcher:
    """Tails ``(key, name, start, length)`` read by ``read(name, start, length)`` on up to
    ``in_flight`` threads; ``take(key)`` -> ``(start, bytes)`` or None."""

    def __init__(self, read: Callable[[str, int, int], bytes], in_flight: int) -> None:
        self._read = read
        self._in_flight = max(1, in_flight)
        self._pool: ThreadPoolExecutor | None = None
        self._held: dict[str, tuple[int, Future]] = {}
        self._lock = threading.Lock()

    def schedule(self, items: Sequence[tuple[str, str, int, int]]) -> None:
        with self._lock:
            todo = [(k, name, s, n) for k, name, s, n in items if n > 0 and k not in self._held]
            if not todo:
                return
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._in_flight, thread_name_prefix="lso-tails")
            for key, name, start, length in todo:
                self._held[key] = (start, self._pool.submit(self._read, name, start, length))

    def take(self, key: str) -> tuple[int, bytes] | None:
        """The tail fetched for ``key`` (waiting for it when in flight), once; None when none
        was asked for or its read failed."""
        with self._lock:
            got = self._held.pop(key, None)
        if got is None:
            return None
        start, fut = got
        try:
            return start, fut.result()
        except Exception:  # noqa: BLE001 - the caller reads the file itself and meets the error
            return None

    def close(self) -> None:
        """Drop what is held and cancel what has not started."""
        with self._lock:
            pool, self._pool = self._pool, None
            self._held.clear()
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
