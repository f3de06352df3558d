"""Stream a Lance 2.x container: 64-byte aligned page buffers, then (as pylance lays it out)
the global buffers, column metadata, the two offset tables and the footer.

The writer never holds more than the page being written; pages of different columns may be
interleaved in any order (each page is referenced by absolute offsets).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import BinaryIO

import numpy as np
from google.protobuf import any_pb2
from google.protobuf.message import Message

from lance_spark_ops._pb import encodings_v2_0_pb2, file2_pb2
from lance_spark_ops.encoding.page import EncodedPage
from lance_spark_ops.file.container import BYTES_BY_VERSION, FOOTER_SIZE, Footer

ALIGN = 64
_PAD = b"H" * ALIGN  # pylance pads with 0x48; files then match byte for byte


def pack_encoding(msg: Message | None) -> file2_pb2.Encoding:
    """Wrap an encoding message as ``Encoding.direct`` holding a ``google.protobuf.Any``."""
    enc = file2_pb2.Encoding()
    if msg is None:
        enc.none.SetInParent()
        return enc
    anyv = any_pb2.Any()
    anyv.Pack(msg, type_url_prefix="")
    enc.direct.encoding = anyv.SerializeToString()
    return enc


def default_column_encoding() -> file2_pb2.Encoding:
    """Column encoding pylance writes for plain columns: ``ColumnEncoding{values: {}}``."""
    col = encodings_v2_0_pb2.ColumnEncoding()
    col.values.SetInParent()
    return pack_encoding(col)


class ContainerWriter:
    """Low-level writer: ``write_page`` per page, ``finish`` once."""

    def __init__(self, out: BinaryIO, num_columns: int, version: str) -> None:
        self._out = out
        self._pos = 0
        self._version = version
        self._columns = [file2_pb2.ColumnMetadata() for _ in range(num_columns)]
        for col in self._columns:
            col.encoding.CopyFrom(default_column_encoding())

    @property
    def num_columns(self) -> int:
        return len(self._columns)

    @property
    def position(self) -> int:
        return self._pos

    def _write(self, data: bytes | memoryview | np.ndarray) -> None:
        mv = memoryview(data).cast("B") if not isinstance(data, (bytes, bytearray)) else data
        self._out.write(mv)
        self._pos += len(mv)

    def _align(self) -> None:
        pad = -self._pos % ALIGN
        if pad:
            self._write(_PAD[:pad])

    def write_buffer(self, data: bytes | memoryview | np.ndarray) -> tuple[int, int]:
        """Write one aligned buffer; returns (offset, size)."""
        self._align()
        offset = self._pos
        self._write(data)
        return offset, self._pos - offset

    def write_encoded_page(self, column: int, page: EncodedPage, priority: int) -> None:
        """Write an encoder's page, placing its external (blob) payloads first."""
        if page.external:
            offsets = [self.write_buffer(buf)[0] for buf in page.external]
            if page.finalize is None:
                raise ValueError("a page with external buffers needs a finalize callback")
            page.finalize(offsets)
        self.write_page(column, page.buffers, page.encoding, page.num_rows, priority)  # type: ignore[arg-type]

    def write_page(self, column: int, buffers: Sequence[bytes | memoryview | np.ndarray],
                   encoding: Message | None, num_rows: int, priority: int) -> None:
        self.write_packed_page(column, buffers, pack_encoding(encoding), num_rows, priority)

    def write_packed_page(self, column: int, buffers: Sequence[bytes | memoryview | np.ndarray],
                          encoding: file2_pb2.Encoding, num_rows: int, priority: int) -> None:
        """Write a page whose encoding is already packed (binary copy of another file's page)."""
        page = self._columns[column].pages.add()
        for buf in buffers:
            off, size = self.write_buffer(buf)
            page.buffer_offsets.append(off)
            page.buffer_sizes.append(size)
        page.length = num_rows
        page.encoding.CopyFrom(encoding)
        page.priority = priority

    def column_encoding(self, column: int) -> file2_pb2.Encoding:
        return self._columns[column].encoding

    def set_column_encoding(self, column: int, encoding: Message) -> None:
        self._columns[column].encoding.CopyFrom(pack_encoding(encoding))

    def finish(self, global_buffers: Sequence[bytes]) -> int:
        """Write global buffers, column metadata, offset tables and footer; returns file size."""
        gbo = [self.write_buffer(gb) for gb in global_buffers]
        # pylance writes the column metadata right after the last global buffer, unaligned.
        column_meta_start = self._pos
        cmo = []
        for col in self._columns:
            blob = col.SerializeToString()
            cmo.append((self._pos, len(blob)))
            self._write(blob)
        cmo_pos = self._pos
        self._write(np.asarray(cmo, dtype="<u8").reshape(-1).tobytes())
        gbo_pos = self._pos
        self._write(np.asarray(gbo, dtype="<u8").reshape(-1).tobytes())
        major, minor = BYTES_BY_VERSION[self._version]
        footer = Footer(column_meta_start, cmo_pos, gbo_pos, len(gbo), len(self._columns), major, minor)
        self._write(footer.pack())
        assert FOOTER_SIZE == 40
        return self._pos
