"""Damaged mini-block pages raise CorruptFileError (never IndexError / wrong rows)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops.encoding.layout.miniblock import MiniBlockDecoder
from lance_spark_ops.errors import CorruptFileError
from tests.encoding._mb import write

N = 5000


def _tampered(page, edit: Callable[[list[bytearray]], None]):
    """A fresh decoder over ``page`` whose fetch serves edited copies of the buffers."""
    sizes = list(page.decoder.buffer_sizes)
    bufs = [bytearray(b) for b in page.fetch([(i, 0, s) for i, s in enumerate(sizes)])]
    edit(bufs)

    def fetch(ranges):
        return [memoryview(bytes(bufs[b][o : o + n])) for b, o, n in ranges]

    dec = MiniBlockDecoder(page.decoder.layout, page.num_rows, [len(b) for b in bufs], page.decoder.version)
    return dec, fetch


@pytest.fixture(scope="module", params=["2.1", "2.2"])
def pages(request, tmp_path_factory):
    base = tmp_path_factory.mktemp("err")
    v = request.param
    ints = write(
        base, pa.table({"x": pa.array(np.arange(N, dtype=np.int32) % 1000)}), v, "ints"
    ).column_pages()[0]
    nulls = write(
        base, pa.table({"x": pa.array(np.arange(N, dtype=np.int32), mask=np.arange(N) % 3 == 0)}), v, "nulls"
    ).column_pages()[0]
    lists = write(
        base, pa.table({"x": pa.array([[1, 2], None, [], [3]] * 1250, pa.list_(pa.int32()))}), v, "lists"
    ).column_pages()[0]
    return v, ints, nulls, lists


def _word(v: str) -> int:
    return 4 if v == "2.2" else 2


def test_metadata_overruns_chunk_buffer(pages) -> None:
    v, ints, _, _ = pages

    def edit(bufs):
        bufs[0][0:2] = (0xFFF0 | bufs[0][0] & 0xF).to_bytes(2, "little")

    dec, fetch = _tampered(ints, edit)
    with pytest.raises(CorruptFileError, match="add up to"):
        dec.decode(fetch, None)


def test_metadata_not_whole_words(pages) -> None:
    v, ints, _, _ = pages
    dec, fetch = _tampered(ints, lambda bufs: bufs[0].__delitem__(-1))
    with pytest.raises(CorruptFileError, match="whole number"):
        dec.decode(fetch, None)


def test_value_buffer_size_beyond_chunk(pages) -> None:
    v, ints, _, _ = pages
    dec, fetch = _tampered(ints, lambda bufs: bufs[1].__setitem__(slice(2, 4), b"\xff\x7f"))
    with pytest.raises(CorruptFileError, match="chunk 0"):
        dec.decode(fetch, None)


def test_bad_bit_width(pages) -> None:
    v, ints, _, _ = pages
    header = 8
    dec, fetch = _tampered(ints, lambda bufs: bufs[1].__setitem__(slice(header, header + 4), b"\x30\0\0\0"))
    with pytest.raises(CorruptFileError, match="bits per value"):
        dec.decode(fetch, None)


def test_level_count_disagrees_with_values(pages) -> None:
    v, _, nulls, _ = pages
    dec, fetch = _tampered(nulls, lambda bufs: bufs[1].__setitem__(slice(0, 2), (1000).to_bytes(2, "little")))
    with pytest.raises(CorruptFileError):
        dec.decode(fetch, None)


def test_repetition_index_wrong_rows(pages) -> None:
    v, _, _, lists = pages
    last = len(lists.decoder.buffer_sizes) - 1
    dec, fetch = _tampered(lists, lambda bufs: bufs[last].__setitem__(slice(0, 8), (7).to_bytes(8, "little")))
    with pytest.raises(CorruptFileError, match="repetition index"):
        dec.load_search_cache(fetch)


def test_rows_outside_page(pages) -> None:
    v, ints, _, _ = pages
    with pytest.raises(CorruptFileError):
        ints.decode(np.array([N]))
    with pytest.raises(CorruptFileError):
        ints.decode(np.array([5, 3]))


def test_missing_buffers(pages) -> None:
    v, _, _, lists = pages
    with pytest.raises(CorruptFileError, match="buffers"):
        MiniBlockDecoder(lists.decoder.layout, lists.num_rows, lists.decoder.buffer_sizes[:2], v)
