"""A moto server (S3 + DynamoDB) on loopback for the whole session, and a fresh bucket per test.

pylance (object_store) and our fsspec backend are both pointed at it with pylance's option
names; the fixture gives the dataset root and those options."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.latency_store import LatencyProxy
from tests.support.processes import free_port, stop_process, wait_http

READY_SECONDS = 30.0
RECORDING_PATH: Path | None = None  # where the session's moto server records requests


class Recording:
    """``with Recording(endpoint) as r:`` the requests the moto server got meanwhile, in order
    (``r.entries``: method, url, headers), read at exit."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.entries: list[dict] = []

    def _call(self, what: str) -> None:
        request = urllib.request.Request(f"{self.endpoint}/moto-api/recorder/{what}", method="POST")
        urllib.request.urlopen(request, timeout=10).close()

    def __enter__(self) -> Recording:
        self._call("reset-recording")
        self._call("start-recording")
        return self

    def __exit__(self, *exc: object) -> None:
        self._call("stop-recording")
        assert RECORDING_PATH is not None
        text = RECORDING_PATH.read_text() if RECORDING_PATH.exists() else ""
        self.entries = [json.loads(line) for line in text.splitlines() if line.strip()]


@dataclass
class S3:
    endpoint: str
    bucket: str

    @property
    def options(self) -> dict[str, str]:
        """pylance's storage options for the server (dummy credentials)."""
        return {"aws_endpoint": self.endpoint, "allow_http": "true", "aws_access_key_id": "testing",
                "aws_secret_access_key": "testing-secret", "aws_region": "us-east-1"}

    @property
    def ddb_options(self) -> dict[str, str]:
        return {**self.options, "dynamodb_endpoint": self.endpoint}

    def uri(self, name: str) -> str:
        return f"s3://{self.bucket}/{name}"

    def client(self, service: str = "s3"):  # type: ignore[no-untyped-def]
        import boto3

        return boto3.client(service, endpoint_url=self.endpoint, aws_access_key_id="testing",
                            aws_secret_access_key="testing-secret", region_name="us-east-1")


@pytest.fixture(scope="session")
def moto_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``moto_server`` on 127.0.0.1:<free port>; bounded wait for readiness, stopped at teardown.
    Its request recorder (off unless a test starts it: ``Recording``) writes under a temp dir."""
    pytest.importorskip("moto")
    exe = shutil.which("moto_server", path=str(Path(sys.executable).parent)) or shutil.which("moto_server")
    assert exe, "moto[server] is in the test extra"
    port = free_port()
    global RECORDING_PATH
    RECORDING_PATH = tmp_path_factory.mktemp("moto") / "recording.jsonl"
    env = {**os.environ, "MOTO_RECORDER_FILEPATH": str(RECORDING_PATH)}
    proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{endpoint}/moto-api/", proc, "moto_server", READY_SECONDS)
        yield endpoint
    finally:
        stop_process(proc)


@pytest.fixture
def s3(moto_endpoint: str) -> S3:
    """A new, empty bucket on the moto server."""
    bucket = f"lso-{uuid.uuid4().hex[:12]}"
    env = S3(moto_endpoint, bucket)
    env.client().create_bucket(Bucket=bucket)
    return env


@pytest.fixture(scope="session")
def latency_proxy(moto_endpoint: str) -> Iterator[LatencyProxy]:
    """``tests/support/latency_store``'s proxy in front of the session's moto server (a thread
    of this process), logging every request; tests reset it and set its delay and faults."""
    with LatencyProxy(moto_endpoint, log=True) as proxy:
        yield proxy


@dataclass
class SlowS3:
    """A bucket reached two ways: ``direct`` (set-up and checks, uncounted) and through the
    proxy (``options``: the requests under test, counted)."""

    direct: S3
    proxy: LatencyProxy

    @property
    def options(self) -> dict[str, str]:
        return {**self.direct.options, "aws_endpoint": self.proxy.endpoint}

    def uri(self, name: str) -> str:
        return self.direct.uri(name)


@pytest.fixture
def slow_s3(s3: S3, latency_proxy: LatencyProxy) -> Iterator[SlowS3]:
    """A fresh bucket behind the proxy, 2 ms per request; counts, faults and delay reset after."""
    latency_proxy.reset()
    latency_proxy.configure(delay_ms=2, log=True)
    try:
        yield SlowS3(s3, latency_proxy)
    finally:
        latency_proxy.reset()
        latency_proxy.configure(delay_ms=0)
