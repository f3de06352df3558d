"""``strategy.level_codecs`` (the level codecs of a flush's pages chosen in one pass) makes
the choice ``level_codec`` makes page by page - the per-page choice is the one checked
against pylance's files (test_strategy) - for page sets covering RLE, inline and
out-of-line bitpacking, raw and zstd-wrapped raw levels, runs over 255 values and pages
that RLE wins only against raw or only against bitpacking."""

from __future__ import annotations

import numpy as np
import pytest

from lance_spark_ops.encoding.compression.strategy import level_codec, level_codecs


def _page(rng: np.random.Generator, kind: int, size: int) -> np.ndarray:
    if kind == 0:  # rep-like: a 1 at each row start
        return (rng.random(size) < 0.15).astype(np.uint16)
    if kind == 1:  # def-like: rare empty lists
        return (rng.random(size) < 0.03).astype(np.uint16)
    if kind == 2:  # long runs (over 255)
        return np.repeat(rng.integers(0, 4, size // 300 + 1), 300)[:size].astype(np.uint16)
    if kind == 3:  # wide random: raw (zstd when big)
        return rng.integers(0, 60_000, size).astype(np.uint16)
    return np.full(size, int(rng.integers(0, 3)), np.uint16)  # constant


@pytest.mark.parametrize("version", ["2.1", "2.2"])
@pytest.mark.parametrize("max_size", [5, 1100, 3000, 70_000])
def test_level_codecs_equal_page_by_page(version: str, max_size: int) -> None:
    rng = np.random.default_rng(max_size)
    for _ in range(60):
        sizes = rng.integers(1, max_size, int(rng.integers(1, 6)))
        pages = [_page(rng, int(rng.integers(0, 5)), int(s)) for s in sizes]
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        got = level_codecs(np.concatenate(pages), bounds, version)
        assert got == [level_codec(p, version) for p in pages]
