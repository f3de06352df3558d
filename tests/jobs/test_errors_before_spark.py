"""Errors a job finds before Spark starts, each as one line on stderr and the JSON line last on
stdout: a plain file as the URI and an unknown table or namespace root exit 6; the fleet jobs
refuse a namespace root that does not exist (exit 6, not an empty fleet) and name a stray
``*.lance`` file; a typed error prints no traceback unless ``LSO_DEBUG=1`` / ``--log-level DEBUG``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest

from tests.jobs.test_jobs import MISSING_ARGS, NEEDS_DATASET, last_json, load_job


@pytest.fixture
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    from lance_spark_ops.spark.runtime import cli

    def no_session(job: Any) -> Any:
        raise AssertionError("a Spark session was started")

    monkeypatch.setattr(cli, "_session", no_session)


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if ": error: " in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("path", NEEDS_DATASET, ids=lambda p: p.stem)
def test_plain_file_and_unknown_table_exit_6(path: Path, tmp_path: Path, no_spark: None,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    module = load_job(path.stem)
    extra = MISSING_ARGS.get(path.stem, [])
    plain = tmp_path / "notes.txt"
    plain.write_text("not a dataset")
    lake = tmp_path / "lake"
    lance.write_dataset(pa.table({"x": [1, 2]}), str(lake / "t.lance"))
    cases = [([str(plain)], "a file, not a dataset directory"),
             (["--namespace-impl", "dir", "--namespace-prop", f"root={lake}", "--table", "nosuch"],
              "table nosuch does not exist"),
             (["--namespace-impl", "dir", "--namespace-prop", f"root={tmp_path / 'typo'}", "--table", "t"],
              "does not exist")]
    for argv, words in cases:
        assert module.main([*argv, *extra]) == 6, argv
        out, err = capsys.readouterr()
        last = last_json(out)
        assert last["exit_code"] == 6 and last["error"]["type"] == "DatasetNotFound", last
        assert words in _one_error_line(err)


@pytest.mark.parametrize("job", ["maintain", "report"])
def test_fleet_namespace_root_missing_exit_6(job: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    module = load_job(job)
    out_dir = tmp_path / "out"
    tail = ["--report", str(out_dir)] if job == "report" else ["--dry-run"]
    assert module.main(["--namespace-impl", "dir", "--namespace-prop", f"root={tmp_path / 'typo'}",
                        "--recursive", *tail], {}) == 6
    out, err = capsys.readouterr()
    last = last_json(out)
    assert last["exit_code"] == 6 and last["error"]["type"] == "DatasetNotFound"
    assert "namespace root" in _one_error_line(err) and not (out_dir / "index.html").exists()
    # a root that exists: a stray *.lance plain file is named, the real table maintained
    root = tmp_path / "lake"
    lance.write_dataset(pa.table({"x": [1, 2]}), str(root / "t.lance"))
    (root / "stray.lance").write_text("oops")
    assert module.main(["--namespace-impl", "dir", "--namespace-prop", f"root={root}", *tail], {}) == 0
    out, err = capsys.readouterr()
    assert [t["table"] for t in last_json(out)["tables"]] == ["t"]
    assert "stray.lance is not a table" in err


def test_typed_error_one_line_traceback_on_debug(tmp_path: Path, no_spark: None,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    uri = str(tmp_path / "ds.lance")
    lance.write_dataset(pa.table({"x": [1, 2]}), uri)
    for name in os.listdir(os.path.join(uri, "_versions")):
        Path(uri, "_versions", name).write_bytes(b"not a manifest")
    module = load_job("create_index")
    argv = [uri, "--column", "x", "--type", "BTREE"]
    monkeypatch.delenv("LSO_DEBUG", raising=False)
    assert module.main(argv) == 1
    out, err = capsys.readouterr()
    assert "CorruptFileError" in _one_error_line(err)
    assert last_json(out)["error"]["type"] == "CorruptFileError"
    for debug_argv, env in (([*argv, "--log-level", "DEBUG"], None), (argv, "1")):
        if env:
            monkeypatch.setenv("LSO_DEBUG", env)
        assert module.main(debug_argv) == 1
        out, err = capsys.readouterr()
        assert "Traceback" in err and last_json(out)["error"]["type"] == "CorruptFileError"


def test_decisions_before_spark(tmp_path: Path, no_spark: None, capsys: pytest.CaptureFixture[str]) -> None:
    """No session for: a row-id rebuild without stable row ids (nothing to do, exit 0), a vector
    index on an int column (the type problem, not the name clash with its BTREE), and every index
    type the registry refuses (its table, so a type it learns to build drops out here)."""
    from lance_spark_ops.spark.indices.index_registry import REFUSED_KINDS

    uri = str(tmp_path / "ds.lance")
    ds = lance.write_dataset(pa.table({"id": pa.array(range(100), pa.int64())}), uri)
    ds.create_scalar_index("id", "BTREE")
    rebuild = load_job("rebuild_row_id_index")
    assert rebuild.main([uri]) == 0
    out, _ = capsys.readouterr()
    assert last_json(out)["stable_row_ids"] is False and "row address" in out

    create = load_job("create_index")
    assert create.main([uri, "--column", "id", "--type", "IVF_PQ"]) == 2
    out, err = capsys.readouterr()
    line = _one_error_line(err)
    assert "int64" in line and "already exists" not in line, line
    for kind in REFUSED_KINDS:
        assert create.main([uri, "--column", "id", "--type", kind]) == 1, kind
        out, err = capsys.readouterr()
        assert "UnsupportedError" in _one_error_line(err)
        assert last_json(out)["error"]["type"] == "UnsupportedError"
    assert lance.dataset(uri).version == ds.version


def test_nothing_to_do_needs_no_spark(tmp_path: Path, no_spark: None,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """compact of a table already compacted, materialize_deletions with no fragment over the
    threshold: planned before Spark, exit 0 with their metrics, no session, nothing committed."""
    uri = str(tmp_path / "ds.lance")
    ds = lance.write_dataset(pa.table({"id": range(1000)}), uri, max_rows_per_file=500)
    ds.delete("id < 10")  # 2% of the first fragment
    version = lance.dataset(uri).version
    assert load_job("compact").main([uri, "--target-rows-per-fragment", "500"]) == 0
    out, err = capsys.readouterr()
    metrics = last_json(out)
    assert metrics["fragments_removed"] == 0 and metrics["plan"] == [] and metrics["dry_run"] is False
    assert err.count("plan started") == 1  # the precheck's own plan is not logged
    assert load_job("materialize_deletions").main([uri, "--threshold", "0.05"]) == 0
    assert last_json(capsys.readouterr().out)["fragments_removed"] == 0
    assert lance.dataset(uri).version == version
