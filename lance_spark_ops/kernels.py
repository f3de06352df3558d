"""Loading a numba-compiled kernel module once per process, the numpy code as its fallback.

Each kernel module (FSST, k-means, HNSW) is imported and run once on a tiny input, which
compiles it into numba's cache the first time on a machine (seconds) and loads it from there
afterwards (~0.1-0.3 s per process). Any failure - numba missing or broken on this platform,
no writable cache directory - leaves the numpy code in charge, with a warning;
``LSO_NO_COMPILED=1`` turns every kernel off. ``python -m lance_spark_ops.compile_kernels``
compiles them all ahead of any job, and builds the modules that declare ``AOT_EXPORTS`` ahead of
time (``kernels_aot``): those then load without importing numba (~1 ms instead of 0.5-1.5 s).
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable
from types import ModuleType

from lance_spark_ops import kernels_aot

log = logging.getLogger(__name__)


def load(module: str, warm: Callable[[ModuleType], object], what: str) -> ModuleType | None:
    """``module`` imported and ``warm(module)`` run (compiling or loading its kernels), or None
    when kernels are off or that fails (``what`` names them in the warning). The extension built
    ahead of time for this machine (``kernels_aot``) first, when there is one and it passes
    ``warm``."""
    if os.environ.get("LSO_NO_COMPILED"):
        return None
    built = kernels_aot.load_built(module)
    if built is not None:
        try:
            warm(built)
            return built
        except Exception as e:  # noqa: BLE001 - the jitted kernels do the same work
            log.warning("ahead-of-time %s kernels unusable (%s: %s); loading them with numba", what,
                        type(e).__name__, e)
    try:
        kernels = importlib.import_module(module)
        warm(kernels)
    except Exception as e:  # noqa: BLE001 - the numpy code does the same work, slower
        log.warning("compiled %s kernels unavailable (%s: %s); using the numpy code", what,
                    type(e).__name__, e)
        return None
    return kernels
