"""Carried dictionaries (``encoding.carried_dictionary``): string / binary pages pylance
dictionary-encoded, read by our reader as dictionary arrays (``keep_dictionaries``) and
written by our writer without decoding them. The values read must be pylance's, and the
file written must read back in pylance as the source does; it must also be the very file
the writer makes of the decoded values (the carried path only skips work)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops import LanceFileReader
from lance_spark_ops.encoding.carried_dictionary import TWIN_BITMAP, decoded_nbytes, plain_type
from lance_spark_ops.file.writer import LanceFileWriter
from tests.conftest import pylance_read, pylance_write

pytest.importorskip("lance")

WORDS = np.array(["lance", "spark", "column", "page", "block", "zip", "row", "data"])


def _lists(rng: np.random.Generator, n: int, words: np.ndarray, max_len: int = 8,
           large: bool = False) -> pa.Array:
    lens = rng.integers(0, max_len, n)
    offs = np.concatenate([[0], np.cumsum(lens)])
    items = pa.array(words[rng.integers(0, len(words), int(lens.sum()))],
                     pa.large_string() if large else pa.string())
    return (pa.LargeListArray if large else pa.ListArray).from_arrays(
        pa.array(offs, pa.int64() if large else pa.int32()), items)


def _late(n: int) -> pa.Array:
    """Low cardinality, but one value first appears near the end (first-appearance order
    must look past any prefix)."""
    vals = WORDS[np.arange(n) % 3]
    vals[n - 5] = "latecomer"
    return pa.array(vals)


def _cases() -> dict[str, pa.Table]:
    rng = np.random.default_rng(3)
    n = 20_000
    cats = WORDS[rng.integers(0, 8, n)]
    return {
        "list_string": pa.table({"tags": _lists(rng, n, WORDS)}),
        "large_list_large_string": pa.table({"tags": _lists(rng, n, WORDS, large=True)}),
        "string": pa.table({"s": pa.array(cats)}),
        "binary": pa.table({"b": pa.array([w.encode() for w in cats], pa.binary())}),
        "struct": pa.table({"st": pa.StructArray.from_arrays(
            [pa.array(cats), pa.array(np.arange(n, dtype=np.int32))], names=["name", "k"])}),
        "one_value": pa.table({"s": pa.array(["same"] * n)}),
        "late_value": pa.table({"s": _late(n)}),
        "many_pages": pa.table({"tags": _lists(rng, 200_000, WORDS, max_len=12)}),
    }


CASES = _cases()


def _kept_batches(path: str) -> list[pa.RecordBatch]:
    reader = LanceFileReader(path)
    return list(reader.iter_batches(batch_rows=reader.num_rows, keep_dictionaries=True))


def _write(path: Path, batches: list[pa.RecordBatch], schema: pa.Schema, version: str) -> bytes:
    with LanceFileWriter(str(path), schema, version=version) as w:
        for b in batches:
            w.write(b)
    return path.read_bytes()


@pytest.mark.parametrize("version", ["2.1", "2.2"])
@pytest.mark.parametrize("name", list(CASES))
def test_carried_read_and_write(tmp_path: Path, name: str, version: str) -> None:
    table = CASES[name]
    src = pylance_write(tmp_path / "src.lance", table, version=version)
    expected = pylance_read(src)
    batches = _kept_batches(src)
    kept = [f for f in batches[0].schema if TWIN_BITMAP in (f.metadata or {})]
    if name != "one_value" or version == "2.1":  # pylance stores a 2.2 constant, not a dictionary
        assert kept, "pylance dictionary-encoded these strings; the reader should have kept them"
    for f in kept:
        assert plain_type(f.type) == table.schema.field(f.name).type
    got = pa.Table.from_batches([b.cast(expected.schema) for b in batches])
    assert got.equals(expected)

    carried = _write(tmp_path / "carried.lance", batches, expected.schema, version)
    assert pylance_read(tmp_path / "carried.lance").equals(expected)
    plain = _write(tmp_path / "plain.lance", expected.to_batches(), expected.schema, version)
    assert carried == plain


@pytest.mark.parametrize("version", ["2.1", "2.2"])
@pytest.mark.parametrize(("rows", "page_bytes", "step"), [(200_000, 256 * 1024, 7_777), (3_000, 600, 101)])
def test_carried_small_pages_and_slices(tmp_path: Path, version: str, rows: int, page_bytes: int,
                                        step: int) -> None:
    """Batches cutting the source pages (a batch of several decoded pages: its decoded twin
    is a concatenation, without a validity bitmap) written in slices with a small page size:
    pages are cut where the decoded batches cut them (same bytes), and pylance reads the
    rows back. With 600-byte pages most pages hold too few values for a dictionary: the
    writer decodes those and plans them as plain strings."""
    table = CASES["many_pages"].slice(0, rows)
    src = pylance_write(tmp_path / "src.lance", table, version=version)
    expected = pylance_read(src)
    reader = LanceFileReader(src)
    kept = list(reader.iter_batches(batch_rows=10_000, keep_dictionaries=True))
    plain = list(reader.iter_batches(batch_rows=10_000))
    marks = {f.metadata[TWIN_BITMAP] for b in kept for f in b.schema if TWIN_BITMAP in (f.metadata or {})}
    assert marks == ({b"0", b"1"} if rows > 10_000 else {b"1"})

    def write(path: Path, batches: list[pa.RecordBatch]) -> bytes:
        with LanceFileWriter(str(path), expected.schema, version=version, page_bytes=page_bytes) as w:
            for b in batches:
                for lo in range(0, b.num_rows, step):
                    w.write(b.slice(lo, step))
        return path.read_bytes()

    carried = write(tmp_path / "carried.lance", kept)
    assert pylance_read(tmp_path / "carried.lance").equals(expected)
    assert carried == write(tmp_path / "plain.lance", plain)


def test_unmarked_dictionary_data_is_cast(tmp_path: Path) -> None:
    """Dictionary data for a string field that no keeping reader marked is decoded as
    before (the writer's bytes for ordinary writes do not change)."""
    words = pa.array(WORDS[np.arange(5000) % 8])
    schema = pa.schema([pa.field("s", pa.string())])
    dict_batch = pa.record_batch([words.dictionary_encode()], names=["s"])
    plain_batch = pa.record_batch([words], names=["s"])
    a = _write(tmp_path / "a.lance", [dict_batch], schema, "2.2")
    b = _write(tmp_path / "b.lance", [plain_batch], schema, "2.2")
    assert a == b
    assert pylance_read(tmp_path / "a.lance").column("s").combine_chunks().equals(words)


def test_decoded_nbytes_is_the_twins(tmp_path: Path) -> None:
    """``decoded_nbytes`` of kept batches, their slices and concatenations is Arrow's
    ``nbytes`` of the same rows read decoded (what the writer counted before)."""
    src = pylance_write(tmp_path / "src.lance", CASES["many_pages"], version="2.2")
    reader = LanceFileReader(src)
    kept = list(reader.iter_batches(batch_rows=30_000, keep_dictionaries=True))
    plain = list(reader.iter_batches(batch_rows=30_000))
    rng = np.random.default_rng(5)
    for k, p in zip(kept, plain, strict=True):
        bitmap = k.schema.field(0).metadata[TWIN_BITMAP] == b"1"
        ck, cp = k.column(0), p.column(0)
        for lo, hi in [(0, len(cp)), *(sorted(rng.integers(0, len(cp), 2)) for _ in range(10))]:
            assert decoded_nbytes(ck.slice(lo, hi - lo), bitmap)[0] == cp.slice(lo, hi - lo).nbytes
    parts_k = [b.column(0).slice(7, 20_000) for b in kept[:3]]
    parts_p = [b.column(0).slice(7, 20_000) for b in plain[:3]]
    data = sum(decoded_nbytes(a, True)[1] for a in parts_k)
    cat_k, cat_p = pa.concat_arrays(parts_k), pa.concat_arrays(parts_p)
    assert decoded_nbytes(cat_k, False) == (cat_p.nbytes, data)
    assert decoded_nbytes(cat_k, False, data)[0] == cat_p.nbytes
    assert decoded_nbytes(cat_k.slice(999, 12_345), False)[0] == cat_p.slice(999, 12_345).nbytes
