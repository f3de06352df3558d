"""The proxy's fault runs on Azure and GCS (``tests/faults/proxy.py``), judged as the S3 runs:
0 rows lost, no orphan reported as committed, a failed job leaves the latest version as it was.

* Azure: Azurite behind the proxy; reads, block uploads and batch deletes go through obstore,
  listings, commits (conditional puts) and small writes through adlfs - both retrying as
  object_store does (``io.retries``: with azure-storage-blob's own policy each fault cost a job
  ~18 s).
* GCS: the emulator (``tests/gcs_azure/gcs_server.py``, with GCS's generation preconditions)
  behind the proxy, every request through gcsfs.

Seed 0 of three jobs on each by default; ``-m slow``: every job, seeds 0..``PROXY_FAULT_SEEDS``/2.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults.proxy import PROXY_RUNNERS, AzureTarget, GCSTarget, run_proxy_scenario
from tests.gcs_azure.conftest import GCS, Azure, azure, azurite_endpoint, gcs, gcs_endpoint  # noqa: F401
from tests.support.azurite import AZURITE_ACCOUNT
from tests.support.latency_store import LatencyProxy

JOBS = sorted(PROXY_RUNNERS)
DEFAULT = ("compact", "create_index", "vacuum")
SEEDS = int(os.environ.get("PROXY_FAULT_SEEDS", "6")) // 2
STORES = ("azure", "gcs")

# the commit's manifest write reset after it landed: the job must find its own manifest or say
# CommitStateUnknown, and delete none of its files either way (a GCS upload names its object
# in its body)
COMMIT_LANDED = {
    "azure": [{"kind": "reset", "count": 1, "ops": ["PUT"], "path_contains": "/_versions/", "forward": True}],
    "gcs": [{"kind": "reset", "count": 1, "ops": ["POST"], "path_contains": "/upload/",
             "body_contains": "/_versions/", "forward": True}],
}


@pytest.fixture(params=STORES)
def slow_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AzureTarget | GCSTarget]:
    """A fresh container / bucket behind its own proxy, 2 ms a request, stopped after the test
    (GCS is named through a service-account file's ``gcs_base_url``, as pylance names it)."""
    direct = request.getfixturevalue(request.param)
    with LatencyProxy(direct.endpoint, delay_ms=2) as proxy:
        if isinstance(direct, Azure):
            yield AzureTarget(direct, Azure(f"{proxy.endpoint}/{AZURITE_ACCOUNT}", direct.container), proxy)
        else:
            key = tmp_path / "proxied-service-account.json"
            key.write_text(json.dumps({**json.loads(Path(direct.service_account).read_text()),
                                       "gcs_base_url": proxy.endpoint}))
            yield GCSTarget(direct, GCS(proxy.endpoint, direct.bucket, str(key)), proxy)


def _run(job: str, seed: int, tmp_path: Path, target: AzureTarget | GCSTarget, **kw: Any) -> None:
    bad = run_proxy_scenario(job, seed, tmp_path, target, **kw)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("job", DEFAULT)
def test_proxy_fault_on_emulator(job: str, tmp_path: Path, slow_store: AzureTarget | GCSTarget) -> None:
    _run(job, 0, tmp_path, slow_store)


@pytest.mark.slow
@pytest.mark.parametrize(("job", "seed"), [(j, s) for j in JOBS for s in range(SEEDS + 1)
                                           if s or j not in DEFAULT])
def test_proxy_fault_on_emulator_slow(job: str, seed: int, tmp_path: Path,
                                      slow_store: AzureTarget | GCSTarget) -> None:
    _run(job, seed, tmp_path, slow_store)


@pytest.mark.parametrize("job", ["add_columns", "compact"])
def test_commit_reset_after_it_landed_on_emulator(job: str, tmp_path: Path,
                                                  slow_store: AzureTarget | GCSTarget) -> None:
    store = "azure" if isinstance(slow_store, AzureTarget) else "gcs"
    _run(job, 0, tmp_path, slow_store, faults=COMMIT_LANDED[store], fired_at_least=1)
