"""jobs/create_index.py and jobs/optimize_indices.py: bad input exits 2 with a typed error and
the JSON line before any Spark session starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops.spark.runtime import cli
from lance_spark_ops.spark.runtime.config import parse_param_values
from tests.jobs.test_jobs import last_json, load_job

lance = pytest.importorskip("lance")


@pytest.fixture
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(job: Any) -> Any:
        raise AssertionError("a Spark session was started")

    monkeypatch.setattr(cli, "_session", refuse)


@pytest.fixture
def dataset(tmp_path: Path) -> str:
    uri = str(tmp_path / "ds")
    ds = lance.write_dataset(pa.table({"x": np.arange(100), "s": [str(i) for i in range(100)]}), uri)
    ds.create_scalar_index("x", "BTREE")
    return uri


@pytest.mark.parametrize(("args", "error", "words"), [
    (["--column", "nope", "--type", "BTREE"], "InvalidInputError", "'nope' does not exist"),
    (["--column", "x", "--type", "BTREEE"], "InvalidInputError", "unknown index type"),
    (["--column", "x", "--type", "RTREE"], "InvalidInputError", "GeoArrow"),
    (["--column", "x", "--type", "MINHASHLSH"], "InvalidInputError", "must be a string column"),
    (["--column", "x", "--type", "IVF_RQ"], "InvalidInputError", "needs a fixed_size_list of floats"),
    (["--column", "x", "--type", "BTREE", "--no-replace"], "InvalidInputError", "already exists"),
    (["--column", "x", "--type", "BTREE", "--param", "a=1", "--param", "a=2"], "InvalidInputError",
     "given twice"),
])
def test_create_index_bad_input(dataset: str, no_spark: None, capsys: pytest.CaptureFixture[str],
                                args: list[str], error: str, words: str) -> None:
    code = load_job("create_index").main([dataset, *args])
    out = last_json(capsys.readouterr().out)
    assert out["error"]["type"] == error and words in out["error"]["message"]
    assert out["uri"] == dataset
    assert code == (2 if error == "InvalidInputError" else 1)


@pytest.mark.parametrize(("args", "words"), [
    (["--index-names", "y_idx"], "no index named 'y_idx'"),
    (["--num-indices-to-merge", "-1"], "must not be negative"),
    (["--merge-policy", "greedy"], "expected one of pylance, tiered"),
    (["--retrain-if-drift", "0"], "retrain_if_drift must be positive"),
])
def test_optimize_indices_bad_input(dataset: str, no_spark: None, capsys: pytest.CaptureFixture[str],
                                    args: list[str], words: str) -> None:
    assert load_job("optimize_indices").main([dataset, *args]) == 2
    assert words in last_json(capsys.readouterr().out)["error"]["message"]


def test_param_values() -> None:
    assert parse_param_values(["num_partitions=256", "metric=cosine", "with_position=true",
                               "custom_stop_words=[\"a\", \"b\"]", "x=a=b"]) == {
        "num_partitions": 256, "metric": "cosine", "with_position": True,
        "custom_stop_words": ["a", "b"], "x": "a=b"}
