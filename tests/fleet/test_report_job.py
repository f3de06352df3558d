"""The report job only measures: ``jobs/report.py`` and ``spark.report`` write report.json and
index.html with every table's health and what the policy would run, and no dataset changes
(pylance's version and the file listing are the same before and after); a usage error exits 2
before any table is read."""

from __future__ import annotations

import json
import os

import lance
import pytest

from lance_spark_ops.spark import FleetTarget, report
from tests.fleet.lake import EXPECTED, POLICY, make_lake


def _state(root: str, locations: dict[str, str]) -> tuple[dict[str, int], dict[str, tuple[int, int]]]:
    versions = {n: lance.dataset(loc).version for n, loc in locations.items() if n != "broken"}
    files = {}
    for d, _, names in os.walk(root):
        for f in names:
            st = os.stat(os.path.join(d, f))
            files[os.path.join(d, f)] = (st.st_size, st.st_mtime_ns)
    return versions, files


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, str]]:
    root = str(tmp_path_factory.mktemp("report_job") / "lake")
    return root, make_lake(root)


def test_report_job_measures_only(lake, tmp_path, capsys) -> None:
    from jobs.report import main

    root, locations = lake
    before = _state(root, locations)
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(POLICY))
    out_dir = tmp_path / "report"
    code = main(["--namespace-impl", "dir", "--namespace-prop", f"root={root}", "--recursive",
                 "--policy", str(policy), "--report", str(out_dir)], {})
    out = capsys.readouterr().out.strip().splitlines()
    line = json.loads(out[-1])
    assert code == 1 and line["exit_code"] == 1 and line["job"] == "report"  # the broken table failed
    assert line["mode"] == "report" and line["actions_run"] == 0 and line["tables_failed"] == 1
    assert "  compact: would run - 12 of 12 fragments below 500 rows (>= 4 and >= 20%)" in out
    saved = json.loads((out_dir / "report.json").read_text())
    tables = {t["table"]: t for t in saved["tables"]}
    assert sorted(tables) == sorted([*EXPECTED, "broken"])
    for name, actions in EXPECTED.items():
        assert [d["action"] for d in tables[name]["decisions"]] == actions, name
        assert [a["status"] for a in tables[name]["actions"]] == ["would run"] * len(actions), name
        assert tables[name]["before"]["version"] == lance.dataset(locations[name]).version
        assert tables[name]["before"]["fragment_rows_histogram"]  # the chart series are in the file
    assert tables["broken"]["status"] == "failed" and tables["broken"]["error"]["type"] == "CorruptFileError"
    page = (out_dir / "index.html").read_text()
    assert all(f'data-table="{t}"' in page for t in tables) and "measured only" in page
    assert _state(root, locations) == before  # nothing committed, nothing deleted


def test_report_python_entry_point(lake, tmp_path) -> None:
    root, locations = lake
    before = _state(root, locations)
    result = report(None, FleetTarget(("dir", {"root": root}), "staging"), str(tmp_path / "r"), POLICY)
    assert [(t.table, [d["action"] for d in t.decisions]) for t in result.tables] == \
        [("staging.indexed", EXPECTED["staging.indexed"])]
    saved = json.loads((tmp_path / "r" / "report.json").read_text())
    assert [t["table"] for t in saved["tables"]] == ["staging.indexed"]
    assert (tmp_path / "r" / "index.html").exists()
    assert _state(root, locations) == before


@pytest.mark.parametrize("argv", [
    [],                                                      # no targets
    ["/some/uri"],                                           # no --report
    ["/some/uri", "--report", "/tmp/x", "--recursive"],      # --recursive without a namespace
    ["/some/uri", "--report", "/tmp/x", "--namespace-impl", "dir", "--namespace-prop", "root=/r"],
    ["/some/uri", "--report", "/tmp/x", "--dry-run"],        # not a flag of this job
])
def test_report_usage_error_exits_2(argv, tmp_path, capsys) -> None:
    from jobs.report import main

    assert main(argv, {}) == 2
    out, err = capsys.readouterr()
    line = json.loads(out.strip().splitlines()[-1])
    assert line["exit_code"] == 2 and line["job"] == "report" and "report: error:" in err
