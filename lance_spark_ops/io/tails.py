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
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future

from lance_spark_ops.concurrency import io_pool

__all__ = ["TailFetcher"]


class TailFetcher:
    """Tails ``(key, name, start, length)`` read by ``read(name, start, length)``, up to
    ``in_flight`` at a time on the process's ``io_pool``; ``take(key)`` -> ``(start, bytes)`` or
    None."""

    def __init__(self, read: Callable[[str, int, int], bytes], in_flight: int) -> None:
        self._read = read
        self._in_flight = max(1, in_flight)
        self._runners = 0  # calls of ``_run`` on the pool (at most ``in_flight``)
        self._queue: deque[tuple[Future, str, int, int]] = deque()
        self._held: dict[str, tuple[int, Future]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def schedule(self, items: Sequence[tuple[str, str, int, int]]) -> None:
        with self._lock:
            for key, name, start, length in items:
                if length > 0 and key not in self._held:
                    fut: Future = Future()
                    self._held[key] = (start, fut)
                    self._queue.append((fut, name, start, length))
            more = min(self._in_flight - self._runners, len(self._queue))
            self._runners += more
        for _ in range(more):
            io_pool().submit(self._run)

    def _run(self) -> None:
        """Read queued tails one after another until none is left (or the fetcher is closed)."""
        while True:
            with self._lock:
                if self._closed or not self._queue:
                    self._runners -= 1
                    return
                fut, name, start, length = self._queue.popleft()
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(self._read(name, start, length))
            except BaseException as e:  # noqa: BLE001 - handed to ``take``, which drops it
                fut.set_exception(e)

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
        """Drop what is held and what has not started."""
        with self._lock:
            held, self._held = self._held, {}
            self._queue.clear()
            self._closed = True
        for _, fut in held.values():
            fut.cancel()
