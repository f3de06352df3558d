"""``maintain`` over a namespace of pylance tables with different needs - our directory
namespace, and pylance's REST server (RestAdapter over the same layout) on 127.0.0.1 through
our REST client: exactly the actions the policy implies run on each table, pylance's answers
are unchanged, the healthy table gets no commit, the broken one is reported and the others
finish; a dry run changes nothing; the job's exit code, JSON line and report. The lake is
written once per module and copied for each test."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import lance
import lance.namespace
import pytest

from lance_spark_ops.fleet.health import measure
from lance_spark_ops.fleet.policy_file import load_policy
from lance_spark_ops.spark.fleet.maintenance import FleetTarget, exit_status, maintain
from lance_spark_ops.spark.runtime.cli import exit_code
from tests.fleet.lake import EXPECTED, POLICY, make_lake

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("template") / "lake"
    make_lake(str(root))
    return root


def _copy(template: Path, tmp_path: Path) -> str:
    """A fresh copy of the lake (its manifest table holds locations relative to the root)."""
    root = tmp_path / "lake"
    shutil.copytree(template, root)
    return str(root)


@contextmanager
def _served(kind: str, root: str) -> Iterator[tuple[str, dict[str, str]]]:
    """The lake as ``kind`` namespace: ours over the directory, or pylance's REST server."""
    if kind == "dir":
        yield "dir", {"root": root}
        return
    with lance.namespace.RestAdapter("dir", {"root": root}, host="127.0.0.1", port=0) as server:
        yield "rest", {"uri": f"http://127.0.0.1:{server.port}"}


def _snapshot(root: str) -> dict[str, tuple[int, int]]:
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            st = os.stat(os.path.join(d, f))
            out[os.path.join(d, f)] = (st.st_size, st.st_mtime_ns)
    return out


def _answers(locations: dict[str, str]) -> dict[str, object]:
    return {name: lance.dataset(loc).to_table().sort_by("id") for name, loc in locations.items()
            if name != "broken"}


def _decided(result) -> dict[str, list[str]]:
    return {t.table: [d["action"] for d in t.decisions] for t in result.tables if t.status == "ok"}


def test_dry_run_decides_by_policy_and_changes_nothing(template, tmp_path, capsys) -> None:
    root = _copy(template, tmp_path)
    assert all(loc.startswith(root) for loc in make_locations(root).values())
    before = _snapshot(root)
    result = maintain(None, FleetTarget(("dir", {"root": root}), recursive=True), POLICY, dry_run=True)
    assert _decided(result) == EXPECTED
    broken = next(t for t in result.tables if t.table == "broken")
    assert broken.status == "failed" and broken.error["type"] == "CorruptFileError"
    assert exit_status(result, exit_code) == 1
    assert _snapshot(root) == before
    _health_as_pylance_sees_it(result, make_locations(root))

    # the job: same decisions, its JSON line last, exit code 1 (a table failed), the report
    from jobs.maintain import main

    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(POLICY))
    report = tmp_path / "report"
    code = main(["--namespace-impl", "dir", "--namespace-prop", f"root={root}", "--recursive", "--policy",
                 str(policy), "--dry-run", "--report", str(report)], {})
    out = capsys.readouterr().out.strip().splitlines()
    line = json.loads(out[-1])
    assert code == 1 and line["exit_code"] == 1 and line["tables_failed"] == 1
    assert {t["table"]: [d["action"] for d in t["decisions"]] for t in line["tables"]
            if t["status"] == "ok"} == EXPECTED
    assert "  compact: dry run - 12 of 12 fragments below 500 rows (>= 4 and >= 20%)" in out
    saved = json.loads((report / "report.json").read_text())
    assert sorted(t["table"] for t in saved["tables"]) == sorted([*EXPECTED, "broken"])
    assert _snapshot(root) == before


def make_locations(root: str) -> dict[str, str]:
    from lance_spark_ops.namespace import iter_tables, resolve_table

    ns = ("dir", {"root": root})
    return {".".join(t): resolve_table(ns, t).location for t in iter_tables(ns, recursive=True)}


def _health_as_pylance_sees_it(result, locations: dict[str, str]) -> None:
    """The measured figures against pylance's own answers for the same tables."""
    for t in result.tables:
        if t.status != "ok":
            continue
        ds, h = lance.dataset(locations[t.table]), t.before
        frags = ds.get_fragments()
        assert h["versions"] == len(ds.versions()) and h["version"] == ds.version, t.table
        assert h["rows"] == ds.count_rows() and h["fragments"] == len(frags), t.table
        assert h["deleted_rows"] == sum(f.metadata.num_deletions for f in frags), t.table
        for ix in h["indices"]:
            stats = ds.stats.index_stats(ix["name"])
            assert ix["unindexed_rows"] == stats["num_unindexed_rows"], t.table
            assert ix["segments"] == stats["num_indices"], t.table


def test_dry_run_through_a_rest_namespace(template, tmp_path) -> None:
    """The same decisions when the tables come from pylance's REST server on 127.0.0.1."""
    root = _copy(template, tmp_path)
    before = _snapshot(root)
    with _served("rest", root) as rest:
        result = maintain(None, FleetTarget(rest, recursive=True), POLICY, dry_run=True)
    assert _decided(result) == EXPECTED
    assert [t.status for t in result.tables if t.table == "broken"] == ["failed"]
    assert _snapshot(root) == before


@pytest.mark.parametrize("kind", ["dir", "rest"])
def test_maintain_runs_exactly_the_policy_actions(spark, template, tmp_path, kind: str) -> None:
    root = _copy(template, tmp_path)
    locations = make_locations(root)
    answers = _answers(locations)
    versions = {n: lance.dataset(loc).version for n, loc in locations.items() if n != "broken"}
    with _served(kind, root) as ns:
        result = maintain(spark, FleetTarget(ns, recursive=True), POLICY, max_concurrent_tables=2)
    by_name = {t.table: t for t in result.tables}
    expected = EXPECTED
    assert set(by_name) == {*expected, "broken"}
    btree = _builds_btree()
    for name, actions in expected.items():
        t = by_name[name]
        assert t.status == "ok", (name, t.error)
        assert [a["action"] for a in t.actions] == actions, name
        for a in t.actions:
            skipped = a["action"] == "optimize_indices" and not btree
            assert a["status"].startswith("skipped: id_idx") if skipped else a["status"] == "ok", (name, a)
    assert by_name["broken"].status == "failed" and result.tables_failed == 1
    assert exit_status(result, exit_code) == 1

    after = _answers(locations)
    for name, table in after.items():
        assert table.equals(answers[name]), name
    assert lance.dataset(locations["healthy"]).version == versions["healthy"]  # no commit
    assert len(lance.dataset(locations["small"]).get_fragments()) < 12
    assert all(f.deletion_file() is None for f in lance.dataset(locations["deletes"]).get_fragments())
    assert len(lance.dataset(locations["old"]).versions()) == 1
    vacuumed = by_name["old"].actions[0]["metrics"]
    assert (vacuumed["old_versions"], vacuumed["bytes_removed"]) == (by_name["old"].before["versions_old"],
                                                                    by_name["old"].before["bytes_old"])
    remap = lance.dataset(locations["remap"])
    assert remap.to_table(filter="id = 1234").num_rows == 1
    assert measure(locations["remap"], load_policy(POLICY).for_table("remap")).reuse_versions_behind == 0
    assert by_name["small"].after["fragments"] < by_name["small"].before["fragments"]
    deltas = lance.dataset(locations["deltas"])
    assert deltas.stats.index_stats("id_idx")["num_indices"] == (1 if btree else 6)
    assert deltas.stats.index_stats("id_idx")["num_unindexed_rows"] == 0
    assert deltas.to_table(filter="id = 4321").num_rows == 1 and len(deltas.versions()) == 1
    mixed = lance.dataset(locations["mixed"])
    assert len(mixed.get_fragments()) < 13 and len(mixed.versions()) == 1
    indexed = lance.dataset(locations["staging.indexed"])
    assert indexed.stats.index_stats("id_idx")["num_unindexed_rows"] == (0 if btree else 1000)
    assert indexed.version == versions["staging.indexed"] + (1 if btree else 0)
    assert indexed.to_table(filter="id = 2500").num_rows == 1

    # a re-run measures again: nothing left to do (but what this build cannot do yet)
    with _served(kind, root) as ns:
        again = maintain(spark, FleetTarget(ns, recursive=True), POLICY, dry_run=True)
    assert _decided(again) == {**dict.fromkeys(expected, []),
                               **({} if btree else {"staging.indexed": ["optimize_indices"],
                                                    "deltas": ["optimize_indices"]})}


def _builds_btree() -> bool:
    """Whether this build has the BTREE segment builder (optimize_indices skips the index without)."""
    from lance_spark_ops.errors import UnsupportedError
    from lance_spark_ops.spark.indices.index_registry import builder_for

    try:
        builder_for("BTREE")
    except UnsupportedError:
        return False
    return True


def test_budget_spent_runs_nothing(spark, template, tmp_path) -> None:
    root = _copy(template, tmp_path)
    before = _snapshot(root)
    result = maintain(spark, FleetTarget(("dir", {"root": root})), POLICY, budget_seconds=1e-9)
    assert result.actions_run == 0 and result.actions_skipped == sum(
        len(v) for k, v in EXPECTED.items() if not k.startswith("staging."))
    assert all(a["status"] == "skipped: budget" for t in result.tables for a in t.actions)
    assert _snapshot(root) == before
