"""Vacuum on Spark (listing, manifest reading and deletes as tasks) and the jobs/vacuum.py CLI."""

from __future__ import annotations

import importlib.util
import json
from datetime import timedelta
from pathlib import Path

import pytest

from lance_spark_ops.spark.runtime.tuning import Tuning
from tests.vacuum.helpers import files, twin
from tests.vacuum.test_vacuum import _rows, compare, template  # noqa: F401 - fixture

lance = pytest.importorskip("lance")


def _job():
    path = Path(__file__).resolve().parents[2] / "jobs" / "vacuum.py"
    spec = importlib.util.spec_from_file_location("job_vacuum", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("inline", [True, False], ids=["one-spark-job", "waves"])
def test_spark_same_as_pylance(spark, template: Path, tmp_path: Path,  # noqa: F811
                               monkeypatch: pytest.MonkeyPatch, inline: bool) -> None:
    # small batches so manifests and deletes really spread over several tasks; in one Spark job
    # each, or a Spark job per task (as a job's past Tuning.task_inline_bytes run in waves)
    tuning = Tuning(manifests_per_task=3, deletes_per_task=4, driver_manifests=0, driver_prefixes=0,
                    driver_deletes=0, **({} if inline else {"task_inline_bytes": 0}))  # none on the driver
    removed, m = compare(template, tmp_path, spark=spark, older_than=timedelta(0),
                         error_if_tagged_old_versions=False, delete_unverified=True, tuning=tuning)
    assert m.old_versions >= 6 and len(removed) > 8


def test_cli(spark, template: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:  # noqa: F811
    job = _job()
    ours = twin(template, tmp_path / "ours")
    before = files(ours)
    args = [str(ours), "--older-than", "0s", "--error-if-tagged-old-versions", "false"]
    assert job.main([*args, "--dry-run"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    dry = json.loads(out[-1])
    would = {line.removeprefix("would remove ") for line in out[:-1]}
    assert files(ours) == before and dry["dry_run"] and dry["old_versions"] > 0
    theirs = twin(template, tmp_path / "theirs")
    stats = lance.dataset(str(theirs)).cleanup_old_versions(older_than=timedelta(0),
                                                             error_if_tagged_old_versions=False)
    assert job.main(args) == 0
    real = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(before) - set(files(ours)) == would == set(before) - set(files(theirs))
    assert real["bytes_removed"] == stats.bytes_removed == dry["bytes_removed"]
    assert _rows(ours) == _rows(theirs)
    # the tagged old version makes the default refuse (exit 1); bad durations are usage errors (2)
    again = twin(template, tmp_path / "again")
    assert job.main([str(again), "--older-than", "0s"]) == 1
    assert "tagged" in json.loads(capsys.readouterr().out.strip().splitlines()[-1])["error"]["message"]
    for bad in ("14", "3 days", "1y"):
        assert job.main([str(ours), "--older-than", bad]) == 2
        assert "duration" in capsys.readouterr().err
        assert job.main([str(ours), "--unverified-older-than", bad]) == 2
        assert "duration" in capsys.readouterr().err
