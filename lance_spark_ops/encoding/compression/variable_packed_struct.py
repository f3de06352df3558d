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

Writing (``encode_variable_packed_struct_per_value``, Lance's
``PackedStructVariablePerValueEncoder``): each field is first compressed per value on its
own (Flat, Variable, Fsst, General zstd for values over 32 KiB ...), then the rows are laid
out field after field with one ragged scatter per field; the row offsets are u32 (u64 past
4 GiB) and the full-zip layout adds its own length prefix per row. Bool fields are refused
(not byte aligned), as pylance refuses them.
"""

from __future__ import annotations

import numpy as np

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import DataBlock, FixedWidthBlock, StructBlock, VariableWidthBlock
from lance_spark_ops.encoding.compression.contexts import CodecEncoders
from lance_spark_ops.encoding.compression.encoded import CodecLookup, CompressionParams
from lance_spark_ops.encoding.compression.strategy import Codec
from lance_spark_ops.encoding.compression.variable import gather_segments
from lance_spark_ops.errors import CorruptFileError, InvalidInputError, UnsupportedError


def _read_le(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    out = np.zeros(pos.size, dtype=np.uint64)
    for k in range(width):
        out |= buf[pos + k].astype(np.uint64) << np.uint64(8 * k)
    return out


def decode_variable_packed_struct_per_value(
    msg: pb.VariablePackedStruct, block: DataBlock, codecs: CodecLookup
) -> DataBlock:
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
        children.append(codecs.decompress_per_value(f.value, child))
    if (cursor != row_end).any():
        raise CorruptFileError("variable packed struct: trailing bytes after the last field of a row")
    return StructBlock(children, n)


# ----------------------------------------------------------------------------- encoder


def _child_bytes(child: DataBlock, n: int, what: str) -> tuple[np.ndarray, np.ndarray, int, bool]:
    """(bytes of each row's value back to back, per-row value size, prefix width, variable)."""
    from lance_spark_ops.encoding.compression._arrays import as_u8

    if isinstance(child, FixedWidthBlock):
        if child.bits_per_value <= 0 or child.bits_per_value % 8:
            raise UnsupportedError(f"{what}: {child.bits_per_value}-bit values are not byte aligned "
                                   "(packed structs need byte-aligned fixed-width fields, as in Lance)")
        w = child.bits_per_value // 8
        data = as_u8(child.data)
        if child.num_values != n or data.size < n * w:
            raise InvalidInputError(f"{what}: {child.num_values} values for {n} rows")
        return data[: n * w], np.full(n, w, np.int64), 0, False
    if isinstance(child, VariableWidthBlock):
        offs = np.asarray(child.offsets)
        lw = offs.dtype.itemsize
        if lw not in (4, 8):
            raise UnsupportedError(f"{what}: {lw * 8}-bit offsets (expected 32 or 64)")
        o = offs.astype(np.int64)
        data = as_u8(child.data)
        if child.num_values != n or o.size != n + 1 or (o.size and (o[0] < 0 or o[-1] > data.size)):
            raise InvalidInputError(f"{what}: offsets do not describe {n} values")
        return data[int(o[0]) : int(o[-1])], np.diff(o), lw, True
    raise UnsupportedError(f"{what}: per-value output of type {type(child).__name__}")


def _scatter_le(out: np.ndarray, pos: np.ndarray, values: np.ndarray, width: int) -> None:
    v = values.astype(np.uint64)
    for k in range(width):
        out[pos + k] = ((v >> np.uint64(8 * k)) & np.uint64(0xFF)).astype(np.uint8)


def encode_variable_packed_struct_per_value(
    block: DataBlock,
    params: object | None = None,
    *,
    children: list[tuple[DataBlock, pb.CompressiveEncoding]],
) -> tuple[VariableWidthBlock, pb.CompressiveEncoding]:
    """Rows of ``block`` (a ``StructBlock``) packed as described in the module docstring.

    ``children``: each field's per-value compressed values and encoding (what
    ``codecs.compress_per_value`` produced for it); when omitted each field is compressed
    with the strategy's per-value choice. Row offsets are u32 unless the rows exceed 4 GiB.
    """
    from lance_spark_ops.encoding.compression._arrays import exclusive_cumsum, scatter_ragged

    if not isinstance(block, StructBlock) or not block.children:
        raise InvalidInputError("variable packed struct needs a struct block with at least one field")
    n = block.num_values
    if len(children) != len(block.children):
        raise InvalidInputError(
            f"variable packed struct: {len(children)} encoded fields for {len(block.children)}"
        )
    parts = [_child_bytes(c, n, f"variable packed struct field {i}") for i, (c, _) in enumerate(children)]
    row_size = np.zeros(n, np.int64)
    for _, lens, lw, _var in parts:
        row_size += lens + lw
    row_start = exclusive_cumsum(row_size)
    total = int(row_size.sum())
    out = np.empty(total, np.uint8)
    cursor = row_start.copy()
    fields = []
    for (data, lens, lw, variable), (_, enc) in zip(parts, children, strict=True):
        if variable:
            _scatter_le(out, cursor, lens, lw)
            cursor += lw
            fields.append(pb.VariablePackedStruct.FieldEncoding(value=enc, bits_per_length=lw * 8))
        else:
            bits = int(lens[0] * 8) if n else 0
            fields.append(pb.VariablePackedStruct.FieldEncoding(value=enc, bits_per_value=bits))
        scatter_ragged(out, cursor, data, exclusive_cumsum(lens), lens)
        cursor += lens
    if not n:
        fields = [pb.VariablePackedStruct.FieldEncoding(value=enc, **(
            {"bits_per_length": _child_bytes(c, 0, "")[2] * 8} if isinstance(c, VariableWidthBlock)
            else {"bits_per_value": c.bits_per_value})) for c, enc in children]
    dtype = np.uint32 if total < 2**32 else np.uint64
    offsets = np.append(row_start, total).astype(dtype)
    enc = pb.CompressiveEncoding(variable_packed_struct=pb.VariablePackedStruct(fields=fields))
    return VariableWidthBlock(offsets, out, n), enc


def encode_variable_packed_struct_codec_per_value(
    block: DataBlock, params: CompressionParams, codec: Codec, codecs: CodecEncoders
) -> tuple[VariableWidthBlock, pb.CompressiveEncoding]:
    """The registry form: each field compressed per value by its node of ``codec.children``
    (through the registry), then the rows packed."""
    if not isinstance(block, StructBlock) or len(block.children) != len(codec.children):
        raise UnsupportedError("variable packed struct codec needs a struct block matching its fields")
    kids = [codecs.compress_per_value(c, b, p)
            for c, b, p in zip(codec.children, block.children, codec.child_params, strict=True)]
    return encode_variable_packed_struct_per_value(block, params, children=kids)
