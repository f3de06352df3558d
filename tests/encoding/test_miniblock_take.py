"""``MiniBlockDecoder.decode(fetch, rows)``: random row subsets equal the same rows of the
full decode, and only the chunks holding those rows are read."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops.encoding.blocks import FixedSizeListBlock, StructBlock
from lance_spark_ops.encoding.layout.miniblock import MiniBlockDecoder
from lance_spark_ops.encoding.page import PageData
from tests.encoding._mb import Written, block_numpy, item_values, list_column, table_with_meta, write

# every test twice: fast *_ranges decode paths, then per-chunk paths, same pylance pages
pytestmark = pytest.mark.usefixtures("codec_path")

N = 6000


def _lists(n: int, seed: int, max_len: int, item_nulls: bool) -> pa.Array:
    r = np.random.default_rng(seed)
    rows = []
    for _i in range(n):
        k = int(r.integers(0, 6))
        if k == 1:
            rows.append(None)
        elif k == 2:
            rows.append([])
        else:
            vals = r.integers(0, 1000, int(r.integers(1, max_len + 1))).tolist()
            rows.append([None if item_nulls and v % 5 == 0 else v for v in vals])
    return pa.array(rows, pa.list_(pa.int32()))


def _fsl() -> pa.Array:
    r = np.random.default_rng(2)
    items = pa.array(r.integers(0, 2**31, N * 4).astype(np.int32), mask=r.random(N * 4) < 0.2)
    return pa.FixedSizeListArray.from_arrays(items, 4, mask=pa.array(r.random(N) < 0.1))


TABLES = {
    "bitpacked": lambda: pa.table(
        {"x": pa.array(np.random.default_rng(0).integers(0, 5000, N).astype(np.int32))}
    ),
    "flat_nullable": lambda: pa.table(
        {"x": pa.array(np.random.default_rng(1).integers(-(2**62), 2**62, N), mask=np.arange(N) % 3 == 0)}
    ),
    "rle": lambda: pa.table({"x": pa.array(np.repeat(np.arange(N // 50, dtype=np.int64), 50))}),
    "bool": lambda: pa.table({"x": pa.array(np.random.default_rng(4).random(N) < 0.5)}),
    "zstd": lambda: table_with_meta(pa.array(np.random.default_rng(5).random(N)), compression="zstd"),
    "fsl": lambda: pa.table({"x": _fsl()}),
    "packed": lambda: table_with_meta(
        pa.StructArray.from_arrays(
            [pa.array(np.arange(N, dtype=np.int64)), pa.array(np.arange(N, dtype=np.int16))], names=["a", "b"]
        ),
        packed="true",
    ),
    "strings": lambda: pa.table({"x": pa.array([f"v{i % 13}" for i in range(N)])}),
    "list_short": lambda: pa.table({"x": _lists(N, 6, 5, False)}),
    "list_null_items": lambda: pa.table({"x": _lists(N, 7, 5, True)}),
    "list_long_rows": lambda: pa.table({"x": _lists(160, 8, 3000, False)}),
    "list_long_null_items": lambda: pa.table({"x": _lists(120, 9, 2500, True)}),
}


def _rows_of(pd: PageData, kind: str) -> list:
    """Comparable per-row Python values of a decoded page."""
    if kind.startswith("list"):
        return list_column(pd, np.int32)
    valid = [True] * pd.num_rows if pd.def_ is None else (pd.def_ == 0).tolist()
    blk = pd.values
    if isinstance(blk, FixedSizeListBlock):
        items = block_numpy(blk.items, np.int32).reshape(-1, 4).tolist()
        iv = blk.item_validity.reshape(-1, 4).tolist()
        vals = [
            [x if m else None for x, m in zip(row, v, strict=True)] for row, v in zip(items, iv, strict=True)
        ]
    elif isinstance(blk, StructBlock):
        vals = list(
            zip(
                block_numpy(blk.children[0], np.int64).tolist(),
                block_numpy(blk.children[1], np.int16).tolist(),
                strict=True,
            )
        )
    elif kind == "strings":  # dictionary indices
        vals = block_numpy(pd.values, f"<u{pd.values.bits_per_value // 8}").tolist()
    elif kind == "bool":
        vals = block_numpy(blk, bool).tolist()
    else:
        vals = item_values(
            pd, np.int64 if kind in ("flat_nullable", "rle") else np.float64 if kind == "zstd" else np.int32
        ).tolist()
    return [v if ok else None for v, ok in zip(vals, valid, strict=True)]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    base = tmp_path_factory.mktemp("take")
    cache: dict[tuple[str, str], Written] = {}

    def get(kind: str, version: str) -> Written:
        if (kind, version) not in cache:
            cache[(kind, version)] = write(base, TABLES[kind](), version, kind)
        return cache[(kind, version)]

    return get


@pytest.mark.parametrize("version", ["2.1", "2.2"])
@pytest.mark.parametrize("kind", sorted(TABLES))
def test_random_rows_match_full_decode(kind: str, version: str, files) -> None:
    w = files(kind, version)
    r = np.random.default_rng(11)
    for page in w.column_pages():
        assert page.decoder is not None
        full = _rows_of(page.decode(), kind)
        n = page.num_rows
        subsets = [
            np.array([0]),
            np.array([n - 1]),
            np.arange(n // 2, n // 2 + 3),
            np.arange(0, n, 97),
            np.arange(1, n - 1),
            np.array([], dtype=np.int64),
        ]
        subsets += [
            np.sort(r.choice(n, size=int(r.integers(1, min(n, 400))), replace=False)) for _ in range(6)
        ]
        for rows in subsets:
            pd = page.decode(rows)
            assert pd.num_rows == len(rows)
            assert _rows_of(pd, kind) == [full[i] for i in rows], f"rows {rows[:10]}..."


@pytest.mark.parametrize("kind", ["bitpacked", "list_long_rows", "list_short"])
def test_take_reads_only_needed_chunks(kind: str, files) -> None:
    w = files(kind, "2.2")
    page = w.column_pages()[0]
    page.decoder.load_search_cache(page.fetch)
    chunk_bytes = page.decoder.buffer_sizes[1]
    seen: list[tuple[int, int, int]] = []

    def spy(ranges):
        seen.extend(ranges)
        return page.fetch(ranges)

    page.decoder.decode(spy, np.array([page.num_rows // 2]))
    read = sum(size for buf, _, size in seen if buf == 1)
    assert all(buf == 1 for buf, _, _ in seen)  # metadata / index come from the search cache
    assert 0 < read < chunk_bytes / 2, (read, chunk_bytes)


def test_full_decode_is_one_fetch(files) -> None:
    w = files("strings", "2.2")
    page = w.column_pages()[0]
    calls: list = []

    def spy(ranges):
        calls.append(list(ranges))
        return page.fetch(ranges)

    fresh = MiniBlockDecoder(page.decoder.layout, page.num_rows, page.decoder.buffer_sizes, "2.2")
    fresh.decode(spy, None)
    assert len(calls) == 1 and {b for b, _, _ in calls[0]} == {0, 1, 2}


def test_lists_without_repetition_index(files) -> None:
    """A list page whose layout has no repetition index: rows are found from the levels."""
    w = files("list_short", "2.1")
    page = w.column_pages()[0]
    layout = type(page.decoder.layout)()
    layout.CopyFrom(page.decoder.layout)
    layout.repetition_index_depth = 0
    dec = MiniBlockDecoder(layout, page.num_rows, page.decoder.buffer_sizes[:-1], "2.1")
    full = _rows_of(page.decode(), "list_short")
    rows = np.arange(3, page.num_rows, 11)
    dec.load_search_cache(page.fetch)
    assert _rows_of(dec.decode(page.fetch, rows), "list_short") == [full[i] for i in rows]
