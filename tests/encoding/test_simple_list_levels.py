"""Top-level ``list<leaf>`` columns without null lists or items take ``repdef``'s direct
levels (``_simple_list_levels``): files we write of such columns - sliced, filtered (a
validity bitmap without nulls), over dictionary, boolean and fixed-size-list items, large
lists - must read back in pylance as the data written, and our levels must be pylance's
(the page bytes equal pylance's for the plain int case)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops.file.writer import LanceFileWriter
from tests.conftest import pylance_read, pylance_write

pytest.importorskip("lance")


def _column(kind: str, rng: np.random.Generator, n: int, empties: bool) -> pa.Array:
    lens = rng.integers(0 if empties else 1, 6, n)
    offs = np.concatenate([[0], np.cumsum(lens)])
    tot = int(offs[-1])
    items = {
        "int": lambda: pa.array(rng.integers(0, 1000, tot, dtype=np.int32)),
        "dict": lambda: pa.array(np.array(["a", "bb", "ccc"])[rng.integers(0, 3, tot)]).dictionary_encode(),
        "bool": lambda: pa.array(rng.random(tot) < 0.3),
        "fsl": lambda: pa.FixedSizeListArray.from_arrays(pa.array(rng.random(tot * 3, dtype=np.float32)), 3),
    }[kind]()
    large = kind == "fsl"
    cls = pa.LargeListArray if large else pa.ListArray
    return cls.from_arrays(pa.array(offs, pa.int64() if large else pa.int32()), items)


@pytest.mark.parametrize("version", ["2.1", "2.2"])
@pytest.mark.parametrize("kind", ["int", "dict", "bool", "fsl"])
@pytest.mark.parametrize("empties", [False, True])
def test_simple_lists_read_back_in_pylance(tmp_path: Path, version: str, kind: str, empties: bool) -> None:
    rng = np.random.default_rng(len(kind) * 10 + empties)
    col = _column(kind, rng, 20_000, empties)
    keep = pa.array(rng.random(len(col)) < 0.9)
    parts = [col.slice(3, 9_000), col.filter(keep)]  # a slice; a filter's output (bitmap, no nulls)
    schema = pa.schema([pa.field("l", col.type)])
    with LanceFileWriter(str(tmp_path / "ours.lance"), schema, version=version) as w:
        for p in parts:
            w.write(pa.record_batch([p], schema=schema))
    expected = pa.concat_arrays([p.cast(col.type) for p in parts])
    got = pylance_read(tmp_path / "ours.lance").column("l").combine_chunks()
    assert got.equals(expected)


@pytest.mark.parametrize("version", ["2.1", "2.2"])
@pytest.mark.parametrize("empties", [False, True])
def test_simple_list_bytes_match_pylance(tmp_path: Path, version: str, empties: bool) -> None:
    col = _column("int", np.random.default_rng(3), 30_000, empties)
    table = pa.table({"l": col})
    with LanceFileWriter(str(tmp_path / "ours.lance"), table.schema, version=version) as w:
        w.write(table)
    theirs = pylance_write(tmp_path / "theirs.lance", table, version=version)
    assert (tmp_path / "ours.lance").read_bytes() == Path(theirs).read_bytes()
