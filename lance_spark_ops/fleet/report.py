"""The health report of a ``maintain`` run: ``report.json`` (the whole result) and a static
``index.html`` a person opens in a browser - one row per table (health figures, what was
decided and why, what ran and what it changed, before -> after) and small inline PNG charts
(fragment sizes, versions over time per table; deleted fraction and unindexed rows across the
fleet). No JavaScript; the charts need matplotlib (the ``report`` extra) and are left out
without it. Everything shown is escaped; storage options never reach the report (the result
holds none).
"""

from __future__ import annotations

import base64
import html
import io
import json
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["render_html", "write_report"]

FIGURES = (("fragments", "fragments"), ("rows", "live rows"), ("deleted_fraction", "deleted"),
           ("small_fragments", "small fragments"), ("versions", "versions"), ("versions_old", "old versions"),
           ("bytes_old", "old bytes"), ("unreferenced_bytes", "unreferenced bytes"),
           ("reuse_versions_behind", "reuse versions behind"))

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;max-width:1400px}
table{border-collapse:collapse;width:100%;table-layout:fixed}td{overflow-wrap:anywhere}
th,td{border-bottom:1px solid #ddd;padding:.35em .5em;vertical-align:top;text-align:left}
th{background:#f4f4f4;position:sticky;top:0}
.ok{color:#1a7f37}.failed{color:#c62828;font-weight:600}.skipped{color:#8a6d00}
.fig{font-variant-numeric:tabular-nums;white-space:nowrap}.muted{color:#777}
ul{margin:0;padding-left:1.1em}img{display:block;max-width:100%}
td.charts .charts{flex-direction:column}.charts{display:flex;gap:.6em;flex-wrap:wrap}
"""


def _charts_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _png(draw: Any, size: tuple[float, float] = (2.3, 1.3)) -> str:
    """A data: URI of the PNG ``draw(ax)`` makes."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=90)
    ax = fig.add_subplot()
    draw(ax)
    ax.tick_params(labelsize=7)
    fig.tight_layout(pad=0.4)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _fragment_chart(health: Mapping[str, Any]) -> str | None:
    hist = health.get("fragment_rows_histogram") or []
    if not hist:
        return None

    def draw(ax: Any) -> None:
        ax.bar([str(lo) for lo, _ in hist], [n for _, n in hist], color="#4c78a8")
        ax.set_title("fragments by rows (>=)", fontsize=8)

    return _png(draw)


def _versions_chart(health: Mapping[str, Any]) -> str | None:
    times = health.get("version_times") or []
    if len(times) < 2:
        return None

    unit, scale = _time_unit(times[-1] - times[0])

    def draw(ax: Any) -> None:
        from matplotlib.ticker import FuncFormatter, MaxNLocator

        ago = [(t - times[-1]) / scale for t in times]
        ax.plot(ago, range(len(ago)), marker=".", color="#f58518")
        ax.set_title(f"versions over time ({unit} before latest)", fontsize=8)
        # a few short labels: at 2.3 inches wide, matplotlib's default ticks ("-2000", "-1500",
        # ... or six-digit fractions) run into each other
        ax.xaxis.set_major_locator(MaxNLocator(nbins=4, min_n_ticks=2))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:.3g}"))
        ax.yaxis.set_major_locator(MaxNLocator(nbins=4, integer=True))

    return _png(draw)


def _time_unit(span: float) -> tuple[str, float]:
    """The unit the versions chart counts in: the largest in which the span is at least 2."""
    for unit, scale in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if span >= 2 * scale:
            return unit, scale
    return "s", 1.0


def _fleet_chart(rows: Sequence[tuple[str, float]], title: str, color: str) -> str | None:
    if not rows:
        return None

    def draw(ax: Any) -> None:
        ax.barh([n for n, _ in rows], [v for _, v in rows], color=color)
        ax.invert_yaxis()
        ax.set_title(title, fontsize=8)

    return _png(draw, (3.6, 0.4 + 0.25 * len(rows)))


def _fmt(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if key == "deleted_fraction":
        return f"{100 * value:.1f}%"
    if key.endswith("bytes") or key == "bytes_old":
        n = float(value)
        for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
            if n < 1024 or unit == "TiB":
                return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
            n /= 1024
    return str(value)


def _figures(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> str:
    if not before:
        return '<span class="muted">not measured</span>'
    items = []
    for key, label in FIGURES:
        b, a = before.get(key), (after or before).get(key)
        text = _fmt(key, b) if a == b else f"{_fmt(key, b)} &rarr; {_fmt(key, a)}"
        items.append(f"<li>{html.escape(label)}: <span class=fig>{text}</span></li>")
    for f in before.get("findings") or []:
        cls = "failed" if f.get("refuse") else "skipped"
        where = f" fragment {f['fragment']}" if f.get("fragment") is not None else ""
        items.append(f"<li class=finding><span class={cls}>{html.escape(f['check'])}</span>"
                     f"{html.escape(where)}: {html.escape(f['detail'])}</li>")
    for ix in before.get("indices") or []:
        now = next((i for i in (after or before).get("indices") or [] if i["name"] == ix["name"]), ix)
        items.append(f"<li>index {html.escape(ix['name'])} ({html.escape(ix['kind'])}): "
                     f"<span class=fig>{ix['unindexed_rows']} &rarr; {now['unindexed_rows']}</span> "
                     "unindexed, "
                     f"{ix['segments']} &rarr; {now['segments']} segments</li>")
    return "<ul>" + "".join(items) + "</ul>"


def _actions(table: Mapping[str, Any]) -> str:
    if table.get("error") and not table.get("actions"):
        e = table["error"]
        return f'<span class=failed>{html.escape(e["type"])}: {html.escape(e["message"])}</span>'
    if not table.get("actions"):
        return '<span class=muted>nothing to do</span>'
    items = []
    for a in table["actions"]:
        status = str(a.get("status") or "")
        cls = "failed" if status == "failed" else "skipped" if status.startswith("skipped") else "ok"
        extra = ""
        if a.get("error"):
            e = a["error"]
            extra = f' <span class=failed>{html.escape(e["type"])}: {html.escape(e["message"])}</span>'
        elif a.get("metrics"):
            shown = ", ".join(f"{k} {json.dumps(v, sort_keys=True) if isinstance(v, dict) else v}"
                              for k, v in sorted(a["metrics"].items()) if v not in ({}, None))
            extra = f"<br><span class=muted>{html.escape(shown)}</span>"
        items.append(f"<li><b>{html.escape(a['action'])}</b> <span class={cls}>{html.escape(status)}</span>"
                     f" - {html.escape(a['reason'])}{extra}</li>")
    return "<ul>" + "".join(items) + "</ul>"


def render_html(result: Mapping[str, Any], charts: bool | None = None) -> str:
    """The report page of a ``MaintainResult.to_dict()``."""
    charts = _charts_available() if charts is None else charts
    tables = result.get("tables") or []
    rows = []
    for t in tables:
        before = t.get("before")
        pics = ""
        if charts and before:
            imgs = [p for p in (_fragment_chart(before), _versions_chart(before)) if p]
            pics = "<div class=charts>" + "".join(f'<img alt="chart" src="{p}">' for p in imgs) + "</div>"
        status = html.escape(t.get("status", ""))
        rows.append(f'<tr data-table="{html.escape(t["table"])}"><td><b>{html.escape(t["table"])}</b><br>'
                    f'<span class=muted>{html.escape(t.get("uri") or "")}</span><br>'
                    f'<span class={status}>{status}</span></td>'
                    f'<td class=health>{_figures(before, t.get("after"))}</td>'
                    f"<td>{_actions(t)}</td><td class=charts>{pics}</td></tr>")
    fleet = ""
    if charts:
        measured = [t for t in tables if t.get("before")]
        deleted = [(t["table"], 100 * t["before"]["deleted_fraction"]) for t in measured]
        unindexed = [(t["table"], max([i["unindexed_rows"] for i in t["before"]["indices"]] or [0]))
                     for t in measured]
        imgs = [p for p in (_fleet_chart(deleted, "deleted rows (%)", "#e45756"),
                            _fleet_chart(unindexed, "unindexed rows (largest index)", "#72b7b2")) if p]
        fleet = "<div class=charts>" + "".join(f'<img alt="fleet chart" src="{p}">' for p in imgs) + "</div>"
    modes = {"report": "health report: measured only, the decisions are what maintain would run",
             "dry run": "dry run: decisions only"}
    mode = modes.get(result.get("mode") or ("dry run" if result.get("dry_run") else ""), "maintenance run")
    head = (f"{len(tables)} tables, {result.get('tables_failed', 0)} failed, {result.get('actions_run', 0)} "
            f"actions run, {result.get('actions_skipped', 0)} skipped, {result.get('seconds', 0)} s")
    return ("<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
            "<meta name=viewport content='width=device-width,initial-scale=1'>"
            f"<title>Lance fleet health</title><style>{CSS}</style></head><body>"
            f"<h1>Lance fleet health</h1><p>{html.escape(mode)} - {html.escape(head)} - "
            f"{html.escape(time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime()))}</p>{fleet}"
            "<table><colgroup><col style='width:19%'><col style='width:23%'><col style='width:40%'>"
            "<col style='width:18%'></colgroup><thead><tr><th>table</th><th>health (before &rarr; after)</th>"
            "<th>decisions and actions</th><th>charts</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></body></html>")


def write_report(result: Mapping[str, Any], directory: str, charts: bool | None = None) -> dict[str, str]:
    """Write ``report.json`` and ``index.html`` into ``directory`` (a local path); their paths."""
    os.makedirs(directory, exist_ok=True)
    paths = {"json": os.path.join(directory, "report.json"), "html": os.path.join(directory, "index.html")}
    with open(paths["json"], "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1, sort_keys=True, default=str)
    with open(paths["html"], "w", encoding="utf-8") as f:
        f.write(render_html(result, charts))
    return paths
