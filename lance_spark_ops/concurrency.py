"""One way to run a few driver-side calls at once: ``map_concurrently`` on a short-lived thread
pool (Spark runs the jobs these calls submit side by side). Fewer than two calls, or one worker,
run in the calling thread: no pool for nothing to overlap."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def map_concurrently(fn: Callable[[T], R], items: Iterable[T], max_workers: int = 8) -> list[R]:
    """``[fn(x) for x in items]`` in order, up to ``max_workers`` at once; the first error raised
    propagates once every started call has finished."""
    items = list(items)
    if len(items) < 2 or max_workers <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=min(len(items), max_workers)) as pool:
        return list(pool.map(fn, items))
