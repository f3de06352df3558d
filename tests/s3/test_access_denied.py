"""A store that refuses access, through the latency proxy's 403 AccessDenied answers and with
no credentials at all: every job fails with ``AccessDeniedError`` naming the object (exit code
8), and the dataset stays as it was - pylance reads the same version and rows. A refused
commit is the exception: its outcome is unknown (see ``test_commit_refused``)."""

from __future__ import annotations

import pytest

from lance_spark_ops.errors import AccessDeniedError, CommitStateUnknown
from lance_spark_ops.spark import compact
from lance_spark_ops.spark.runtime.cli import EXIT_ACCESS, exit_code
from lance_spark_ops.spark.runtime.tuning import Tuning
from lance_spark_ops.table.dataset import Dataset
from tests.s3.conftest import SlowS3
from tests.s3.test_compact_in_driver import _after, _dataset

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("where", ["driver", "tasks"])
def test_reads_refused(spark, slow_s3: SlowS3, where: str) -> None:
    """Every GET of a data file answered 403: the compaction in the driver, or in Spark tasks
    (the error pickled back from the executor), fails typed; nothing is committed."""
    uri, expected = _dataset(slow_s3, f"denied-read-{where}.lance")
    version = _after(slow_s3, uri).version
    slow_s3.proxy.inject("accessdenied", count=10_000, ops=["GET"], path_contains="/data/")
    tuning = Tuning(driver_rewrite_bytes=1 << 30) if where == "driver" else Tuning(driver_rewrite_bytes=0)
    with pytest.raises(AccessDeniedError, match=r"refused: PermissionError") as info:
        compact(spark, uri, target_rows_per_fragment=4_000, storage_options=slow_s3.options, tuning=tuning)
    assert "/data/" in str(info.value.path) and exit_code(info.value) == EXIT_ACCESS
    assert slow_s3.proxy.stats()["faults"]["accessdenied"] >= 1
    after = _after(slow_s3, uri)
    assert after.version == version and after.to_table().sort_by("id").equals(expected)


def test_commit_refused(spark, slow_s3: SlowS3) -> None:
    """The manifest's conditional put answered 403 (the data files were written). An earlier
    try of the same put (a client retry after a dropped answer) could still land, and the
    manifest is absent on a read-back, so the outcome is unknown: CommitStateUnknown naming the
    refusal, and the job's files are kept (never deleted while a commit may land)."""
    uri, expected = _dataset(slow_s3, "denied-commit.lance")
    version = _after(slow_s3, uri).version
    files_before = _data_keys(slow_s3, uri)
    slow_s3.proxy.inject("accessdenied", count=10_000, ops=["PUT"], path_contains="/_versions/")
    with pytest.raises(CommitStateUnknown, match=r"conditional put refused: PermissionError"):
        compact(spark, uri, target_rows_per_fragment=4_000, storage_options=slow_s3.options,
                tuning=Tuning(driver_rewrite_bytes=1 << 30))
    after = _after(slow_s3, uri)
    assert after.version == version and after.to_table().sort_by("id").equals(expected)
    assert _data_keys(slow_s3, uri) > files_before  # the rewritten files are still there


def _data_keys(slow: SlowS3, uri: str) -> set[str]:
    prefix = uri.split("/", 3)[3] + "/data/"
    listed = slow.direct.client().list_objects_v2(Bucket=slow.direct.bucket, Prefix=prefix)
    return {k["Key"] for k in listed.get("Contents", [])}


def test_no_credentials(slow_s3: SlowS3, monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """No key in the options, the environment or a profile: botocore finds no credentials and
    the open fails typed before any request."""
    uri, _ = _dataset(slow_s3, "no-credentials.lance")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance-metadata lookup
    options = {k: v for k, v in slow_s3.options.items()
               if k not in ("aws_access_key_id", "aws_secret_access_key")}
    slow_s3.proxy.reset()
    with pytest.raises(AccessDeniedError, match="NoCredentialsError") as info:
        Dataset.open(uri, storage_options=options)
    assert exit_code(info.value) == EXIT_ACCESS
    assert slow_s3.proxy.stats()["total"] == 0


def test_writes_refused(spark, slow_s3: SlowS3) -> None:
    """Every upload of a data file answered 403 (obstore's multipart and single puts): the task
    fails typed, and nothing is committed."""
    uri, expected = _dataset(slow_s3, "denied-write.lance")
    version = _after(slow_s3, uri).version
    slow_s3.proxy.inject("accessdenied", count=10_000, ops=["PUT", "CREATE_MPU", "PUT_PART"],
                         path_contains="/data/")
    with pytest.raises(AccessDeniedError, match=r"write refused: PermissionDeniedError") as info:
        compact(spark, uri, target_rows_per_fragment=4_000, storage_options=slow_s3.options,
                tuning=Tuning(driver_rewrite_bytes=0))
    assert "/data/" in str(info.value.path) and exit_code(info.value) == EXIT_ACCESS
    after = _after(slow_s3, uri)
    assert after.version == version and after.to_table().sort_by("id").equals(expected)


def test_vacuum_deletes_refused(spark, slow_s3: SlowS3, monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    """``jobs/vacuum.py`` whose every delete is answered 403: the failed deletes are reported
    (each old manifest kept, as for any failed delete) and the job exits 8, not 1 - a retry
    would be refused again. The latest version reads as before."""
    import json

    from tests.jobs.test_jobs import load_job

    uri, expected = _dataset(slow_s3, "denied-vacuum.lance")
    version = _after(slow_s3, uri).version
    monkeypatch.setenv("LSO_STORAGE_OPTIONS", json.dumps(slow_s3.options))
    slow_s3.proxy.inject("accessdenied", count=10_000, ops=["DELETE_OBJECTS", "DELETE"])
    assert load_job("vacuum").main([uri, "--older-than", "0s"]) == EXIT_ACCESS
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["failed_deletes"] >= 1, last
    assert all("AccessDenied" in err for _, err in last["failures"]), last["failures"]
    after = _after(slow_s3, uri)
    assert after.version == version and after.to_table().sort_by("id").equals(expected)
    assert len(after.versions()) == version  # nothing removed


def test_validate_refused_is_not_a_finding(slow_s3: SlowS3) -> None:
    """``validate`` whose reads of data and deletion files are refused: the store's refusal,
    not findings about the table (which would say "inconsistent", exit 7); unrefused, the same
    table validates clean."""
    from lance_spark_ops.spark import validate

    uri, _ = _dataset(slow_s3, "denied-validate.lance")
    assert validate(None, uri, storage_options=slow_s3.options).consistent
    slow_s3.proxy.inject("accessdenied", count=10_000, ops=["GET", "HEAD"], path_contains="/data/")
    slow_s3.proxy.inject("accessdenied", count=10_000, ops=["GET", "HEAD"], path_contains="/_deletions/")
    with pytest.raises(AccessDeniedError) as info:
        validate(None, uri, storage_options=slow_s3.options)
    assert exit_code(info.value) == EXIT_ACCESS
