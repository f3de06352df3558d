"""Blob pages (``lance-encoding:blob`` on large_binary) written by our encoder: payloads
placed before the page, 64-byte aligned; the descriptor page and layout are byte for byte
what ``lance.file.LanceFileWriter`` writes in 2.1 and 2.2; both readers read them back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.layout.blob import blob_descriptors, encode_blob_page
from lance_spark_ops.errors import InvalidInputError, UnsupportedError
from tests.encoding._fz import Written, meta_table
from tests.encoding._write import leaf_levels, page_bytes, roundtrip, size_ratio

RNG = np.random.default_rng(1)
MIXED = [RNG.bytes(int(RNG.integers(1, 3000))) if i % 4 else (None if i % 8 == 0 else b"") for i in range(40)]
CASES = {
    "mixed": MIXED,
    "no_nulls": [v or b"x" for v in MIXED],
    "all_null": [None] * 5,
    "all_empty": [b""] * 5,
    "big": [RNG.bytes(300_000) for _ in range(3)],
}


def our_page(table: pa.Table, version: str):
    lv = leaf_levels(table.column(0).combine_chunks(), table.schema.field(0))
    return encode_blob_page(lv.num_rows, lv.values, lv.rep, lv.def_, lv.layers, version)


@pytest.mark.parametrize("version", ["2.1", "2.2"])
@pytest.mark.parametrize("name", list(CASES))
def test_blob_page_matches_pylance(tmp_path: Path, name: str, version: str) -> None:
    table = meta_table(pa.array(CASES[name], pa.large_binary()), blob="true")
    ref = Written.of(tmp_path, table, version, "ref")
    theirs = ref.columns[0][0]
    page = our_page(table, version)
    assert bool(page.external) == any(CASES[name])  # payloads travel as one external buffer
    path, _, _ = roundtrip(tmp_path, table, [[page]], version)
    assert page.encoding == theirs.layout
    assert page.encoding.blob_layout.inner_layout.WhichOneof("layout") == "mini_block_layout"
    assert page_bytes(page) == [
        theirs.data[o : o + s] for o, s in zip(theirs.offsets, theirs.sizes, strict=True)
    ]
    assert size_ratio(tmp_path, table, path, version) <= 1.0001
    # equal descriptor pages mean the payloads sit where pylance puts them (first, in row
    # order, 64-byte aligned); only the alignment padding differs (pylance pads with 0x48)
    ours = np.frombuffer(Path(path).read_bytes()[: theirs.offsets[0]], np.uint8)
    ref_bytes = np.frombuffer(ref.data[: theirs.offsets[0]], np.uint8)
    assert ((ours == ref_bytes) | ((ours == 0) & (ref_bytes == 0x48))).all()


def test_descriptors_smuggle_nulls() -> None:
    pos, size = blob_descriptors(
        np.array([3, 0, 0, 5]), np.array([0, 1, 0, 0]), 128, np.array([0, 64, 64, 64])
    )
    assert pos.tolist() == [128, 1 << 16, 0, 192] and size.tolist() == [3, 0, 0, 5]


def test_blob_refusals() -> None:
    layers = [pb.REPDEF_ALL_VALID_ITEM]
    with pytest.raises(UnsupportedError, match="large_binary"):
        encode_blob_page(1, pa.array([b"x"], pa.binary()), None, None, layers, "2.2")
    with pytest.raises(UnsupportedError):
        encode_blob_page(
            1, pa.array([b"x"], pa.large_binary()), np.array([1], np.uint16), None, layers, "2.2"
        )
    with pytest.raises(UnsupportedError):
        encode_blob_page(1, pa.array([b"x"], pa.large_binary()), None, None, layers, "2.0")
    with pytest.raises(InvalidInputError):
        encode_blob_page(2, pa.array([b"x"], pa.large_binary()), None, None, layers, "2.2")
