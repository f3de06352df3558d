"""Lazy access to the numba-compiled kernels (``fsst_kernels``).

numba costs ~0.1 s to import and each kernel ~0.05 s to load from its cache (seconds to
compile the first time on a machine), once per process. So the first input of
``MIN_BYTES`` loads them (a process that only meets small pages never does), and once
loaded they take every input of ``LOADED_MIN_BYTES`` or more. Without numba installed,
or with ``LSO_NO_COMPILED=1``, everything runs on the numpy code.
"""

from __future__ import annotations

import os
from types import ModuleType

MIN_BYTES = int(os.environ.get("LSO_COMPILED_MIN_BYTES", 1 << 20))  # an input this big loads the kernels
LOADED_MIN_BYTES = 4096  # ... which then take inputs from this size

_loaded: list[ModuleType | None] = []


def fsst_kernels(nbytes: int) -> ModuleType | None:
    """The compiled FSST kernels when an input of ``nbytes`` should use them, else None."""
    if _loaded:
        return _loaded[0] if nbytes >= LOADED_MIN_BYTES else None
    if nbytes < MIN_BYTES:
        return None
    _loaded.append(_load())
    return _loaded[0]


def _load() -> ModuleType | None:
    if os.environ.get("LSO_NO_COMPILED"):
        return None
    try:
        from lance_spark_ops.encoding.compression import fsst_kernels
    except ImportError:  # numba missing or broken on this platform: numpy it is
        return None
    return fsst_kernels
