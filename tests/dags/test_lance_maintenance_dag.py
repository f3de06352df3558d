"""The Airflow DAG ``dags/lance_maintenance.py``, run with ``dag.test`` in ``.venv-airflow``
(made by ``.ci/airflow-setup``, which ``.ci/run`` calls) against a local Spark master: a run
that validates and maintains a pylance-made dataset with MINHASHLSH and IVF_RQ indices (checked
with pylance), and a run whose compaction exits 2, failing its task (no retry) and the tasks after
it, with the exit code in the log."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from tests.spark.datasets import rows_multiset, small_fragments

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-airflow"
COLUMNS = ["id", "f", "s"]

pytestmark = [
    pytest.mark.skipif(not (VENV / "bin" / "python").exists(),
                       reason="no .venv-airflow: run .ci/airflow-setup (.ci/run does)"),
    pytest.mark.spark,
]


def airflow_env(home: Path) -> dict[str, str]:
    """Airflow with its home (SQLite metadata DB) in ``home``, no example DAGs, the Spark
    connection pointing at a local master, and spark-submit / the jobs' Python from the venv."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "SPARK_", "PYSPARK_"))}
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "PATH": f"{VENV / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYSPARK_PYTHON": str(VENV / "bin" / "python"),
    })
    return env


def test_dag_runs_the_jobs(tmp_path: Path) -> None:
    import lance

    uri = str(tmp_path / "ds")
    small_fragments(uri, "2.1", fragments=4, rows=100)
    # the newest index types ride along: a compaction keeps them answering, optimize_indices
    # indexes the appended rows (checked with pylance's index_stats below)
    ds = lance.dataset(uri)
    ds.add_columns({"v8": "arrow_cast(make_array(f, f, f, f, f, f, f, f), 'FixedSizeList(8, Float32)')"})
    ds.create_scalar_index("s", "MINHASHLSH", name="m")
    ds.create_index("v8", "IVF_RQ", num_partitions=2, name="vq")
    extra = ds.to_table(limit=50)
    extra = extra.set_column(0, "id", pa.array(np.arange(900_000, 900_050, dtype=np.int64)))
    lance.write_dataset(extra, uri, mode="append")
    before = lance.dataset(uri)
    expected = rows_multiset(before.to_table(columns=COLUMNS), COLUMNS)
    confs = [{"uri": uri, "target_rows_per_fragment": 1000, "older_than": "0s"},
             {"uri": uri, "commit_every": 0}]
    proc = subprocess.run([str(VENV / "bin" / "python"), str(ROOT / "tests" / "dags" / "run_dag.py"),
                           str(ROOT / "dags" / "lance_maintenance.py"), json.dumps(confs)],
                          env=airflow_env(tmp_path / "airflow"), capture_output=True, text=True, timeout=900)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-5000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    jobs = ["validate", "compact", "materialize_deletions", "optimize_indices", "rebuild_row_id_index",
            "vacuum"]
    ok, failed = result["runs"]
    assert ok == dict.fromkeys(jobs, "success"), log[-5000:]

    after = lance.dataset(uri)
    assert after.version > before.version
    # the four indexed fragments become one; the unindexed append is not binned with them (pylance's plan)
    assert len(after.get_fragments()) == 2 < len(before.get_fragments())
    assert all(f.deletion_file() is None for f in after.get_fragments())
    assert rows_multiset(after.to_table(columns=COLUMNS), COLUMNS) == expected
    assert [v["version"] for v in after.versions()] == [after.version]  # vacuum --older-than 0s
    for name in ("m", "vq"):
        stats = after.stats.index_stats(name)
        assert (stats["num_indexed_rows"], stats["num_unindexed_rows"]) == (after.count_rows(), 0), stats

    assert failed == {"validate": "success", "compact": "failed",
                      **dict.fromkeys(jobs[2:], "upstream_failed")}, log[-5000:]
    assert "lance job compact exited with code 2: bad usage or option values" in log
    assert "commit_every must be positive" in log
    assert lance.dataset(uri).version == after.version
    print(json.dumps(result["seconds"]))  # shown with -s: the DB migration and the whole run
