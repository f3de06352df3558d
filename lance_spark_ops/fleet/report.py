"""The health report of a ``maintain`` run: ``report.json`` (the whole result) and a static
``index.html`` a person opens in a browser. Problems first: failed tables, then the tables that
need (or got) maintenance in priority order - one row each with the health figures (before ->
after when maintenance ran), what was decided and why, what ran and what it changed, and small
inline PNG charts of the state before maintenance (fragment sizes, versions over time) - then
the healthy tables as one compact line each (folded away in a large fleet). Fleet charts
(deleted fraction, unindexed rows) show the worst tables. No JavaScript; the charts need
matplotlib (the ``report`` extra) and are left out without it. Everything shown is escaped;
storage options never reach the report (the result holds none).
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

__all__ = ["action_metrics", "render_html", "write_report"]

FIGURES = (("fragments", "fragments"), ("rows", "live rows"), ("deleted_fraction", "deleted"),
           ("small_fragments", "small fragments"), ("versions", "versions"), ("versions_old", "old versions"),
           ("bytes_old", "old bytes"), ("unreferenced_bytes", "unreferenced bytes"),
           ("reuse_versions_behind", "reuse versions behind"))
FLEET_CHART_TABLES = 20  # the fleet charts show the worst tables, at most this many
HEALTHY_OPEN = 20  # up to this many healthy tables are listed unfolded

# ``div.charts`` only: a bare ``.charts`` would also match the table cell and take it out of
# the table layout (its borders and height no longer line up with the row's other cells)
CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;max-width:1400px}
table{border-collapse:collapse;width:100%;table-layout:fixed}td,th{overflow-wrap:anywhere}
th,td{border-bottom:1px solid #ddd;padding:.35em .5em;vertical-align:top;text-align:left}
thead th{background:#f4f4f4;position:sticky;top:0;z-index:1}
tr.group th{background:#fafafa;font-size:15px;padding-top:.8em}
.ok{color:#1a7f37}.failed{color:#c62828;font-weight:600}.skipped{color:#8a6d00}
.fig{font-variant-numeric:tabular-nums;white-space:nowrap}.muted{color:#777}
.num{text-align:right;font-variant-numeric:tabular-nums}table.healthy{font-size:13px}
ul{margin:0;padding-left:1.1em}img{display:block;max-width:100%}
.metrics{color:#555;font-size:13px}.metrics li{list-style:circle}
div.charts{display:flex;flex-direction:column;align-items:flex-start;gap:.6em}
div.fleet{display:flex;flex-wrap:wrap;align-items:flex-start;gap:1em;margin-bottom:1em}
.summary a{margin-right:1em}summary{cursor:pointer;font-weight:600;margin:1em 0 .5em}
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


def _fragment_chart(health: Mapping[str, Any], when: str = "") -> str | None:
    hist = health.get("fragment_rows_histogram") or []
    if not hist:
        return None

    def draw(ax: Any) -> None:
        ax.bar([str(lo) for lo, _ in hist], [n for _, n in hist], color="#4c78a8")
        ax.set_title(f"fragments by rows (>=){when}", fontsize=8)

    return _png(draw, (2.3, 1.45 if when else 1.3))


def _versions_chart(health: Mapping[str, Any], when: str = "") -> str | None:
    times = health.get("version_times") or []
    if len(times) < 2:
        return None

    unit, scale = _time_unit(times[-1] - times[0])

    def draw(ax: Any) -> None:
        from matplotlib.ticker import FuncFormatter, MaxNLocator

        ago = [(t - times[-1]) / scale for t in times]
        ax.plot(ago, range(len(ago)), marker=".", color="#f58518")
        ax.set_title(f"versions over time ({unit} before latest){when}", fontsize=8)
        # a few short labels: at 2.3 inches wide, matplotlib's default ticks ("-2000", "-1500",
        # ... or six-digit fractions) run into each other
        ax.xaxis.set_major_locator(MaxNLocator(nbins=4, min_n_ticks=2))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:.3g}"))
        ax.yaxis.set_major_locator(MaxNLocator(nbins=4, integer=True))

    return _png(draw, (2.3, 1.45 if when else 1.3))


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

    return _png(draw, (3.6, 0.55 + 0.2 * title.count("\n") + 0.25 * len(rows)))


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _fmt(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if key == "deleted_fraction":
        return f"{100 * value:.1f}%"
    if key.endswith("bytes") or key == "bytes_old":
        return _size(float(value))
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _change(before: Any, after: Any, fmt: Any = str) -> str:
    """``before &rarr; after``, or the one value when nothing changed."""
    return fmt(before) if before == after else f"{fmt(before)} &rarr; {fmt(after)}"


def _figures(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> str:
    if not before:
        return '<span class="muted">not measured</span>'
    after = after or before
    items = []
    for key, label in FIGURES:
        text = _change(before.get(key), after.get(key), lambda v, k=key: html.escape(_fmt(k, v)))
        items.append(f"<li>{html.escape(label)}: <span class=fig>{text}</span></li>")
    for f in before.get("findings") or []:
        cls = "failed" if f.get("refuse") else "skipped"
        where = f" fragment {f['fragment']}" if f.get("fragment") is not None else ""
        items.append(f"<li class=finding><span class={cls}>{html.escape(f['check'])}</span>"
                     f"{html.escape(where)}: {html.escape(f['detail'])}</li>")
    for ix in before.get("indices") or []:
        now = next((i for i in after.get("indices") or [] if i["name"] == ix["name"]), ix)
        unindexed = _change(ix["unindexed_rows"], now["unindexed_rows"], _fmt_int)
        segments = _change(ix["segments"], now["segments"], _fmt_int)
        items.append(f"<li>index {html.escape(ix['name'])} ({html.escape(ix['kind'])}): "
                     f"<span class=fig>{unindexed}</span> unindexed, <span class=fig>{segments}</span>"
                     f" segment{'' if ix['segments'] == now['segments'] == 1 else 's'}</li>")
    return "<ul>" + "".join(items) + "</ul>"


def _fmt_int(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else html.escape(str(value))


def _index_metrics(name: str, m: Mapping[str, Any]) -> str:
    """One index of an index job's metrics, in words."""
    head = f"index {name}" + (f" ({m['type']})" if m.get("type") else "")
    if m.get("skipped"):
        return f"{head}: skipped - {m['skipped']}"
    parts = []
    if "segments_before" in m and "segments_after" in m:
        parts.append(f"segments {m['segments_before']} -> {m['segments_after']}")
    if "partitions_before" in m and "partitions_after" in m:
        parts.append(f"partitions {m['partitions_before']} -> {m['partitions_after']}")
    if m.get("rows_indexed") or m.get("fragments_indexed"):
        parts.append(f"{_plural(int(m.get('rows_indexed') or 0), 'row')} indexed in "
                     f"{_plural(int(m.get('fragments_indexed') or 0), 'fragment')}")
    if m.get("bytes_written"):
        parts.append(f"{_size(float(m['bytes_written']))} written")
    if m.get("retrained"):
        drift = m.get("drift")
        parts.append("retrained" + (f" (drift {drift:.2f})" if isinstance(drift, float) else ""))
    known = {"type", "skipped", "segments_before", "segments_after", "partitions_before", "partitions_after",
             "rows_indexed", "fragments_indexed", "bytes_written", "retrained", "drift", "segments_built"}
    parts += [f"{k.replace('_', ' ')} {_plain(v)}" for k, v in sorted(m.items()) if k not in known]
    return f"{head}: " + (", ".join(parts) or "unchanged")


def _plain(value: Any) -> str:
    """A metric value as words: mappings as ``key value`` pairs, lists joined, no JSON braces."""
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {_plain(v)}" for k, v in sorted(value.items())) or "none"
    if isinstance(value, list | tuple):
        return ", ".join(_plain(v) for v in value) or "none"
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def action_metrics(metrics: Mapping[str, Any]) -> list[str]:
    """An action's metrics as short phrases (``version 4 -> 5``, ``12 fragments -> 1``,
    ``1,200 rows written (5.7 KiB)``, per index: segments and partitions before -> after)."""
    m = dict(metrics)
    out = []
    if "read_version" in m and "new_version" in m:
        commits = m.get("commits")
        out.append(f"version {m['read_version']} -> {m['new_version']}"
                   + (f" ({_plural(int(commits), 'commit')})" if commits not in (None, 1) else ""))
    if "fragments_removed" in m or "fragments_added" in m:
        out.append(f"{_plural(int(m.get('fragments_removed') or 0), 'fragment')} -> "
                   f"{int(m.get('fragments_added') or 0):,}")
    if "rows_written" in m:
        written = f" ({_size(float(m['bytes_written']))})" if m.get("bytes_written") is not None else ""
        out.append(f"{_plural(int(m['rows_written']), 'row')} written{written}")
    if m.get("indices_remapped"):
        out.append(f"indices remapped: {_plain(m['indices_remapped'])}")
    if m.get("reuse_versions_trimmed"):
        out.append(f"{_plural(int(m['reuse_versions_trimmed']), 'reuse version')} trimmed")
    if "old_versions" in m:
        out.append(f"{_plural(int(m['old_versions']), 'old version')} removed")
    if "data_files_removed" in m:
        out.append(f"{_plural(int(m['data_files_removed']), 'data file')} removed")
    if "bytes_removed" in m:
        out.append(f"{_size(float(m['bytes_removed']))} freed")
    if m.get("failed_deletes"):
        out.append(f"{_plural(int(m['failed_deletes']), 'delete')} failed")
    indices = m.get("indices")
    if isinstance(indices, Mapping):
        out += [_index_metrics(str(k), v) for k, v in sorted(indices.items()) if isinstance(v, Mapping)]
    known = {"read_version", "new_version", "commits", "fragments_removed", "fragments_added", "rows_written",
             "bytes_written", "indices_remapped", "reuse_versions_trimmed", "old_versions",
             "data_files_removed", "bytes_removed", "failed_deletes", "indices"}
    out += [f"{k.replace('_', ' ')} {_plain(v)}" for k, v in sorted(m.items())
            if k not in known and v not in ({}, [], None)]
    return out


def _error_text(e: Mapping[str, Any]) -> str:
    text = f'{e.get("type")}: {e.get("message")}'
    return f"<span class=failed>{html.escape(text)}</span>"


def _actions(table: Mapping[str, Any]) -> str:
    if table.get("error") and not table.get("actions"):
        return _error_text(table["error"])
    if not table.get("actions"):
        return '<span class=muted>nothing to do</span>'
    items = []
    for a in table["actions"]:
        status = str(a.get("status") or "")
        cls = "failed" if status == "failed" else "skipped" if status.startswith("skipped") else "ok"
        extra = ""
        if a.get("error"):
            extra = " " + _error_text(a["error"])
        elif a.get("metrics"):
            phrases = action_metrics(a["metrics"])
            if phrases:
                lines = "".join(f"<li>{html.escape(p).replace('-&gt;', '&rarr;')}</li>" for p in phrases)
                extra = f"<ul class=metrics>{lines}</ul>"
        seconds = f' <span class=muted>{a["seconds"]} s</span>' if a.get("seconds") is not None else ""
        items.append(f"<li><b>{html.escape(a['action'])}</b> <span class={cls}>{html.escape(status)}</span>"
                     f"{seconds} - {html.escape(a['reason'])}{extra}</li>")
    return "<ul>" + "".join(items) + "</ul>"


def _groups(tables: Sequence[Mapping[str, Any]], ran: bool) -> list[tuple[str, str, list[Mapping[str, Any]]]]:
    """(anchor, heading, tables): failed, then those needing maintenance (in the result's order,
    which is maintain's priority order), then the healthy ones by name."""
    failed = [t for t in tables if t.get("status") == "failed"]
    acting = [t for t in tables if t.get("status") != "failed" and (t.get("decisions") or t.get("actions"))]
    healthy = sorted((t for t in tables if t.get("status") != "failed" and not (t.get("decisions")
                                                                                 or t.get("actions"))),
                     key=lambda t: str(t.get("table")))
    return [("failed", "failed", sorted(failed, key=lambda t: str(t.get("table")))),
            ("maintenance", "maintained" if ran else "needs maintenance", acting),
            ("healthy", "healthy: nothing to do", healthy)]


def _row(t: Mapping[str, Any], charts: bool, when: str) -> str:
    before = t.get("before")
    pics = ""
    if charts and before:
        alt = when.replace("\n", ", ")
        imgs = [(a, p) for a, p in (("fragments by rows" + alt, _fragment_chart(before, when)),
                                    ("versions over time" + alt, _versions_chart(before, when))) if p]
        pics = "<div class=charts>" + "".join(f'<img alt="{html.escape(alt)}" src="{p}">'
                                                for alt, p in imgs) + "</div>"
    status = html.escape(t.get("status", ""))
    return (f'<tr data-table="{html.escape(t["table"])}"><td><b>{html.escape(t["table"])}</b><br>'
            f'<span class=muted>{html.escape(t.get("uri") or "")}</span><br>'
            f'<span class={status}>{status}</span></td>'
            f'<td class=health>{_figures(before, t.get("after"))}</td>'
            f"<td>{_actions(t)}</td><td class=charts>{pics}</td></tr>")


def _healthy_row(t: Mapping[str, Any]) -> str:
    h = t.get("before") or {}
    cells = [_fmt("fragments", h.get("fragments")), _fmt("rows", h.get("rows")),
             _fmt("deleted_fraction", h.get("deleted_fraction")), _fmt("versions", h.get("versions")),
             str(len(h.get("indices") or [])), _fmt("data_bytes", h.get("data_bytes"))]
    return (f'<tr data-table="{html.escape(t["table"])}"><td><b>{html.escape(t["table"])}</b> '
            f'<span class=muted>{html.escape(t.get("uri") or "")}</span></td>'
            + "".join(f"<td class=num>{html.escape(c)}</td>" for c in cells) + "</tr>")


def _fleet_charts(tables: Sequence[Mapping[str, Any]], when: str) -> str:
    """The worst tables by deleted fraction and by unindexed rows (at most FLEET_CHART_TABLES each)."""
    measured = [t for t in tables if t.get("before")]
    deleted = [(t["table"], 100 * t["before"]["deleted_fraction"]) for t in measured]
    unindexed = [(t["table"], max([i["unindexed_rows"] for i in t["before"]["indices"]] or [0]))
                 for t in measured]
    series = (("deleted rows (%)", "#e45756", deleted),
              ("unindexed rows (largest index)", "#72b7b2", unindexed))
    imgs = []
    for title, color, values in series:
        shown = sorted((v for v in values if v[1] > 0), key=lambda v: -v[1])[:FLEET_CHART_TABLES]
        notes = [when] if when else []
        if len(shown) < len(measured):
            notes.append(f"worst {len(shown)} of {len(measured)} tables")
        title += "\n" + ", ".join(notes) if notes else ""
        png = _fleet_chart(shown, title, color)
        if png:
            imgs.append(f'<img alt="{html.escape(title.replace(chr(10), ", "))}" src="{png}">')
    return "<div class=fleet>" + "".join(imgs) + "</div>" if imgs else ""


def render_html(result: Mapping[str, Any], charts: bool | None = None) -> str:
    """The report page of a ``MaintainResult.to_dict()``."""
    charts = _charts_available() if charts is None else charts
    tables = result.get("tables") or []
    mode_key = result.get("mode") or ("dry run" if result.get("dry_run") else "maintain")
    ran = mode_key == "maintain"  # only then are there two states to show
    when = "\nbefore maintenance" if ran else ""  # the charts' second title line
    groups = _groups(tables, ran)
    body = []
    for anchor, heading, members in groups[:2]:
        if members:
            body.append(f"<tr class=group id={anchor}><th colspan=4>{html.escape(heading)} "
                        f"({len(members)})</th></tr>")
            body += [_row(t, charts, when) for t in members]
    healthy = groups[2][2]
    fold = ""
    if healthy:
        rows = "".join(_healthy_row(t) for t in healthy)
        unfolded = " open" if len(healthy) <= HEALTHY_OPEN else ""
        fold = (f"<details id=healthy{unfolded}><summary>healthy: nothing to do ({len(healthy)})</summary>"
                "<table class=healthy><colgroup><col style='width:46%'>"
                + "<col style='width:9%'>" * 6 + "</colgroup><thead><tr><th>table</th><th class=num>fragments"
                "</th><th class=num>live rows</th><th class=num>deleted</th><th class=num>versions</th>"
                f"<th class=num>indices</th><th class=num>data</th></tr></thead><tbody>{rows}</tbody></table>"
                "</details>")
    fleet = _fleet_charts(tables, when.strip()) if charts else ""
    modes = {"report": "health report: measured only, the decisions are what maintain would run",
             "dry run": "dry run: decisions only, nothing ran", "maintain": "maintenance run"}
    mode = modes.get(mode_key, "maintenance run")
    head = (f"{len(tables)} tables, {result.get('tables_failed', 0)} failed, {result.get('actions_run', 0)} "
            f"actions run, {result.get('actions_skipped', 0)} skipped, {result.get('seconds', 0)} s")
    links = " ".join(f"<a href='#{anchor}'>{len(members)} {html.escape(heading.split(':')[0])}</a>"
                     for anchor, heading, members in groups if members)
    health_head = "health (before &rarr; after)" if ran else "health"
    charts_head = "charts (before maintenance)" if ran else "charts"
    main = ""
    if body:
        main = ("<table class=main><colgroup><col style='width:19%'><col style='width:23%'>"
                "<col style='width:40%'><col style='width:18%'></colgroup>"
                f"<thead><tr><th>table</th><th>{health_head}</th>"
                f"<th>decisions and actions</th><th>{charts_head}</th></tr></thead>"
                f"<tbody>{''.join(body)}</tbody></table>")
    return ("<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
            "<meta name=viewport content='width=device-width,initial-scale=1'>"
            f"<title>Lance fleet health</title><style>{CSS}</style></head><body>"
            f"<h1>Lance fleet health</h1><p>{html.escape(mode)} - {html.escape(head)} - "
            f"{html.escape(time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime()))}</p>"
            f"<p class=summary>{links}</p>{fleet}{main}{fold}</body></html>")


def write_report(result: Mapping[str, Any], directory: str, charts: bool | None = None) -> dict[str, str]:
    """Write ``report.json`` and ``index.html`` into ``directory`` (a local path); their paths."""
    os.makedirs(directory, exist_ok=True)
    paths = {"json": os.path.join(directory, "report.json"), "html": os.path.join(directory, "index.html")}
    with open(paths["json"], "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1, sort_keys=True, default=str)
    with open(paths["html"], "w", encoding="utf-8") as f:
        f.write(render_html(result, charts))
    return paths
