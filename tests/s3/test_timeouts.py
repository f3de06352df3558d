"""pylance's ``timeout`` / ``connect_timeout`` storage options reach every carrier: a request
the store holds without answering is given up after ``timeout`` and retried, instead of
waiting out s3fs's own (the same open without the option: 16 s here) - the proxy holds one
listing for 60 s."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from lance_spark_ops.errors import InvalidInputError
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.table.dataset import Dataset
from tests.s3.conftest import SlowS3

HOLD_S = 60.0  # the held request's time without an answer (the proxy then resets it)
WAIT_S = 8.0  # the open's bound: 1 s of timeout and a retry take ~2 s, s3fs's default 16 s


def test_held_listing_is_retried_after_the_timeout(slow_s3: SlowS3) -> None:
    import lance

    uri = slow_s3.uri("t.lance")
    lance.write_dataset(pa.table({"id": list(range(10))}), uri, storage_options=slow_s3.direct.options)
    slow_s3.proxy.inject("timeout", count=1, ops=["LIST"], path_contains="", hold_s=HOLD_S)
    opened: list[Dataset] = []
    # the open runs beside the held request; it must be done long before the hold ends
    worker = threading.Thread(target=lambda: opened.append(
        Dataset.open(uri, storage_options={**slow_s3.options, "timeout": "1s"})), daemon=True)
    worker.start()
    worker.join(WAIT_S)
    assert opened and opened[0].version == 1, "the held listing was waited out"
    assert slow_s3.proxy.stats()["faults"] == {"timeout": 1}


@pytest.mark.parametrize("value", ["soon", "0s", "-1s"])
def test_a_timeout_that_is_no_duration_is_refused(value: str) -> None:
    with pytest.raises(InvalidInputError, match="'timeout'"):
        ObjectStore("s3://bucket/t", {"aws_region": "r", "timeout": value}).fs  # noqa: B018 - built lazily
