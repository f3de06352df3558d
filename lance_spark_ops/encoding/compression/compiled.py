"""Lazy access to the numba-compiled kernels (``fsst_kernels``).

numba costs ~0.1 s to import and each kernel ~0.05 s to load from its cache (seconds to
compile the first time on a machine), once per process. So the first input of
``CodecTuning.compiled_min_bytes`` loads them (a process that only meets small pages never
does), and once loaded they take every input of ``compiled_loaded_min_bytes`` or more.
Without numba installed, or with ``LSO_NO_COMPILED=1``, everything runs on the numpy code
(``kernels.load``).
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

from lance_spark_ops.encoding.tuning import CodecTuning, codec_tuning
from lance_spark_ops.kernels import load

_loaded: list[ModuleType | None] = []


def fsst_kernels(nbytes: int, tuning: CodecTuning | None = None) -> ModuleType | None:
    """The compiled FSST kernels when an input of ``nbytes`` should use them, else None
    (``tuning``: the thresholds; None: the process's)."""
    t = codec_tuning(tuning)
    if _loaded:
        return _loaded[0] if nbytes >= t.compiled_loaded_min_bytes else None
    return load_kernels() if nbytes >= t.compiled_min_bytes else None


def load_kernels() -> ModuleType | None:
    """The FSST kernels loaded now, whatever the input size (once per process)."""
    if not _loaded:
        _loaded.append(_load())
    return _loaded[0]


def _warm(k: ModuleType) -> None:
    """Each kernel run once on a tiny input."""
    one = np.zeros(1, np.uint16)
    k.compress(np.zeros(1, np.uint8), np.array([0, 1]), 511, np.zeros(65536, np.uint16), one | 4096,
               np.ones(4096, np.uint64), np.zeros(4096, np.uint64), np.zeros(4096, np.uint16))
    lo, hi = np.zeros(1, np.int64), np.ones(1, np.int64)
    k.decompress(np.zeros(1, np.uint8), lo, hi, np.zeros(256, np.uint64), np.ones(256, np.uint8), 1, 8)
    k.expanded_size(np.zeros(1, np.uint8), lo, hi, np.ones(256, np.uint8), 1)
    k.count_tokens(one, np.full(1, -1), np.zeros(512, np.uint64), np.ones(512, np.int64), True,
                   np.zeros(2 * 512 * 512, np.int32))


def _load() -> ModuleType | None:
    return load("lance_spark_ops.encoding.compression.fsst_kernels", _warm, "FSST")
