"""Every job script run with ``spark-submit --master spark://127.0.0.1:PORT`` against a real
standalone master + worker: the master's ``/json`` page must list the application as completed,
and pylance checks the dataset afterwards."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pytest

from tests.spark.datasets import rows_multiset, small_fragments

pytestmark = pytest.mark.cluster

JOBS = Path(__file__).resolve().parents[2] / "jobs"
COLUMNS = ["id", "f", "s", "l"]


def _run(cluster, script: str, *args: str) -> dict:
    """Submit a job, check it ran on the cluster, return its metrics (the last output line)."""
    before = {a["id"] for a in cluster.state().get("completedapps", [])}
    t0 = time.monotonic()
    done = cluster.submit(str(JOBS / script), *args)
    print(f"spark-submit {script}: {time.monotonic() - t0:.1f} s")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    deadline = time.monotonic() + 30
    while True:  # the master files the application as completed shortly after it stops
        new = [a for a in cluster.state().get("completedapps", []) if a["id"] not in before]
        if new or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    assert len(new) == 1, f"no new completed application on the master: {cluster.state()}"
    # spark-submit names the application (the script, unless --name): the job keeps that name
    assert new[0]["state"] == "FINISHED" and new[0]["name"] == script, new[0]
    assert new[0]["cores"] >= 1
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_compact_job(standalone, tmp_path: Path) -> None:
    import lance

    uri = str(tmp_path / "ds")
    small_fragments(uri, "2.1", fragments=6, rows=300)
    before = lance.dataset(uri)
    expected = rows_multiset(before.to_table(columns=COLUMNS), COLUMNS)
    metrics = _run(standalone, "compact.py", uri, "--target-rows-per-fragment", "100000")
    after = lance.dataset(uri)
    assert after.version > before.version and metrics["new_version"] == after.version
    assert len(after.get_fragments()) == 1 and len(before.get_fragments()) == 6
    assert rows_multiset(after.to_table(columns=COLUMNS), COLUMNS) == expected


@pytest.mark.slow  # same task path as compact (run_tasks); each spark-submit costs 15-60 s here
def test_materialize_deletions_job(standalone, tmp_path: Path) -> None:
    import lance

    uri = str(tmp_path / "ds")
    small_fragments(uri, "2.2", fragments=3, rows=400)
    before = lance.dataset(uri)
    assert all(f.metadata.deletion_file is not None for f in before.get_fragments())
    expected = rows_multiset(before.to_table(columns=COLUMNS), COLUMNS)
    _run(standalone, "materialize_deletions.py", uri)
    after = lance.dataset(uri)
    assert after.version > before.version
    assert all(f.metadata.deletion_file is None for f in after.get_fragments())
    assert rows_multiset(after.to_table(columns=COLUMNS), COLUMNS) == expected


def test_add_columns_job(standalone, tmp_path: Path) -> None:
    import lance

    uri = str(tmp_path / "ds")
    small_fragments(uri, "2.1", fragments=3, rows=300)
    _run(standalone, "add_columns.py", uri, "--column", "twice=id * 2", "--column", "tag=upper(s)")
    got = lance.dataset(uri).to_table(columns=["id", "s", "twice", "tag"])
    assert got.num_rows == lance.dataset(uri).count_rows() > 0
    assert got.column("twice").to_pylist() == pc.multiply(got.column("id"), 2).to_pylist()
    assert got.column("tag").to_pylist() == pc.utf8_upper(got.column("s")).to_pylist()


@pytest.mark.slow  # also run over Connect in the default suite (test_connect)
def test_rebuild_row_id_index_job(standalone, tmp_path: Path) -> None:
    import lance

    from lance_spark_ops.row_id_index import lookup

    uri = str(tmp_path / "ds")
    small_fragments(uri, "2.1", stable=True, fragments=4, rows=300)
    _run(standalone, "rebuild_row_id_index.py", uri)
    truth = lance.dataset(uri).to_table(columns=["id"], with_row_id=True, with_row_address=True)
    addrs = lookup(uri, truth.column("_rowid"))
    assert np.array_equal(addrs, truth.column("_rowaddr").to_numpy())
