"""The job scripts in ``jobs/``: documented help, real runs on pylance-made datasets checked
with pylance, exit codes of real failures (a conflict, an unknown commit state), and
spark-submit with ``conf/``."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow as pa
import pytest

from lance_spark_ops.errors import CommitConflict, CommitStateUnknown, IncompatibleTransaction
from lance_spark_ops.spark.runtime.config import option_specs
from tests.spark.datasets import rows_multiset, small_fragments

ROOT = Path(__file__).resolve().parents[2]
JOB_FILES = sorted(p for p in (ROOT / "jobs").glob("*.py") if not p.name.startswith("_"))
COLUMNS = ["id", "f", "s"]


def load_job(name: str) -> ModuleType:
    path = ROOT / "jobs" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"lso_job_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve string annotations through it
    spec.loader.exec_module(module)
    return module


def last_json(out: str) -> dict[str, Any]:
    return json.loads(out.strip().splitlines()[-1])


def data_files(uri: str) -> set[str]:
    return set(os.listdir(os.path.join(uri, "data")))


@pytest.mark.parametrize("path", JOB_FILES, ids=lambda p: p.stem)
def test_help_documents_every_option(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    module = load_job(path.stem)
    job = module.JOB
    assert module.main(["--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "exit codes:" in out and "--config FILE" in out
    for spec in option_specs(job.options, job.choices):
        assert spec.help, f"{path.name}: option {spec.name} has no documentation"
        assert spec.flag in out
        assert "(required" in out if spec.required else "default" in out
        for choice in spec.choices or ():
            assert str(choice) in out


@pytest.mark.spark
def test_compact_job(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import lance

    uri = str(tmp_path / "ds")
    small_fragments(uri, "2.1")
    before = lance.dataset(uri)
    expected = rows_multiset(before.to_table(columns=COLUMNS), COLUMNS)
    compact = load_job("compact")
    assert compact.main([uri, "--dry-run", "--target-rows-per-fragment", "1000"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("task 0: fragments [")
    assert last_json(out)["dry_run"] is True and lance.dataset(uri).version == before.version

    config = tmp_path / "compact.toml"
    config.write_text(f'uri = "{uri}"\ntarget_rows_per_fragment = 1000\ndry_run = true\n')
    assert compact.main(["--config", str(config), "--no-dry-run"]) == 0
    metrics = last_json(capsys.readouterr().out)
    after = lance.dataset(uri)
    assert metrics["new_version"] == after.version > before.version
    assert len(after.get_fragments()) == metrics["fragments_added"] < len(before.get_fragments())
    assert rows_multiset(after.to_table(columns=COLUMNS), COLUMNS) == expected

    # nothing left to do: exit 0, no new version
    assert compact.main([uri, "--target-rows-per-fragment", "1000"]) == 0
    assert last_json(capsys.readouterr().out)["tasks"] == 0 and lance.dataset(uri).version == after.version


@pytest.mark.spark
@pytest.mark.parametrize("error, code, files_kept", [
    (CommitConflict, 3, False), (IncompatibleTransaction, 4, False), (CommitStateUnknown, 5, True)])
def test_commit_failures_exit_codes(spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str], error: type, code: int,
                                    files_kept: bool) -> None:
    """A real compaction whose Rewrite commit fails: exit 3 (conflict) or 4 (incompatible): the
    files it wrote are deleted; 5 (state unknown): they are kept. The rows are those pylance saw
    before."""
    import lance

    from lance_spark_ops.spark.indices import index_remap
    from lance_spark_ops.table.format.transaction import Rewrite

    uri = str(tmp_path / "ds")
    small_fragments(uri, "2.1", fragments=4, rows=200)
    expected = rows_multiset(lance.dataset(uri).to_table(columns=COLUMNS), COLUMNS)
    files_before = data_files(uri)
    real_commit = index_remap.commit_transaction  # compaction's Rewrite goes through commit_rewrite

    def failing_commit(store: Any, operation: Any, read_version: int, *a: Any, **kw: Any) -> Any:
        if isinstance(operation, Rewrite):
            raise error("injected by the test", path=uri)
        return real_commit(store, operation, read_version, *a, **kw)

    monkeypatch.setattr(index_remap, "commit_transaction", failing_commit)
    assert load_job("compact").main([uri, "--target-rows-per-fragment", "1000"]) == code
    out, err = capsys.readouterr()
    assert last_json(out) == {"error": {"type": error.__name__, "message": f"{uri}: injected by the test"},
                              "exit_code": code, "job": "compact", "uri": uri}
    assert rows_multiset(lance.dataset(uri).to_table(columns=COLUMNS), COLUMNS) == expected
    new_files = data_files(uri) - files_before
    assert bool(new_files) is files_kept
    assert "Traceback" not in err


@pytest.mark.spark
def test_materialize_deletions_job(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import lance

    uri = str(tmp_path / "ds")
    small_fragments(uri, "2.1", fragments=3, rows=200)
    expected = rows_multiset(lance.dataset(uri).to_table(columns=COLUMNS), COLUMNS)
    assert all(f.deletion_file() is not None for f in lance.dataset(uri).get_fragments())
    assert load_job("materialize_deletions").main([uri]) == 0
    assert last_json(capsys.readouterr().out)["tasks"] == 3
    after = lance.dataset(uri)
    assert all(f.deletion_file() is None for f in after.get_fragments())
    assert rows_multiset(after.to_table(columns=COLUMNS), COLUMNS) == expected
    assert load_job("materialize_deletions").main([uri, "--threshold", "1.5"]) == 2


@pytest.mark.spark
def test_add_columns_job(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import lance

    uri = str(tmp_path / "ds")
    small_fragments(uri, "2.1", fragments=2, rows=100)
    assert load_job("add_columns").main([uri, "--column", "twice=id * 2", "--column", "big=id > 100000"]) == 0
    assert last_json(capsys.readouterr().out)["columns"] == ["twice", "big"]
    table = lance.dataset(uri).to_table(columns=["id", "twice", "big"])
    ids = table.column("id").to_pylist()
    assert table.column("twice").to_pylist() == [i * 2 for i in ids]
    assert table.column("big").to_pylist() == [i > 100000 for i in ids]
    assert load_job("add_columns").main([uri, "--column", "novalue"]) == 2


@pytest.mark.spark
def test_rebuild_row_id_index_job(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import lance

    job = load_job("rebuild_row_id_index")
    plain = str(tmp_path / "plain")
    small_fragments(plain, "2.1", fragments=2, rows=100)
    version = lance.dataset(plain).version
    assert job.main([plain]) == 0
    assert last_json(capsys.readouterr().out)["stable_row_ids"] is False
    assert lance.dataset(plain).version == version

    stable = str(tmp_path / "stable")
    small_fragments(stable, "2.1", fragments=2, rows=100, stable=True)
    ds = lance.dataset(stable)
    live = ds.count_rows()
    assert job.main([stable, "--rows-per-partition", "64"]) == 0
    metrics = last_json(capsys.readouterr().out)
    assert metrics["index_rows"] == live and metrics["index_partitions"] == -(-live // 64)
    assert job.main([stable, "--rows-per-partition", "0"]) == 2


def test_inspect_file_job(tmp_path: Path, lance_file: Any, capsys: pytest.CaptureFixture[str]) -> None:
    table = pa.table({"a": list(range(50)), "b": [f"x{i}" for i in range(50)]})
    path = lance_file(table, "2.1")
    assert load_job("inspect_file").main([path, "--rows", "3"]) == 0
    out = capsys.readouterr().out
    assert last_json(out) == {"version": "2.1", "rows": 50, "columns": ["a", "b"],
                              "arrow_bytes": last_json(out)["arrow_bytes"]}
    assert "Lance file version 2.1, 50 rows" in out
    assert load_job("inspect_file").main([str(tmp_path / "missing.lance")]) == 1


@pytest.mark.spark
def test_spark_submit_with_conf(tmp_path: Path) -> None:
    """spark-submit with SPARK_CONF_DIR=conf: our progress lines, no Spark INFO lines, the JSON
    line last. (A failing job's exit code through spark-submit: tests/dags, which exits 2.)"""
    import lance

    uri = str(tmp_path / "ds")
    small_fragments(uri, "2.1", fragments=4, rows=100)
    version = lance.dataset(uri).version
    env = {**os.environ, "SPARK_CONF_DIR": str(ROOT / "conf"), "PYSPARK_PYTHON": sys.executable,
           # an option the storage layer accepts (and ignores for a local dataset): a real credential name
           "LSO_STORAGE_OPTION_AWS_SECRET_ACCESS_KEY": "a-secret-never-shown"}
    submit = str(Path(sys.executable).parent / "spark-submit")
    cmd = [submit, "--master", "local[1]", str(ROOT / "jobs" / "compact.py"), uri]
    ok = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr[-3000:] + ok.stdout[-3000:]
    both = ok.stdout + ok.stderr
    assert " INFO " not in both.replace("INFO lance_spark_ops", ""), both[:3000]
    assert f"INFO lance_spark_ops: compact {uri}: starting" in both
    assert "a-secret-never-shown" not in both
    assert last_json(ok.stdout)["new_version"] == lance.dataset(uri).version > version


@pytest.mark.parametrize("path", JOB_FILES, ids=lambda p: p.stem)
def test_example_options_file(path: Path) -> None:
    """conf/examples/<job>.toml exists for every job and is read without error (as given, and
    with the URI from the command line overriding it)."""
    from lance_spark_ops.spark.runtime.cli import parse_request

    example = ROOT / "conf" / "examples" / f"{path.stem}.toml"
    job = load_job(path.stem).JOB
    request = parse_request(job, ["--config", str(example)], environ={})
    assert request.uri.startswith("s3://")
    assert parse_request(job, ["/local/ds", "--config", str(example)], environ={}).uri == "/local/ds"


def test_import_delta_arguments(tmp_path: Path) -> None:
    """DELTA_URI LANCE_URI, or the Lance URI alone with delta_uri from --delta-uri or the config
    file; both ways at once, or a lone DELTA_URI with no Lance URI, are usage errors."""
    from lance_spark_ops.spark.runtime.cli import UsageError, option_secrets, parse_request

    job = load_job("import_delta").JOB
    request = parse_request(job, ["/d", "/l", "--mode", "append"], environ={})
    assert (request.options.delta_uri, request.uri, request.options.mode) == ("/d", "/l", "append")
    assert parse_request(job, ["--delta-uri", "/d", "/l"], environ={}).options.delta_uri == "/d"
    config = tmp_path / "c.toml"
    config.write_text('delta_uri = "/cd"\nuri = "/cl"\n[delta_storage_option]\naws_region = "x"\n')
    request = parse_request(job, ["--config", str(config)], environ={})
    assert (request.options.delta_uri, request.uri) == ("/cd", "/cl")
    assert request.options.delta_storage_option == ("aws_region=x",)
    assert option_secrets(request.options) == {"aws_region": "x"}  # redacted in anything printed
    assert parse_request(job, ["/l", "--config", str(config)], environ={}).uri == "/l"
    for argv in (["/d", "/l", "--delta-uri", "/d"], ["/l"], ["/d", "/l", "/x"]):
        with pytest.raises(UsageError):
            parse_request(job, argv, environ={})


@pytest.mark.spark
def test_import_delta_job(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A deltalake-made table imported through the job matches it in pylance; a Delta storage
    option's value is never printed (not even in the error of a second, refused create)."""
    import lance
    from deltalake import write_deltalake

    delta, uri = str(tmp_path / "delta"), str(tmp_path / "ds.lance")
    table = pa.table({"id": pa.array(range(250), pa.int64()), "s": [f"v{i}" for i in range(250)]})
    write_deltalake(delta, table)
    secret = ["--delta-storage-option", "aws_secret_access_key=a-secret-never-shown"]
    assert load_job("import_delta").main([delta, uri, "--max-rows-per-file", "100", *secret]) == 0
    out, err = capsys.readouterr()
    assert last_json(out)["rows"] == 250 and "a-secret-never-shown" not in out + err
    assert lance.dataset(uri).to_table().sort_by("id") == table
    assert load_job("import_delta").main([delta, uri, *secret]) == 2  # create over an existing dataset
    out, err = capsys.readouterr()
    assert "already exists" in last_json(out)["error"]["message"] and "a-secret-never-shown" not in out + err


@pytest.mark.spark
def test_spark_submit_stdout_contract(tmp_path: Path) -> None:
    """Under spark-submit the driver's stderr arrives merged into stdout (Spark's Python runner):
    progress lines are on stdout, a job's report lines come before its "done" line, and the
    JSON metrics line is the last line (``tail -n 1``)."""
    uri = str(tmp_path / "ds")
    small_fragments(uri, "2.1", fragments=3, rows=50)
    env = {**os.environ, "SPARK_CONF_DIR": str(ROOT / "conf"), "PYSPARK_PYTHON": sys.executable}
    submit = str(Path(sys.executable).parent / "spark-submit")
    cmd = [submit, "--master", "local[1]", str(ROOT / "jobs" / "vacuum.py"), uri, "--older-than", "0s",
           "--dry-run"]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:] + run.stdout[-3000:]
    lines = run.stdout.strip().splitlines()
    assert f"INFO lance_spark_ops: vacuum {uri}: starting" in lines[0]  # stderr, merged by Spark
    removes = [i for i, line in enumerate(lines) if line.startswith("would remove ")]
    done = [i for i, line in enumerate(lines) if f"vacuum {uri}: done in" in line]
    assert removes and done and max(removes) < done[-1] == len(lines) - 2, lines
    last = json.loads(lines[-1])
    assert last["dry_run"] and last["old_versions"] == len([i for i in removes if "_versions/" in lines[i]])


MISSING_ARGS = {"add_columns": ["--column", "x=1"], "create_index": ["--column", "x", "--type", "BTREE"]}
# import_delta creates its dataset, inspect_file takes a file; maintain's and report's entry point is
# the fleet's (several tables, each table's failure reported in its metrics)
NEEDS_DATASET = [p for p in JOB_FILES if p.stem not in ("import_delta", "inspect_file", "maintain", "report")]


@pytest.mark.parametrize("path", NEEDS_DATASET, ids=lambda p: p.stem)
def test_missing_dataset_exit_6_before_spark(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A URI with no dataset: one error line, exit 6 (not retried), and no Spark session started
    (local paths and object-store URIs alike; a store's errors are not read as "absent")."""
    from lance_spark_ops.spark.runtime import cli

    def no_session(job: Any) -> Any:
        raise AssertionError("a Spark session was started for a missing dataset")

    monkeypatch.setattr(cli, "_session", no_session)
    module = load_job(path.stem)
    for uri in (str(tmp_path / "missing.lance"), "memory://lso-missing/ds.lance"):
        assert module.main([uri, *MISSING_ARGS.get(path.stem, [])]) == cli.EXIT_NOT_FOUND == 6
        out, err = capsys.readouterr()
        last = last_json(out)
        assert last["error"]["type"] == "DatasetNotFound" and last["uri"] == uri and last["exit_code"] == 6
        errors = [line for line in err.splitlines() if "error" in line.lower()]
        assert len(errors) == 1 and "no Lance dataset here" in errors[0] and "Traceback" not in err


def test_dataset_present_object_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """``dataset_present`` through fsspec: true once ``_versions/`` holds a manifest, false
    before; a store failure raises (typed) rather than reading as absent."""
    import fsspec

    from lance_spark_ops.errors import AccessDeniedError, LanceError
    from lance_spark_ops.io.storage import ObjectStore
    from lance_spark_ops.table.dataset import dataset_present

    uri = "memory://lso-present/ds.lance"
    assert not dataset_present(uri)
    fsspec.filesystem("memory").pipe_file("/lso-present/ds.lance/_versions/1.manifest", b"x")
    assert dataset_present(uri)
    store = ObjectStore(uri)

    def unreachable(path: str, **kw: Any) -> Any:
        raise ConnectionError("no route to host")

    store.protocol = "s3"  # as a remote store: its errors are typed
    monkeypatch.setattr(store.fs, "info", unreachable)
    with pytest.raises(LanceError, match="info failed: ConnectionError"):
        store.present("_versions")

    def denied(path: str, **kw: Any) -> Any:
        raise PermissionError("denied")

    monkeypatch.setattr(store.fs, "info", denied)
    with pytest.raises(AccessDeniedError, match="info refused: PermissionError"):
        store.present("_versions")


def test_dag_exit_codes_match_cli() -> None:
    """The DAG knows every exit code the jobs document, and retries only 1 and 3 (6, no dataset
    at the URI, is a caller's mistake: never retried)."""
    import ast

    from lance_spark_ops.spark.runtime import cli

    tree = ast.parse((ROOT / "dags" / "lance_maintenance.py").read_text())
    values = {t.id: ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
              for t in n.targets if isinstance(t, ast.Name) and t.id in ("EXIT_MEANINGS", "NO_RETRY")}
    documented = {int(line.split()[0]) for line in cli.EPILOG.split("exit codes:")[1].splitlines()
                  if line[:3].strip().isdigit()}
    assert documented == {0, 1, 2, 3, 4, 5, 6, 7, 8} and set(values["EXIT_MEANINGS"]) == documented - {0}
    assert set(values["NO_RETRY"]) == documented - {0, 1, cli.EXIT_RETRY}


@pytest.mark.parametrize("fail", [False, True])
def test_ci_setup_says_each_step(tmp_path: Path, fail: bool) -> None:
    """``.ci/setup`` prints one line per step and nothing else (pip's output only when a step
    fails); run on a copy whose .venv/bin/python is a stand-in recording the pip calls."""
    (tmp_path / ".ci").mkdir()
    (tmp_path / ".ci" / "setup").write_text((ROOT / ".ci" / "setup").read_text())
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text('#!/usr/bin/env bash\necho "$*" >> "$(dirname "$0")/calls"\n'
                      f'case "$*" in *"-e"*) {"echo pip-says-why; exit 1" if fail else "exit 0"};; esac\n')
    python.chmod(0o755)
    run = subprocess.run(["bash", str(tmp_path / ".ci" / "setup")], capture_output=True, text=True,
                         timeout=60)
    lines = run.stdout.splitlines()
    calls = (python.parent / "calls").read_text().splitlines()
    assert any("--upgrade pip" in c for c in calls) and any("-e .[test]" in c for c in calls), calls
    if fail:
        assert run.returncode == 1 and lines[-1] == "pip-says-why"
        assert [line.split(":")[0] for line in lines[:-1]] == ["setup"] * 3
    else:
        assert run.returncode == 0 and run.stderr == ""
        steps = [line.split(" ")[1] for line in lines]
        assert steps == ["reusing", "upgrading", "installing", "compiling", "done:"], lines
        assert any("-m lance_spark_ops.compile_kernels" in c for c in calls), calls
