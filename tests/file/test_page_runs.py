"""Runs of whole mini-block pages decoded together (``decode_whole_pages``) read exactly
what pylance reads: list columns split into many pages, dictionary pages (variable and
64-bit dictionaries, nulls), pages cut by batch boundaries, and files whose column's
layout changes between pages."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from lance.file import LanceFileReader as PyReader
from lance.file import LanceFileWriter as PyWriter

from lance_spark_ops.file.reader import LanceFileReader


def _table(n: int = 30_000) -> pa.Table:
    rng = np.random.default_rng(3)
    words = pa.array(["alpha", "beta", None, "gamma", "delta"])
    lens = rng.integers(0, 6, n)
    offs = pa.array(np.concatenate([[0], np.cumsum(lens)]).astype(np.int32))
    total = int(lens.sum())
    return pa.table({
        "i64": pa.array(rng.integers(0, 7, n) * 1_000_000_007, pa.int64()),
        "s": words.take(pa.array(rng.integers(0, 5, n))),
        "ls": pa.ListArray.from_arrays(offs, words.take(pa.array(rng.integers(0, 5, total)))),
        "li": pa.ListArray.from_arrays(offs, pa.array(rng.integers(0, 7, total) * 10**12, pa.int64()),
                                       mask=pa.array(rng.random(n) < 0.1)),
        "lf": pa.ListArray.from_arrays(offs, pa.array(rng.random(total))),
        # small values first, then wide ones: the column's page layouts differ
        "x": pa.array(np.where(np.arange(n) < n // 2, rng.integers(0, 8, n), rng.integers(0, 2**40, n))),
    })


@pytest.fixture(scope="module", params=["2.1", "2.2"])
def written(request, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("runs") / "t.lance")
    table = _table()
    with PyWriter(path, table.schema, version=request.param, max_page_bytes=64 * 1024) as w:
        w.write_batch(table)
    return path, PyReader(path).read_all().to_table()


def test_whole_file_matches_pylance(written):
    path, theirs = written
    reader = LanceFileReader(path)
    assert reader.read().equals(theirs)
    # several pages per column really were decoded as one
    column = reader.schema.get_field_index("ls")
    pages = reader._leaf_pages(column, 0, reader.num_rows, None)  # noqa: SLF001
    assert len(pages) < len(reader._meta.column(column).pages)  # noqa: SLF001


@pytest.mark.parametrize("batch_rows", [2500, 7777, 20_000])
def test_batches_cutting_pages_match_pylance(written, batch_rows):
    path, theirs = written
    got = pa.Table.from_batches(list(LanceFileReader(path).iter_batches(batch_rows=batch_rows)))
    assert got.equals(theirs)
