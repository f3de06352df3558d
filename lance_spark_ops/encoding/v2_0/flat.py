"""Flat buffers of the 2.0 ``ArrayEncoding`` tree, the pieces every 2.0 codec shares:
reading ``Flat`` values, unsigned ints (offsets, indices), validity bitmaps and bytes for a
row range, and writing ``Flat`` / ``Nullable`` basic encodings (``physical.py`` describes
the layouts). Kept apart from the ``decode_array`` dispatcher so ``binary.py`` and
``physical.py`` both build on it without importing each other.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lance_spark_ops._pb import encodings_v2_0_pb2 as pb
from lance_spark_ops.encoding.v2_0.arrays import fixed_value_bytes, unpack_bits, validity_bits
from lance_spark_ops.encoding.v2_0.buffers import BufferData, PageBuffers, PageContext
from lance_spark_ops.errors import CorruptFileError, UnsupportedError


def flat_values(flat: pb.Flat, ctx: PageContext, lo: int, hi: int) -> tuple[memoryview | np.ndarray, int]:
    """The bytes holding values ``[lo, hi)`` of a ``Flat`` buffer and the bit offset of value
    ``lo`` in them (non-zero only for 1-bit values)."""
    bits = flat.bits_per_value
    n = hi - lo
    scheme = flat.compression.scheme if flat.HasField("compression") else ""
    if bits == 0 or (bits != 1 and bits % 8):
        raise UnsupportedError(f"{ctx.where}: flat values of {bits} bits are not supported "
                               "(expected 1 or a multiple of 8)")
    if not flat.HasField("buffer"):
        raise CorruptFileError(f"{ctx.where}: flat encoding has no buffer")
    if bits == 1:
        start, stop, bit_offset = lo // 8, (hi + 7) // 8, lo % 8
    else:
        start, stop, bit_offset = lo * (bits // 8), hi * (bits // 8), 0
    if n == 0:
        return np.zeros(0, np.uint8), 0
    what = f"{n} values of {bits} bits"
    if scheme in ("", "none"):
        return ctx.read(flat.buffer, start, stop - start, what), bit_offset
    if bits == 1:
        raise UnsupportedError(f"{ctx.where}: compressed ({scheme}) bitmaps are not supported")
    data = ctx.read_decompressed(flat.buffer, scheme, what)
    if stop > data.size:
        raise CorruptFileError(f"{ctx.where}: {what} need {stop} bytes, the {scheme} buffer "
                               f"decompresses to {data.size}")
    return data[start:stop], 0


def flat_bytes(enc: pb.ArrayEncoding, ctx: PageContext, lo: int, hi: int) -> np.ndarray:
    """Bytes ``[lo, hi)`` of an 8-bit ``Flat`` (binary bytes), as uint8."""
    flat = unwrap_no_nulls(enc, ctx, "bytes")
    if flat.bits_per_value != 8:
        raise CorruptFileError(f"{ctx.where}: byte buffer has {flat.bits_per_value} bits per value, "
                               "expected 8")
    data, _ = flat_values(flat, ctx, lo, hi)
    return np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data


def decode_ints(enc: pb.ArrayEncoding, ctx: PageContext, lo: int,
                hi: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Unsigned integers ``[lo, hi)`` (offsets, indices) at their stored width, plus a validity
    mask when the encoding is ``Nullable.some_nulls`` / ``all_nulls`` (else ``None``)."""
    kind = enc.WhichOneof("array_encoding")
    if kind == "nullable":
        nk = enc.nullable.WhichOneof("nullability")
        if nk == "no_nulls":
            return decode_ints(enc.nullable.no_nulls.values, ctx, lo, hi)
        if nk == "all_nulls":
            return np.zeros(hi - lo, np.uint64), np.zeros(hi - lo, bool)
        if nk == "some_nulls":
            valid = decode_bitmap(enc.nullable.some_nulls.validity, ctx, lo, hi)
            values, inner = decode_ints(enc.nullable.some_nulls.values, ctx, lo, hi)
            return values, valid if inner is None else valid & inner
        raise CorruptFileError(f"{ctx.where}: nullable encoding without nullability")
    if kind != "flat":
        raise UnsupportedError(f"{ctx.where}: integer offsets/indices encoded as {kind!r} are not supported")
    bits = enc.flat.bits_per_value
    if bits not in (8, 16, 32, 64):
        raise UnsupportedError(f"{ctx.where}: {bits}-bit offsets/indices are not supported")
    data, _ = flat_values(enc.flat, ctx, lo, hi)
    n = hi - lo
    raw = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
    if raw.size < n * bits // 8:
        raise CorruptFileError(f"{ctx.where}: {n} {bits}-bit integers need {n * bits // 8} bytes")
    return raw[: n * bits // 8].view(f"<u{bits // 8}"), None


def decode_bitmap(enc: pb.ArrayEncoding, ctx: PageContext, lo: int, hi: int) -> np.ndarray:
    """Bits ``[lo, hi)`` of a ``Flat(1)`` validity bitmap as bools."""
    if enc.WhichOneof("array_encoding") != "flat" or enc.flat.bits_per_value != 1:
        raise CorruptFileError(f"{ctx.where}: validity must be a 1-bit flat buffer, found "
                               f"{enc.WhichOneof('array_encoding')}")
    data, bit_offset = flat_values(enc.flat, ctx, lo, hi)
    return unpack_bits(data, bit_offset, hi - lo)


def unwrap_no_nulls(enc: pb.ArrayEncoding, ctx: PageContext, what: str) -> pb.Flat:
    """The ``Flat`` under any ``Nullable.no_nulls`` wrappers (UnsupportedError for anything else)."""
    while (enc.WhichOneof("array_encoding") == "nullable"
           and enc.nullable.WhichOneof("nullability") == "no_nulls"):
        enc = enc.nullable.no_nulls.values
    if enc.WhichOneof("array_encoding") != "flat":
        raise UnsupportedError(f"{ctx.where}: {what} encoded as {enc.WhichOneof('array_encoding')!r} "
                               "are not supported (expected flat)")
    return enc.flat


def encode_flat(data: BufferData, bits: int, pages: PageBuffers,
                compression: pb.Compression | None = None) -> pb.ArrayEncoding:
    """``Flat{bits_per_value, buffer}`` over a new page buffer (optionally with the
    ``Compression`` the buffer was compressed with)."""
    enc = pb.ArrayEncoding()
    enc.flat.bits_per_value = bits
    enc.flat.buffer.CopyFrom(pages.add(data))
    if compression is not None:
        enc.flat.compression.CopyFrom(compression)
    return enc


def encode_uints(values: np.ndarray, pages: PageBuffers) -> pb.ArrayEncoding:
    """Integer offsets / indices / keys without nulls: ``Nullable.no_nulls(Flat(width))``."""
    enc = pb.ArrayEncoding()
    enc.nullable.no_nulls.values.CopyFrom(encode_flat(values, values.dtype.itemsize * 8, pages))
    return enc


def encode_basic(arr: pa.Array, pages: PageBuffers) -> pb.ArrayEncoding:
    """``Nullable`` around the values of a fixed-width, bool, null or fixed-size-list array."""
    n = len(arr)
    enc = pb.ArrayEncoding()
    if n == 0 or pa.types.is_null(arr.type) or arr.null_count == n:
        enc.nullable.all_nulls.SetInParent()
    elif arr.null_count:
        some = enc.nullable.some_nulls
        some.validity.CopyFrom(encode_flat(validity_bits(arr), 1, pages))
        some.values.CopyFrom(_encode_values(arr, pages))
    else:
        enc.nullable.no_nulls.values.CopyFrom(_encode_values(arr, pages))
    return enc


def fsl_items(arr: pa.FixedSizeListArray) -> pa.Array:
    """The items of a fixed-size list array's rows (``values`` ignores the slice offset)."""
    d = arr.type.list_size
    return arr.values.slice(arr.offset * d, len(arr) * d)


def _encode_values(arr: pa.Array, pages: PageBuffers) -> pb.ArrayEncoding:
    if pa.types.is_fixed_size_list(arr.type):
        enc = pb.ArrayEncoding()
        enc.fixed_size_list.dimension = arr.type.list_size
        enc.fixed_size_list.items.CopyFrom(encode_basic(fsl_items(arr), pages))
        return enc
    data, bits = fixed_value_bytes(arr)
    return encode_flat(data, bits, pages)
