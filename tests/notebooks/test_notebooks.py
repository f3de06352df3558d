"""The Databricks notebooks in ``notebooks/``, executed as Databricks would run them (the whole
source in one namespace, ``spark`` and ``dbutils`` provided, ``display`` when present) with a
stand-in ``dbutils``, on pylance-made datasets; pylance checks what they did."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.spark.datasets import rows_multiset, small_fragments

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
COLUMNS = ["id", "f", "s"]


class _Widgets:
    """``dbutils.widgets``: ``text`` defines a widget (with its default), ``get`` reads the value
    a run was given, and - as on Databricks - fails for a widget never defined."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values, self.defined = values, {}

    def text(self, name: str, default_value: str, label: str | None = None) -> None:
        assert isinstance(default_value, str), name
        self.defined[name] = default_value

    def get(self, name: str) -> str:
        if name not in self.defined:
            raise KeyError(f"InputWidgetNotDefined: {name}")
        return self.values.get(name, self.defined[name])


class DBUtils:
    def __init__(self, values: dict[str, str]) -> None:
        self.widgets = _Widgets(values)


def run_notebook(name: str, spark: Any, values: dict[str, str], display: bool = True
                 ) -> tuple[dict[str, Any], list[Any]]:
    path = NOTEBOOKS / f"{name}.py"
    source = path.read_text()
    assert source.startswith("# Databricks notebook source\n")
    cells = source.split("\n# COMMAND ----------\n")
    assert len(cells) >= 3 and cells[0].strip().splitlines()[1].startswith("# MAGIC %md")
    shown: list[Any] = []
    namespace: dict[str, Any] = {"spark": spark, "dbutils": DBUtils(values), "__name__": "__main__"}
    if display:
        namespace["display"] = shown.append
    exec(compile(source, str(path), "exec"), namespace)
    assert set(values) <= set(namespace["dbutils"].widgets.defined), "a value for an undefined widget"
    return namespace, shown


def metric_table(shown: list[Any]) -> dict[str, str]:
    return {r["metric"]: r["value"] for r in shown[0].collect()}


def test_every_job_has_a_notebook() -> None:
    """One notebook per job file, named as the job."""
    jobs = {p.stem for p in (NOTEBOOKS.parent / "jobs").glob("*.py")}
    assert {"compact", "materialize_deletions", "add_columns", "inspect_file", "rebuild_row_id_index",
            "vacuum", "import_delta", "remap_indices"} <= jobs
    missing = {j for j in jobs if not (NOTEBOOKS / f"{j}.py").exists()}
    assert not missing, missing


@pytest.mark.spark
def test_compact_notebook(spark: Any, tmp_path: Path) -> None:
    import lance

    uri = str(tmp_path / "ds")
    small_fragments(uri, "2.1", fragments=4, rows=200)
    before = lance.dataset(uri)
    expected = rows_multiset(before.to_table(columns=COLUMNS), COLUMNS)
    widgets = {"uri": uri, "dry_run": "true", "target_rows_per_fragment": "500"}
    ns, shown = run_notebook("compact", spark, widgets)
    assert ns["metrics"].dry_run and lance.dataset(uri).version == before.version
    ns, shown = run_notebook("compact", spark, {"uri": uri, "target_rows_per_fragment": "500"})
    after = lance.dataset(uri)
    table = metric_table(shown)
    assert int(table["new_version"]) == after.version > before.version
    assert int(table["fragments_added"]) == len(after.get_fragments()) < len(before.get_fragments())
    assert rows_multiset(after.to_table(columns=COLUMNS), COLUMNS) == expected


@pytest.mark.spark
def test_materialize_deletions_notebook_without_display(spark: Any, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    import lance

    uri = str(tmp_path / "ds")
    small_fragments(uri, "2.1", fragments=2, rows=200)
    expected = rows_multiset(lance.dataset(uri).to_table(columns=COLUMNS), COLUMNS)
    ns, shown = run_notebook("materialize_deletions", spark, {"uri": uri}, display=False)
    assert not shown and "fragments_removed" in capsys.readouterr().out  # the show() fallback
    after = lance.dataset(uri)
    assert all(f.deletion_file() is None for f in after.get_fragments())
    assert rows_multiset(after.to_table(columns=COLUMNS), COLUMNS) == expected
    assert ns["metrics"].fragments_removed == 2


@pytest.mark.spark
def test_add_columns_notebook(spark: Any, tmp_path: Path) -> None:
    import lance

    uri = str(tmp_path / "ds")
    small_fragments(uri, "2.1", fragments=2, rows=100)
    _, shown = run_notebook("add_columns", spark, {"uri": uri, "column": "twice=id * 2; tag=upper(s)"})
    assert metric_table(shown)["columns"] == '["twice", "tag"]'
    table = lance.dataset(uri).to_table(columns=["id", "s", "twice", "tag"])
    assert table.column("twice").to_pylist() == [i * 2 for i in table.column("id").to_pylist()]
    strings = table.column("s").to_pylist()
    assert table.column("tag").to_pylist() == [s.upper() if s else None for s in strings]


@pytest.mark.spark
def test_rebuild_row_id_index_notebook(spark: Any, tmp_path: Path) -> None:
    import lance

    uri = str(tmp_path / "ds")
    small_fragments(uri, "2.1", fragments=2, rows=100, stable=True)
    live = lance.dataset(uri).count_rows()
    ns, shown = run_notebook("rebuild_row_id_index", spark, {"uri": uri, "rows_per_partition": "100"})
    table = metric_table(shown)
    assert int(table["index_rows"]) == live and int(table["index_partitions"]) == -(-live // 100)
    assert int(table["index_version"]) == lance.dataset(uri).version


@pytest.mark.spark
def test_inspect_file_notebook(spark: Any, lance_file: Any) -> None:
    from lance.file import LanceFileReader

    path = lance_file(pa.table({"a": list(range(20)), "b": [f"x{i}" for i in range(20)]}), "2.1")
    _, shown = run_notebook("inspect_file", spark, {"uri": path, "rows": "3"})
    table = metric_table(shown)
    assert int(table["rows"]) == LanceFileReader(path).metadata().num_rows == 20
    assert [r["a"] for r in shown[1].collect()] == [0, 1, 2]


@pytest.mark.spark
def test_vacuum_notebook(spark: Any, tmp_path: Path) -> None:
    """A dry run lists exactly what pylance's cleanup removes from a twin; the real run removes it."""
    from datetime import timedelta

    import lance

    from tests.vacuum.helpers import files, history_dataset, twin

    ours = tmp_path / "ours"
    history_dataset(ours, tag=None)
    theirs = twin(ours, tmp_path / "theirs")
    before = files(ours)
    stats = lance.dataset(str(theirs)).cleanup_old_versions(older_than=timedelta(0))
    gone = set(before) - set(files(theirs))
    assert gone
    widgets = {"uri": str(ours), "older_than": "0s", "dry_run": "true"}
    ns, shown = run_notebook("vacuum", spark, widgets)
    assert files(ours) == before
    assert set(ns["metrics"].removed_paths) == gone  # relative to the dataset
    ns, shown = run_notebook("vacuum", spark, {"uri": str(ours), "older_than": "0s"})
    table = metric_table(shown)
    assert int(table["bytes_removed"]) == stats.bytes_removed
    assert int(table["old_versions"]) == stats.old_versions
    assert set(before) - set(files(ours)) == gone
    assert lance.dataset(str(ours)).to_table() == lance.dataset(str(theirs)).to_table()


@pytest.mark.spark
def test_import_delta_notebook(spark: Any, tmp_path: Path) -> None:
    """A Delta table made by deltalake (two commits) comes out of pylance row for row."""
    import lance
    from deltalake import write_deltalake

    delta = str(tmp_path / "delta")
    first = pa.table({"id": pa.array(range(300), pa.int64()), "s": [f"r{i}" for i in range(300)]})
    second = pa.table({"id": pa.array(range(300, 450), pa.int64()), "s": [None] * 150},
                      schema=first.schema)
    write_deltalake(delta, first)
    write_deltalake(delta, second, mode="append")
    uri = str(tmp_path / "ds.lance")
    widgets = {"delta_uri": delta, "uri": uri, "data_storage_version": "2.1", "max_rows_per_file": "100"}
    _, shown = run_notebook("import_delta", spark, widgets)
    table = metric_table(shown)
    ds = lance.dataset(uri)
    assert int(table["rows"]) == ds.count_rows() == 450 and int(table["new_version"]) == ds.version
    assert ds.data_storage_version == "2.1" and all(
        f.metadata.physical_rows <= 100 for f in ds.get_fragments())
    assert ds.to_table().sort_by("id") == pa.concat_tables([first, second])
    _, shown = run_notebook("import_delta", spark, {**widgets, "mode": "append", "delta_version": "0"})
    assert lance.dataset(uri).count_rows() == 750


@pytest.mark.spark
def test_remap_indices_notebook(spark: Any, tmp_path: Path) -> None:
    """After a deferred compaction, the notebook remaps the BTREE index: pylance answers as
    before and sees no unindexed row."""
    import lance

    from lance_spark_ops.spark.files.compaction import compact
    from tests.index.helpers import build, queries, unindexed

    uri = str(tmp_path / "ds")
    before = queries(build(uri, "2.2", False, scalar=(("id", "BTREE", None),), vector=()))
    compact(None, uri, target_rows_per_fragment=1000, defer_index_remap=True)
    _, shown = run_notebook("remap_indices", spark, {"uri": uri})
    table = metric_table(shown)
    assert table["indices_remapped"] == '{"BTREE": 1}' and int(table["reuse_versions_trimmed"]) == 1
    ds = lance.dataset(uri)
    assert queries(ds) == before and set(unindexed(ds).values()) == {0}


@pytest.mark.spark
def test_maintain_notebook(spark: Any, tmp_path: Path) -> None:
    """Decisions over a directory namespace (dry run: nothing changes), shown as a table."""
    import json
    import os

    from tests.fleet.lake import EXPECTED, POLICY, make_lake

    root = str(tmp_path / "lake")
    make_lake(root)
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(POLICY))
    before = sorted(os.walk(root))
    widgets = {"namespace_impl": "dir", "namespace_properties": f"root={root}", "recursive": "true",
               "policy": str(policy), "report": str(tmp_path / "report")}
    ns, shown = run_notebook("maintain", spark, widgets)
    rows = {r["table"]: r for r in shown[0].collect()}
    assert {t: r["decided"] for t, r in rows.items() if r["status"] == "ok"} == \
        {t: ", ".join(a) for t, a in EXPECTED.items()}
    assert rows["broken"]["status"] == "failed" and sorted(os.walk(root)) == before
    assert (tmp_path / "report" / "index.html").exists()
