"""The slow fault suite runs only when asked for (``-m slow``); the fault runs' counters are
printed at the end of the session (and appended to ``$FAULTS_SUMMARY_FILE`` when set)."""

from __future__ import annotations

import os
from typing import Any

from tests.faults.model import STATS


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    """Deselect this directory's ``slow`` tests unless the mark expression names ``slow``."""
    if "slow" in (config.getoption("markexpr") or ""):
        return
    here = os.path.dirname(__file__)
    drop = [i for i in items if i.get_closest_marker("slow") and str(i.path).startswith(here)]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [i for i in items if i not in drop]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not STATS.runs:
        return
    line = STATS.line()
    terminalreporter.write_line(line)
    for v in STATS.violations[:20]:
        terminalreporter.write_line(f"VIOLATION {v}"[:2000])
    path = os.environ.get("FAULTS_SUMMARY_FILE")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n" + "".join(f"VIOLATION {v}\n" for v in STATS.violations))
