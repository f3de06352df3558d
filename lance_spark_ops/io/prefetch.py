"""Whole objects fetched ahead of their reads: a task that will read every byte of a list of
files (a rewrite reads its fragments' data and deletion files whole) names them in order, and
they are fetched in the background, many in flight, while the task decodes the earlier ones.

Memory is bounded by the store's byte budget (``io.budget``) less the share its uploads may
hold (``prefetch_share``: half of it by default). A fetched object is held until the task
releases it (``release``: a rewrite drops a fragment's files once it has read them) - it is
read several times meanwhile (footer, then pages), so it is never dropped for a later object
while the task may still read it: an object the task has not read yet is never dropped, and
the objects it has read (in use) are dropped, least recently read first, only while they hold
more than ``in_use_share`` of the prefetch's bytes (a caller that never
releases still lets the prefetch run ahead). Dropping an object the task was still reading
cost a direct read per later request of it, one round trip each: a rewrite of 500 fragments
within 128 MiB took 4x as long. A read of an object whose fetch has not started (the budget
was full) starts it at once, out of turn and past the budget by that one object (the task
waits on it anyway; a direct read would hold its bytes too, in a footer and then a page round
trip). The objects fetched before it stay unread: a rewrite asks for a slice's deletion files
before that slice's data files, and counting those data files as passed let them be dropped
and then read directly (16 more requests and ~1 s in a compaction at 50 ms). A task releases
what it does not read (``FragmentBatch.release``), so nothing unread holds the budget for good.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from lance_spark_ops.io import remote
from lance_spark_ops.io.budget import IOBudget, prefetch_share

Span = tuple[str, "int | None", "int | None"]  # (path, start, end); start None: the whole object

# what an object of unknown size (a deletion file) is counted as against the byte budget
UNKNOWN_SIZE = 64 * 1024


def in_use_share(max_bytes: int) -> int:
    """Bytes of objects the task has read (and not released) that the prefetch keeps when it
    needs room for the next ones: half its share (no object over half is prefetched, so the one
    being read is always kept)."""
    return max_bytes // 2


class _Entry:
    __slots__ = ("data", "future", "path", "read", "released", "size", "whole")

    def __init__(self, path: str, size: int | None) -> None:
        self.path, self.size = path, size or UNKNOWN_SIZE
        self.whole = size is None  # size unknown: one GET of the whole object
        self.future: concurrent.futures.Future[list[bytes]] | None = None
        self.read = False  # the task has read it (or passed it): in use until released
        self.released = False  # the task is done with it: dropped once its fetch is over
        self.data: bytes | None = None  # the parts joined, once


class Prefetcher:
    """Objects of one async filesystem fetched ahead (see the module docstring). ``paths``
    are the filesystem's full paths with their sizes (the manifest's ``file_size_bytes``)."""

    def __init__(self, fs: Any, budget: IOBudget,
                 read: Callable[[list[Span]], Awaitable[list[bytes]]] | None = None) -> None:
        self.fs, self.budget = fs, budget
        # the coroutine fetching one object's (path, start, end) spans: fsspec's, or the store's
        # carrier for its bulk reads (``io.obstore_reads``)
        self._read = read or (lambda spans: remote.read_many(fs, spans, budget))
        # a task that reads also writes (a rewrite): its output's upload holds the other share
        self.max_bytes = prefetch_share(budget)
        self._lock = threading.Lock()
        self._queue: list[_Entry] = []  # not started, in order
        # started or fetched; the ones read move to the end when read again (least recently read first)
        self._held: OrderedDict[str, _Entry] = OrderedDict()
        self._bytes = 0  # of the held entries
        self._in_use = 0  # bytes of the held entries read and not released
        self.peak_bytes = 0  # the most ``_bytes`` ever was (metrics, tests)
        self.fetched = 0  # objects fetched (metrics)
        self.hits = 0
        self._pumping: int | None = None  # the thread inside _pump
        self._again = False
        # requests of the fetches started and not over (counted, not recomputed from every held
        # entry's future on each pass: that walk was ~15% of a rewrite task's CPU)
        self._in_flight = 0
        self._need: dict[int, tuple[int, _Entry]] = {}  # id(future) -> (its requests, its entry), until over

    def schedule(self, items: Sequence[tuple[str, int]]) -> None:
        """Fetch these (path, size) objects, in this order, as the budget allows (size None:
        unknown, fetched whole in one request). Objects over half the budget are left to
        direct reads."""
        cap = self.max_bytes // 2
        with self._lock:
            known = {e.path for e in self._queue} | set(self._held)
            for p, s in items:
                if p not in known and (s is None or 0 < s <= cap):
                    self._queue.append(_Entry(p, s))
                    known.add(p)
            self._pump()

    def _pump(self) -> None:
        """Start queued fetches while requests and bytes allow (lock held). A fetch that is
        over before its callback is added calls ``_done`` in this thread: it only asks for
        another pass then (the lock is not re-entrant)."""
        self._pumping = threading.get_ident()
        try:
            while True:
                self._again = False
                self._pump_once()
                if not self._again:
                    return
        finally:
            self._pumping = None

    def _pump_once(self) -> None:
        part = self.budget.part_bytes
        limit = self.max_bytes
        while self._queue:
            in_flight = self._in_flight
            e = self._queue[0]
            need = 1 if e.whole else -(-e.size // part)
            if in_flight and in_flight + need > self.budget.max_requests:
                return
            while self._bytes + e.size > limit:
                if not self._drop_one():
                    return
            self._queue.pop(0)
            self._start(e)

    def _start(self, e: _Entry) -> None:
        """Fetch ``e`` (lock held, ``_pumping`` set: see ``_pump``)."""
        part = self.budget.part_bytes
        need = 1 if e.whole else -(-e.size // part)
        spans: list[tuple[str, int | None, int | None]] = [(e.path, None, None)] if e.whole else [
            (e.path, s, min(s + part, e.size)) for s in range(0, e.size, part)]
        e.future = remote.submit(self.fs, self._read(spans))
        self._need[id(e.future)] = (need, e)
        self._in_flight += need
        self._held[e.path] = e
        self._bytes += e.size
        self.peak_bytes = max(self.peak_bytes, self._bytes)
        e.future.add_done_callback(self._done)

    def _drop_one(self) -> bool:
        """Drop the least recently read object the task has read, when objects in use hold more
        than ``in_use_share`` (lock held; released ones are dropped as soon as they are fetched).
        False when nothing may be dropped: the prefetch waits for the task to read or release."""
        if self._in_use <= in_use_share(self.max_bytes):
            return False
        old = next((k for k, h in self._held.items() if h.read and h.future is not None and h.future.done()),
                   None)
        if old is None:
            return False
        self._forget(self._held.pop(old))
        return True

    def _forget(self, e: _Entry) -> None:
        """``e`` has left ``_held``: its bytes leave the counts (lock held)."""
        self._bytes -= e.size
        if e.read and not e.released:
            self._in_use -= e.size
        e.data = None

    def _mark_read(self, e: _Entry) -> None:
        if not e.read:
            e.read = True
            self._in_use += e.size

    def _settle(self, fut: concurrent.futures.Future) -> None:
        """A fetch is over: its requests leave the in-flight count, and an object released
        meanwhile is dropped (lock held)."""
        need, e = self._need.pop(id(fut), (0, None))
        self._in_flight -= need
        if e is not None and e.released and self._held.get(e.path) is e:
            self._forget(self._held.pop(e.path))

    def _done(self, fut: concurrent.futures.Future) -> None:
        if self._pumping == threading.get_ident():  # from add_done_callback inside _pump
            self._settle(fut)
            self._again = True
            return
        with self._lock:
            self._settle(fut)
            if fut.cancelled():
                return
            self.fetched += 1
            self._pump()

    def get(self, path: str) -> bytes | memoryview | None:
        """The object's bytes when it was scheduled (waiting for its fetch), else None (read it
        directly). A failed fetch is None too: the direct read raises the store's typed error."""
        with self._lock:
            e = self._held.get(path)
            if e is None:
                at = next((i for i, q in enumerate(self._queue) if q.path == path), None)
                if at is None:
                    return None
                e = self._queue.pop(at)
                self._again = False
                self._pumping = threading.get_ident()  # a fetch over at once calls back here
                try:
                    self._start(e)  # out of turn (see the module docstring)
                finally:
                    self._pumping = None
                if self._again:
                    self._pump()
            self._mark_read(e)
            self._held.move_to_end(path)
            fut = e.future
        assert fut is not None
        try:
            parts = fut.result()
        except Exception:  # noqa: BLE001 - read directly; its error is typed there
            with self._lock:
                if self._held.get(path) is e:
                    self._forget(self._held.pop(path))
                    self._pump()
            return None
        data = e.data
        if data is None:
            data = e.data = parts[0] if len(parts) == 1 else b"".join(parts)
        with self._lock:
            self.hits += 1
            self._pump()
        return data

    def release(self, paths: Sequence[str]) -> None:
        """The task is done with these objects: drop them now (a fetch still in flight is
        dropped when it is over; one not started is not fetched), so the budget holds only what
        is still to be read."""
        with self._lock:
            gone = set(paths)
            if not gone:
                return
            self._queue = [q for q in self._queue if q.path not in gone]
            for p in gone:
                e = self._held.get(p)
                if e is None or e.released:
                    continue
                if e.read:
                    self._in_use -= e.size
                e.read = e.released = True
                if e.future is not None and e.future.done():
                    self._forget(self._held.pop(p))
            self._pump()

    def close(self) -> None:
        """Cancel what has not been fetched and drop everything held."""
        with self._lock:
            self._queue.clear()
            futures = [e.future for e in self._held.values() if e.future is not None]
            self._held.clear()
            self._bytes = self._in_use = 0
            self._need.clear()
            self._in_flight = 0
        for f in futures:  # outside the lock: a cancelled future runs its callbacks right here
            f.cancel()
