"""import_delta: Delta tables made by deltalake become Lance datasets holding exactly the rows
delta-rs reads (pylance is the reader of our result; compared sorted)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from lance_spark_ops.errors import InvalidInputError, SchemaError, UnsupportedError
from lance_spark_ops.spark.files.delta_import import import_delta
from tests.delta.deltas import add_inline_deletion_vector, history_table, rows

pytest.importorskip("deltalake")


def _pylance(uri: str) -> pa.Table:
    import lance

    return lance.dataset(uri).to_table()


def _same(lance_rows: pa.Table, delta_rows: pa.Table) -> None:
    assert lance_rows.schema.equals(delta_rows.schema), (lance_rows.schema, delta_rows.schema)
    assert lance_rows.sort_by("id").equals(delta_rows.sort_by("id"))


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> str:
    uri = str(tmp_path_factory.mktemp("delta") / "history")
    history_table(uri)
    return uri


@pytest.mark.parametrize("version", ["2.0", "2.2"])
def test_history_imported(history: str, tmp_path: Path, version: str) -> None:
    from deltalake import DeltaTable

    expected = DeltaTable(history).to_pyarrow_table()
    assert "x" in expected.column_names and expected.num_rows > 500
    m = import_delta(None, history, str(tmp_path / "ds"), data_storage_version=version, max_rows_per_file=200,
                     rows_per_task=250)
    assert m.new_version == 1 and m.rows == expected.num_rows
    assert m.delta_version == DeltaTable(history).version()
    assert m.tasks > 1 and m.lance_files >= 3
    _same(_pylance(str(tmp_path / "ds")), expected)
    import lance

    assert lance.dataset(str(tmp_path / "ds")).data_storage_version == version


def test_modes(history: str, tmp_path: Path) -> None:
    from deltalake import DeltaTable

    expected = DeltaTable(history).to_pyarrow_table()
    uri = str(tmp_path / "ds")
    assert import_delta(None, history, uri, "append").new_version == 1  # append creates
    with pytest.raises(InvalidInputError, match="already exists"):
        import_delta(None, history, uri)
    assert import_delta(None, history, uri, "append").new_version == 2
    _same(_pylance(uri), pa.concat_tables([expected, expected]))
    assert import_delta(None, history, uri, "overwrite").new_version == 3
    _same(_pylance(uri), expected)
    other = str(tmp_path / "other")
    from deltalake import write_deltalake

    write_deltalake(other, rows(0, 10))
    files = sorted((tmp_path / "ds" / "data").iterdir())
    with pytest.raises(SchemaError):
        import_delta(None, other, uri, "append")  # no column x
    assert sorted((tmp_path / "ds" / "data").iterdir()) == files


def test_column_mapping_struct_and_deletion_vectors(tmp_path: Path) -> None:
    from deltalake import DeltaTable, write_deltalake

    uri = str(tmp_path / "dv")
    data = rows(0, 60).append_column("st", pa.StructArray.from_arrays(
        [pa.array(range(60), pa.int64()), pa.array([f"y{i}" for i in range(60)])], names=["a", "b"]))
    write_deltalake(uri, data, partition_by=["k"], configuration={
        "delta.enableDeletionVectors": "true", "delta.columnMapping.mode": "name",
        "delta.minReaderVersion": "3", "delta.minWriterVersion": "7"})
    add_inline_deletion_vector(uri, {0: [0, 3, 4], 2: [1]})
    dt = DeltaTable(uri)
    scanned = pa.table(dt.scan())  # delta-rs' engine applies column mapping and deletion vectors
    assert scanned.num_rows == 56
    m = import_delta(None, uri, str(tmp_path / "ds"))
    assert m.rows == 56
    got = _pylance(str(tmp_path / "ds"))
    assert got.schema.names == ["id", "k", "s", "st"] and not any(f.metadata for f in got.schema)
    assert [f.type for f in got.schema] == [pa.int64(), pa.int32(), pa.string(),
                                            pa.struct([("a", pa.int64()), ("b", pa.string())])]
    _same(got, scanned.select(got.schema.names).cast(got.schema))  # scan() gives string_view


def test_unreadable_deletion_vectors_refused(history: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    from deltalake import DeltaTable

    def broken(self):  # type: ignore[no-untyped-def]
        raise RuntimeError("deletion vector storage type 'p' is not supported")

    monkeypatch.setattr(DeltaTable, "deletion_vectors", broken)
    with pytest.raises(UnsupportedError, match="deletion vectors"):
        import_delta(None, history, str(tmp_path / "ds"))
    assert not (tmp_path / "ds").exists()


def _fail_commit(monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    import lance_spark_ops.spark.files.delta_import as mod

    def commit(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise error

    monkeypatch.setattr(mod, "commit_transaction", commit)


def test_failed_commit_deletes_the_jobs_files(history: str, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Files the import wrote go when its commit fails, a version's files stay; create and append."""
    from lance_spark_ops.errors import IncompatibleTransaction

    fresh = tmp_path / "fresh"
    _fail_commit(monkeypatch, IncompatibleTransaction("overwritten meanwhile"))
    with pytest.raises(IncompatibleTransaction):
        import_delta(None, history, str(fresh), max_rows_per_file=200)
    assert sorted(p.name for p in (fresh / "data").iterdir()) == []  # written, then deleted
    monkeypatch.undo()
    uri = str(tmp_path / "ds")
    import_delta(None, history, uri)
    before = sorted((tmp_path / "ds" / "data").iterdir())
    _fail_commit(monkeypatch, IncompatibleTransaction("overwritten meanwhile"))
    with pytest.raises(IncompatibleTransaction):
        import_delta(None, history, uri, "append", max_rows_per_file=200)
    assert sorted((tmp_path / "ds" / "data").iterdir()) == before
    from deltalake import DeltaTable

    _same(_pylance(uri), DeltaTable(history).to_pyarrow_table())


def test_commit_state_unknown_keeps_the_files(history: str, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """After CommitStateUnknown the commit may have landed: none of the job's files is deleted."""
    from lance_spark_ops.errors import CommitStateUnknown

    uri = str(tmp_path / "ds")
    import_delta(None, history, uri)
    before = {p.name for p in (tmp_path / "ds" / "data").iterdir()}
    _fail_commit(monkeypatch, CommitStateUnknown("timed out"))
    with pytest.raises(CommitStateUnknown):
        import_delta(None, history, uri, "append", max_rows_per_file=200)
    new = {p.name for p in (tmp_path / "ds" / "data").iterdir()} - before
    assert len(new) >= 3 and all(n.startswith("lso-") for n in new)


def test_phases_timed(history: str, tmp_path: Path) -> None:
    m = import_delta(None, history, str(tmp_path / "ds"))
    assert set(m.seconds) == {"plan", "convert", "commit", "total"}
    assert m.seconds["total"] >= m.seconds["convert"] > 0 and m.job_tag.startswith("lso-")


def test_bad_inputs(tmp_path: Path) -> None:
    from lance_spark_ops.errors import NotFoundError

    with pytest.raises(NotFoundError):
        import_delta(None, str(tmp_path / "nothing"), str(tmp_path / "ds"))
    with pytest.raises(InvalidInputError, match="mode"):
        import_delta(None, str(tmp_path / "nothing"), str(tmp_path / "ds"), "merge")


@pytest.mark.spark
def test_job_on_spark(spark, history: str, tmp_path: Path,  # type: ignore[no-untyped-def]
                      capsys: pytest.CaptureFixture[str]) -> None:
    """jobs/import_delta.py with the test session: tasks on executors, metrics as the last line."""
    import importlib.util
    import json

    from deltalake import DeltaTable

    spec = importlib.util.spec_from_file_location("import_delta_job", Path(__file__).parents[2] / "jobs" /
                                                  "import_delta.py")
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    uri = str(tmp_path / "ds")
    assert job.main([history, uri, "--data-storage-version", "2.1", "--max-rows-per-file", "150"]) == 0
    metrics = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert metrics["new_version"] == 1 and metrics["lance_files"] >= 4
    _same(_pylance(uri), DeltaTable(history).to_pyarrow_table())


@pytest.mark.parametrize("damage", ["garbage", "truncated", "page_header"])
def test_unreadable_parquet_file_refused(history: str, tmp_path: Path, damage: str) -> None:
    """A Delta data file that is not readable Parquet - overwritten, cut short, or a page header
    that does not parse (pyarrow's bare OSError) - is a CorruptFileError naming that file, and
    no dataset is made."""
    import shutil

    from lance_spark_ops.errors import CorruptFileError

    src = tmp_path / "delta"
    shutil.copytree(history, src)
    victim = sorted(src.rglob("*.parquet"))[-1]
    data = victim.read_bytes()
    if damage == "garbage":
        victim.write_bytes(b"x" * len(data))
    elif damage == "truncated":
        victim.write_bytes(data[: len(data) // 2])
    else:
        victim.write_bytes(data[:8] + b"\xff" * 192 + data[200:])
    with pytest.raises(CorruptFileError) as e:
        import_delta(None, str(src), str(tmp_path / "ds"))
    assert e.value.path is not None and e.value.path.endswith(victim.name)
    assert not (tmp_path / "ds" / "_versions").exists()
