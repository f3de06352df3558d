"""Many tiny batches into one writer (a re-encode of thousands of tiny fragments): the
writer's memory does not grow with their count (``_FieldBuffer.merge_tail``), and the file is
the bytes it wrote before it merged them."""

from __future__ import annotations

import hashlib
import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops import LanceFileWriter
from lance_spark_ops.file.tuning import DEFAULT_FILE_TUNING, FileTuning
from tests.conftest import pylance_read


def _table(n: int) -> pa.Table:
    rng = np.random.default_rng(3)
    x = rng.random(n)
    words = np.array(["", "a", "lance", "a longer string value"])
    s = words[rng.integers(0, 4, n)].astype(object)
    s[rng.random(n) < 0.1] = None
    lens = rng.integers(0, 4, n)
    offsets = pa.array(np.concatenate([[0], np.cumsum(lens)]).astype(np.int32))
    return pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "x": pa.array(x, mask=rng.random(n) < 0.05),
        "s": pa.array(s, pa.string()),
        "l": pa.ListArray.from_arrays(offsets, pa.array(rng.integers(0, 99, int(lens.sum()), dtype=np.int32))
                                      ),
        "st": pa.StructArray.from_arrays([pa.array(rng.integers(0, 5, n, dtype=np.int32)),
                                          pa.array(words[rng.integers(0, 4, n)])], names=["k", "w"]),
    })


def _tiny_batches(table: pa.Table) -> list[pa.RecordBatch]:
    """``table`` cut into batches of 1..7 rows (slices of it, as a run of small fragments)."""
    sizes = np.random.default_rng(11).integers(1, 8, len(table))
    cuts = np.concatenate([[0], np.cumsum(sizes)])
    cuts = cuts[cuts < len(table)].tolist() + [len(table)]
    batch = table.combine_chunks().to_batches()[0]
    return [batch.slice(a, b - a) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]


def _write(path: Path, table: pa.Table, batches: list[pa.RecordBatch], version: str, page_bytes: int,
           how: str, tuning: FileTuning = DEFAULT_FILE_TUNING) -> str:
    with LanceFileWriter(str(path), table.schema, version=version, page_bytes=page_bytes,
                         tuning=tuning) as w:
        if how == "batches":
            for i in range(0, len(batches), 100):
                w.write_batches(batches[i:i + 100])
        else:
            for b in batches:
                w.write(b)
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("version", ["2.1", "2.2"])
@pytest.mark.parametrize("how", ["batches", "write"])
def test_merged_chunks_write_the_same_bytes(tmp_path: Path, version: str, how: str) -> None:
    table = _table(6000)
    batches = _tiny_batches(table)
    assert len(batches) > 4 * DEFAULT_FILE_TUNING.merge_chunks
    # small pages: cuts fall inside merged chunks, variable-width fields cut by their average width
    for page_bytes in (3000, 8 * 1024 * 1024):
        merged = _write(tmp_path / f"m{page_bytes}.lance", table, batches, version, page_bytes, how)
        kept = _write(tmp_path / f"k{page_bytes}.lance", table, batches, version, page_bytes, how,
                      FileTuning(merge_chunks=10**9))
        assert merged == kept
        assert pylance_read(tmp_path / f"m{page_bytes}.lance").equals(table)


def _held_after(n: int, batches: list[pa.RecordBatch], schema: pa.Schema, path: Path) -> int:
    """Python memory the writer holds (traced) after ``n`` tiny batches, none of them flushed."""
    w = LanceFileWriter(str(path), schema, version="2.2")
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for i in range(0, n, 100):
            w.write_batches(batches[i:i + 100])
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    w.close()
    return held


def test_memory_does_not_grow_with_the_batch_count(tmp_path: Path) -> None:
    n = 2000
    table = pa.table({"id": pa.array(np.arange(16 * n, dtype=np.int64)),
                      "x": pa.array(np.random.default_rng(0).random(16 * n))})
    batches = table.to_batches(max_chunksize=4)  # 4 rows each: no page fills up
    few = _held_after(n, batches, table.schema, tmp_path / "few.lance")
    many = _held_after(4 * n, batches, table.schema, tmp_path / "many.lance")
    # one chunk object per batch and field held until the page was cut: ~0.4 KB a batch here
    # (2.3 MB more for the 6 000 more batches); merged, the difference is noise
    assert many - few < 200_000, (few, many)
