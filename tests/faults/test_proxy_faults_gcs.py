"""The proxy's fault runs on GCS: the GCS emulator (``tests/gcs_azure/gcs_server.py``, with
GCS's generation preconditions) behind the latency proxy, every request through gcsfs. Judged
as the S3 runs (``tests/faults/proxy.py``). Seed 0 of three jobs by default; ``-m slow``: every
job, seeds 0..``PROXY_FAULT_SEEDS``/2."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.proxy import PROXY_RUNNERS, GCSTarget, run_proxy_scenario
from tests.gcs_azure.conftest import GCS, gcs, gcs_endpoint  # noqa: F401 - fixtures
from tests.support.latency_store import LatencyProxy

JOBS = sorted(PROXY_RUNNERS)
DEFAULT = ("compact", "create_index", "vacuum")
SEEDS = int(os.environ.get("PROXY_FAULT_SEEDS", "6")) // 2


@pytest.fixture
def slow_gcs(gcs: GCS, tmp_path: Path) -> Iterator[GCSTarget]:  # noqa: F811 - the fixture
    """A fresh bucket behind its own proxy, 2 ms a request, stopped after the test (pylance's
    way to name an endpoint: a service-account file's ``gcs_base_url``)."""
    with LatencyProxy(gcs.endpoint, delay_ms=2) as proxy:
        key = tmp_path / "proxied-service-account.json"
        key.write_text(json.dumps({**json.loads(Path(gcs.service_account).read_text()),
                                   "gcs_base_url": proxy.endpoint}))
        yield GCSTarget(gcs, GCS(proxy.endpoint, gcs.bucket, str(key)), proxy)


@pytest.mark.parametrize("job", DEFAULT)
def test_gcs_proxy_fault(job: str, tmp_path: Path, slow_gcs: GCSTarget) -> None:
    bad = run_proxy_scenario(job, 0, tmp_path, slow_gcs)
    assert not bad, "\n".join(bad)


@pytest.mark.slow
@pytest.mark.parametrize(("job", "seed"), [(j, s) for j in JOBS for s in range(SEEDS + 1)
                                           if s or j not in DEFAULT])
def test_gcs_proxy_fault_slow(job: str, seed: int, tmp_path: Path, slow_gcs: GCSTarget) -> None:
    bad = run_proxy_scenario(job, seed, tmp_path, slow_gcs)
    assert not bad, "\n".join(bad)


# the commit's manifest upload reset after it landed: the job must find its own manifest or say
# CommitStateUnknown, and delete none of its files either way
COMMIT_LANDED = [{"kind": "reset", "count": 1, "ops": ["POST"], "path_contains": "/upload/",
                  "body_contains": "/_versions/", "forward": True}]


@pytest.mark.parametrize("job", ["add_columns", "compact"])
def test_gcs_commit_reset_after_it_landed(job: str, tmp_path: Path, slow_gcs: GCSTarget) -> None:
    bad = run_proxy_scenario(job, 0, tmp_path, slow_gcs, faults=COMMIT_LANDED, fired_at_least=1)
    assert not bad, "\n".join(bad)
