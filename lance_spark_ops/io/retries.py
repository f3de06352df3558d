"""How failed requests are retried: pylance's object_store policy, for our obstore stores and
for adlfs's client.

object_store (Rust) retries a request that failed at the connection, timed out or got a 5xx /
429 up to ``client_max_retries`` times (10) within ``client_retry_timeout`` (180 s), after a
backoff that starts at 0.1 s and grows by a random factor up to 2 a try, at most 15 s.
azure-storage-blob's default (the policy adlfs's client gets: it takes no policy of ours)
waits 15 s plus 3 to the power of the try (+-3 s) before each of its retries - ~18 s before
the first - so one connection reset on a listing or a commit through adlfs stalled a job for
longer than the job, and a wrong endpoint took over a minute to report.
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Mapping
from typing import Any

from lance_spark_ops.errors import InvalidInputError
from lance_spark_ops.io.options import duration_seconds, plain_options

INIT_BACKOFF_S = 0.1
MAX_BACKOFF_S = 15.0
BACKOFF_BASE = 2.0
MAX_RETRIES = 10  # object_store's defaults
RETRY_TIMEOUT_S = 180.0


def retry_limits(storage_options: Mapping[str, Any], retries: int = MAX_RETRIES,
                 timeout_s: float = RETRY_TIMEOUT_S) -> tuple[int, float]:
    """pylance's ``client_max_retries`` / ``client_retry_timeout`` (seconds) when given, else
    ``retries`` / ``timeout_s``; a value that is no count / duration is an InvalidInputError."""
    opts = plain_options(dict(storage_options))
    given, wait = opts.get("client_max_retries"), opts.get("client_retry_timeout")
    if given is not None and str(given).strip() != "":
        try:
            retries = int(str(given).strip())
        except ValueError:
            retries = -1
        if retries < 0:
            raise InvalidInputError(f"storage option 'client_max_retries' must be a count of retries "
                                    f"(0 or more), not {given!r}")
    if wait is not None and str(wait).strip() != "":
        timeout_s = duration_seconds("client_retry_timeout", wait)
    return retries, timeout_s


def next_backoff(current: float, rng: random.Random | Any = random) -> float:
    """The backoff after ``current``: random between the first and ``BACKOFF_BASE`` times
    ``current``, at most ``MAX_BACKOFF_S`` (object_store's ``Backoff``)."""
    return min(MAX_BACKOFF_S, rng.uniform(INIT_BACKOFF_S, max(INIT_BACKOFF_S, current * BACKOFF_BASE)))


@functools.cache
def _adlfs_retry_class() -> type:
    from azure.storage.blob.aio import ExponentialRetry

    class ObjectStoreRetry(ExponentialRetry):  # type: ignore[misc, valid-type]
        """azure-storage-blob's async retry with object_store's backoff and limits; a request's
        state lives in its ``settings`` (one policy serves every request of a client)."""

        timeout_s: float = RETRY_TIMEOUT_S

        def configure_retries(self, request: Any) -> dict[str, Any]:
            settings = super().configure_retries(request)
            settings["lso_backoff"] = INIT_BACKOFF_S
            settings["lso_deadline"] = time.monotonic() + self.timeout_s
            return settings

        # (``get``: a request already in flight when the class changed has no such state)
        def get_backoff_time(self, settings: dict[str, Any]) -> float:
            wait = settings.get("lso_backoff", INIT_BACKOFF_S)
            settings["lso_backoff"] = next_backoff(wait)
            return wait

        def increment(self, settings: dict[str, Any], request: Any, response: Any = None,
                      error: Any = None) -> bool:
            retry = super().increment(settings, request, response, error)
            deadline = settings.get("lso_deadline", float("inf"))
            return retry and time.monotonic() + settings.get("lso_backoff", INIT_BACKOFF_S) < deadline

    return ObjectStoreRetry


def retry_adlfs_as_object_store(fs: Any, storage_options: Mapping[str, Any]) -> bool:
    """Give an adlfs filesystem's client object_store's retries (``client_max_retries`` and
    ``client_retry_timeout`` honoured); False when its client's policy is not the SDK's default
    (left as it is). adlfs builds its client itself, so its one policy object, shared by the
    service client and every container and blob client made from it, changes class in place."""
    policy = getattr(getattr(getattr(fs, "service_client", None), "_config", None), "retry_policy", None)
    try:
        cls = _adlfs_retry_class()
    except ImportError:
        return False
    if type(policy) not in (cls, cls.__bases__[0]):  # ours already, or the SDK's ExponentialRetry
        return False
    policy.__class__ = cls
    retries, policy.timeout_s = retry_limits(storage_options)
    # each kind's count too: the SDK stops at 3 connection failures whatever the total
    policy.total_retries = policy.connect_retries = policy.read_retries = policy.status_retries = retries
    return True
