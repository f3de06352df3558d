"""The validate job on a namespace holding one table of each inconsistency (and a good one):
findings as JSON rows naming table, version, fragment, file and check; exit 7; every table
pylance's ``validate()`` rejects has a finding, the good one none. ``maintain`` checks first,
rewrites no inconsistent table and says why; the health report lists the findings."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from lance_spark_ops.fleet.report import render_html
from lance_spark_ops.spark import FleetTarget, maintain, validate
from lance_spark_ops.spark.runtime.cli import EXIT_INCONSISTENT
from tests.table import manifest_mutations as mm

lance = pytest.importorskip("lance")

COMPAT = Path(__file__).parents[1] / "data" / "lance_compat"
POLICY = {"target_rows_per_fragment": 1000, "compact_min_small_fragments": 2,
          "optimize_min_unindexed_rows": 1 << 40}
# table -> (mutation, the checks we must report)
LAKE = {
    "duplicate_entry": ("duplicate_entry", {"duplicate_fragment_id"}),
    "no_files": ("no_files", {"no_data_files"}),
    "shared_file": ("shared_file", {"shared_data_file"}),
    "wrong_rows": ("wrong_physical_rows", {"physical_rows"}),
    "wrong_deleted": ("wrong_deleted_rows", {"deleted_rows"}),
    "wrong_size": ("wrong_file_size", {"file_size"}),
    "wrong_version": ("wrong_file_version", {"file_version"}),
    "ghost_index": ("index_ghost_fragment", {"index_fragment"}),
}


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("validate_lake")
    base = root / "base"
    t = pa.table({"id": pa.array(range(400), pa.int64()), "s": pa.array([f"x{i}" for i in range(400)])})
    lance.write_dataset(t, base, max_rows_per_file=100)
    lance.dataset(base).delete("id % 7 = 3")
    lance.dataset(base).create_scalar_index("id", "BTREE")
    lake = root / "lake"
    lake.mkdir()
    shutil.copytree(base, lake / "good.lance")
    for name, (mutation, _) in LAKE.items():
        shutil.copytree(base, lake / f"{name}.lance")
        mm.apply(lake / f"{name}.lance", [mutation])
    shutil.copytree(COMPAT / "v0.16.0" / "wrong_data_version_no_fix.lance", lake / "mixed.lance")
    return lake


def _pylance_rejects(uri: Path) -> bool:
    try:
        lance.dataset(str(uri)).validate()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # noqa: BLE001 - OSError / ValueError, or a Rust panic (no_files)
        return True
    return False


def test_findings_per_table(lake: Path) -> None:
    for name, (_, checks) in {**LAKE, "good": (None, set()),
                              "mixed": (None, {"duplicate_fragment_id", "mixed_file_versions"})}.items():
        uri = lake / f"{name}.lance"
        m = validate(None, str(uri), table=name)
        got = {f["check"] for f in m.findings}
        assert checks <= got and (got == set()) == (not checks), (name, m.findings)
        assert m.consistent == (not checks)
        if _pylance_rejects(uri):
            assert not m.consistent, name  # whatever pylance's validate() rejects, we report
        for f in m.findings:
            assert set(f) == {"table", "version", "fragment", "file", "check", "detail"}
            assert f["table"] == name


def test_validate_job_on_a_namespace(spark, lake: Path, capsys: pytest.CaptureFixture) -> None:
    from jobs.validate import main

    code = main(["--namespace-impl", "dir", "--namespace-prop", f"root={lake}"], {})
    out = capsys.readouterr().out.strip().splitlines()
    summary = json.loads(out[-1])
    assert code == EXIT_INCONSISTENT == summary["exit_code"] == 7
    assert summary["tables_consistent"] == 1 and summary["tables_inconsistent"] == len(LAKE) + 1
    rows = [json.loads(line) for line in out[:-1] if line.startswith("{")]
    for name, (_, checks) in LAKE.items():
        assert checks <= {r["check"] for r in rows if r["table"] == name}, name
    assert any(line.startswith("good version ") and "consistent" in line for line in out)
    assert any(line.startswith("mixed version 2: INCONSISTENT") for line in out)


def test_maintain_refuses_inconsistent_tables(lake: Path, tmp_path: Path) -> None:
    work = tmp_path / "lake"
    shutil.copytree(lake, work)
    def versions_of(p: Path) -> list[str]:  # pylance cannot open some of them: the manifest names
        return sorted(f.name for f in (p / "_versions").iterdir())

    versions = {p.name: versions_of(p) for p in work.iterdir()}
    result = maintain(None, FleetTarget(("dir", {"root": str(work)})), POLICY, dry_run=True).to_dict()
    tables = {t["table"]: t for t in result["tables"]}
    # what the manifest shows: refused before any decision
    for name in ("duplicate_entry", "no_files", "wrong_version", "mixed"):
        t = tables[name]
        assert t["status"] == "failed" and t["error"]["type"] == "InconsistentDatasetError", name
        assert "not maintained" in t["error"]["message"] and t["decisions"] == [], name
        assert t["before"]["findings"], name
    assert tables["good"]["status"] == "ok" and tables["good"]["decisions"]  # small fragments: compact
    assert tables["shared_file"]["status"] == "ok" and tables["shared_file"]["before"]["findings"]
    page = render_html(result, charts=False)
    assert "duplicate_fragment_id" in page and "mixed_file_versions" in page and "not maintained" in page
    result = maintain(None, FleetTarget(("dir", {"root": str(work)})), POLICY).to_dict()
    tables = {t["table"]: t for t in result["tables"]}
    assert tables["good"]["status"] == "ok" and tables["good"]["actions"]
    # what only the files show (counts, sizes): the rewrite's tasks refuse, nothing is committed
    for name in ("wrong_deleted", "wrong_size"):
        t = tables[name]
        assert t["status"] == "failed" and t["error"]["type"] == "InconsistentDatasetError", (name, t)
    for p in work.iterdir():
        name = p.name[: -len(".lance")]
        if name not in ("good", "shared_file", "ghost_index", "wrong_rows"):
            assert versions_of(p) == versions[p.name], name  # nothing rewritten


def test_notebook(spark, lake: Path) -> None:
    from tests.notebooks.test_notebooks import run_notebook

    _, shown = run_notebook("validate", spark, {"uri": str(lake / "good.lance")})
    assert shown[0].count() == 0
    with pytest.raises(RuntimeError, match="inconsistencies"):
        run_notebook("validate", spark, {"uri": str(lake / "duplicate_entry.lance")})
