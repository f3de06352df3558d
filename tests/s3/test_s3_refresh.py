"""Credentials refreshed inside one job: a namespace (``RotatingNamespace``, plugged in by class
path) vends a new key pair on every ``describe_table`` with an expiry the test makes short; a
compaction on the moto S3 server is held at its first commit until that expiry has passed
(a barrier on the clock, in the driver's before-commit hook), asks the namespace again and
finishes. The namespace's call log shows the refresh, moto's request log that every request
signed after the expiry used a later key, and the vended secrets appear nowhere in the output
or the metrics. Executors ask the namespace themselves: a Spark task given due credentials
(only the provider descriptor travels, no namespace object) refreshes from its own process."""

from __future__ import annotations

import calendar
import dataclasses
import fcntl
import json
import math
import os
import re
import time
from pathlib import Path

import pytest
from lance_namespace import DescribeTableResponse, LanceNamespace, ListTablesResponse

from tests.s3.conftest import S3, Recording

pytestmark = pytest.mark.spark

CLASS_PATH = f"{__name__}.RotatingNamespace"
OFFSET_S = 1.0  # the refresh offset the tests give (storage option credentials_refresh_offset_seconds)


def key_id(gen: int) -> str:
    return f"LSOGEN{gen:04d}KEY"


def secret(gen: int) -> str:
    return f"rotated-secret-{gen:04d}-9f8e7d6c"


class RotatingNamespace(LanceNamespace):
    """One table, ``t``, at ``location``: every describe_table vends key pair number n (the
    n-th call, counted in the ``log`` file across processes) expiring ``ttl_ms`` later, and
    logs (pid, time, n, expiry) - never the secret."""

    def __init__(self, **props: str) -> None:
        self.props = props

    def namespace_id(self) -> str:
        return "RotatingNamespace"

    def list_tables(self, request):  # type: ignore[no-untyped-def]
        return ListTablesResponse(tables=["t"])

    def describe_table(self, request):  # type: ignore[no-untyped-def]
        log = Path(self.props["log"])
        with open(log, "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.seek(0)
            gen = len(f.read().splitlines()) + 1
            now = time.time()
            expires = int(now * 1000) + int(self.props["ttl_ms"])
            f.write(json.dumps({"pid": os.getpid(), "t": now, "gen": gen, "expires_ms": expires}) + "\n")
        options = {**json.loads(self.props["options"]), "aws_access_key_id": key_id(gen),
                   "aws_secret_access_key": secret(gen), "expires_at_millis": str(expires)}
        return DescribeTableResponse(location=self.props["location"], storage_options=options)


def _calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def _signed(entries: list[dict], bucket: str) -> list[tuple[float, int]]:
    """(signing time, key generation) of every request to ``bucket``."""
    out = []
    for e in entries:
        if f"/{bucket}" not in e["url"] and f"{bucket}." not in e["url"]:
            continue
        headers = {k.lower(): v for k, v in e["headers"].items()}
        found = re.search(r"Credential=LSOGEN(\d+)KEY/", headers.get("authorization", ""))
        assert found, (e["method"], e["url"])  # every request was signed with a vended key
        signed = calendar.timegm(time.strptime(headers["x-amz-date"], "%Y%m%dT%H%M%SZ"))
        out.append((float(signed), int(found.group(1))))
    return out


def _namespace(s3: S3, uri: str, log: Path, ttl_ms: int) -> tuple[str, dict[str, str]]:
    base = {k: v for k, v in s3.options.items() if k not in ("aws_access_key_id", "aws_secret_access_key")}
    return CLASS_PATH, {"location": uri, "options": json.dumps(base), "ttl_ms": str(ttl_ms), "log": str(log)}


def _wait_past(epoch_s: float, bound_s: float = 30.0) -> None:
    """Block until the clock passes ``epoch_s`` (the event the test waits for is the expiry)."""
    deadline = time.monotonic() + bound_s
    while time.time() <= epoch_s:
        assert time.monotonic() < deadline
        time.sleep(min(0.05, max(0.0, epoch_s - time.time()) + 0.001))


def test_one_compaction_outlives_its_credentials(spark, s3: S3, tmp_path, capfd, monkeypatch) -> None:
    import lance
    import pyarrow as pa

    from lance_spark_ops.spark import compact
    from lance_spark_ops.spark.runtime.tuning import Tuning

    uri = s3.uri("t.lance")
    data = pa.table({"id": pa.array(range(1200), pa.int64()), "s": pa.array([f"v{i}" for i in range(1200)])})
    lance.write_dataset(data, uri, storage_options=s3.options, max_rows_per_file=100)
    log = tmp_path / "calls.jsonl"
    namespace = _namespace(s3, uri, log, ttl_ms=4000)
    held: list[float] = []

    def barrier(kind: str, attempt: int) -> None:
        if not held:  # the first commit waits until the first credentials have expired
            first = _calls(log)[0]["expires_ms"] / 1000.0
            # ... and a whole second more: requests are dated in whole seconds (X-Amz-Date), and
            # the rest of the job may take well under a second, so the commit's own requests
            # must be the ones dated after the expiry
            _wait_past(math.ceil(first) + 1)
            held.append(first)

    with Recording(s3.endpoint) as rec:
        offset = {"credentials_refresh_offset_seconds": str(OFFSET_S)}
        metrics = compact(spark, namespace=namespace, table_id="t", target_rows_per_fragment=400,
                          commit_every=1, storage_options=offset, tuning=Tuning(before_commit=barrier))
    out, err = capfd.readouterr()
    assert metrics.commits == 3 and metrics.fragments_removed == 12 and metrics.fragments_added == 3
    ds = lance.dataset(uri, storage_options=s3.options)
    assert len(ds.get_fragments()) == 3 and ds.to_table().sort_by("id").equals(data)

    calls = _calls(log)
    expired = held[0]
    # asked once to resolve, then again during the job: by then the first key pair had expired
    assert len(calls) >= 2 and any(c["t"] >= expired - OFFSET_S for c in calls[1:]), calls
    signed = _signed(rec.entries, s3.bucket)
    after = [gen for t, gen in signed if t >= expired + 1]  # X-Amz-Date has whole seconds
    assert after and min(after) >= 2, signed  # work after the expiry happened, all on later keys
    assert {gen for _, gen in signed} >= {1, 2}  # the job began on the first key pair
    shown = out + err + json.dumps(dataclasses.asdict(metrics), default=str) + repr(metrics)
    for c in calls:
        assert secret(c["gen"]) not in shown


def test_executors_refresh_from_the_descriptor(spark, s3: S3, tmp_path) -> None:
    import lance
    import pyarrow as pa

    from lance_spark_ops.io.options import PROVIDER_KEY
    from lance_spark_ops.namespace import resolve_table

    uri = s3.uri("e.lance")
    lance.write_dataset(pa.table({"id": list(range(10))}), uri, storage_options=s3.options)
    log = tmp_path / "calls.jsonl"
    table = resolve_table(_namespace(s3, uri, log, ttl_ms=300), "t",
                          {"credentials_refresh_offset_seconds": str(OFFSET_S)})
    options = table.options()
    provider = options[PROVIDER_KEY]
    assert "rotated-secret" not in repr(provider) and "options" not in repr(provider)
    _wait_past(table.expires_at)  # what the tasks get is due
    asked = len(_calls(log))

    def task(batches):  # type: ignore[no-untyped-def]
        from lance_spark_ops.io.storage import ObjectStore

        for batch in batches:
            store = ObjectStore(uri, dict(options))
            names = store.list("_versions")
            yield pa.RecordBatch.from_pydict({
                "pid": [os.getpid()] * batch.num_rows, "versions": [len(names)] * batch.num_rows,
                "key": [store.storage_options["aws_access_key_id"]] * batch.num_rows})

    rows = spark.range(2, numPartitions=2).mapInArrow(task, "pid long, versions long, key string").collect()
    assert [r.versions for r in rows] == [1, 1]
    calls = _calls(log)
    executors = {c["pid"] for c in calls[asked:]}  # who asked during the Spark job
    assert os.getpid() not in executors and {r.pid for r in rows} <= executors, calls
    assert all(r.key != key_id(1) for r in rows)
