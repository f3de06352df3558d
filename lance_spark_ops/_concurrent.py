"""A few blocking calls at once on threads, results in order: how the driver runs several Spark
jobs side by side (Spark schedules them together). One helper, so that every such place caps
its threads and runs a single call on its own thread the same way."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

MAX_THREADS = 8  # Spark jobs submitted at once from one driver; more only queue in its scheduler


def map_concurrently(fn: Callable[[T], R], items: Sequence[T], max_threads: int = MAX_THREADS) -> list[R]:
    """``[fn(x) for x in items]``, up to ``max_threads`` at once; fewer than two items (or one
    thread) run on the calling thread. The first exception raised is raised here."""
    if len(items) < 2 or max_threads < 2:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=min(len(items), max_threads)) as pool:
        return list(pool.map(fn, items))
