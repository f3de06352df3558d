"""A second thread for the compiled kernels: a big input runs as two halves at once.

The FSST kernels release the GIL and code each string on its own, so a page's strings can
be cut in two at a string boundary and the halves coded in parallel, giving the same bytes.
A Spark executor runs one task per core, so this pays while a core sits idle - the last
tasks of a job, a job with fewer tasks than cores - and costs a thread handoff per page
otherwise (re-encode of string-heavy data on 2 slots, 10-round A/B runs: ~3% less wall time;
in one process, one task at a time: ~15% less wall time, CPU within noise).
``LSO_KERNEL_THREADS=1`` keeps every kernel on its caller's thread (``CodecTuning.split_threads``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TypeVar

from lance_spark_ops.encoding.tuning import CodecTuning, codec_tuning

T = TypeVar("T")

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def _forget_after_fork() -> None:
    """A forked child has none of its parent's threads (and maybe a lock held by one of them)."""
    global _lock, _pool
    _lock, _pool = threading.Lock(), None


os.register_at_fork(after_in_child=_forget_after_fork)


def worth_splitting(nbytes: int, tuning: CodecTuning | None = None) -> bool:
    """Whether an input of ``nbytes`` should run as two halves (``both``): below
    ``split_min_bytes`` the handoff and the extra concatenation cost more than a half saves."""
    t = codec_tuning(tuning)
    return t.split_threads and nbytes >= t.split_min_bytes


def _helper() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(1, thread_name_prefix="lso-kernel")
        return _pool


def both(first: Callable[[], T], second: Callable[[], T]) -> tuple[T, T]:
    """``(first(), second())`` with ``second`` on the helper thread (it must not call ``both``:
    the one helper would wait for itself). Errors come as in order: the first's, else the
    second's."""
    fut: Future[T] = _helper().submit(second)
    try:
        a = first()
    except BaseException:
        wait([fut])  # the second half stops before the first's error leaves (its own is dropped)
        raise
    return a, fut.result()
