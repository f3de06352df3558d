"""The one commit-retry loop (``table.commit.retry``): what it retries, how often, what it never
retries, and its backoff."""

from __future__ import annotations

import pytest

from lance_spark_ops.errors import (
    CommitConflict,
    CommitStateUnknown,
    IncompatibleTransaction,
    InvalidInputError,
)
from lance_spark_ops.table.commit.retry import MAX_BACKOFF_SECONDS, backoff_seconds, retry_on_conflict


def _conflicts_then(value: object, conflicts: int, seen: list[int]):
    def attempt(n: int) -> object:
        seen.append(n)
        if n <= conflicts:
            raise CommitConflict(f"lost round {n}")
        return value
    return attempt


def test_retries_until_success_and_prepares_each_retry() -> None:
    seen: list[int] = []
    prepared: list[int] = []
    waits: list[float] = []
    out = retry_on_conflict(_conflicts_then("ok", 2, seen), retries=3, what="t",
                            on_conflict=lambda n, e: prepared.append(n), sleep=waits.append)
    assert out == "ok" and seen == [1, 2, 3] and prepared == [1, 2] and len(waits) == 2


def test_gives_up_after_retries_with_the_last_conflict() -> None:
    seen: list[int] = []
    with pytest.raises(CommitConflict, match="lost round 3"):
        retry_on_conflict(_conflicts_then("ok", 10, seen), retries=2, what="t", sleep=lambda s: None)
    assert seen == [1, 2, 3]


def test_zero_retries_is_one_attempt() -> None:
    seen: list[int] = []
    with pytest.raises(CommitConflict):
        retry_on_conflict(_conflicts_then("ok", 1, seen), retries=0, what="t", sleep=lambda s: None)
    assert seen == [1]


@pytest.mark.parametrize("error", [CommitStateUnknown("maybe landed"), IncompatibleTransaction("overwritten"),
                                   ValueError("bug")])
def test_other_errors_are_never_retried(error: Exception) -> None:
    seen: list[int] = []

    def attempt(n: int) -> None:
        seen.append(n)
        raise error

    with pytest.raises(type(error)):
        retry_on_conflict(attempt, retries=5, what="t", sleep=lambda s: None)
    assert seen == [1]


def test_on_conflict_can_stop_the_loop() -> None:
    seen: list[int] = []

    def stop(n: int, e: CommitConflict) -> None:
        raise e

    with pytest.raises(CommitConflict, match="lost round 1"):
        retry_on_conflict(_conflicts_then("ok", 5, seen), retries=5, what="t", on_conflict=stop,
                          sleep=lambda s: None)
    assert seen == [1]


def test_negative_retries_is_invalid_input() -> None:
    with pytest.raises(InvalidInputError):
        retry_on_conflict(lambda n: None, retries=-1, what="t")


def test_backoff_grows_with_jitter_and_is_capped() -> None:
    for attempt in range(12):
        slots = 2 ** min(attempt + 1, 8)
        waits = {backoff_seconds(attempt, 0.01) for _ in range(200)}
        assert all(0.01 <= w <= min(MAX_BACKOFF_SECONDS, 0.01 * slots) + 1e-12 for w in waits)
    assert backoff_seconds(50, 1.0) <= MAX_BACKOFF_SECONDS
    assert len({backoff_seconds(5, 0.01) for _ in range(200)}) > 1  # jittered, so retriers spread apart
