"""The fault harness over the latency proxy (``tests/faults/proxy.py``): every job on S3 under
503 SlowDown, held requests and resets before / after the server acted, judged by
``model.check`` and the runners' post-checks through pylance. Seed 0 of four jobs by default (each
job's seed draws its own mix of faults); ``-m slow`` runs ``PROXY_FAULT_SEEDS`` (default 6) more
per job and seed 0 of the rest; a run in four also meets a storm its retries cannot all absorb."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.faults.proxy import PROXY_RUNNERS, STORM_OPTIONS, S3Target, run_proxy_scenario
from tests.s3.conftest import SlowS3, latency_proxy, moto_endpoint, s3, slow_s3  # noqa: F401 - fixtures

JOBS = sorted(PROXY_RUNNERS)
# seed 0 of these in the default suite: between them a commit PUT reset after it landed, held
# requests and listings, 503s and resets of reads (the others' seed 0 runs under -m slow)
DEFAULT = ("materialize_deletions", "optimize_indices", "remap_indices", "vacuum")
SEEDS = int(os.environ.get("PROXY_FAULT_SEEDS", "6"))


def _run(job: str, seed: int, tmp_path: Path, slow: SlowS3) -> None:
    bad = run_proxy_scenario(job, seed, tmp_path, S3Target(slow))
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("job", DEFAULT)
def test_proxy_fault(job: str, tmp_path: Path, slow_s3: SlowS3) -> None:  # noqa: F811 - the fixture
    _run(job, 0, tmp_path, slow_s3)


@pytest.mark.slow
@pytest.mark.parametrize(("job", "seed"), [(j, s) for j in JOBS for s in range(SEEDS + 1)
                                           if s or j not in DEFAULT])
def test_proxy_fault_slow(job: str, seed: int, tmp_path: Path, slow_s3: SlowS3) -> None:  # noqa: F811
    _run(job, seed, tmp_path, slow_s3)


# the commit's manifest PUT reset after it landed: the client cannot know; the job must find its
# own manifest (success) or say CommitStateUnknown, and delete none of its files either way
COMMIT_LANDED = [{"kind": "reset", "count": 1, "ops": ["PUT"], "path_contains": "/_versions/",
                  "forward": True}]


@pytest.mark.parametrize("job", ["add_columns", "create_vector_index"])
def test_commit_reset_after_it_landed(job: str, tmp_path: Path, slow_s3: SlowS3) -> None:  # noqa: F811
    bad = run_proxy_scenario(job, 0, tmp_path, S3Target(slow_s3), faults=COMMIT_LANDED, fired_at_least=1)
    assert not bad, "\n".join(bad)


@pytest.mark.slow
@pytest.mark.parametrize("job", [j for j in JOBS if j != "vacuum"])  # vacuum commits nothing
def test_commit_reset_after_it_landed_every_job(job: str, tmp_path: Path, slow_s3: SlowS3) -> None:  # noqa: F811
    bad = run_proxy_scenario(job, 0, tmp_path, S3Target(slow_s3), faults=COMMIT_LANDED, fired_at_least=1)
    assert not bad, "\n".join(bad)


# S3's 503 SlowDown on the commit's manifest PUT, more times than the client's own retries absorb
# (botocore's cut to one retry, as in a storm: 2 tries in each of s3fs's 5, so the first put sees
# 10): S3 said it stored nothing, so the commit is no CommitStateUnknown but retried after a
# backoff, and lands
COMMIT_REFUSED = [{"kind": "slowdown", "count": 12, "ops": ["PUT"], "path_contains": "/_versions/"}]


@pytest.mark.parametrize("job", ["add_columns", "compact"])
def test_commit_refused_by_slowdown_is_retried(job: str, tmp_path: Path, slow_s3: SlowS3) -> None:  # noqa: F811
    bad = run_proxy_scenario(job, 0, tmp_path, S3Target(slow_s3), faults=COMMIT_REFUSED, fired_at_least=12,
                             options=STORM_OPTIONS, must_commit=True)
    assert not bad, "\n".join(bad)


# every try of a data file's upload reset before it reached the server (botocore's two tries; s3fs
# does not retry a connection error): the job fails with a LanceError naming the file (it raised botocore's
# EndpointConnectionError / s3fs's OSError before), and the dataset is as it was
UPLOAD_LOST = [{"kind": "reset", "count": 40, "ops": ["PUT"], "path_contains": "/data/"}]


def test_failed_upload_is_a_typed_error(tmp_path: Path, slow_s3: SlowS3) -> None:  # noqa: F811
    bad = run_proxy_scenario("materialize_deletions", 0, tmp_path, S3Target(slow_s3), faults=UPLOAD_LOST,
                             fired_at_least=2, options=STORM_OPTIONS, must_fail=True)
    assert not bad, "\n".join(bad)
