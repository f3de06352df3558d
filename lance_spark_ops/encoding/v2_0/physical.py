"""Decoders for the 2.0 ``ArrayEncoding`` tree of one page (fixed-width family).

``decode_array(enc, ctx, dt, lo, hi)`` decodes rows ``[lo, hi)`` of a page into an Arrow
array of type ``dt``; it dispatches on the oneof of ``enc`` (``binary`` and ``dictionary``
live in ``binary.py``, the shared ``Flat`` readers / writers in ``flat.py``). Uncompressed
buffers are read only over the requested rows.

On-disk layouts (all little endian; "buffer" = ``Buffer{buffer_index, buffer_type}``):

- ``Flat{bits_per_value, buffer, compression}``: values back to back. ``bits_per_value`` 1 is
  an LSB-first bitmap (booleans, validity); otherwise a multiple of 8 (int/float/date/time/
  timestamp/duration = their width, decimal128 = 128, fixed_size_binary(w) = 8w). With a
  ``compression`` other than ``none`` the whole buffer is compressed (``buffers.py``).
- ``Nullable``: ``no_nulls{values}`` | ``some_nulls{validity: Flat(1), values}`` |
  ``all_nulls{}`` (no buffers). Null slots still occupy a (zeroed) value.
- ``FixedSizeList{dimension, items, has_validity}``: row i is items ``[i*d, (i+1)*d)``; item
  nulls come from a ``Nullable`` inside ``items``, row nulls from a ``Nullable`` around it.
- ``FixedSizeBinary{bytes, byte_width}``: fixed-width values exposed as a binary/string type.
- ``PackedStruct{inner, buffer}``: rows of ``sum(child widths)`` bytes, children's bytes
  side by side (row-major); ``inner`` only describes the children (their buffers are fake).
- ``Constant{value}``: every row is ``value`` (never written by pylance; fixed width only).

Worked example (a page of 5 nullable int32 rows ``[7, null, 9, null, 11]``)::

    nullable { some_nulls { validity { flat { bits_per_value: 1 buffer {} } }
                            values { flat { bits_per_value: 32 buffer { buffer_index: 1 } } } } }
    page buffer 0 = 0b00010101 (rows 0, 2, 4 valid)
    page buffer 1 = 07000000 00000000 09000000 00000000 0b000000

``decode_array(enc, ctx, pa.int32(), 1, 4)`` reads validity bits 1..3 (byte 0) and bytes
4..16 of buffer 1 and returns ``[null, 9, null]``.

Encoding (what pylance's 2.0 ``BasicEncoder(ValueEncoder)`` writes, mirrored by
``encode_basic``): a page with no null rows is ``no_nulls``, one whose rows are all null
(or a ``null``-typed / empty page) ``all_nulls`` without buffers, anything else
``some_nulls`` with the validity bitmap as buffer 0. Values keep what Arrow holds under
null slots. A fixed-size list is ``Nullable(FixedSizeList(Nullable(items)))``: row nulls
outside, item nulls inside, buffers in that order. ``encode_packed_struct`` zips the
children's bytes row by row into one buffer; its ``inner`` descriptions all name buffer 0.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lance_spark_ops._pb import encodings_v2_0_pb2 as pb
from lance_spark_ops.encoding.v2_0.arrays import (
    fixed_array,
    fixed_bit_width,
    fixed_byte_width,
    fixed_value_bytes,
    variable_array,
    with_validity,
)
from lance_spark_ops.encoding.v2_0.binary import decode_binary, decode_dictionary
from lance_spark_ops.encoding.v2_0.buffers import PageBuffers, PageContext
from lance_spark_ops.encoding.v2_0.flat import decode_bitmap, flat_values, fsl_items, unwrap_no_nulls
from lance_spark_ops.errors import CorruptFileError, UnsupportedError

_NEVER_IN_2_0 = {
    "bitpacked", "bitpacked_for_non_neg", "fsst", "inline_bitpacking", "out_of_line_bitpacking",
    "variable", "packed_struct_fixed_width_mini_block", "block", "rle", "general_mini_block",
    "byte_stream_split",
}


def decode_array(enc: pb.ArrayEncoding, ctx: PageContext, dt: pa.DataType, lo: int, hi: int) -> pa.Array:
    """Rows ``[lo, hi)`` of the page encoded by ``enc`` as an Arrow array of type ``dt``."""
    kind = enc.WhichOneof("array_encoding")
    n = hi - lo
    if kind == "nullable":
        return _decode_nullable(enc.nullable, ctx, dt, lo, hi)
    if kind == "flat":
        data, bit_offset = flat_values(enc.flat, ctx, lo, hi)
        _check_flat_type(enc.flat, dt, ctx)
        return fixed_array(dt, n, data, bit_offset)
    if kind == "fixed_size_list":
        return _decode_fsl(enc.fixed_size_list, ctx, dt, lo, hi)
    if kind == "binary":
        return decode_binary(enc.binary, ctx, dt, lo, hi)
    if kind == "dictionary":
        return decode_dictionary(enc.dictionary, ctx, dt, lo, hi, decode_array)
    if kind == "packed_struct":
        return decode_packed_struct(enc.packed_struct, ctx, dt, lo, hi)
    if kind == "fixed_size_binary":
        return _decode_fixed_size_binary(enc.fixed_size_binary, ctx, dt, lo, hi)
    if kind == "constant":
        return _decode_constant(enc.constant, ctx, dt, n)
    if kind == "list" and (pa.types.is_string(dt) or pa.types.is_binary(dt)
                           or pa.types.is_large_string(dt) or pa.types.is_large_binary(dt)):
        raise UnsupportedError(f"{ctx.where}: {dt} stored as list<uint8> plus an items column (early 2.0 "
                               "writers) is not supported")
    if kind == "list" or kind == "struct":
        raise CorruptFileError(f"{ctx.where}: a {kind} encoding found where {dt} values were expected")
    if kind in _NEVER_IN_2_0:
        raise UnsupportedError(f"{ctx.where}: array encoding {kind!r} is not supported in 2.0 files")
    raise CorruptFileError(f"{ctx.where}: empty or unknown array encoding {kind!r}")


def _check_flat_type(flat: pb.Flat, dt: pa.DataType, ctx: PageContext) -> None:
    bits = fixed_bit_width(dt)
    if bits is None:
        raise CorruptFileError(f"{ctx.where}: flat {flat.bits_per_value}-bit values found for a field "
                               f"of type {dt}")
    if bits != flat.bits_per_value:
        raise CorruptFileError(f"{ctx.where}: flat values have {flat.bits_per_value} bits but type {dt} "
                               f"has {bits}")


def _decode_nullable(msg: pb.Nullable, ctx: PageContext, dt: pa.DataType, lo: int, hi: int) -> pa.Array:
    kind = msg.WhichOneof("nullability")
    if kind == "no_nulls":
        return decode_array(msg.no_nulls.values, ctx, dt, lo, hi)
    if kind == "all_nulls":
        return pa.nulls(hi - lo, type=dt)
    if kind == "some_nulls":
        valid = decode_bitmap(msg.some_nulls.validity, ctx, lo, hi)
        values = decode_array(msg.some_nulls.values, ctx, dt, lo, hi)
        return with_validity(values, valid)
    raise CorruptFileError(f"{ctx.where}: nullable encoding without nullability")


def _decode_fsl(msg: pb.FixedSizeList, ctx: PageContext, dt: pa.DataType, lo: int, hi: int) -> pa.Array:
    if not pa.types.is_fixed_size_list(dt):
        raise CorruptFileError(f"{ctx.where}: fixed_size_list encoding found for a field of type {dt}")
    d = msg.dimension
    if d != dt.list_size:
        raise CorruptFileError(f"{ctx.where}: fixed_size_list dimension {d} but the field has {dt.list_size}")
    if msg.has_validity:
        raise UnsupportedError(f"{ctx.where}: fixed_size_list with has_validity is not a 2.0 layout")
    items = decode_array(msg.items, ctx, dt.value_type, lo * d, hi * d)
    return pa.FixedSizeListArray.from_arrays(items, type=dt)


def _decode_fixed_size_binary(msg: pb.FixedSizeBinary, ctx: PageContext, dt: pa.DataType,
                              lo: int, hi: int) -> pa.Array:
    w = msg.byte_width
    if w == 0:
        raise CorruptFileError(f"{ctx.where}: fixed_size_binary with byte_width 0")
    flat = unwrap_no_nulls(msg.bytes, ctx, "fixed-size binary bytes")
    if flat.bits_per_value == 8 * w:
        data, _ = flat_values(flat, ctx, lo, hi)
    elif flat.bits_per_value == 8:
        data, _ = flat_values(flat, ctx, lo * w, hi * w)
    else:
        raise CorruptFileError(f"{ctx.where}: fixed_size_binary of width {w} over "
                               f"{flat.bits_per_value}-bit values")
    n = hi - lo
    raw = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
    if raw.size < n * w:
        raise CorruptFileError(f"{ctx.where}: {n} values of {w} bytes need {n * w} bytes")
    if pa.types.is_fixed_size_binary(dt) and dt.byte_width == w:
        return fixed_array(dt, n, raw[: n * w])
    offsets = np.arange(n + 1, dtype=np.int64) * w
    return variable_array(dt, offsets, raw[: n * w], None)


def _decode_constant(msg: pb.Constant, ctx: PageContext, dt: pa.DataType, n: int) -> pa.Array:
    bits = fixed_bit_width(dt)
    value = bytes(msg.value)
    if bits is None or bits % 8 or len(value) != bits // 8:
        raise UnsupportedError(f"{ctx.where}: constant encoding of {len(value)} bytes for type {dt} "
                               "is not supported")
    return fixed_array(dt, n, np.tile(np.frombuffer(value, np.uint8), n))


def packed_rows(msg: pb.PackedStruct, ctx: PageContext, widths: list[int], lo: int,
                hi: int) -> list[np.ndarray]:
    """The bytes of each child of a packed struct for rows ``[lo, hi)``: one contiguous uint8
    array of ``(hi - lo) * widths[k]`` bytes per child."""
    if len(msg.inner) != len(widths):
        raise CorruptFileError(f"{ctx.where}: packed struct describes {len(msg.inner)} children, "
                               f"the field has {len(widths)}")
    for k, (inner, w) in enumerate(zip(msg.inner, widths, strict=True)):
        bits = _inner_bits(inner)
        if bits is not None and bits != 8 * w:
            raise CorruptFileError(f"{ctx.where}: packed struct child {k} is stored with {bits} bits, "
                                   f"its type needs {8 * w}")
    if not msg.HasField("buffer"):
        raise CorruptFileError(f"{ctx.where}: packed struct has no buffer")
    stride = sum(widths)
    n = hi - lo
    if n == 0 or stride == 0:
        return [np.zeros(0, np.uint8) for _ in widths]
    raw = ctx.read(msg.buffer, lo * stride, n * stride, f"{n} packed rows of {stride} bytes")
    rows = np.frombuffer(raw, dtype=np.uint8).reshape(n, stride)
    out, pos = [], 0
    for w in widths:
        out.append(np.ascontiguousarray(rows[:, pos: pos + w]).reshape(-1))
        pos += w
    return out


def _inner_bits(enc: pb.ArrayEncoding) -> int | None:
    """Total bits per row a packed struct child description implies (None if unknown)."""
    kind = enc.WhichOneof("array_encoding")
    if kind == "nullable" and enc.nullable.WhichOneof("nullability") == "no_nulls":
        return _inner_bits(enc.nullable.no_nulls.values)
    if kind == "flat":
        return int(enc.flat.bits_per_value)
    if kind == "fixed_size_list":
        inner = _inner_bits(enc.fixed_size_list.items)
        return None if inner is None else inner * enc.fixed_size_list.dimension
    return None


def child_from_bytes(dt: pa.DataType, n: int, data: np.ndarray) -> pa.Array:
    """A fixed-width (or fixed-size-list of fixed-width) child from its packed bytes."""
    if pa.types.is_fixed_size_list(dt):
        items = child_from_bytes(dt.value_type, n * dt.list_size, data)
        return pa.FixedSizeListArray.from_arrays(items, type=dt)
    return fixed_array(dt, n, data)


def decode_packed_struct(msg: pb.PackedStruct, ctx: PageContext, dt: pa.DataType, lo: int,
                         hi: int) -> pa.Array:
    if not pa.types.is_struct(dt):
        raise CorruptFileError(f"{ctx.where}: packed struct encoding found for a field of type {dt}")
    fields = [dt.field(i) for i in range(dt.num_fields)]
    widths = []
    for f in fields:
        w = fixed_byte_width(f.type)
        if w is None:
            raise UnsupportedError(f"{ctx.where}: packed struct child {f.name!r} of type {f.type} has no "
                                   "fixed byte width")
        widths.append(w)
    n = hi - lo
    parts = packed_rows(msg, ctx, widths, lo, hi)
    children = [child_from_bytes(f.type, n, part) for f, part in zip(fields, parts, strict=True)]
    if not children:
        return pa.StructArray.from_buffers(dt, n, [None], children=[])
    return pa.StructArray.from_arrays(children, fields=fields)


# -- encoding ------------------------------------------------------------------------------
def describe_basic(dt: pa.DataType) -> pb.ArrayEncoding:
    """The no-null ``Nullable`` description of a packed struct child (buffers all index 0)."""
    enc = pb.ArrayEncoding()
    values = enc.nullable.no_nulls.values
    if pa.types.is_fixed_size_list(dt):
        values.fixed_size_list.dimension = dt.list_size
        values.fixed_size_list.items.CopyFrom(describe_basic(dt.value_type))
    else:
        bits = fixed_bit_width(dt)
        if bits is None:
            raise UnsupportedError(f"type {dt} has no fixed width")
        values.flat.bits_per_value = bits
        values.flat.buffer.SetInParent()
    return enc


def packed_child_bytes(arr: pa.Array) -> np.ndarray:
    """Row-major value bytes of a packed struct child (fixed width or fixed-size lists of it)."""
    if pa.types.is_fixed_size_list(arr.type):
        return packed_child_bytes(fsl_items(arr))
    data, bits = fixed_value_bytes(arr)
    if bits % 8:
        raise UnsupportedError(f"a packed struct child of type {arr.type} has {bits} bits per value")
    return data


def encode_packed_struct(arr: pa.StructArray, pages: PageBuffers) -> pb.ArrayEncoding:
    """``PackedStruct``: each row's children bytes side by side in one buffer."""
    dt = arr.type
    maybe = [fixed_byte_width(dt.field(k).type) for k in range(dt.num_fields)]
    if not maybe or any(not w for w in maybe):
        raise UnsupportedError(f"cannot pack struct {dt}: every child needs a fixed byte width")
    widths = [int(w or 0) for w in maybe]
    n, stride = len(arr), sum(widths)
    rows = np.empty((n, stride), dtype=np.uint8)
    pos = 0
    enc = pb.ArrayEncoding()
    for k, w in enumerate(widths):
        rows[:, pos: pos + w] = packed_child_bytes(arr.field(k)).reshape(n, w)
        pos += w
        enc.packed_struct.inner.append(describe_basic(dt.field(k).type))
    enc.packed_struct.buffer.CopyFrom(pages.add(rows.reshape(-1)))
    return enc
