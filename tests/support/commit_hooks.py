"""A job's ``Tuning`` whose commit hook makes a concurrent change once (tests of races)."""

from __future__ import annotations

from collections.abc import Callable

from lance_spark_ops.spark.runtime.tuning import Tuning


def once_before_commit(action: Callable[[], object]) -> Tuning:
    """Run ``action`` once, after the job's tasks and right before its first commit."""
    done: list[int] = []

    def hook(kind: str, attempt: int) -> None:
        if not done:
            done.append(attempt)
            action()

    return Tuning(before_commit=hook)
