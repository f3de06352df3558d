"""Arrow helpers shared by the 2.0 decoders and encoders (no file format knowledge here).

Everything is vectorised: bitmaps are (un)packed and re-aligned with numpy, variable-width
slices are gathered with one index array (``gather_slices``), arrays are assembled from
buffers, and the encoders read an array's buffers as views honouring its slice offset.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from lance_spark_ops.errors import CorruptFileError, UnsupportedError

INT32_MAX = 2**31 - 1


def fixed_bit_width(dt: pa.DataType) -> int | None:
    """Bits per value of a fixed-width Arrow type (1 for bool), ``None`` otherwise."""
    if pa.types.is_dictionary(dt) or pa.types.is_null(dt) or pa.types.is_nested(dt):
        return None
    try:
        return int(dt.bit_width)
    except ValueError:
        return None


def fixed_byte_width(dt: pa.DataType) -> int | None:
    """Bytes per value of a type that can live in a packed struct (FSL of fixed width
    included), ``None`` if it has no whole-byte fixed width."""
    if pa.types.is_fixed_size_list(dt):
        inner = fixed_byte_width(dt.value_type)
        return None if inner is None else inner * dt.list_size
    bits = fixed_bit_width(dt)
    if bits is None or bits % 8:
        return None
    return bits // 8


def unpack_bits(bitmap: memoryview | bytes | np.ndarray, bit_offset: int, count: int) -> np.ndarray:
    """``count`` LSB-first bits starting at ``bit_offset`` as a bool array."""
    raw = np.frombuffer(bitmap, dtype=np.uint8) if not isinstance(bitmap, np.ndarray) else bitmap
    need = (bit_offset + count + 7) // 8
    if raw.size < need:
        raise CorruptFileError(f"bitmap of {raw.size} bytes cannot hold bits "
                               f"{bit_offset}..{bit_offset + count}")
    return np.unpackbits(raw[:need], bitorder="little")[bit_offset: bit_offset + count].astype(bool)


def pack_bits(mask: np.ndarray, offset: int = 0) -> pa.Buffer:
    """LSB-first bitmap of ``mask`` starting at bit ``offset`` (earlier bits zero)."""
    if offset:
        mask = np.concatenate([np.zeros(offset, dtype=bool), mask])
    return pa.py_buffer(np.packbits(mask.astype(bool, copy=False), bitorder="little"))


def validity_buffer(valid: np.ndarray | None) -> pa.Buffer | None:
    """Arrow validity buffer for ``valid`` (``None`` when every value is valid)."""
    if valid is None or valid.all():
        return None
    return pack_bits(valid)


def fixed_array(dt: pa.DataType, n: int, data: memoryview | bytes | np.ndarray,
                bit_offset: int = 0) -> pa.Array:
    """A fixed-width array of ``n`` values over ``data`` (bool: a bitmap at ``bit_offset``)."""
    bits = fixed_bit_width(dt)
    if bits is None:
        raise UnsupportedError(f"type {dt} is not fixed width")
    nbytes = memoryview(data).nbytes
    need = (bit_offset + n * bits + 7) // 8
    if nbytes < need:
        raise CorruptFileError(f"{n} values of type {dt} need {need} bytes, buffer has {nbytes}")
    buf = pa.py_buffer(data)
    if bits == 1:
        return pa.Array.from_buffers(dt, n, [None, buf], offset=bit_offset)
    return pa.Array.from_buffers(dt, n, [None, buf])


def with_validity(arr: pa.Array, valid: np.ndarray) -> pa.Array:
    """``arr`` with the rows where ``valid`` is False made null (existing nulls kept)."""
    if len(valid) != len(arr):
        raise CorruptFileError(f"validity has {len(valid)} entries for {len(arr)} values")
    if arr.null_count:
        valid = valid & arr.is_valid().to_numpy(zero_copy_only=False)
    if valid.all():
        return arr
    dt = arr.type
    if pa.types.is_null(dt):
        return arr
    if pa.types.is_fixed_size_list(dt):
        size = dt.list_size
        values = arr.values.slice(arr.offset * size, len(arr) * size)
        return pa.FixedSizeListArray.from_arrays(values, type=dt, mask=pa.array(~valid))
    if pa.types.is_dictionary(dt):
        idx = with_validity(arr.indices, valid)
        return pa.DictionaryArray.from_arrays(idx, arr.dictionary, ordered=dt.ordered)
    if pa.types.is_nested(dt):
        raise UnsupportedError(f"a validity bitmap over {dt} values is not supported in 2.0 files")
    buffers = arr.buffers()
    buffers[0] = pack_bits(valid, arr.offset)
    return pa.Array.from_buffers(dt, len(arr), buffers, offset=arr.offset)


def variable_array(dt: pa.DataType, offsets: np.ndarray, data: np.ndarray | memoryview,
                   valid: np.ndarray | None) -> pa.Array:
    """A string/binary (large or not) array from int64 ``offsets`` (n + 1, starting at 0)."""
    n = len(offsets) - 1
    large = pa.types.is_large_string(dt) or pa.types.is_large_binary(dt)
    if not large and (pa.types.is_string(dt) or pa.types.is_binary(dt)):
        if n >= 0 and int(offsets[-1]) > INT32_MAX:
            raise UnsupportedError(f"{int(offsets[-1])} bytes do not fit a {dt} array (int32 offsets); "
                                   "read fewer rows at a time")
        off = offsets.astype(np.int32)
    elif large:
        off = offsets.astype(np.int64, copy=False)
    else:
        raise CorruptFileError(f"variable-width data found for a field of type {dt}")
    return pa.Array.from_buffers(dt, n, [validity_buffer(valid), pa.py_buffer(off), pa.py_buffer(data)])


def gather_slices(source: np.ndarray, starts: np.ndarray,
                  lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate ``source[starts[i] : starts[i] + lengths[i]]`` for all i (vectorised).

    Returns ``(data, offsets)`` where ``offsets`` (int64, n + 1) delimit the slices in ``data``.
    """
    lengths = lengths.astype(np.int64, copy=False)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    if total == 0:
        return np.zeros(0, dtype=source.dtype), offsets
    ends = starts.astype(np.int64) + lengths
    if (starts < 0).any() or int(ends.max()) > source.size:
        raise CorruptFileError(f"slices reach past the end of a {source.size}-byte buffer")
    idx = np.repeat(starts.astype(np.int64) - offsets[:-1], lengths) + np.arange(total, dtype=np.int64)
    return source[idx], offsets


def concat(pieces: Sequence[pa.Array], dt: pa.DataType) -> pa.Array:
    """Concatenate decoded pieces (dictionaries are unified); empty array if none."""
    if not pieces:
        return pa.array([], type=dt)
    if len(pieces) == 1:
        return pieces[0]
    return pa.concat_arrays(list(pieces))


# -- reading Arrow buffers (encoders) -----------------------------------------------------
def bitmap_slice(buf: pa.Buffer | None, offset: int, n: int) -> np.ndarray:
    """Bits ``[offset, offset + n)`` of an LSB-first Arrow bitmap, re-based to bit 0, as
    ``ceil(n / 8)`` bytes with the unused high bits of the last byte cleared."""
    nbytes = (n + 7) // 8
    if buf is None or n == 0:
        return np.zeros(nbytes, np.uint8)
    raw = np.frombuffer(buf, dtype=np.uint8)
    start, shift = divmod(offset, 8)
    if shift == 0:
        out = raw[start: start + nbytes].copy()
    else:
        seg = raw[start: start + nbytes + 1]
        out = seg[:nbytes] >> np.uint8(shift)
        out[: len(seg) - 1] |= seg[1: nbytes + 1] << np.uint8(8 - shift)
    if n % 8:
        out[-1] &= np.uint8((1 << (n % 8)) - 1)
    return out


def validity_bits(arr: pa.Array) -> np.ndarray:
    """The array's validity bitmap (its own nulls only) re-based to bit 0."""
    n = len(arr)
    buf = arr.buffers()[0]
    if buf is None:
        out = np.full((n + 7) // 8, 0xFF, dtype=np.uint8)
        if n % 8:
            out[-1] = (1 << (n % 8)) - 1
        return out
    return bitmap_slice(buf, arr.offset, n)


def valid_mask(arr: pa.Array) -> np.ndarray:
    """The array's own validity as bools (True = valid)."""
    if arr.null_count == 0:
        return np.ones(len(arr), dtype=bool)
    return np.unpackbits(validity_bits(arr), bitorder="little", count=len(arr)).astype(bool)


def fixed_value_bytes(arr: pa.Array) -> tuple[np.ndarray, int]:
    """The value bytes of a fixed-width (or bool) array and its bits per value; a view for
    whole-byte types, a re-based bitmap for bool."""
    dt = arr.type
    bits = fixed_bit_width(dt)
    if bits is None:
        raise UnsupportedError(f"type {dt} is not fixed width")
    n = len(arr)
    buf = arr.buffers()[1]
    if bits == 1:
        return bitmap_slice(buf, arr.offset, n), 1
    width = bits // 8
    if buf is None or n == 0:
        return np.zeros(n * width, np.uint8), bits
    return np.frombuffer(buf, dtype=np.uint8)[arr.offset * width: (arr.offset + n) * width], bits


def variable_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """int64 offsets (``len + 1``, starting at 0) and the bytes they delimit, of a
    string/binary array (large or not), honouring its slice offset."""
    n = len(arr)
    dt = arr.type
    large = pa.types.is_large_string(dt) or pa.types.is_large_binary(dt)
    bufs = arr.buffers()
    if n == 0 or bufs[1] is None:
        return np.zeros(n + 1, np.int64), np.zeros(0, np.uint8)
    raw = np.frombuffer(bufs[1], dtype=np.int64 if large else np.int32)[arr.offset: arr.offset + n + 1]
    base, end = int(raw[0]), int(raw[-1])
    data = np.frombuffer(bufs[2], dtype=np.uint8)[base:end] if bufs[2] is not None else np.zeros(0, np.uint8)
    return raw.astype(np.int64) - base, data
