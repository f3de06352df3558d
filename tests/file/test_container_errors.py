"""Damaged files give a typed error naming the file and what is wrong."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops import LanceFileReader
from lance_spark_ops.errors import CorruptFileError, LanceError, NotFoundError, UnsupportedError
from lance_spark_ops.file.container import FOOTER_SIZE


@pytest.fixture
def good_file(lance_file) -> str:
    t = pa.table({
        "a": pa.array(np.arange(1000, dtype=np.int64)),
        "s": pa.array([f"v{i}" for i in range(1000)]),
    })
    return lance_file(t, "2.1")


def _damage(path: str, tmp_path: Path, fn) -> str:
    data = bytearray(Path(path).read_bytes())
    out = tmp_path / "damaged.lance"
    out.write_bytes(bytes(fn(data)))
    return str(out)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="not found"):
        LanceFileReader(str(tmp_path / "nope.lance"))


def test_truncated_to_nothing(good_file: str, tmp_path: Path) -> None:
    p = _damage(good_file, tmp_path, lambda d: d[:10])
    with pytest.raises(CorruptFileError, match="too small") as e:
        LanceFileReader(p)
    assert "damaged.lance" in str(e.value)


def test_truncated_tail(good_file: str, tmp_path: Path) -> None:
    # Cutting bytes from the end leaves no valid footer at the end.
    p = _damage(good_file, tmp_path, lambda d: d[:-7])
    with pytest.raises(CorruptFileError):
        LanceFileReader(p)


def test_truncated_head_keeps_footer(good_file: str, tmp_path: Path) -> None:
    # Dropping data from the front: the footer's offsets now point outside the file.
    p = _damage(good_file, tmp_path, lambda d: d[len(d) // 2 :])
    with pytest.raises(CorruptFileError):
        LanceFileReader(p).read()


def test_bad_magic(good_file: str, tmp_path: Path) -> None:
    p = _damage(good_file, tmp_path, lambda d: d[:-4] + b"LANX")
    with pytest.raises(CorruptFileError, match="magic"):
        LanceFileReader(p)


def test_unknown_version(good_file: str, tmp_path: Path) -> None:
    def bump(d: bytearray) -> bytearray:
        d[-8:-4] = struct.pack("<HH", 9, 9)
        return d

    p = _damage(good_file, tmp_path, bump)
    with pytest.raises(UnsupportedError, match="version 9.9"):
        LanceFileReader(p)


def test_corrupt_column_metadata(good_file: str, tmp_path: Path) -> None:
    def scramble(d: bytearray) -> bytearray:
        cms = struct.unpack_from("<Q", d, len(d) - FOOTER_SIZE)[0]
        d[cms : cms + 8] = b"\xff" * 8
        return d

    p = _damage(good_file, tmp_path, scramble)
    with pytest.raises(CorruptFileError):
        LanceFileReader(p).read()


def test_offset_table_outside_file(good_file: str, tmp_path: Path) -> None:
    def move(d: bytearray) -> bytearray:
        cmo = struct.unpack_from("<Q", d, len(d) - FOOTER_SIZE + 8)[0]
        struct.pack_into("<Q", d, cmo, len(d) * 4)  # column 0 metadata position
        return d

    p = _damage(good_file, tmp_path, move)
    with pytest.raises(CorruptFileError, match="outside the file"):
        LanceFileReader(p)


def test_errors_are_lance_errors() -> None:
    assert issubclass(CorruptFileError, LanceError) and issubclass(UnsupportedError, LanceError)


# -- damage inside the column metadata: rebuild the file's tail around edited messages ----------
def _edit_columns(path: str, tmp_path: Path, edit) -> str:
    """Copy of ``path`` whose column metadata messages went through ``edit(list)``; pages and
    global buffers (which precede the column metadata) stay where they were."""
    from lance_spark_ops._pb import file2_pb2
    from lance_spark_ops.file.container import Footer, parse_footer

    data = Path(path).read_bytes()
    f = parse_footer(data, len(data), path)
    table = np.frombuffer(data, dtype="<u8", count=2 * f.num_columns, offset=f.cmo_table_pos).reshape(-1, 2)
    cols = []
    for pos, size in table:
        cm = file2_pb2.ColumnMetadata()
        cm.ParseFromString(data[int(pos):int(pos + size)])
        cols.append(cm)
    edit(cols)
    out = bytearray(data[:f.column_meta_start])
    cmo = []
    for cm in cols:
        blob = cm.SerializeToString()
        cmo.append((len(out), len(blob)))
        out += blob
    cmo_pos = len(out)
    out += np.asarray(cmo, dtype="<u8").tobytes()
    gbo_pos = len(out)
    out += data[f.gbo_table_pos:f.gbo_table_pos + 16 * f.num_global_buffers]
    out += Footer(f.column_meta_start, cmo_pos, gbo_pos, f.num_global_buffers, f.num_columns, f.major,
                  f.minor).pack()
    dst = tmp_path / "edited.lance"
    dst.write_bytes(bytes(out))
    return str(dst)


def test_edit_helper_keeps_a_good_file_good(good_file: str, tmp_path: Path) -> None:
    from tests.conftest import pylance_read

    p = _edit_columns(good_file, tmp_path, lambda cols: None)
    assert LanceFileReader(p).read().equals(pylance_read(good_file))


@pytest.mark.parametrize("field", ["offset", "size"])
def test_page_buffer_outside_file(good_file: str, tmp_path: Path, field: str) -> None:
    def push(cols) -> None:
        page = cols[0].pages[0]
        if field == "offset":
            page.buffer_offsets[0] = 10**9
        else:
            page.buffer_sizes[0] = 10**9

    p = _edit_columns(good_file, tmp_path, push)
    with pytest.raises(CorruptFileError) as e:
        LanceFileReader(p).read()
    assert "edited.lance" in str(e.value)


def test_unknown_page_encoding(good_file: str, tmp_path: Path) -> None:
    def foreign(cols) -> None:
        enc = cols[1].pages[0].encoding
        enc.direct.encoding = b"\x0a\x1bnot.a.lance.encoding/Message\x12\x01x"

    p = _edit_columns(good_file, tmp_path, foreign)
    with pytest.raises((UnsupportedError, CorruptFileError)) as e:
        LanceFileReader(p).read()
    assert "edited.lance" in str(e.value)


def test_deferred_page_encoding_is_unsupported(good_file: str, tmp_path: Path) -> None:
    def defer(cols) -> None:
        page = cols[0].pages[0]
        page.encoding.indirect.SetInParent()

    p = _edit_columns(good_file, tmp_path, defer)
    with pytest.raises(UnsupportedError, match="deferred") as e:
        LanceFileReader(p).read()
    assert "edited.lance" in str(e.value)


def test_corrupt_schema_buffer(good_file: str, tmp_path: Path) -> None:
    def garble(d: bytearray) -> bytearray:
        f_gbo = struct.unpack_from("<Q", d, len(d) - FOOTER_SIZE + 16)[0]
        pos, size = struct.unpack_from("<QQ", d, f_gbo)
        d[pos:pos + size] = b"\xff" * size
        return d

    p = _damage(good_file, tmp_path, garble)
    with pytest.raises(CorruptFileError, match="schema") as e:
        LanceFileReader(p)
    assert "damaged.lance" in str(e.value)
