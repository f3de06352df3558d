"""The proxy's fault runs on Azure: Azurite behind the latency proxy, where the jobs' reads,
block uploads and batch deletes go through obstore and their listings, commits (conditional
puts) and small writes through adlfs - both retrying as object_store does (``io.retries``:
with azure-storage-blob's own policy each fault cost a job ~18 s). Judged as the S3 runs
(``tests/faults/proxy.py``): 0 rows lost, no orphan reported as committed, a failed job leaves
the latest version as it was. Seed 0 of three jobs by default; ``-m slow``: every job, seeds
0..``PROXY_FAULT_SEEDS``/2."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.proxy import PROXY_RUNNERS, AzureTarget, run_proxy_scenario
from tests.gcs_azure.conftest import Azure, azure, azurite_endpoint  # noqa: F401 - fixtures
from tests.support.azurite import AZURITE_ACCOUNT
from tests.support.latency_store import LatencyProxy

JOBS = sorted(PROXY_RUNNERS)
DEFAULT = ("compact", "create_index", "vacuum")
SEEDS = int(os.environ.get("PROXY_FAULT_SEEDS", "6")) // 2


@pytest.fixture
def slow_azure(azure: Azure) -> Iterator[AzureTarget]:  # noqa: F811 - the fixture
    """A fresh container behind its own proxy, 2 ms a request, stopped after the test."""
    with LatencyProxy(azure.endpoint, delay_ms=2) as proxy:
        yield AzureTarget(azure, Azure(f"{proxy.endpoint}/{AZURITE_ACCOUNT}", azure.container), proxy)


@pytest.mark.parametrize("job", DEFAULT)
def test_azure_proxy_fault(job: str, tmp_path: Path, slow_azure: AzureTarget) -> None:
    bad = run_proxy_scenario(job, 0, tmp_path, slow_azure)
    assert not bad, "\n".join(bad)


@pytest.mark.slow
@pytest.mark.parametrize(("job", "seed"), [(j, s) for j in JOBS for s in range(SEEDS + 1)
                                           if s or j not in DEFAULT])
def test_azure_proxy_fault_slow(job: str, seed: int, tmp_path: Path, slow_azure: AzureTarget) -> None:
    bad = run_proxy_scenario(job, seed, tmp_path, slow_azure)
    assert not bad, "\n".join(bad)


# the commit's manifest PUT reset after it landed: the job must find its own manifest or say
# CommitStateUnknown, and delete none of its files either way
COMMIT_LANDED = [{"kind": "reset", "count": 1, "ops": ["PUT"], "path_contains": "/_versions/",
                  "forward": True}]


@pytest.mark.parametrize("job", ["add_columns", "compact"])
def test_azure_commit_reset_after_it_landed(job: str, tmp_path: Path, slow_azure: AzureTarget) -> None:
    bad = run_proxy_scenario(job, 0, tmp_path, slow_azure, faults=COMMIT_LANDED, fired_at_least=1)
    assert not bad, "\n".join(bad)
