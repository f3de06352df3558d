"""The driver's manifest handed to its tasks (``scan_tasks.ship`` / ``receive``): a task's
``open_dataset`` parses the shipped bytes instead of reading the file, gets the version the
driver read, and never takes them for another version or a table replaced at the same URI."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

from lance_spark_ops.errors import NotFoundError
from lance_spark_ops.spark.runtime.job import Job
from lance_spark_ops.spark.runtime.scan_tasks import open_dataset, receive, ship
from lance_spark_ops.spark.runtime.tuning import Tuning
from lance_spark_ops.table import dataset as dataset_module
from lance_spark_ops.table.dataset import Dataset

lance = pytest.importorskip("lance")


def _write(uri: str, n: int = 300, start: int = 0, mode: str = "create") -> None:
    lance.write_dataset(pa.table({"id": pa.array(range(start, start + n), pa.int64())}), uri, mode=mode,
                        max_rows_per_file=100)


def _hide_manifests(uri: str) -> None:
    """Move the manifests away: an open that reads one now fails."""
    versions = Path(uri, "_versions")
    versions.rename(Path(uri, "_versions_away"))
    versions.mkdir()


def test_open_dataset_parses_what_was_shipped(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _write(uri)
    ds = Dataset.open(uri)
    shipped = ship(ds)
    assert shipped is not None and shipped.data == Path(uri, ds.manifest_path).read_bytes()
    assert "data=" not in repr(shipped) and "key=" not in repr(shipped)  # options hold secrets
    _hide_manifests(uri)
    with pytest.raises(NotFoundError):  # not shipped: read, and gone
        open_dataset(uri, ds.version, {}, ds.timestamp)
    receive([shipped])
    got = open_dataset(uri, ds.version, {}, ds.timestamp)
    assert got.version == ds.version and got.timestamp == ds.timestamp
    assert [f.id for f in got.fragments] == [f.id for f in ds.fragments]
    assert got.to_table().equals(ds.to_table())


def test_shipped_manifest_is_not_taken_for_a_replaced_table(tmp_path: Path) -> None:
    """The table written again at the same URI (same version number, other rows): a task planned
    on the new one (its commit time) does not parse the old bytes."""
    import shutil

    uri = str(tmp_path / "t")
    _write(uri)
    old = Dataset.open(uri)
    receive([ship(old)])
    shutil.rmtree(uri)
    _write(uri, n=50, start=1000)
    new = Dataset.open(uri)
    assert new.version == old.version and new.timestamp != old.timestamp
    got = open_dataset(uri, new.version, {}, new.timestamp)
    assert got.to_table().column("id").to_pylist() == list(range(1000, 1050))


def test_large_manifests_are_not_shipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = str(tmp_path / "t")
    _write(uri)
    size = os.path.getsize(Path(uri, Dataset.open(uri).manifest_path))
    monkeypatch.setattr(dataset_module, "SHIPPED_MANIFEST_BYTES", size - 1)
    assert ship(Dataset.open(uri)) is None
    monkeypatch.setattr(dataset_module, "SHIPPED_MANIFEST_BYTES", size)
    assert ship(Dataset.open(uri)) is not None


def test_a_job_ships_what_fits_its_budget(tmp_path: Path) -> None:
    """Newest version first, up to ``slice_inline_job_bytes`` in all (every task's closure
    carries them)."""
    uri = str(tmp_path / "t")
    _write(uri)
    _write(uri, mode="append", start=300)
    v1, v2 = Dataset.open(uri, 1), Dataset.open(uri, 2)
    n1, n2 = len(v1.manifest_bytes or b""), len(v2.manifest_bytes or b"")
    with Job(None, "test", uri, tuning=Tuning(slice_inline_job_bytes=n1 + n2)) as job:
        job.opened(v1), job.opened(v2)
        assert [s.path for s in job._shipped()] == [v2.manifest_path, v1.manifest_path]
    with Job(None, "test", uri, tuning=Tuning(slice_inline_job_bytes=n2)) as job:
        job.opened(v1), job.opened(v2)
        assert [s.path for s in job._shipped()] == [v2.manifest_path]


def test_tasks_of_a_job_read_no_manifest(tmp_path: Path) -> None:
    """``Job.run_tasks`` hands the job's open to its tasks (here in this process)."""
    uri = str(tmp_path / "t")
    _write(uri)
    ds = Dataset.open(uri)
    _hide_manifests(uri)

    def task(_: int, ctx: object) -> int:
        return open_dataset(uri, ds.version, {}, ds.timestamp).count_rows()

    with Job(None, "test", uri) as job:
        job.opened(ds)
        assert job.run_tasks([0, 1], task) == [300, 300]


def test_a_committed_version_keeps_the_bytes_it_wrote(tmp_path: Path) -> None:
    """``Dataset.from_commit`` holds the manifest file the commit wrote, byte for byte, so the
    next phase's tasks (the row-id lookup over the version just committed) parse it too."""
    from lance_spark_ops.table.format.transaction import Delete

    uri = str(tmp_path / "t")
    _write(uri)
    ds = Dataset.open(uri)
    new = ds.commit(Delete([], [ds.fragments[0].id], "id < 100"))
    assert new.manifest_bytes == Path(uri, new.manifest_path).read_bytes()
    assert lance.dataset(uri).count_rows() == 200
