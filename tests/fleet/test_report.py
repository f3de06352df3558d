"""The health report: opened in headless Chromium it renders without console errors, every
table has its row, the charts are images, and the layout holds (every cell of a row is a table
cell with the row's top and bottom, the cells abut, nothing overflows) - for the test lake and
for a fleet of 200 tables, problems first, healthy ones folded; action metrics in words;
report-only pages without "before -> after". Without matplotlib it has no charts but the same
rows. The policy file's keys and overrides."""

from __future__ import annotations

import html
import json
import re
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
from tests.fleet.fleet_result import fleet_result
from tests.fleet.lake import EXPECTED, POLICY, make_lake

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _chromium(args: list[str], page: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
                           "--v=0", *args, f"file://{page}"], capture_output=True, text=True, timeout=120)


def _console(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "CONSOLE" in line]


# appended to a copy of the page: once it has loaded (images decoded), unfold <details>, then
# record every row's cell boxes, display and horizontal overflow, and the page's width
PROBE = """<script>
addEventListener('load', () => {
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  const rows = [...document.querySelectorAll('tr')].map(tr => ({table: tr.dataset.table || null,
    cells: [...tr.children].map(c => { const r = c.getBoundingClientRect();
      return {box: [r.left, r.top, r.right, r.bottom], display: getComputedStyle(c).display,
              over: c.scrollWidth - c.clientWidth}; })}));
  const images = [...document.querySelectorAll('img')].filter(i => i.offsetParent).map(
    i => [i.alt, i.naturalWidth, i.naturalHeight, i.clientWidth, i.clientHeight]);
  const page = [document.documentElement.scrollWidth, document.documentElement.clientWidth];
  const pre = document.createElement('pre');
  pre.id = 'lso-probe';
  pre.textContent = JSON.stringify({rows, images, page});
  document.body.append(pre);
});
</script>"""


def _layout(page_html: str, tmp_path: Path, width: int = 1300) -> dict:
    """The probe's findings for ``page_html`` rendered at ``width`` CSS pixels (``dom``: the
    page after load, ``console``: what it logged)."""
    probe = tmp_path / "probe.html"
    probe.write_text(page_html.replace("</body>", PROBE + "</body>"))
    run = _chromium(["--dump-dom", f"--window-size={width},1100", "--virtual-time-budget=10000"], str(probe))
    found = re.search(r'<pre id="lso-probe">(.*?)</pre>', run.stdout, re.S)
    assert found, run.stderr[-2000:]
    return {**json.loads(html.unescape(found.group(1))), "dom": run.stdout, "console": _console(run.stderr)}


def _assert_laid_out(layout: dict) -> None:
    """Each row: table cells only, one top and one bottom, each cell starting where the last
    ended; no cell and not the page wider than its box; every chart drawn at its own aspect
    ratio and no larger than it was drawn (not stretched to a neighbour's height)."""
    assert layout["rows"]
    for row in layout["rows"]:
        cells = row["cells"]
        assert [c["display"] for c in cells] == ["table-cell"] * len(cells), row
        tops, bottoms = [c["box"][1] for c in cells], [c["box"][3] for c in cells]
        assert max(tops) - min(tops) <= 1 and max(bottoms) - min(bottoms) <= 1, (row["table"], tops, bottoms)
        for a, b in zip(cells, cells[1:], strict=False):
            assert abs(a["box"][2] - b["box"][0]) <= 1, (row["table"], a["box"], b["box"])
        assert all(c["over"] <= 1 for c in cells), row
    width, viewport = layout["page"]
    assert width <= viewport, layout["page"]
    for alt, nw, nh, w, h in layout["images"]:
        assert nw and nh and w <= nw + 1 and h <= nh + 1 and abs(w / h - nw / nh) < 0.03 * nw / nh, \
            (alt, nw, nh, w, h)


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
    layout = _layout(Path(page).read_text(), tmp_path)
    dom = layout["dom"]
    assert layout["console"] == []
    _assert_laid_out(layout)
    for t in result["tables"]:
        assert f'data-table="{t["table"]}"' in dom
    assert dom.count("<tr data-table=") == len(EXPECTED) + 1
    assert dom.count('src="data:image/png;base64,') >= len(EXPECTED)
    _assert_laid_out(_layout(Path(page).read_text(), tmp_path, width=800))
    # the layout check can fail: the charts cell taken out of the table layout is caught
    broken = Path(page).read_text().replace("<style>", "<style>td.charts{display:flex}")
    with pytest.raises(AssertionError):
        _assert_laid_out(_layout(broken, tmp_path))
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


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install -y chromium)")
def test_large_fleet_problems_first(tmp_path) -> None:
    """200 tables: failed ones first, then those maintained (in the result's priority order),
    then the healthy ones folded away as one line each; fleet charts of the worst 20; laid out."""
    result = fleet_result(200, failed=3, acting=8)
    page = render_html(result)
    order = re.findall(r'<tr data-table="([^"]+)"', page)
    assert len(order) == 200
    failed = [t["table"] for t in result["tables"] if t["status"] == "failed"]
    acting = [t["table"] for t in result["tables"] if t["actions"]]
    assert order[:3] == sorted(failed) and order[3:11] == acting
    assert order[11:] == sorted(order[11:])  # healthy, by name
    assert page.index("failed (3)") < page.index("maintained (8)") < page.index("<details id=healthy>")
    assert "healthy: nothing to do (189)" in page  # folded (no `open`): too many to list unfolded
    assert page.count('src="data:image/png') == 2 * 8 + 2  # charts where there is something to see
    assert "worst 20 of 197 tables" in page
    layout = _layout(page, tmp_path)
    assert layout["console"] == []
    _assert_laid_out(layout)


def test_action_metrics_in_words_and_headings() -> None:
    maintained = render_html(fleet_result(6, failed=1, acting=2), charts=False)
    for phrase in ("version 6 &rarr; 8", "13 fragments &rarr; 1", "1,300 rows written (5.7 KiB)",
                   "indices remapped: BTREE 1", "index vec_idx (IVF_PQ): segments 6 &rarr; 1, partitions 16 "
                   "&rarr; 4, 1,000 rows indexed in 1 fragment, 36.5 KiB written", "7 old versions removed",
                   "13 data files removed", "35.9 KiB freed"):
        assert phrase in maintained, phrase
    assert "{&quot;" not in maintained and '{"' not in maintained  # no raw JSON
    assert "health (before &rarr; after)" in maintained and "charts (before maintenance)" in maintained
    assert "fragments: <span class=fig>16 &rarr; 5</span>" in maintained
    with_charts = render_html(fleet_result(6, failed=1, acting=2))
    assert 'alt="fragments by rows, before maintenance"' in with_charts
    assert "deleted rows (%), before maintenance" in with_charts
    for mode in ("report", "dry run"):  # nothing ran: one state, no arrows, no "before maintenance"
        page = render_html(fleet_result(6, failed=1, acting=2, mode=mode), charts=mode == "report")
        assert "&rarr;" not in page and "before maintenance" not in page, mode
        assert "<th>health</th>" in page and "needs maintenance (2)" in page
