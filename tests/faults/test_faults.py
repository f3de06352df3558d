"""Fault injection over every job (issue #15): transient and ambiguous object-store failures,
concurrent pylance writers, killed drivers and killed Python workers; the invariants of
``model.check`` must hold after every run. A few seeds run by default; ``-m slow`` runs the
full count (``FAULT_SEEDS`` / ``FAULT_SPARK_SEEDS`` scale it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lance_spark_ops.spark.runtime.tuning import Tuning
from tests.faults.runners import RUNNERS
from tests.faults.runners_write import SESSION
from tests.faults.scenarios import IN_PROCESS, run_scenario

JOBS = sorted(RUNNERS)
# issue #15's last three and the index jobs (#27): more default seeds
NEW_JOBS = ["datasource", "import_delta", "remap_indices",
            *(j for j in ("create_index", "optimize_indices") if j in RUNNERS)]
SEEDS = int(os.environ.get("FAULT_SEEDS", "40"))
SPARK_SEEDS = int(os.environ.get("FAULT_SPARK_SEEDS", "3"))


@pytest.fixture(autouse=True)
def _session_for_datasource(request: pytest.FixtureRequest) -> None:
    """The data-source runner's in-process writes need the session fixture (only it asks)."""
    params = getattr(getattr(request.node, "callspec", None), "params", {})
    if params.get("job") == "datasource" and params.get("fault") in IN_PROCESS:
        SESSION["spark"] = request.getfixturevalue("spark")


def _run(job: str, fault: str, seed: int, tmp_path: Path, tuning: Tuning | None = None) -> None:
    bad = run_scenario(job, fault, seed, tmp_path, tuning)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("fault", IN_PROCESS)
@pytest.mark.parametrize("job", JOBS)
def test_in_process_fault(job: str, fault: str, tmp_path: Path) -> None:
    _run(job, fault, 0, tmp_path)


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("fault", IN_PROCESS)
@pytest.mark.parametrize("job", NEW_JOBS)
def test_in_process_fault_more_seeds(job: str, fault: str, seed: int, tmp_path: Path) -> None:
    _run(job, fault, seed, tmp_path)


@pytest.mark.parametrize("fault", IN_PROCESS)
@pytest.mark.parametrize("job", [j for j in ("create_vector_index", "optimize_vector_indices")
                                 if j in RUNNERS])
def test_in_process_fault_ivf_rq(job: str, fault: str, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The vector jobs under the faults with IVF_RQ (issue #37)."""
    from tests.faults import runners_vector

    monkeypatch.setattr(runners_vector, "KINDS", ("IVF_RQ",))
    _run(job, fault, 0, tmp_path)


@pytest.mark.spark
@pytest.mark.parametrize(("job", "fault"), [("compact", "driver_kill"), ("add_columns", "worker_kill"),
                                            *(("optimize_indices", "worker_kill") for _ in
                                              ("optimize_indices",) if _ in RUNNERS),
                                            *(("create_vector_index", "worker_kill") for _ in
                                              ("create_vector_index",) if _ in RUNNERS)])
def test_spark_submit_fault(job: str, fault: str, tmp_path: Path) -> None:
    _run(job, fault, 0, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1, SEEDS + 1))
@pytest.mark.parametrize("fault", IN_PROCESS)
@pytest.mark.parametrize("job", JOBS)
def test_in_process_fault_slow(job: str, fault: str, seed: int, tmp_path: Path) -> None:
    _run(job, fault, seed, tmp_path)


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.parametrize("seed", range(1, SPARK_SEEDS + 1))
@pytest.mark.parametrize("fault", ["driver_kill", "worker_kill"])
@pytest.mark.parametrize("job", JOBS)
def test_spark_submit_fault_slow(job: str, fault: str, seed: int, tmp_path: Path) -> None:
    _run(job, fault, seed, tmp_path)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("fault", IN_PROCESS)
@pytest.mark.parametrize("job", [j for j in ("create_index", "optimize_indices") if j in RUNNERS])
def test_in_process_fault_btree_range_merge(job: str, fault: str, seed: int, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """BTREE's range merge (parts -> value-range tasks -> a finish task) under the faults: its
    thresholds lowered so the small fault datasets take that path whenever a BTREE is built."""
    from lance_spark_ops.spark.indices import scalar_index

    monkeypatch.setattr(scalar_index, "_range_merge", _counting(scalar_index._range_merge))
    _run(job, fault, seed, tmp_path, Tuning(range_merge_rows=1, range_rows=256))


def _counting(fn):  # noqa: ANN001, ANN202 - a test spy
    """``fn`` wrapped to print whether the range path wrote the segment (visible with -s)."""
    def wrapped(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        out = fn(*args, **kwargs)
        print("RANGE_MERGE", "used" if out is not None else "declined")
        return out
    return wrapped
