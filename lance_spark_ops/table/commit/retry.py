"""The one retry loop of a job's commit (issue #38): plan on the latest version, build, commit;
when the commit loses to a concurrent one (``CommitConflict``), back off and do it all again.

``commit_transaction`` already retries the put itself and rebases what it can; what reaches
this loop is a conflict the job must plan again for. pyiceberg's
``Transaction.commit_transaction`` has the same shape: one loop, a randomised exponential
backoff, every other error raised at once. ``CommitStateUnknown`` is never retried and never
cleaned up after (the commit may have landed); an attempt deletes its own files when its
outcome is a known failure, before it raises.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from lance_spark_ops.errors import CommitConflict, InvalidInputError

__all__ = ["MAX_BACKOFF_SECONDS", "backoff_seconds", "retry_on_conflict"]

T = TypeVar("T")
logger = logging.getLogger("lance_spark_ops")

MAX_BACKOFF_SECONDS = 5.0
# the first wait's unit when the caller measured none: a planning round is seconds, a put
# milliseconds, so this only spreads concurrent retriers apart
DEFAULT_UNIT_SECONDS = 0.05


def backoff_seconds(attempt: int, unit: float) -> float:
    """The wait before retry ``attempt + 1`` (0-based ``attempt``): ``unit`` times a random slot
    of 1 .. 2^(attempt+1) (capped at 2^8), at most ``MAX_BACKOFF_SECONDS``."""
    slots = 2 ** min(attempt + 1, 8)
    return min(MAX_BACKOFF_SECONDS, unit * random.randint(1, slots))


def retry_on_conflict(attempt: Callable[[int], T], *, retries: int, what: str,
                      on_conflict: Callable[[int, CommitConflict], None] | None = None,
                      unit: float = DEFAULT_UNIT_SECONDS,
                      sleep: Callable[[float], None] = time.sleep) -> T:
    """``attempt(n)`` for n = 1, 2, ... until it returns; a ``CommitConflict`` is retried up to
    ``retries`` times (then raised). ``on_conflict(n, error)`` runs after attempt ``n``'s conflict,
    before the backoff: it prepares the next attempt (a rebase) or raises to stop. Every other
    error propagates at once. ``what`` names the commit in the log line."""
    if retries < 0:
        raise InvalidInputError(f"the number of commit retries must be >= 0, got {retries}")
    for n in range(1, retries + 2):
        try:
            return attempt(n)
        except CommitConflict as e:
            if n > retries:
                raise
            if on_conflict is not None:
                on_conflict(n, e)
            wait = backoff_seconds(n - 1, unit)
            logger.info("%s conflicted with a concurrent commit (%s); planning again in %.2f s (retry %d/%d)",
                        what, e, wait, n, retries)
            sleep(wait)
    raise AssertionError("unreachable")  # pragma: no cover
