"""Run mutation cases in worker subprocesses (address-space cap, per-case deadline)."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from tests.hostile.mutate import Case

ROOT = Path(__file__).resolve().parents[2]
CASE_DEADLINE_S = 30.0  # a case (one copy + one read of a ~1 MB dataset) takes well under 1 s
MEM_CAP_MB = 256


def _read_line(proc: subprocess.Popen, sel: selectors.BaseSelector) -> dict | None:
    """The worker's next JSON line, or None when it exited or missed the deadline."""
    if not sel.select(timeout=CASE_DEADLINE_S):
        return None
    line = proc.stdout.readline()
    return json.loads(line) if line else None


def run_cases(cases: list[Case], corpus: Path, work: Path) -> dict[int, dict]:
    """``{case index: result}``; a crash or a hang is the result of the case it happened in."""
    cases_file = work / "cases.json"
    cases_file.write_text(json.dumps([asdict(c) for c in cases]))
    results: dict[int, dict] = {}
    start = 0
    while start < len(cases):
        cmd = [sys.executable, "-m", "tests.hostile.worker", str(corpus), str(work), str(cases_file),
               str(start), str(len(cases)), str(MEM_CAP_MB)]
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        current = None
        try:
            while (r := _read_line(proc, sel)) is not None:
                if r.get("start"):
                    current = r["i"]
                else:
                    results[r["i"]], current = r, None
        finally:
            proc.kill()
            rc = proc.wait()
            sel.close()
            proc.stdout.close()
        if current is None:
            break
        results[current] = {"i": current, "status": "crash", "type": f"exit {rc} or over {CASE_DEADLINE_S}s",
                            "msg": "", "sec": CASE_DEADLINE_S, "named": False}
        start = current + 1
    return results


def escapes(cases: list[Case], results: dict[int, dict]) -> list[str]:
    """One line per case that ended other than in a LanceError naming a file (or success)."""
    bad = []
    for i, c in enumerate(cases):
        r = results.get(i, {"status": "missing", "type": "", "msg": ""})
        if r["status"] not in ("ok", "lance") or not r.get("named", True):
            bad.append(f"case {i} {c}: {r['status']} {r['type']} {r['msg'][:200]}")
    return bad
