"""Small files of one writer with the same size and metadata bytes ("twins") share their
parsed metadata (``file.metadata.load_metadata``) and are decoded as one run
(``file.read_together``); what is read must be pylance's rows, and a file that differs in
any byte the metadata parse looks at must be parsed (and refused) on its own."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from lance.file import LanceFileReader as PyReader
from lance.file import LanceFileWriter as PyWriter

from lance_spark_ops.errors import LanceError
from lance_spark_ops.file.read_together import read_files_together
from lance_spark_ops.file.reader import LanceFileReader


def _write(path: Path, rows: int, seed: int, version: str) -> pa.Table:
    rng = np.random.default_rng(seed)
    vectors = pa.array(rng.random(rows * 4, dtype=np.float32))
    table = pa.table({"id": pa.array(np.arange(seed * rows, (seed + 1) * rows, dtype=np.int64)),
                      "x": pa.array(rng.random(rows)),
                      "v": pa.FixedSizeListArray.from_arrays(vectors, 4)})
    with PyWriter(str(path), table.schema, version=version) as w:
        w.write_batch(table)
    return table


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_twins_share_metadata_and_read_as_pylance(tmp_path: Path, version: str) -> None:
    # six 20-row files, one of 30 rows in the middle (not a twin of its neighbours), then two more
    sizes = [20, 20, 20, 30, 20, 20, 20, 20]
    paths = [tmp_path / f"f{i}.lance" for i in range(len(sizes))]
    for i, (p, n) in enumerate(zip(paths, sizes, strict=True)):
        _write(p, n, i, version)
    readers = [LanceFileReader(str(p)) for p in paths]
    metas = [r.metadata for r in readers]
    assert all(m.shares_layout_with(metas[0]) for m in metas[1:3] + metas[4:])  # twins across the gap
    assert not metas[3].shares_layout_with(metas[0])
    # each twin still reads its own bytes: pylance's rows, file by file and all together
    theirs = [PyReader(str(p)).read_all().to_table() for p in paths]
    for r, t in zip(readers, theirs, strict=True):
        assert r.read().equals(t)
    got = read_files_together(readers, readers[0].schema.names)
    assert pa.Table.from_arrays(got, schema=readers[0].schema).equals(
        pa.concat_tables(theirs).cast(readers[0].schema))


@pytest.mark.parametrize("where", ["magic", "footer_offset", "column_meta", "schema"])
def test_a_copy_differing_in_metadata_bytes_is_no_twin(tmp_path: Path, where: str) -> None:
    good = tmp_path / "a.lance"
    _write(good, 20, 0, "2.2")
    first = LanceFileReader(str(good))  # remembered as the template of files of its size
    data = bytearray(good.read_bytes())
    size = len(data)
    meta = first.metadata
    at = {"magic": size - 1,  # the footer's magic
          "footer_offset": size - 40 + 7,  # high byte of the column metadata start
          "column_meta": int(meta.column_table[0, 0]),  # the first byte of column 0's metadata
          "schema": int(meta.global_buffers[0, 0]) + 1}[where]
    data[at] ^= 0xFF
    bad = tmp_path / "b.lance"
    bad.write_bytes(bytes(data))
    # parsed on its own, never served the template's metadata: refused with the file named
    # (a bad footer always is), or read as a file of its own
    try:
        r = LanceFileReader(str(bad))
        r.read()
    except LanceError as e:
        assert "b.lance" in str(e.path)
    else:
        assert where not in ("magic", "footer_offset")
        assert not r.metadata.shares_layout_with(meta)


def test_a_twin_with_other_page_bytes_reads_its_own_values(tmp_path: Path) -> None:
    a, b = tmp_path / "a.lance", tmp_path / "b.lance"
    _write(a, 20, 0, "2.2")
    shutil.copy(a, b)
    ra = LanceFileReader(str(a))
    data = bytearray(b.read_bytes())
    x_page = ra.metadata.column(1).pages[0]  # column 1 is "x" (float64): any bytes are values
    off = int(x_page.buffer_offsets[1]) + int(x_page.buffer_sizes[1]) - 8
    data[off:off + 8] = np.float64(-1.5).tobytes()
    b.write_bytes(bytes(data))
    rb = LanceFileReader(str(b))
    assert rb.metadata.shares_layout_with(ra.metadata)
    theirs = [PyReader(str(p)).read_all().to_table() for p in (a, b)]
    assert theirs[0] != theirs[1]
    got = read_files_together([ra, rb], ra.schema.names)
    assert pa.Table.from_arrays(got, schema=ra.schema).equals(pa.concat_tables(theirs).cast(ra.schema))
