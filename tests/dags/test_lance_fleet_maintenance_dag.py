"""The Airflow DAG ``dags/lance_fleet_maintenance.py``, run with ``dag.test`` in ``.venv-airflow``
against a local Spark master: it maintains a directory namespace's tables by a policy
(checked with pylance), and a bad policy fails its task without a retry."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.dags.test_lance_maintenance_dag import ROOT, VENV, airflow_env

pytestmark = [
    pytest.mark.skipif(not (VENV / "bin" / "python").exists(),
                       reason="no .venv-airflow: run .ci/airflow-setup (.ci/run does)"),
    pytest.mark.spark,
]


def test_fleet_dag_maintains_a_namespace(tmp_path: Path) -> None:
    import lance
    import lance.namespace
    import pyarrow as pa

    root = str(tmp_path / "lake")
    ns = lance.namespace.DirectoryNamespace(root=root)
    data = pa.table({"id": pa.array(range(1200), pa.int64())})
    ds = lance.write_dataset(data, namespace_client=ns, table_id=["small"], max_rows_per_file=100)
    policy = tmp_path / "policy.toml"
    policy.write_text("target_rows_per_fragment = 1000\ncompact_min_small_fragments = 4\n")
    bad = tmp_path / "bad.toml"
    bad.write_text("no_such_key = 1\n")
    common = {"namespace_impl": "dir", "namespace_properties": {"root": root}, "report": str(tmp_path / "r")}
    confs = [{**common, "policy": str(policy)}, {**common, "policy": str(bad)}]
    proc = subprocess.run([str(VENV / "bin" / "python"), str(ROOT / "tests" / "dags" / "run_dag.py"),
                           str(ROOT / "dags" / "lance_fleet_maintenance.py"), json.dumps(confs)],
                          env=airflow_env(tmp_path / "airflow"), capture_output=True, text=True, timeout=900)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-5000:]
    ok, failed = json.loads(proc.stdout.strip().splitlines()[-1])["runs"]
    assert ok == {"maintain": "success"} and failed == {"maintain": "failed"}, log[-5000:]
    after = lance.dataset(ds.uri)
    assert len(after.get_fragments()) < 12 and after.to_table().sort_by("id").equals(data)
    assert "lance maintain exited with code 2" in log
    assert (tmp_path / "r" / "index.html").exists()
