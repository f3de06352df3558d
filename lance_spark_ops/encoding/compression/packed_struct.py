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

Writing interleaves the children into rows with one strided copy per field, then chunks
the rows like any Flat mini-block (512 rows of the 14-byte example per chunk).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import DataBlock, FixedWidthBlock, StructBlock
from lance_spark_ops.encoding.compression._arrays import as_u8
from lance_spark_ops.encoding.compression.contexts import CodecEncoders
from lance_spark_ops.encoding.compression.encoded import CodecLookup, CompressionParams, MiniBlockCompressed
from lance_spark_ops.encoding.compression.strategy import Codec
from lance_spark_ops.encoding.compression.value import encode_flat_block, encode_flat_miniblock
from lance_spark_ops.errors import CorruptFileError, InvalidInputError, UnsupportedError


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
    msg: pb.PackedStruct, chunks: Sequence[Sequence[memoryview]], counts: np.ndarray, codecs: CodecLookup
) -> StructBlock:
    return split_rows(msg, codecs.decompress_miniblock_chunks(_values(msg), chunks, counts))


def decode_packed_struct_miniblock_ranges(
    msg: pb.PackedStruct, data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, counts: np.ndarray,
    codecs: CodecLookup,
) -> StructBlock:
    """Mini-block chunks given as byte ranges of ``data`` (the inner encoding decodes them)."""
    return split_rows(msg, codecs.decode_miniblock_ranges(_values(msg), data, starts, sizes, counts))


def decode_packed_struct_block(
    msg: pb.PackedStruct, buffer: memoryview, num_values: int, codecs: CodecLookup
) -> StructBlock:
    return split_rows(msg, codecs.decompress_block(_values(msg), buffer, num_values))


def decode_packed_struct_per_value(
    msg: pb.PackedStruct, block: DataBlock, codecs: CodecLookup
) -> StructBlock:
    return split_rows(msg, codecs.decompress_per_value(_values(msg), block))


# ---------------------------------------------------------------------------- encoders


def pack_rows(block: DataBlock) -> tuple[FixedWidthBlock, list[int]]:
    """Row-major rows of a struct of fixed-width whole-byte fields, and the field widths in bits."""
    if not isinstance(block, StructBlock):
        raise InvalidInputError(f"packed struct encoding needs a StructBlock, got {type(block).__name__}")
    n = block.num_values
    widths = []
    for i, child in enumerate(block.children):
        if not isinstance(child, FixedWidthBlock):
            raise InvalidInputError(f"packed struct field {i} is a {type(child).__name__}, not fixed width")
        if child.bits_per_value <= 0 or child.bits_per_value % 8:
            raise UnsupportedError(
                f"packed struct field {i} of {child.bits_per_value} bits: whole bytes only"
            )
        if child.num_values < n:
            raise InvalidInputError(f"packed struct field {i} has {child.num_values} values for {n} rows")
        widths.append(child.bits_per_value // 8)
    if not widths:
        raise InvalidInputError("packed struct without fields")
    table = np.empty((n, sum(widths)), dtype=np.uint8)
    col = 0
    for child, w in zip(block.children, widths, strict=True):
        table[:, col : col + w] = as_u8(child.data)[: n * w].reshape(n, w)
        col += w
    return FixedWidthBlock(table.reshape(-1), sum(widths) * 8, n), [w * 8 for w in widths]


def packed_struct_encoding(bits: list[int], values: pb.CompressiveEncoding) -> pb.CompressiveEncoding:
    return pb.CompressiveEncoding(packed_struct=pb.PackedStruct(bits_per_value=bits, values=values))


def encode_packed_struct_miniblock(
    block: DataBlock, params: CompressionParams | None = None,
    codec: Codec | None = None, codecs: CodecEncoders | None = None
) -> MiniBlockCompressed:
    """Packed rows stored as Flat mini-block chunks."""
    rows, bits = pack_rows(block)
    out = encode_flat_miniblock(rows)
    out.encoding = packed_struct_encoding(bits, out.encoding)
    return out


def encode_packed_struct_block(
    block: DataBlock, params: CompressionParams | None = None,
    codec: Codec | None = None, codecs: CodecEncoders | None = None
) -> tuple[np.ndarray, pb.CompressiveEncoding]:
    """Packed rows in one Flat buffer."""
    rows, bits = pack_rows(block)
    data, enc = encode_flat_block(rows)
    return data, packed_struct_encoding(bits, enc)
