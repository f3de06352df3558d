"""Fixtures of the encoding tests."""

from __future__ import annotations

import pytest

from lance_spark_ops.encoding.compression.registry import CODECS, PER_CHUNK_CODECS
from tests.encoding import _mb


@pytest.fixture(params=["ranges", "per_chunk"])
def codec_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Decode mini-block pages with the fast ``*_ranges`` codec paths, then again with the
    per-chunk paths (``PER_CHUNK_CODECS``): modules marked ``usefixtures("codec_path")``
    run every test over both, on the same pylance-written pages."""
    monkeypatch.setattr(_mb, "CODECS_UNDER_TEST", CODECS if request.param == "ranges" else PER_CHUNK_CODECS)
    return request.param


@pytest.fixture(params=["numpy", "compiled", "compiled_sized"])
def fsst_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run FSST on the numpy code, then on the numba kernels at every size (their own
    threshold is 1 MiB) with every input of two strings or more compressed as two halves on
    two threads (``kernel_threads``), then on the kernels again in one thread with the
    decoder sizing its output in a first pass (as it does for huge pages): modules marked
    ``usefixtures("fsst_path")`` check all three."""
    from lance_spark_ops.encoding.compression import compiled, fsst, kernel_threads

    if request.param != "numpy":
        assert compiled.fsst_kernels(compiled.MIN_BYTES) is not None, "numba kernels did not load"
    for name in ("MIN_BYTES", "LOADED_MIN_BYTES"):
        monkeypatch.setattr(compiled, name, 1 << 62 if request.param == "numpy" else 0)
    monkeypatch.setattr(kernel_threads, "ENABLED", request.param == "compiled")
    monkeypatch.setattr(kernel_threads, "MIN_BYTES", 0)
    if request.param == "compiled_sized":
        monkeypatch.setattr(fsst, "ONE_PASS_MAX_BYTES", 0)
    return request.param
