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
