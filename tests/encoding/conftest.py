"""Fixtures of the encoding tests."""

from __future__ import annotations

from collections.abc import Iterator

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
def fsst_path(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run FSST on the numpy code, then on the numba kernels at every size (their own
    threshold is 1 MiB) with every input of two strings or more compressed as two halves on
    two threads (``kernel_threads``), then on the kernels again in one thread with the
    decoder sizing its output in a first pass (as it does for huge pages), each as the
    process's codec tuning: modules marked ``usefixtures("fsst_path")`` check all three."""
    from lance_spark_ops.encoding.compression import compiled
    from lance_spark_ops.encoding.tuning import DEFAULT_CODEC_TUNING, CodecTuning, codecs_tuned

    if request.param != "numpy":
        assert compiled.fsst_kernels(DEFAULT_CODEC_TUNING.compiled_min_bytes, DEFAULT_CODEC_TUNING) \
            is not None, "numba kernels did not load"
    least = 1 << 62 if request.param == "numpy" else 0
    tuning = CodecTuning(compiled_min_bytes=least, compiled_loaded_min_bytes=least,
                         split_threads=request.param == "compiled", split_min_bytes=0,
                         fsst_one_pass_max_bytes=0 if request.param == "compiled_sized"
                         else DEFAULT_CODEC_TUNING.fsst_one_pass_max_bytes)
    with codecs_tuned(tuning):
        yield request.param
