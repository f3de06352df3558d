"""Loading a numba-compiled kernel module once per process, the numpy code as its fallback.

Each kernel module (FSST, k-means, HNSW) is imported and run once on a tiny input, which
compiles it into numba's cache the first time on a machine (seconds) and loads it from there
afterwards (~0.1-0.3 s per process). Any failure - numba missing or broken on this platform,
no writable cache directory - leaves the numpy code in charge, with a warning;
``LSO_NO_COMPILED=1`` turns every kernel off. ``python -m lance_spark_ops.compile_kernels``
compiles them all ahead of any job.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable
from types import ModuleType

log = logging.getLogger(__name__)


def load(module: str, warm: Callable[[ModuleType], object], what: str) -> ModuleType | None:
    """``module`` imported and ``warm(module)`` run (compiling or loading its kernels), or None
    when kernels are off or that fails (``what`` names them in the warning)."""
    if os.environ.get("LSO_NO_COMPILED"):
        return None
    try:
        kernels = importlib.import_module(module)
        warm(kernels)
    except Exception as e:  # noqa: BLE001 - the numpy code does the same work, slower
        log.warning("compiled %s kernels unavailable (%s: %s); using the numpy code", what,
                    type(e).__name__, e)
        return None
    return kernels
