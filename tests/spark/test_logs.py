from __future__ import annotations

import io
import logging
import sys

import pytest

from lance_spark_ops.spark.runtime.logs import CurrentStderr


def test_handler_writes_to_the_stderr_of_the_moment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A harness that swapped sys.stderr and closed its stream (pytest's capture) does not make
    later progress lines fail with 'I/O operation on closed file'."""
    log = logging.getLogger("lance_spark_ops.tests.logs")
    log.propagate = False
    first, second = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    handler = CurrentStderr()
    log.addHandler(handler)
    try:
        log.warning("one")
        first.close()
        monkeypatch.setattr(sys, "stderr", second)
        errors = []
        monkeypatch.setattr(handler, "handleError", lambda record: errors.append(record))
        log.warning("two")
        assert second.getvalue() == "two\n" and errors == []
    finally:
        log.removeHandler(handler)
