"""Lazy access to the numba-compiled kernels (``fsst_kernels``).

numba costs ~0.1 s to import and each kernel ~0.05 s to load from its cache (seconds to
compile the first time on a machine), once per process; the numpy reference code is
faster below ``MIN_BYTES`` of input, so small pages never load numba. Without numba
installed, or with ``LSO_NO_COMPILED=1``, everything runs on the numpy code.
"""

from __future__ import annotations

import os
from types import ModuleType

MIN_BYTES = int(os.environ.get("LSO_COMPILED_MIN_BYTES", 1 << 20))  # inputs from 1 MiB use the kernels

_loaded: list[ModuleType | None] = []


def fsst_kernels(nbytes: int) -> ModuleType | None:
    """The compiled FSST kernels when an input of ``nbytes`` should use them, else None."""
    if nbytes < MIN_BYTES:
        return None
    if not _loaded:
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
