"""Test helpers for the page encoders: put hand-encoded pages into a Lance file with the
container writer (plus the schema global buffer, as ``file.writer`` does), so pylance and
our reader can read them back; and write pylance's own file of the same data to compare
sizes."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from lance_spark_ops._pb import file_pb2
from lance_spark_ops.encoding.page import EncodedPage
from lance_spark_ops.file.container_writer import ContainerWriter
from lance_spark_ops.file.schema import schema_from_arrow, schema_to_pb
from tests.conftest import pylance_read, pylance_write


def write_pages(
    path: str | Path, schema: pa.Schema, columns: Sequence[Sequence[EncodedPage]], num_rows: int, version: str
) -> str:
    """Write ``columns[c]`` (pages in row order) as a 2.1 / 2.2 file; returns the path."""
    lance_schema = schema_from_arrow(schema)
    with open(path, "wb") as out:
        w = ContainerWriter(out, len(columns), version)
        for c, pages in enumerate(columns):
            first = 0
            for page in pages:
                w.write_encoded_page(c, page, first)
                first += page.num_rows
        descriptor = file_pb2.FileDescriptor(length=num_rows)
        descriptor.schema.fields.extend(schema_to_pb(lance_schema))
        for k, v in lance_schema.metadata.items():
            descriptor.schema.metadata[k.decode() if isinstance(k, bytes) else k] = v
        w.finish([descriptor.SerializeToString()])
    return str(path)


def our_read(path: str | Path) -> pa.Table:
    from lance_spark_ops import LanceFileReader

    return LanceFileReader(str(path)).read()


def roundtrip(
    tmp: Path, table: pa.Table, columns: Sequence[Sequence[EncodedPage]], version: str, name: str = "ours"
) -> tuple[str, pa.Table, pa.Table]:
    """Write our pages, read them back with pylance and with our reader; both must equal
    ``table``. Returns (path, pylance's read, our read)."""
    path = write_pages(tmp / f"{name}_{version}.lance", table.schema, columns, table.num_rows, version)
    theirs = pylance_read(path)
    ours = our_read(path)
    expected = table.combine_chunks()
    assert theirs.combine_chunks().equals(expected), "pylance read differs from the input"
    assert ours.combine_chunks().equals(expected), "our read differs from the input"
    return path, theirs, ours


def size_ratio(tmp: Path, table: pa.Table, ours_path: str, version: str) -> float:
    """Our file size / the size of pylance's own file of the same table."""
    theirs = pylance_write(tmp / f"pylance_{version}.lance", table, version)
    return Path(ours_path).stat().st_size / Path(theirs).stat().st_size


def text(n: int, width: int, seed: int = 0, vocab: int = 400) -> list[str]:
    """Word-like text: Zipf-distributed words from a random vocabulary, ``width`` chars."""
    rng = np.random.default_rng(seed)
    alpha = np.frombuffer(b"etaoinshrdlucmfwypvbgkjqxz", np.uint8)
    lens = rng.integers(2, 9, vocab)
    words = [alpha[np.minimum(rng.geometric(0.15, k) - 1, 25)].tobytes().decode() for k in lens]
    ranks = np.minimum(rng.zipf(1.3, (n, width // 3 + 2)) - 1, vocab - 1)
    return [" ".join(words[r] for r in row)[:width] for row in ranks]


def leaf_levels(arr: pa.Array, field: pa.Field | None = None):
    """The single leaf's ``LeafLevels`` of ``arr`` (a one-leaf field)."""
    from lance_spark_ops.encoding.repdef import levels_from_arrow

    (lv,) = levels_from_arrow(arr, field if field is not None else pa.field("v", arr.type))
    return lv


def fullzip_page(arr: pa.Array, encoder, version: str, field: pa.Field | None = None) -> EncodedPage:
    """A full-zip page of a one-leaf array: levels from Arrow, values through ``encoder``
    (an ``encode_<codec>_per_value`` function)."""
    from lance_spark_ops.encoding.blocks_from_arrow import arrow_to_block
    from lance_spark_ops.encoding.layout.fullzip_encode import encode_fullzip_page

    lv = leaf_levels(arr, field)
    values, encoding = encoder(arrow_to_block(lv.values))
    n = len(lv.values)
    items = len(lv.rep) if lv.rep is not None else n
    return encode_fullzip_page(lv.num_rows, values, encoding, lv.rep, lv.def_, lv.layers, items, n, version)


def page_bytes(page: EncodedPage) -> list[bytes]:
    return [bytes(memoryview(b).cast("B")) if not isinstance(b, bytes) else b for b in page.buffers]


def pylance_page(tmp: Path, table: pa.Table, version: str, name: str = "ref"):
    """(buffers, PageLayout) of the first page of column 0 of pylance's file of ``table``."""
    from tests.encoding._fz import Written

    w = Written.of(tmp, table, version, name)
    p = w.columns[0][0]
    return [p.data[o : o + s] for o, s in zip(p.offsets, p.sizes, strict=True)], p.layout
