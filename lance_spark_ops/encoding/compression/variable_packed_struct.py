"""VariablePackedStruct (file version 2.2): a struct stored row-major when a child is
variable width. Used per value in full-zip pages: each full-zip value is one struct row.

``VariablePackedStruct`` message = one ``FieldEncoding`` per child, in order: the child's own
per-value encoding (``value``) and either ``bits_per_value`` (fixed-width child) or
``bits_per_length`` (variable-width child, 32 or 64).

Row bytes: the children back to back; a fixed child is ``bits_per_value / 8`` bytes, a
variable child is a u32 / u64 little-endian length followed by that many bytes. Example,
struct ``{x: int32, s: string}`` row ``{x: 7, s: "hi"}``::

    07000000 | 02000000 6869

Each child's bytes then go through the child's per-value decoder (Flat, Variable, Fsst,
General, FixedSizeList, Constant, nested VariablePackedStruct). A zero-length row is a
placeholder (a null row of a full-zip page): its fixed children read as zero bytes and its
variable children as empty values.

pylance picks it in 2.2 for ``lance-encoding:packed = true`` structs with a string / binary
child (2.1 refuses them), and for blob v2 descriptors ``{kind, position, size, blob_id,
blob_uri}`` in 2.2 datasets. Parsing is vectorised over rows, one pass per field.
"""

from __future__ import annotations

import numpy as np

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import DataBlock, FixedWidthBlock, StructBlock, VariableWidthBlock
from lance_spark_ops.encoding.compression.variable import gather_segments
from lance_spark_ops.errors import CorruptFileError, UnsupportedError


def _read_le(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    out = np.zeros(pos.size, dtype=np.uint64)
    for k in range(width):
        out |= buf[pos + k].astype(np.uint64) << np.uint64(8 * k)
    return out


def decode_variable_packed_struct_per_value(msg: pb.VariablePackedStruct, block: DataBlock) -> DataBlock:
    from lance_spark_ops.encoding.layout.fullzip import per_value

    if not isinstance(block, VariableWidthBlock):
        raise CorruptFileError(
            f"variable packed struct: expected variable-width rows, got {type(block).__name__}"
        )
    if not msg.fields:
        raise CorruptFileError("variable packed struct: no fields")
    n = block.num_values
    offs = np.asarray(block.offsets).astype(np.int64)
    buf = np.asarray(block.data, dtype=np.uint8)
    if (
        offs.size != n + 1
        or (np.diff(offs) < 0).any()
        or (offs.size and (offs[0] < 0 or offs[-1] > buf.size))
    ):
        raise CorruptFileError("variable packed struct: row offsets are not monotonic within the data")
    row_end = offs[1:]
    live = offs[1:] > offs[:-1]  # zero-length rows are null placeholders
    cursor = offs[:-1].copy()
    children: list[DataBlock] = []
    for i, f in enumerate(msg.fields):
        what = f"variable packed struct field {i}"
        kind = f.WhichOneof("layout")
        if not f.HasField("value"):
            raise CorruptFileError(f"{what}: no value encoding")
        if kind == "bits_per_value":
            bits = int(f.bits_per_value)
            if bits <= 0 or bits % 8:
                raise UnsupportedError(f"{what}: {bits}-bit fixed child is not byte aligned")
            width = bits // 8
            end = cursor + np.where(live, width, 0)
            if (end > row_end).any():
                raise CorruptFileError(f"{what}: fixed child runs past the end of its row")
            data = np.zeros(n * width, dtype=np.uint8)
            if live.all():
                data = gather_segments(buf, cursor, np.full(n, width, np.int64))
            elif live.any():
                mat = data.reshape(n, width)
                mat[live] = gather_segments(
                    buf, cursor[live], np.full(int(live.sum()), width, np.int64)
                ).reshape(-1, width)
            child: DataBlock = FixedWidthBlock(np.ascontiguousarray(data), bits, n)
            cursor = end
        elif kind == "bits_per_length":
            bits = int(f.bits_per_length)
            if bits not in (32, 64):
                raise UnsupportedError(f"{what}: {bits}-bit lengths (expected 32 or 64)")
            lw = bits // 8
            if (cursor[live] + lw > row_end[live]).any():
                raise CorruptFileError(f"{what}: length prefix runs past the end of its row")
            lens = np.zeros(n, dtype=np.int64)
            if live.any():
                raw = _read_le(buf, cursor[live], lw)
                if int(raw.max()) > buf.size:
                    raise CorruptFileError(f"{what}: value length {int(raw.max())} exceeds the data")
                lens[live] = raw.astype(np.int64)
            start = cursor + np.where(live, lw, 0)
            end = start + lens
            if (end > row_end).any():
                raise CorruptFileError(f"{what}: value runs past the end of its row")
            data = gather_segments(buf, start, lens)
            offsets = np.zeros(n + 1, dtype=np.uint32 if bits == 32 else np.uint64)
            offsets[1:] = np.cumsum(lens)
            child = VariableWidthBlock(offsets, data, n)
            cursor = end
        else:
            raise CorruptFileError(f"{what}: neither bits_per_value nor bits_per_length is set")
        children.append(per_value(f.value, child))
    if (cursor != row_end).any():
        raise CorruptFileError("variable packed struct: trailing bytes after the last field of a row")
    return StructBlock(children, n)
