"""The writer's promises outside the encoding matrix: version names, close() result,
context manager, 64-byte aligned buffers, bounded buffering, refusals."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops import LanceFileReader, LanceFileWriter
from lance_spark_ops.errors import InvalidInputError, SchemaError, UnsupportedError
from tests.conftest import pylance_read

TABLE = pa.table({"a": pa.array(np.arange(5000, dtype=np.int64)),
                  "s": pa.array([f"v{i}" * (i % 7) for i in range(5000)]),
                  "l": pa.array([[i] * (i % 3) for i in range(5000)], pa.list_(pa.int32()))})


def test_close_returns_rows_and_size_and_context_manager(tmp_path: Path) -> None:
    w = LanceFileWriter(str(tmp_path / "a.lance"), TABLE.schema, version="2.2")
    w.write(TABLE.slice(0, 1000))
    w.write(TABLE.slice(1000))
    rows, size = w.close()
    assert rows == 5000 and size == os.path.getsize(tmp_path / "a.lance")
    with LanceFileWriter(str(tmp_path / "b.lance"), TABLE.schema, version="2.1") as w2:
        w2.write(TABLE)
    assert pylance_read(tmp_path / "b.lance").equals(TABLE)


def test_version_names(tmp_path: Path) -> None:
    with LanceFileWriter(str(tmp_path / "s.lance"), TABLE.schema, version="stable") as w:
        w.write(TABLE)
    assert LanceFileReader(str(tmp_path / "s.lance")).version == "2.2"  # pylance 14's stable
    with pytest.raises(UnsupportedError, match="unstable"):
        LanceFileWriter(str(tmp_path / "n.lance"), TABLE.schema, version="next")
    with pytest.raises(InvalidInputError, match="unknown file version"):
        LanceFileWriter(str(tmp_path / "x.lance"), TABLE.schema, version="3.7")


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_buffers_are_64_byte_aligned(tmp_path: Path, version: str) -> None:
    path = str(tmp_path / f"al_{version}.lance")
    with LanceFileWriter(path, TABLE.schema, version=version, page_bytes=16 * 1024) as w:
        for i in range(0, 5000, 700):
            w.write(TABLE.slice(i, 700))
    meta = LanceFileReader(path).metadata
    offsets = [
        int(o) for c in range(meta.num_columns) for p in meta.column(c).pages for o in p.buffer_offsets
    ]
    assert len(offsets) > meta.num_columns  # several pages
    assert all(o % 64 == 0 for o in offsets)
    assert pylance_read(path).equals(TABLE)


def test_buffering_is_bounded_by_pages(tmp_path: Path) -> None:
    """Rows waiting in memory never exceed about one page per field plus the last batch."""
    page = 64 * 1024
    big = pa.table({"a": pa.array(np.arange(400_000, dtype=np.int64)),
                    "f": pa.array(np.random.default_rng(0).random(400_000))})
    with LanceFileWriter(str(tmp_path / "m.lance"), big.schema, version="2.2", page_bytes=page) as w:
        worst = 0
        for i in range(0, big.num_rows, 10_000):
            w.write(big.slice(i, 10_000))
            worst = max(worst, w.bytes_pending - w.bytes_written)
    assert worst <= 2 * (page + 10_000 * 8)
    assert pylance_read(tmp_path / "m.lance").equals(big)


def _wide(columns: int, rows: int) -> pa.Table:
    rng = np.random.default_rng(columns)
    return pa.table({f"c{i}": pa.array(rng.integers(0, 1 << 40, rows)) if i % 2
                     else pa.array(rng.random(rows)) for i in range(columns)})


@pytest.mark.parametrize("writes", ["write", "write_batches"])
def test_wide_table_buffers_within_the_share(tmp_path: Path, writes: str) -> None:
    """40 columns of 1.6 MB each: the fields together never buffer more than ``buffer_bytes``
    (the largest flushes a shorter page) where each used to keep up to ``page_bytes`` (all 64
    MB here: 40 x 8 MiB for a wider one, whatever the task's budget); pylance reads the rows."""
    from lance.file import LanceFileReader as PyReader

    table = _wide(40, 200_000)
    share = 12 << 20  # above the floor: 40 x 256 KiB
    path = tmp_path / "w.lance"
    with LanceFileWriter(str(path), table.schema, version="2.1", buffer_bytes=share) as w:
        assert w.page_bytes == 8 << 20 and w.buffer_bytes == share
        worst = 0
        for batch in table.to_batches(max_chunksize=5_000):
            if writes == "write":
                w.write(batch)
            else:
                w.write_batches([batch])
            worst = max(worst, w.bytes_pending - w.bytes_written)
    assert worst <= share
    assert pylance_read(path).equals(table)
    pages = [len(c.pages) for c in PyReader(str(path)).metadata().columns]
    assert min(pages) >= 2  # each column cut into pages shorter than page_bytes


def test_share_has_a_floor_per_field_and_defaults_to_the_budget(tmp_path: Path) -> None:
    from lance_spark_ops.io.budget import WRITER_COLUMN_FLOOR, writer_share
    from lance_spark_ops.io.storage import ObjectStore

    table = _wide(100, 10)
    with LanceFileWriter(str(tmp_path / "f.lance"), table.schema, version="2.2", buffer_bytes=1 << 20) as w:
        assert w.buffer_bytes == 100 * WRITER_COLUMN_FLOOR  # pages of a useful size
        w.write(table)
    with LanceFileWriter(str(tmp_path / "d.lance"), TABLE.schema, version="2.2") as w:
        store, _ = ObjectStore.for_file(str(tmp_path / "d.lance"))
        assert w.buffer_bytes == writer_share(store.budget) == min(store.budget.max_bytes // 2, 8 << 20)
        w.write(TABLE)
    assert pylance_read(tmp_path / "f.lance").equals(table)
    with pytest.raises(InvalidInputError, match="buffer_bytes"):
        LanceFileWriter(str(tmp_path / "z.lance"), TABLE.schema, buffer_bytes=0)


def test_map_refused_before_2_2(tmp_path: Path) -> None:
    t = pa.table({"m": pa.array([[("k", 1)], []], pa.map_(pa.string(), pa.int64()))})
    with pytest.raises(SchemaError, match="field 'm': map types need file version 2.2"):
        LanceFileWriter(str(tmp_path / "m21.lance"), t.schema, version="2.1")
    with LanceFileWriter(str(tmp_path / "m22.lance"), t.schema, version="2.2") as w:
        w.write(t)
    assert pylance_read(tmp_path / "m22.lance").equals(t)
