"""Blob pages (``lance-encoding:blob`` on large_binary, LanceFileWriter, 2.1 / 2.2) decode to
the payload bytes exactly as pylance's LanceFileReader returns them."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops.encoding.blocks import VariableWidthBlock
from lance_spark_ops.errors import CorruptFileError
from tests.encoding._fz import FetchLog, Written, meta_table

N = 40


def blobs(nulls: bool) -> pa.Table:
    rng = np.random.default_rng(3)
    vals = [
        None
        if nulls and i % 7 == 3
        else b""
        if i % 7 == 5
        else rng.integers(0, 255, 500 + 97 * i, dtype=np.uint8).tobytes()
        for i in range(N)
    ]
    return meta_table(pa.array(vals, pa.large_binary()), blob="true")


@pytest.mark.parametrize("version", ["2.1", "2.2"])
@pytest.mark.parametrize("nulls", [True, False])
def test_blob_matches_pylance(tmp_path, version: str, nulls: bool) -> None:
    w = Written.of(tmp_path, blobs(nulls), version)
    assert w.expected.schema.field(0).type == pa.large_binary()
    found = w.encodings(0)
    assert {"blob_layout", "mini_block_layout", "packed_struct"} <= found, found
    w.check()


def test_blob_reads_payloads_by_file_offset(tmp_path) -> None:
    w = Written.of(tmp_path, blobs(True), "2.2")
    (page,) = w.columns[0]
    dec = page.decoder("2.2")
    log = FetchLog()
    got = dec.decode(page.fetch(log), np.array([0, 3, 5, 9]))
    assert isinstance(got.values, VariableWidthBlock) and got.values.offsets.dtype == np.uint64
    assert got.def_.tolist() == [0, 1, 0, 0]  # row 3 null, row 5 empty
    payload_reads = [r for call in log.calls for r in call if r[0] == -1]
    assert [s for _, _, s in payload_reads] == [500, 500 + 97 * 9]
    assert all(p + s <= page.offsets[0] for _, p, s in payload_reads)  # payloads precede the page buffers
    dec.load_search_cache(page.fetch())
    log = FetchLog()
    again = dec.decode(page.fetch(log), np.array([0, 3, 5, 9]))
    assert all(b == -1 for call in log.calls for b, _, _ in call)  # descriptors come from the cache
    assert np.array_equal(again.values.data, got.values.data)


def test_blob_short_payload_read_is_corrupt(tmp_path) -> None:
    w = Written.of(tmp_path, blobs(False), "2.1")
    (page,) = w.columns[0]
    fetch = page.fetch()

    def short(ranges):
        got = fetch(ranges)
        return [m[:-1] if b == -1 and len(m) else m for (b, _, _), m in zip(ranges, got, strict=True)]

    with pytest.raises(CorruptFileError):
        page.decoder("2.1").decode(short, None)
