"""object_store's retry policy, as ``io.retries`` gives it to adlfs's client and our obstore
stores: backoffs, limits from pylance's options, the policy installed in place."""

from __future__ import annotations

import random

import pytest

from lance_spark_ops.errors import InvalidInputError
from lance_spark_ops.io.retries import (
    INIT_BACKOFF_S,
    MAX_BACKOFF_S,
    next_backoff,
    retry_adlfs_as_object_store,
    retry_limits,
)


class _Top:
    """An rng that always draws the top of its range."""

    def uniform(self, low: float, high: float) -> float:
        return high


def test_backoffs_at_most_twice_the_last_up_to_fifteen_seconds() -> None:
    rng = random.Random(7)
    wait = INIT_BACKOFF_S
    for _ in range(200):  # object_store's decorrelated jitter: a draw may fall back to the first
        nxt = next_backoff(wait, rng)
        assert INIT_BACKOFF_S <= nxt <= min(MAX_BACKOFF_S, 2 * wait)
        wait = nxt
    waits = [INIT_BACKOFF_S]
    for _ in range(10):
        waits.append(next_backoff(waits[-1], _Top()))
    assert waits[:4] == [0.1, 0.2, 0.4, 0.8] and waits[-1] == MAX_BACKOFF_S


def test_limits_from_pylance_options() -> None:
    assert retry_limits({}) == (10, 180.0)
    assert retry_limits({}, 3, 30.0) == (3, 30.0)
    assert retry_limits({"client_max_retries": "2", "client_retry_timeout": "45"}) == (2, 45.0)
    assert retry_limits({"client_max_retries": 0, "client_retry_timeout": "1m 30s"}) == (0, 90.0)
    for bad in ({"client_max_retries": "many"}, {"client_max_retries": "-1"},
                {"client_retry_timeout": "soon"}):
        with pytest.raises(InvalidInputError, match=next(iter(bad))):
            retry_limits(bad)


def test_adlfs_policy_changed_in_place() -> None:
    """The one policy object adlfs's client and every client made from it share takes
    object_store's backoff and limits; a policy not the SDK's default is left alone."""
    aio = pytest.importorskip("azure.storage.blob.aio")

    client = aio.BlobServiceClient("https://acct.blob.core.windows.net", credential=None)
    fs = type("Fs", (), {"service_client": client})()
    policy = client._config.retry_policy
    assert retry_adlfs_as_object_store(fs, {"client_max_retries": "4"})
    assert client._config.retry_policy is policy and policy in client._pipeline._impl_policies
    counts = (policy.total_retries, policy.connect_retries, policy.read_retries, policy.status_retries)
    assert counts == (4, 4, 4, 4)
    from azure.core.pipeline import PipelineContext, PipelineRequest
    from azure.core.rest import HttpRequest

    request = PipelineRequest(HttpRequest("GET", "https://acct/c"), PipelineContext(None))
    settings = policy.configure_retries(request)
    waits = [policy.get_backoff_time(settings) for _ in range(4)]
    assert waits[0] == INIT_BACKOFF_S, waits
    assert all(b <= 2 * a for a, b in zip(waits, waits[1:], strict=False)), waits
    from azure.core.exceptions import ServiceRequestError

    assert policy.increment(settings, request.http_request, error=ServiceRequestError("reset"))
    assert retry_adlfs_as_object_store(fs, {"client_retry_timeout": "0.001"})  # under the first backoff
    settings = policy.configure_retries(request)
    assert not policy.increment(settings, request.http_request, error=ServiceRequestError("reset"))
    assert retry_adlfs_as_object_store(fs, {})  # again: the defaults
    assert policy.total_retries == 10
    other = aio.BlobServiceClient("https://acct.blob.core.windows.net", credential=None,
                                  retry_policy=aio.LinearRetry(backoff=1))
    assert not retry_adlfs_as_object_store(type("Fs", (), {"service_client": other})(), {})
    assert not retry_adlfs_as_object_store(object(), {})
