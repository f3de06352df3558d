"""The health report: opened in headless Chromium it renders without console errors, every
table has its row, the charts are images; without matplotlib it has no charts but the same
rows. The policy file's keys and overrides."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from lance_spark_ops.errors import InvalidInputError
from lance_spark_ops.fleet.decisions import decide
from lance_spark_ops.fleet.health import TableHealth
from lance_spark_ops.fleet.policy import Policy
from lance_spark_ops.fleet.policy_file import load_policy
from lance_spark_ops.fleet.report import render_html, write_report
from lance_spark_ops.spark.fleet.maintenance import FleetTarget, maintain
from tests.fleet.lake import EXPECTED, POLICY, make_lake

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _chromium(args: list[str], page: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
                           "--v=0", *args, f"file://{page}"], capture_output=True, text=True, timeout=120)


def _console(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "CONSOLE" in line]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    base = tmp_path_factory.mktemp("report")
    make_lake(str(base / "lake"))
    result = maintain(None, FleetTarget(("dir", {"root": str(base / "lake")}), recursive=True), POLICY,
                      dry_run=True).to_dict()
    return result, write_report(result, str(base / "out"))["html"]


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install -y chromium)")
def test_report_renders_in_chromium(report, tmp_path) -> None:
    result, page = report
    shot = tmp_path / "shot.png"
    run = _chromium([f"--screenshot={shot}", "--window-size=1300,1100"], page)
    assert run.returncode == 0 and shot.stat().st_size > 10_000, run.stderr[-2000:]
    assert _console(run.stderr) == []
    dom = _chromium(["--dump-dom"], page).stdout
    for t in result["tables"]:
        assert f'data-table="{t["table"]}"' in dom
    assert dom.count("<tr data-table=") == len(EXPECTED) + 1
    assert dom.count('src="data:image/png;base64,') >= len(EXPECTED)
    # the console check can fail: a page that logs an error is caught
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>console.error('boom')</script></body></html>")
    assert _console(_chromium(["--dump-dom"], str(bad)).stderr)

    import matplotlib.image

    pixels = matplotlib.image.imread(str(shot))
    assert (pixels[..., :3] < 0.9).mean() > 0.02  # not a blank page


def test_report_without_charts_and_escaping(report) -> None:
    result, _ = report
    page = render_html(result, charts=False)
    assert "data:image/png" not in page
    assert all(f'data-table="{t["table"]}"' in page for t in result["tables"])
    evil = json.loads(json.dumps(result))
    evil["tables"][0]["table"] = "<script>alert(1)</script>"
    assert "<script>alert" not in render_html(evil, charts=False)


def test_policy_overrides_and_refusals(tmp_path) -> None:
    policies = load_policy({**POLICY, "tables": {"staging.indexed": {"actions": ["vacuum"]}}})
    assert policies.for_table("small").target_rows_per_fragment == 1000
    assert policies.for_table("staging.indexed").optimize_min_unindexed_fraction == 0.2
    assert policies.for_table("staging.indexed").actions == ("vacuum",)
    assert policies.for_table("stagingx.t").optimize_min_unindexed_fraction == 0.1  # a prefix of parts
    path = tmp_path / "p.toml"
    path.write_text('vacuum_retention = "30d"\n[namespaces."a"]\ncompact_min_small_fragments = 2\n')
    assert load_policy(str(path)).for_table("a.t").compact_min_small_fragments == 2
    example = load_policy(str(Path(__file__).parents[2] / "conf" / "examples" / "maintain_policy.toml"))
    assert example.defaults == Policy()  # the example shows the defaults as they are
    assert example.for_table("prod.events").actions == ("compact", "vacuum")
    for bad in ({"nope": 1}, {"actions": ["explode"]}, {"vacuum_retention": "soon"},
                {"small_fragment_ratio": 2.0}, {"namespaces": {"a": {"nope": 1}}},
                {"target_rows_per_fragment": "x"}):
        with pytest.raises(InvalidInputError):
            load_policy(bad)


def test_decide_on_figures() -> None:
    def health(**kw):
        base = dict(uri="u", version=1, fragments=10, rows=10_000, deleted_rows=0, deleted_fraction=0.0,
                    data_bytes=1, small_fragments=0, fragments_over_deleted_threshold=0)
        return TableHealth(**{**base, **kw})

    p = Policy()
    assert decide(health(), p) == []
    assert [d.action for d in decide(health(small_fragments=9, fragments_over_deleted_threshold=3), p)] == \
        ["compact"]  # compaction materializes the deletions too
    assert [d.action for d in decide(health(fragments_over_deleted_threshold=1, reuse_versions_behind=2,
                                            versions_old=10), p)] == \
        ["remap_indices", "materialize_deletions", "vacuum"]
    assert decide(health(small_fragments=9), Policy(actions=("vacuum",))) == []
    assert decide(health(small_fragments=7), p) == []  # below compact_min_small_fragments


def test_versions_chart_labels_do_not_overlap() -> None:
    """Versions seconds apart (and hours apart): few, short tick labels that do not overlap."""
    import base64
    import io

    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from lance_spark_ops.fleet import report as rep

    drawn = []

    def capture(draw, size=(2.3, 1.3)):  # the page's own figure size and drawing
        fig = Figure(figsize=size, dpi=90)
        ax = fig.add_subplot()
        draw(ax)
        ax.tick_params(labelsize=7)
        fig.tight_layout(pad=0.4)
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        renderer = canvas.get_renderer()
        boxes = [t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_text()
                 and ax.get_xlim()[0] <= t.get_position()[0] <= ax.get_xlim()[1]]
        drawn.append(([t.get_text() for t in ax.get_xticklabels()], boxes))
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()

    base = 1.7e9
    for times in ([base + 0.37 * i for i in range(40)], [base + 1.3 * i * i for i in range(30)],
                  [base + 1000 / 39 * i for i in range(40)], [base + 5000 / 39 * i for i in range(40)],
                  [base + 7000 / 39 * i for i in range(40)], [base + 3600 * 7.1 * i for i in range(12)],
                  [base + 86400 * 1.9 / 9 * i for i in range(10)]):
        drawn.clear()
        original = rep._png
        rep._png = capture
        try:
            assert rep._versions_chart({"version_times": times})
        finally:
            rep._png = original
        labels, boxes = drawn[0]
        assert 2 <= len(boxes) <= 6 and all(len(label) <= 6 for label in labels), labels
        for a, b in zip(boxes, boxes[1:], strict=False):
            assert a.x1 + 4 <= b.x0, labels  # no two labels overlap or touch
    assert rep._time_unit(90) == ("s", 1.0) and rep._time_unit(300)[0] == "min"
