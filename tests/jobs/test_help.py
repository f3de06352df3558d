"""``--help`` says each thing once and truly: one default per option (the documented one when
the documentation gives it), the index types ``create_index`` takes (from the index registry),
a value that is also a positional argument as such, and ``materialize_deletions --dry-run``
(which plans without Spark and changes nothing)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest

from lance_spark_ops.spark.runtime.cli import build_parser
from tests.jobs.test_jobs import JOB_FILES, last_json, load_job


def _option_help(job: Any) -> dict[str, str]:
    parser = build_parser(job)
    return {a.dest: " ".join((a.help or "").split()) for a in parser._actions
            if a.option_strings and a.help is not argparse.SUPPRESS}


@pytest.mark.parametrize("path", JOB_FILES, ids=lambda p: p.stem)
def test_one_default_per_option(path: Path) -> None:
    for dest, text in _option_help(load_job(path.stem).JOB).items():
        assert text.lower().count("default") <= 1, (dest, text)
        assert not ("(required" in text and "default" in text.lower()), (dest, text)


def test_create_index_lists_types_and_positional_required() -> None:
    from lance_spark_ops.spark.indices.index_registry import ALIASES, FTS_KINDS, SCALAR_KINDS, VECTOR_KINDS

    text = _option_help(load_job("create_index").JOB)["type"]
    for kind in (*SCALAR_KINDS, *FTS_KINDS, *VECTOR_KINDS, *ALIASES):
        assert kind in text, kind
    delta = _option_help(load_job("import_delta").JOB)["delta_uri"]
    assert "DELTA_URI argument" in delta and not delta.endswith("(required)")


def test_materialize_deletions_dry_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    from lance_spark_ops.spark.runtime import cli

    def no_session(job: Any) -> Any:
        raise AssertionError("a Spark session was started")

    monkeypatch.setattr(cli, "_session", no_session)
    uri = str(tmp_path / "ds.lance")
    ds = lance.write_dataset(pa.table({"id": range(400)}), uri, max_rows_per_file=100)
    ds.delete("id < 50 or (id >= 200 and id < 210)")  # fragment 0: 50%, fragment 2: 10%
    ds = lance.dataset(uri)
    job = load_job("materialize_deletions")
    assert job.main([uri, "--threshold", "0.2", "--dry-run"]) == 0
    out = capsys.readouterr().out
    deleted = {f.fragment_id: f.metadata.deletion_file.num_deleted_rows / f.metadata.physical_rows
               for f in ds.get_fragments() if f.metadata.deletion_file is not None}
    expected = sorted(i for i, frac in deleted.items() if frac > 0.2)
    assert expected == [0]
    assert [line for line in out.splitlines() if line.startswith("would rewrite")] == \
        [f"would rewrite fragment {i}" for i in expected]
    metrics = last_json(out)
    assert metrics["dry_run"] is True and metrics["plan"] == [[i] for i in expected]
    assert lance.dataset(uri).version == ds.version
