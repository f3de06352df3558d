"""One way to run a few driver-side calls at once: ``map_concurrently`` on a short-lived thread
pool (Spark runs the jobs these calls submit side by side). Fewer than two calls, or one worker,
run in the calling thread: no pool for nothing to overlap. ``read_ahead``: the same for a task's
reads of one item after another (results in order, a bounded window running ahead), on the
process's ``io_pool``. ``beside``: one call on a thread while the caller's block runs, joined
when the block ends."""

from __future__ import annotations

import itertools
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one, else the count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows: no affinity call
        return os.cpu_count() or 1


# the io_pool's bound: callers bound their own calls in flight (a read-ahead window, a fetcher's
# requests), so this only stops a runaway; calls that wait on calls of their own (a read ahead
# within a read ahead) then get threads of their own instead of waiting on a full pool
IO_POOL_THREADS = 512
_io_pool: tuple[int, ThreadPoolExecutor] | None = None  # (pid that made it, the pool)
_io_pool_lock = threading.Lock()


def io_pool() -> ThreadPoolExecutor:
    """The process's pool for blocking object-store calls. Its threads, once started, serve
    every later task and job of the process: a thread start took ~1 ms under a busy GIL, and a
    column scan of 48 fragments started 32 for its read-ahead and 32 for its footers in every
    job. A forked child (a Spark Python worker) makes its own: it has none of its parent's
    threads."""
    global _io_pool
    pid = os.getpid()
    with _io_pool_lock:
        if _io_pool is None or _io_pool[0] != pid:
            _io_pool = (pid, ThreadPoolExecutor(IO_POOL_THREADS, thread_name_prefix="lso-io"))
        return _io_pool[1]


def map_concurrently(fn: Callable[[T], R], items: Iterable[T], max_workers: int = 8) -> list[R]:
    """``[fn(x) for x in items]`` in order, up to ``max_workers`` at once; the first error raised
    propagates once every started call has finished."""
    items = list(items)
    if len(items) < 2 or max_workers <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=min(len(items), max_workers)) as pool:
        return list(pool.map(fn, items))


@contextmanager
def beside(fn: Callable[..., R], *args: Any, name: str = "lso-beside") -> Iterator[Future[R]]:
    """Run ``fn(*args)`` on a thread of its own while the ``with`` block runs; the block's end
    (an error's too) waits for it, so nothing the call touches is cleaned up under it. Its
    outcome is the yielded future's: an error the caller never asks for is dropped."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix=name) as pool:
        yield pool.submit(fn, *args)


def read_ahead(fn: Callable[[T], R], items: Iterable[T], window: int) -> Iterator[R]:
    """``fn(x)`` for each item, yielded in order, with up to ``window`` of the next calls running
    ahead on the ``io_pool``'s threads (each blocks on its own object-store round trips; together
    they keep many in flight). Closing the generator early cancels the calls not started and
    waits for the running ones; the first error raised propagates when its item's turn comes."""
    items = list(items)
    if len(items) < 2 or window <= 1:
        for x in items:
            yield fn(x)
        return
    pool = io_pool()
    pending: deque[Future[R]] = deque()
    it = iter(items)
    try:
        for x in itertools.islice(it, window):
            pending.append(pool.submit(fn, x))
        while pending:
            done = pending.popleft().result()
            for x in itertools.islice(it, 1):
                pending.append(pool.submit(fn, x))
            yield done
    finally:
        for f in pending:
            f.cancel()
        wait(pending)
