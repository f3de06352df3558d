"""``run_job``: exit codes, the JSON line last on stdout, config files, storage options from the
environment (never printed), boolean switches. Jobs here are stand-ins that record what they
receive and raise what a test asks (no Spark)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from lance_spark_ops.errors import (
    AccessDeniedError,
    CommitConflict,
    CommitStateUnknown,
    IncompatibleTransaction,
    InvalidInputError,
    LanceError,
    NotFoundError,
)
from lance_spark_ops.spark.files.compaction_options import CompactionOptions
from lance_spark_ops.spark.runtime.cli import Job, parse_request, run_job
from lance_spark_ops.spark.runtime.config import field_docs, option_specs, storage_options_from_env

SECRET = "s3cr3t-Value/with+chars"


@dataclass(frozen=True)
class Opts:
    """Stand-in options.

    Attributes:
        size: rows per thing,
            continued here.
        ratio: a fraction.
        dry_run: only plan.
        mode: how.
        ids: some ids.
    """

    size: int = 10
    ratio: float = 0.5
    dry_run: bool = False
    mode: str = "a"
    ids: tuple[int, ...] = ()


def recording_job(raise_: BaseException | None = None, calls: list | None = None) -> Job:
    def run(spark: Any, uri: str, storage: dict, opts: Opts) -> dict:
        if calls is not None:
            calls.append((uri, storage, opts))
        if raise_ is not None:
            raise raise_
        return {"uri": uri, "size": opts.size, "echo": storage.get("token", "")}

    return Job("stand_in", run, Opts, "a stand-in job", choices={"mode": ("a", "b")}, spark=False,
               needs_dataset=False)


def last_json(out: str) -> dict:
    lines = out.strip().splitlines()
    return json.loads(lines[-1])


@pytest.mark.parametrize("error, code", [
    (None, 0),
    (InvalidInputError("bad value"), 2),
    (CommitConflict("lost the race"), 3),
    (IncompatibleTransaction("dataset was overwritten"), 4),
    (CommitStateUnknown("timeout after put"), 5),
    (NotFoundError("no such dataset", path="/x"), 1),
    (AccessDeniedError("read refused: PermissionError: Access Denied", path="s3://b/t/data/x.lance"), 8),
    (RuntimeError("boom"), 1),
])
def test_exit_codes_and_last_line(capsys: pytest.CaptureFixture[str], error: Exception | None,
                                  code: int) -> None:
    assert run_job(recording_job(error), ["/data/ds"], environ={}) == code
    out, err = capsys.readouterr()
    last = last_json(out)
    if error is None:
        assert last == {"uri": "/data/ds", "size": 10, "echo": ""}
        assert "stand_in /data/ds: done" in err
    else:
        assert last["error"] == {"type": type(error).__name__, "message": str(error)}
        assert last["exit_code"] == code and last["uri"] == "/data/ds"
        # a typed error is one line; only an unexpected one prints its traceback
        assert ("Traceback" in err) == (not isinstance(error, LanceError))
        assert len([line for line in err.splitlines() if ": error: " in line]) == 1
    if code == 5:
        assert "do not delete files by hand" in err


@pytest.mark.parametrize("argv", [["--size", "x", "/d"], ["--mode", "c", "/d"], ["--nope", "/d"], [],
                                  ["/d", "--ratio=maybe"], ["/d", "--no-dry-run=true"]])
def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    calls: list = []
    assert run_job(recording_job(calls=calls), argv, environ={}) == 2
    out, err = capsys.readouterr()
    assert last_json(out)["error"]["type"] == "UsageError"
    assert "usage:" in err and not calls
    # the URI given, even when argparse refused the line
    assert last_json(out)["uri"] == ("/d" if "/d" in argv else None)


def test_help_lists_docs_defaults_and_choices(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_job(recording_job(), ["--help"], environ={}) == 0
    out = capsys.readouterr().out
    assert "rows per thing, continued here (default: 10)" in " ".join(out.split())
    assert "--dry-run, --no-dry-run" in out and "{a,b}" in out
    assert "5  commit state unknown" in out and "LSO_STORAGE_OPTIONS" in out


def test_every_compaction_option_is_documented() -> None:
    docs = field_docs(CompactionOptions)
    for spec in option_specs(CompactionOptions):
        assert len(docs.get(spec.name, "")) > 20, spec.name


@pytest.mark.parametrize("argv, dry", [
    (["--dry-run", "/d"], True), (["/d", "--dry-run"], True), (["--dry-run", "true", "/d"], True),
    (["--dry-run", "false", "/d"], False), (["--dry-run=no", "/d"], False), (["--no-dry-run", "/d"], False),
    (["/d"], False), (["--dry-run", "--no-dry-run", "/d"], False), (["--dry-run", "ON", "/d"], True),
])
def test_bool_switches(argv: list[str], dry: bool) -> None:
    req = parse_request(recording_job(), argv, environ={})
    assert req.uri == "/d" and req.options.dry_run is dry


def test_list_option_and_types() -> None:
    req = parse_request(recording_job(), ["/d", "--ids", "3", "4", "--ids", "9", "--ratio", "1"], environ={})
    assert req.options.ids == (3, 4, 9) and req.options.ratio == 1.0


@pytest.mark.parametrize("suffix", ["toml", "json"])
def test_config_file_under_flags(tmp_path: Any, suffix: str) -> None:
    path = tmp_path / f"opts.{suffix}"
    if suffix == "toml":
        path.write_text('uri = "/from/config"\nsize = 7\nratio = 0.25\ndry-run = true\nids = [1, 2]\n'
                        '[storage_options]\ntoken = "from-config"\nregion = "eu"\n')
    else:
        storage = {"token": "from-config", "region": "eu"}
        path.write_text(json.dumps({"uri": "/from/config", "size": 7, "ratio": 0.25, "dry_run": True,
                                    "ids": [1, 2], "storage_options": storage}))
    req = parse_request(recording_job(), ["--config", str(path), "--size", "9"], environ={})
    assert req.uri == "/from/config"
    assert req.options == Opts(size=9, ratio=0.25, dry_run=True, ids=(1, 2))
    assert req.storage_options == {"token": "from-config", "region": "eu"}
    env = {"LSO_STORAGE_OPTIONS": json.dumps({"token": "from-env-json", "other": "x"}),
           "LSO_STORAGE_OPTION_REGION": "from-env-key"}
    req = parse_request(recording_job(), ["--config", str(path), "/flag/uri", "--no-dry-run",
                                          "--storage-option", "other=from-flag"], environ=env)
    assert req.uri == "/flag/uri" and req.options.dry_run is False
    assert req.storage_options == {"token": "from-env-json", "region": "from-env-key", "other": "from-flag"}


@pytest.mark.parametrize("text, needle", [
    ("size = 'big'\n", "option size: expected int"),
    ("bogus = 1\n", "unknown option 'bogus'"),
    ("mode = 'z'\n", "expected one of a, b"),
    ("size = [\n", "not valid TOML"),
    ("storage_options = 3\n", "storage_options must be a table"),
])
def test_bad_config_exit_2(tmp_path: Any, capsys: pytest.CaptureFixture[str], text: str, needle: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    assert run_job(recording_job(), ["/d", "--config", str(path)], environ={}) == 2
    last = last_json(capsys.readouterr().out)
    error = last["error"]
    assert needle in error["message"] and str(path) in error["message"], error
    assert last["uri"] == "/d"


def test_missing_config_file_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    assert run_job(recording_job(), ["/d", "--config", str(tmp_path / "none.toml")], environ={}) == 2
    assert "cannot read the config file" in last_json(capsys.readouterr().out)["error"]["message"]


def test_storage_options_never_printed(capsys: pytest.CaptureFixture[str]) -> None:
    """The secret reaches the job, but no output shows it: not the metrics (the stand-in echoes
    it), not the error message, not the traceback, not the log."""
    import logging

    calls: list = []
    env = {"LSO_STORAGE_OPTION_TOKEN": SECRET}
    assert run_job(recording_job(calls=calls), ["/d"], environ=env) == 0
    assert calls[0][1] == {"token": SECRET}
    out, err = capsys.readouterr()
    assert last_json(out)["echo"] == "***"

    def leaky(spark: Any, uri: str, storage: dict, opts: Opts) -> None:
        logging.getLogger("lance_spark_ops.spark.compact").warning("opening with %s", storage)
        raise RuntimeError(f"cannot connect with {storage!r}")

    job = Job("leaky", leaky, Opts, spark=False, needs_dataset=False)
    assert run_job(job, ["/d"], environ={"LSO_STORAGE_OPTIONS": json.dumps({"token": SECRET})}) == 1
    out2, err2 = capsys.readouterr()
    assert "cannot connect with {'token': '***'}" in last_json(out2)["error"]["message"]
    assert "opening with {'token': '***'}" in err2 and "Traceback" in err2
    for text in (out, err, out2, err2):
        assert SECRET not in text and json.dumps(SECRET)[1:-1] not in text


def test_bad_env_json_does_not_echo_it() -> None:
    with pytest.raises(InvalidInputError) as info:
        storage_options_from_env({"LSO_STORAGE_OPTIONS": '{"token": "' + SECRET})
    assert SECRET not in str(info.value) and "LSO_STORAGE_OPTIONS" in str(info.value)


def test_required_option_from_config(tmp_path: Any) -> None:
    @dataclass(frozen=True)
    class Cols:
        """Attributes:
            column: NAME=EXPR.
        """

        column: tuple[str, ...]

    job = Job("cols", lambda *a: {}, Cols, spark=False)
    with pytest.raises(InvalidInputError, match="--column is required"):
        parse_request(job, ["/d"], environ={})
    path = tmp_path / "c.toml"
    path.write_text('[column]\ntotal = "a * b"\ntag = "upper(c)"\n')
    assert parse_request(job, ["/d", "--config", str(path)], environ={}).options.column == (
        "total=a * b", "tag=upper(c)")
    # a text item is one flag's value, even when it looks like the URI
    assert parse_request(job, ["--column", "x=1", "/d"], environ={}).options.column == ("x=1",)
