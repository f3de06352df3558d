"""Each compaction option changes what it should (and pylance reads the same rows after it);
a failed job leaves no file behind; the jobs print their metrics as the last line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pytest

from lance_spark_ops.errors import UnsupportedError
from lance_spark_ops.spark.files.compaction import compact, materialize_deletions
from lance_spark_ops.spark.files.compaction_options import CompactionOptions
from lance_spark_ops.spark.files.compaction_plan import FragmentStats, plan_compaction
from tests.spark.datasets import rows_multiset, small_fragments

COLS = ["id", "f", "s"]


def _rows(uri: str) -> list[tuple]:
    import lance

    return rows_multiset(lance.dataset(uri).to_table(columns=COLS), COLS)


def _ours(uri: str) -> list[str]:
    return [n for n in os.listdir(f"{uri}/data") if n.startswith("lso-")]


def _referenced(uri: str) -> set[str]:
    import lance

    return {f.path for fr in lance.dataset(uri).get_fragments() for f in fr.metadata.files}


def _plain(uri: str, fragments: int, rows: int = 1000, version: str = "2.1") -> None:
    import lance

    for i in range(fragments):
        t = pa.table({"id": pa.array(range(i * rows, (i + 1) * rows), pa.int64()),
                      "f": pa.array([float(j) for j in range(rows)]),
                      "s": pa.array([f"s{j % 13}" for j in range(rows)])})
        lance.write_dataset(t, uri, mode="append" if i else "create", data_storage_version=version)


def test_max_bytes_per_file_cuts_files(tmp_path: Path) -> None:
    import lance

    uri = str(tmp_path / "ds")
    small_fragments(uri, "2.2", fragments=8, rows=2000)
    before = _rows(uri)
    unbounded = compact(None, uri, target_rows_per_fragment=100_000, dry_run=True)
    assert len(unbounded.plan) == 1
    m = compact(None, uri, target_rows_per_fragment=100_000, max_bytes_per_file=60_000)
    assert _rows(uri) == before
    frags = lance.dataset(uri).get_fragments()
    assert m.fragments_added == len(frags) > 1  # one group, several files


def test_max_source_limits_and_threshold_plan() -> None:
    stats = [FragmentStats(i, 100, 0, 1000) for i in range(10)]
    opts = dict(target_rows_per_fragment=250)
    assert len(plan_compaction(stats, CompactionOptions(**opts))) == 3
    by_rows = plan_compaction(stats, CompactionOptions(**opts, max_source_rows=600))
    assert [t.fragment_ids for t in by_rows] == [(0, 1, 2), (3, 4, 5)]
    by_bytes = plan_compaction(stats, CompactionOptions(**opts, max_source_bytes=3000))
    assert [t.fragment_ids for t in by_bytes] == [(0, 1, 2)]
    big = [FragmentStats(i, 1000, d, 0) for i, d in enumerate([0, 50, 200, 0])]  # 0%, 5%, 20%, 0%
    plan = plan_compaction(big, CompactionOptions(target_rows_per_fragment=500))
    assert [t.fragment_ids for t in plan] == [(2,)]
    plan = plan_compaction(big, CompactionOptions(target_rows_per_fragment=500,
                                                  materialize_deletions_threshold=0.01))
    assert [t.fragment_ids for t in plan] == [(1,), (2,)]  # each over the target: one task each
    plan = plan_compaction(big, CompactionOptions(target_rows_per_fragment=500, materialize_deletions=False))
    assert plan == []


def test_threshold_on_a_dataset(tmp_path: Path) -> None:
    import lance

    uri = str(tmp_path / "ds")
    _plain(uri, 3, rows=1000)
    lance.dataset(uri).delete("id < 50 OR (id >= 1000 AND id < 1300)")  # 5% and 30%
    before = _rows(uri)
    compact(None, uri, target_rows_per_fragment=500, materialize_deletions_threshold=0.1)
    frags = lance.dataset(uri).get_fragments()
    assert [f.metadata.deletion_file is not None for f in frags] == [True, False, False]
    compact(None, uri, target_rows_per_fragment=500, materialize_deletions_threshold=0.01)
    assert all(f.metadata.deletion_file is None for f in lance.dataset(uri).get_fragments())
    assert _rows(uri) == before


def test_commit_every_commits_partial_progress(tmp_path: Path) -> None:
    import lance

    uri = str(tmp_path / "ds")
    _plain(uri, 8, rows=100)
    v0 = lance.dataset(uri).version
    before = _rows(uri)
    m = compact(None, uri, target_rows_per_fragment=200, commit_every=1)
    assert m.tasks == 4 and m.commits == 4
    assert m.new_version == v0 + 4 and m.reservation_versions == []  # no index: no ids reserved
    assert len(lance.dataset(uri).get_fragments()) == 4
    assert _rows(uri) == before


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_data_storage_version(tmp_path: Path, version: str) -> None:
    """The dataset's own version (or its alias) is written; another is refused before any
    file is written, since pylance 14 cannot open a dataset that mixes file versions."""
    import lance

    from lance_spark_ops.file.reader import LanceFileReader

    uri = str(tmp_path / "ds")
    _plain(uri, 4, rows=200, version=version)
    before = _rows(uri)
    for other in {"2.0", "2.1", "2.2"} - {version}:
        with pytest.raises(UnsupportedError, match="mixes file versions"):
            compact(None, uri, target_rows_per_fragment=10_000, data_storage_version=other)
    assert not _ours(uri)
    compact(None, uri, target_rows_per_fragment=10_000, data_storage_version=version)
    assert _rows(uri) == before and len(lance.dataset(uri).get_fragments()) == 1
    (path,) = _referenced(uri)
    assert LanceFileReader(f"{uri}/data/{path}").version == version


def test_materialize_deletions_threshold_and_spark(spark, tmp_path: Path) -> None:
    import lance

    uri = str(tmp_path / "ds")
    _plain(uri, 3, rows=1000, version="2.2")
    lance.dataset(uri).delete("id < 50 OR (id >= 1000 AND id < 1300)")  # 5% and 30%
    before = _rows(uri)
    m = materialize_deletions(spark, uri, threshold=0.1)
    assert m.fragments_removed == 1 and m.fragments_added == 1
    frags = lance.dataset(uri).get_fragments()
    assert [f.metadata.deletion_file is not None for f in frags] == [True, False, False]
    materialize_deletions(spark, uri)
    assert all(f.metadata.deletion_file is None for f in lance.dataset(uri).get_fragments())
    assert len(lance.dataset(uri).get_fragments()) == 3
    assert _rows(uri) == before
    assert set(_ours(uri)) <= _referenced(uri)


def test_force_binary_copy_copies_and_a_failed_task_leaves_no_file(tmp_path: Path, monkeypatch) -> None:
    """The second task fails after the first wrote its file: the job deletes that file too
    and commits nothing."""
    import lance

    from lance_spark_ops.spark.files import compaction as compact_mod

    uri = str(tmp_path / "ds")
    _plain(uri, 6, rows=300, version="2.2")
    before = _rows(uri)
    m = compact(None, uri, target_rows_per_fragment=900, compaction_mode="force_binary_copy")
    assert m.fragments_binary_copied == 6 and _rows(uri) == before
    for i in range(6):
        lance.write_dataset(pa.table({"id": pa.array(range(10_000 + i * 300, 10_300 + i * 300), pa.int64()),
                                      "f": pa.array([0.5] * 300), "s": pa.array(["x"] * 300)}),
                            uri, mode="append")
    files_before = sorted(os.listdir(f"{uri}/data"))
    version_before = lance.dataset(uri).version
    real = compact_mod.run_rewrite

    def second_task_fails(spec, ctx):
        if ctx.task_id == 1:
            raise OSError("executor lost")
        return real(spec, ctx)

    monkeypatch.setattr(compact_mod, "run_rewrite", second_task_fails)
    with pytest.raises(OSError, match="executor lost"):
        compact(None, uri, target_rows_per_fragment=900, compaction_mode="force_binary_copy")
    assert sorted(os.listdir(f"{uri}/data")) == files_before
    assert lance.dataset(uri).version == version_before


def test_compact_job_prints_metrics_last(spark, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    import importlib.util

    uri = str(tmp_path / "ds")
    small_fragments(uri, "2.1", fragments=4)
    before = _rows(uri)
    root = Path(__file__).resolve().parents[2] / "jobs"
    for name, args in (("compact", ["--target-rows-per-fragment", "1000"]), ("materialize_deletions", [])):
        spec = importlib.util.spec_from_file_location(f"job_{name}", root / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        assert module.main([uri, *args]) == 0
        metrics = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert metrics["uri"] == uri and "seconds" in metrics
    assert _rows(uri) == before


def test_spark_job_descriptions_name_phase_and_batch(spark, tmp_path: Path, monkeypatch) -> None:
    uri = str(tmp_path / "ds")
    _plain(uri, 4, rows=100)
    seen: list[str | None] = []
    sc = spark.sparkContext
    original = sc.setJobDescription

    def record(value):
        seen.append(value)
        original(value)

    monkeypatch.setattr(sc, "setJobDescription", record)
    m = compact(spark, uri, target_rows_per_fragment=200, commit_every=1)
    assert m.tasks == 2
    named = [d for d in seen if d]
    assert any("rewrite batch 1/2" in d for d in named) and any("rewrite batch 2/2" in d for d in named)
    assert any(d.endswith(": commit") for d in named)
    assert seen[-1] is None  # cleared after the job


@pytest.mark.parametrize("window", [1, 10**9])
def test_binary_copy_windows_of_one_page_or_all(tmp_path: Path, window: int) -> None:
    """Pages are moved in read windows (here one page each, or every page of a file at once),
    pages holding deleted rows re-encoded between them: pylance reads the rows it read before."""
    import lance

    from lance_spark_ops.file.tuning import FileTuning
    from lance_spark_ops.spark.runtime.tuning import Tuning

    uri = str(tmp_path / "ds")
    _plain(uri, 4, rows=300, version="2.2")
    lance.dataset(uri).delete("id % 300 < 20 AND id < 300")
    before = _rows(uri)
    # force: fragment 0's only page per column holds deleted rows; try_binary_copy would re-encode
    # that fragment in a run (nothing of it moves), force re-encodes its pages in place
    m = compact(None, uri, target_rows_per_fragment=10_000, compaction_mode="force_binary_copy",
                tuning=Tuning(file=FileTuning(copy_window=window)))
    assert m.fragments_binary_copied == 4
    assert m.pages_binary_copied > 0 and m.pages_reencoded_for_deletions > 0
    assert _rows(uri) == before
