"""Run a test script in a fresh interpreter (no numba loaded, no threads to fork from)."""

from __future__ import annotations

import subprocess
import sys


def run_fresh(script: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -c script`` with this interpreter; fails the test when it exits non-zero."""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr
    return out
