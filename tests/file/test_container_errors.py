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
    t = pa.table({"a": pa.array(np.arange(1000, dtype=np.int64)), "s": pa.array([f"v{i}" for i in range(1000)])})
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
