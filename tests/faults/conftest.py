"""The fault runs' counters, printed at the end of the session (and appended to
``$FAULTS_SUMMARY_FILE`` when set). The slow fault suite runs with ``-m slow`` (tests/conftest.py)."""

from __future__ import annotations

import os
from typing import Any

from tests.faults.model import STATS


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
