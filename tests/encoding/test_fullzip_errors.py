"""Damaged full-zip / constant / blob pages and codec inputs raise CorruptFileError (or
UnsupportedError) with a message, never an IndexError deep in numpy, a hang or wrong rows."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import VariableWidthBlock
from lance_spark_ops.encoding.compression.registry import CODECS
from lance_spark_ops.encoding.compression.variable import decode_variable_block, decode_variable_miniblock
from lance_spark_ops.encoding.compression.variable_packed_struct import (
    decode_variable_packed_struct_per_value,
)
from lance_spark_ops.encoding.layout.fullzip import FullZipDecoder
from lance_spark_ops.errors import CorruptFileError, InvalidInputError, UnsupportedError
from tests.encoding._fz import Written, meta_table
from tests.encoding.test_fullzip import S300, _list_fsl, _packed, fsl, list_of, text


def _variable(bits: int = 32) -> pb.Variable:
    v = pb.Variable()
    v.offsets.flat.bits_per_value = bits
    return v


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fzerr")
    return {
        "list_str": Written.of(
            tmp, pa.table({"a": pa.array(list_of(S300), pa.list_(pa.string()))}), "2.2", "ls"
        ),
        "str_nulls": Written.of(
            tmp,
            pa.table({"a": pa.array([None if i % 4 == 0 else s for i, s in enumerate(text(120, 500, 3))])}),
            "2.1",
            "sn",
        ),
        "fsl_rows": Written.of(
            tmp, pa.table({"a": fsl(60, 128, item_nulls=0.1, row_mask=np.arange(60) % 4 == 0)}), "2.1", "fsl"
        ),
        "list_fsl": Written.of(tmp, pa.table({"a": _list_fsl()}), "2.2", "lf"),
        "packed": Written.of(tmp, _packed(), "2.2", "pk"),
        "const_list": Written.of(
            tmp,
            pa.table({"a": pa.array([[7, 7] if i % 3 else None for i in range(90)], pa.list_(pa.int64()))}),
            "2.2",
            "cl",
        ),
        "blob": Written.of(
            tmp,
            meta_table(
                pa.array([None if i % 5 == 1 else b"x" * (300 + i) for i in range(30)], pa.large_binary()),
                blob="true",
            ),
            "2.1",
            "bl",
        ),
    }


@pytest.mark.parametrize(
    "name", ["list_str", "str_nulls", "fsl_rows", "list_fsl", "packed", "const_list", "blob"]
)
def test_fuzzed_pages_fail_cleanly(files, name: str) -> None:
    """Random byte damage in a page's buffers: decode succeeds or raises a LanceError."""
    w = files[name]
    (page,) = w.columns[0]
    rng = np.random.default_rng(len(name))
    spans = [(o, s) for o, s in zip(page.offsets, page.sizes, strict=False) if s]
    outcomes = {"ok": 0, "error": 0}
    for trial in range(120):
        data = bytearray(w.data)
        for _ in range(int(rng.integers(1, 4))):
            off, size = spans[int(rng.integers(0, len(spans)))]
            pos = off + int(rng.integers(0, size))
            data[pos] = int(rng.integers(0, 256)) if trial % 3 else data[pos] ^ 0xFF
        rows = None if trial % 2 else np.unique(rng.integers(0, page.num_rows, 5))
        try:
            page.decoder(w.version).decode(page.fetch(data=bytes(data)), rows)
            outcomes["ok"] += 1
        except (CorruptFileError, UnsupportedError) as e:
            assert str(e)
            outcomes["error"] += 1
    assert outcomes["error"] > 0 or name in ("fsl_rows", "const_list", "blob")


def test_bad_rows_argument(files) -> None:
    (page,) = files["list_str"].columns[0]
    dec = page.decoder("2.2")
    for rows in ([3, 2], [1, 1], [-1], [page.num_rows]):
        with pytest.raises(InvalidInputError):
            dec.decode(page.fetch(), np.array(rows))


def test_layout_mismatches(files) -> None:
    (page,) = files["list_str"].columns[0]
    fz = page.layout.full_zip_layout

    def variant(**changes):
        m = pb.FullZipLayout()
        m.CopyFrom(fz)
        for k, v in changes.items():
            setattr(m, k, v)
        return m

    with pytest.raises(CorruptFileError, match="items"):
        FullZipDecoder(variant(num_items=fz.num_items + 1), page.num_rows, page.sizes, "2.2").decode(
            page.fetch(), None
        )
    with pytest.raises(CorruptFileError):  # index size no longer divides into rows + 1 entries
        FullZipDecoder(fz, page.num_rows + 1, page.sizes, "2.2")
    with pytest.raises(CorruptFileError):
        FullZipDecoder(variant(bits_rep=0), page.num_rows, page.sizes, "2.2")
    with pytest.raises(UnsupportedError):
        FullZipDecoder(variant(bits_per_offset=16), page.num_rows, page.sizes, "2.2")
    with pytest.raises(CorruptFileError):
        FullZipDecoder(fz, page.num_rows, page.sizes[:1], "2.2")  # repetition without an index
    (fpage,) = files["fsl_rows"].columns[0]
    short = [fpage.sizes[0] - 1]
    with pytest.raises(CorruptFileError):
        FullZipDecoder(fpage.layout.full_zip_layout, fpage.num_rows, short, "2.1").decode(fpage.fetch(), None)


def test_rep_index_damage(files) -> None:
    w = files["str_nulls"]
    (page,) = w.columns[0]
    width = page.sizes[1] // (page.num_rows + 1)
    data = bytearray(w.data)
    pos = page.offsets[1] + 5 * width
    data[pos : pos + width] = (10**6).to_bytes(width, "little")[:width] if width >= 4 else b"\xff" * width
    for rows in (None, np.array([4, 5])):
        with pytest.raises(CorruptFileError):
            page.decoder("2.1").decode(page.fetch(data=bytes(data)), rows)


def test_length_prefix_damage(files) -> None:
    w = files["str_nulls"]
    (page,) = w.columns[0]
    dec = page.decoder("2.1")
    dec.load_search_cache(page.fetch())
    start = int(dec.rep_index[1])  # row 1 is valid: control word, then its u32 length
    data = bytearray(w.data)
    data[page.offsets[0] + start + 1 : page.offsets[0] + start + 5] = (10**7).to_bytes(4, "little")
    with pytest.raises(CorruptFileError):
        page.decoder("2.1").decode(page.fetch(data=bytes(data)), None)
    with pytest.raises(CorruptFileError):
        dec.decode(page.fetch(data=bytes(data)), np.array([1]))


def test_variable_block_errors() -> None:
    good = (
        (32).to_bytes(4, "little")
        + (20).to_bytes(4, "little")
        + b"".join(x.to_bytes(4, "little") for x in (0, 2, 3))
        + b"abc"
    )
    blk = decode_variable_block(_variable(), memoryview(good), 2)
    assert blk.offsets.tolist() == [0, 2, 3] and blk.data.tobytes() == b"abc"
    for bad in (
        good[:6],
        good[:4] + (99).to_bytes(4, "little") + good[8:],
        good[:12] + (9).to_bytes(4, "little") + good[16:],
        (48).to_bytes(4, "little") + good[4:],
    ):
        with pytest.raises(CorruptFileError):
            decode_variable_block(_variable(), memoryview(bad), 2)
    with pytest.raises(CorruptFileError):
        decode_variable_block(_variable(), memoryview(good), 3)
    v = _variable()
    v.values.scheme = pb.COMPRESSION_ALGORITHM_ZSTD
    with pytest.raises(UnsupportedError):
        decode_variable_block(v, memoryview(good), 2)


def test_variable_miniblock_errors() -> None:
    chunk = b"".join(x.to_bytes(4, "little") for x in (12, 14, 15)) + b"abc" + b"H"
    blk = decode_variable_miniblock(_variable(), [[memoryview(chunk)], [memoryview(chunk)]], np.array([2, 2]))
    assert blk.data.tobytes() == b"abcabc" and blk.offsets.tolist() == [0, 2, 3, 5, 6]
    bad = [
        b"".join(x.to_bytes(4, "little") for x in (12, 30, 15)) + b"abcH",  # offset past the chunk
        b"".join(x.to_bytes(4, "little") for x in (12, 15, 14)) + b"abcH",  # not monotonic
        b"".join(x.to_bytes(4, "little") for x in (4, 14, 15)) + b"abcH",  # values overlap offsets
        b"\x0c\x00",
    ]
    for b in bad:
        with pytest.raises(CorruptFileError):
            decode_variable_miniblock(_variable(), [[memoryview(b)]], np.array([2]))


def test_variable_packed_struct_errors() -> None:
    msg = pb.VariablePackedStruct()
    f1 = msg.fields.add()
    f1.value.flat.bits_per_value = 32
    f1.bits_per_value = 32
    f2 = msg.fields.add()
    f2.value.variable.offsets.flat.bits_per_value = 32
    f2.bits_per_length = 32
    row = (7).to_bytes(4, "little") + (2).to_bytes(4, "little") + b"hi"
    ok = decode_variable_packed_struct_per_value(
        msg, VariableWidthBlock(np.array([0, 10, 10], np.uint32), np.frombuffer(row, np.uint8), 2), CODECS
    )
    assert ok.children[1].data.tobytes() == b"hi" and ok.children[0].data.tobytes()[4:] == b"\0" * 4
    for data, offs in ((row + b"!", [0, 11]), (row[:-1], [0, 9]), (row[:6], [0, 6])):
        with pytest.raises(CorruptFileError):
            decode_variable_packed_struct_per_value(
                msg, VariableWidthBlock(np.array(offs, np.uint32), np.frombuffer(data, np.uint8), 1), CODECS
            )
