"""PackedStruct: a struct of fixed-width fields stored row-major
(``PackedStruct { bits_per_value: [per field], values: Flat(sum of bits) }``).

Each row is the fields' bytes back to back in schema order; the rows are then stored by the
inner encoding (Flat, chunked like any Flat mini-block). Every field must be a whole number
of bytes.

Worked example (struct<a: int32, b: float64, c: int16>): 14-byte rows
``[a: 4 bytes][b: 8 bytes][c: 2 bytes]``, ``bits_per_value = [32, 64, 16]``, values Flat(112).
Row 1 with a=1, b=0.5, c=2 is ``01 00 00 00 | 00 00 00 00 00 00 e0 3f | 02 00``.

pylance picks it for struct fields with ``lance-encoding:packed`` = true whose children are
all fixed width (mini-block), and for the (position, size) descriptions inside BlobLayout.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import DataBlock, FixedWidthBlock, StructBlock
from lance_spark_ops.encoding.compression._arrays import as_u8
from lance_spark_ops.errors import CorruptFileError, UnsupportedError


def _field_bytes(msg: pb.PackedStruct) -> list[int]:
    bits = [int(b) for b in msg.bits_per_value]
    if not bits:
        raise CorruptFileError("packed struct without fields")
    if any(b <= 0 or b % 8 for b in bits):
        raise UnsupportedError(f"packed struct fields of {bits} bits: only whole bytes are supported")
    return [b // 8 for b in bits]


def split_rows(msg: pb.PackedStruct, rows: DataBlock) -> StructBlock:
    """Cut row-major packed rows into one FixedWidthBlock per field."""
    widths = _field_bytes(msg)
    if not isinstance(rows, FixedWidthBlock):
        raise CorruptFileError(f"packed struct rows decoded to a {type(rows).__name__}")
    row_bytes = sum(widths)
    if rows.bits_per_value != row_bytes * 8:
        raise CorruptFileError(
            f"packed struct: rows of {rows.bits_per_value} bits, fields add up to {row_bytes * 8}"
        )
    n = rows.num_values
    data = as_u8(rows.data)
    if len(data) < n * row_bytes:
        raise CorruptFileError(f"packed struct: {len(data)} bytes for {n} rows of {row_bytes}")
    table = data[: n * row_bytes].reshape(n, row_bytes)
    children: list[DataBlock] = []
    col = 0
    for w in widths:
        children.append(FixedWidthBlock(np.ascontiguousarray(table[:, col : col + w]).reshape(-1), w * 8, n))
        col += w
    return StructBlock(children, n)


def _values(msg: pb.PackedStruct) -> pb.CompressiveEncoding:
    if not msg.HasField("values"):
        raise CorruptFileError("packed struct has no values encoding")
    return msg.values


def decode_packed_struct_miniblock(
    msg: pb.PackedStruct, chunks: Sequence[Sequence[memoryview]], counts: np.ndarray
) -> StructBlock:
    from lance_spark_ops.encoding.compression.decompress import decompress_miniblock_chunks

    return split_rows(msg, decompress_miniblock_chunks(_values(msg), chunks, counts))


def decode_packed_struct_block(msg: pb.PackedStruct, buffer: memoryview, num_values: int) -> StructBlock:
    from lance_spark_ops.encoding.compression.decompress import decompress_block

    return split_rows(msg, decompress_block(_values(msg), buffer, num_values))


def decode_packed_struct_per_value(msg: pb.PackedStruct, block: DataBlock) -> StructBlock:
    from lance_spark_ops.encoding.compression.decompress import decompress_per_value

    return split_rows(msg, decompress_per_value(_values(msg), block))
