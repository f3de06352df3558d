"""Arrow leaf array -> DataBlock: the write-side inverse of ``arrow.block_to_arrow``.

A leaf's *values* become a type-erased block; its validity does not (that travels in the
def levels, ``repdef.levels_from_arrow``). Bytes under null slots are kept as they are in
the Arrow buffers, as Lance keeps them. Buffers are zero-copy numpy views of the Arrow
buffers wherever the layout allows (any fixed width whose first value is byte aligned,
offsets and value bytes of strings), so building a block costs no copy of the data.

| Arrow type                                    | block                                         |
| --------------------------------------------- | --------------------------------------------- |
| bool                                          | FixedWidth, 1 bit per value (LSB-first)       |
| ints, floats, decimals, temporal, intervals,  | FixedWidth, the type's bit width              |
| fixed_size_binary                             |                                               |
| string / binary (+ large_)                    | VariableWidth, offsets as stored (32 / 64 bit)|
| fixed_size_list<primitive / fsl>              | FixedSizeList with item validity when items   |
|                                               | hold nulls                                    |
| struct (a packed struct leaf)                 | Struct, one child block per field             |
| dictionary                                    | ``dictionary_blocks``: indices + items        |
| null                                          | no block (``leaf_blocks`` returns None)       |

Dictionary arrays are normalised as Lance does before encoding (``dict.rs``): nulls held
in the dictionary values move into the keys, the values keep only valid entries, and keys
of null slots that point outside the dictionary are cleared to 0.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lance_spark_ops.encoding.blocks import (
    DataBlock,
    FixedSizeListBlock,
    FixedWidthBlock,
    StructBlock,
    VariableWidthBlock,
)
from lance_spark_ops.errors import InvalidInputError, UnsupportedError

__all__ = ["arrow_to_block", "dictionary_blocks", "leaf_blocks", "strip_extension"]


def strip_extension(arr: pa.Array) -> pa.Array:
    """The storage array of an extension array (any other array unchanged)."""
    return arr.storage if isinstance(arr, pa.ExtensionArray) else arr


def _is_variable(t: pa.DataType) -> bool:
    return (pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t)
            or pa.types.is_large_binary(t))


def _buffer_u8(buf: pa.Buffer | None) -> np.ndarray:
    if buf is None:
        return np.zeros(0, np.uint8)
    return np.frombuffer(buf, dtype=np.uint8)


def _bool_block(arr: pa.Array) -> FixedWidthBlock:
    n = len(arr)
    data = _buffer_u8(arr.buffers()[1])
    nbytes = (n + 7) // 8
    if arr.offset % 8 == 0:
        start = arr.offset // 8
        out = data[start:start + nbytes]
        if n % 8:  # clear the bits past the end so equal values give equal bytes
            out = out.copy()
            out[-1] &= np.uint8((1 << (n % 8)) - 1)
        return FixedWidthBlock(out, 1, n)
    bits = np.unpackbits(data, count=arr.offset + n, bitorder="little")[arr.offset:]
    return FixedWidthBlock(np.packbits(bits, bitorder="little"), 1, n)


def _fixed_block(arr: pa.Array, bit_width: int) -> FixedWidthBlock:
    n = len(arr)
    if bit_width % 8:
        raise UnsupportedError(f"cannot store {arr.type}: {bit_width} bits per value is not whole bytes")
    w = bit_width // 8
    data = _buffer_u8(arr.buffers()[1])
    return FixedWidthBlock(data[arr.offset * w:(arr.offset + n) * w], bit_width, n)


def _variable_block(arr: pa.Array) -> VariableWidthBlock:
    n = len(arr)
    t = arr.type
    large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
    offs_buf = arr.buffers()[1]
    dtype = np.dtype("<u8" if large else "<u4")
    if offs_buf is None:  # an empty array may have no offsets buffer
        offsets = np.zeros(n + 1, dtype)
    else:
        offsets = np.frombuffer(offs_buf, dtype=dtype)[arr.offset:arr.offset + n + 1]
    data = _buffer_u8(arr.buffers()[2])
    if len(offsets):
        data = data[:int(offsets[-1])]
    return VariableWidthBlock(offsets, data, n)


def _fsl_block(arr: pa.FixedSizeListArray) -> FixedSizeListBlock:
    n = len(arr)
    dim = arr.type.list_size
    child = arr.values.slice(arr.offset * dim, n * dim)  # .values ignores the array's offset
    items = arrow_to_block(child)
    validity = None
    if child.null_count:
        validity = np.asarray(child.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    return FixedSizeListBlock(items, dim, n, validity)


def _struct_block(arr: pa.StructArray) -> StructBlock:
    t = arr.type
    children = []
    for i in range(t.num_fields):
        child = arr.field(i)  # .field() applies the struct's offset
        if child.null_count:
            raise UnsupportedError(
                f"packed struct child {t.field(i).name!r} holds {child.null_count} null value(s); "
                "Lance cannot pack nullable children (as pylance refuses them)")
        children.append(arrow_to_block(child))
    return StructBlock(children, len(arr))


def arrow_to_block(values: pa.Array) -> DataBlock:
    """The values of a leaf array as a block (validity not included).

    Raises ``InvalidInputError`` for dictionary arrays (use ``dictionary_blocks``) and for
    the null type (it has no values; ``leaf_blocks`` returns None for it), and
    ``UnsupportedError`` for types Lance cannot store as one leaf.
    """
    values = strip_extension(values)
    t = values.type
    if pa.types.is_dictionary(t):
        raise InvalidInputError("dictionary arrays are stored as indices + items; use dictionary_blocks()")
    if pa.types.is_null(t):
        raise InvalidInputError("the null type has no values to store")
    if pa.types.is_boolean(t):
        return _bool_block(values)
    if _is_variable(t):
        return _variable_block(values)
    if pa.types.is_fixed_size_list(t):
        return _fsl_block(values)
    if pa.types.is_struct(t):
        return _struct_block(values)
    try:
        bit_width = int(t.bit_width)
    except ValueError as e:
        raise UnsupportedError(f"cannot store {t} as a leaf column") from e
    return _fixed_block(values, bit_width)


def _normalize_dictionary(arr: pa.DictionaryArray) -> tuple[np.ndarray, pa.Array]:
    """(keys as numpy, dictionary values) with value-nulls moved into the keys (Lance's
    ``normalize_dict_nulls``) and out-of-range keys under nulls cleared to 0."""
    dictionary = arr.dictionary
    index_t = arr.type.index_type
    keys_arr = arr.indices
    key_dt = np.dtype(index_t.to_pandas_dtype())
    width = key_dt.itemsize
    raw = _buffer_u8(keys_arr.buffers()[1])[keys_arr.offset * width:(keys_arr.offset + len(keys_arr)) * width]
    keys = raw.view(key_dt)
    key_valid = (np.ones(len(keys), bool) if keys_arr.null_count == 0
                 else np.asarray(keys_arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool))
    if dictionary.null_count:
        value_valid = np.asarray(dictionary.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        remap = np.cumsum(value_valid) - 1  # old index -> new index among valid values
        safe = np.where(key_valid & (keys >= 0) & (keys < len(dictionary)), keys, 0).astype(np.int64)
        keys = np.where(key_valid & value_valid[safe], remap[safe], 0).astype(key_dt)
        dictionary = dictionary.filter(pa.array(value_valid))
    else:
        out_of_range = ~key_valid & ((keys < 0) | (keys >= max(len(dictionary), 1)))
        if out_of_range.any():
            keys = np.where(out_of_range, 0, keys).astype(key_dt)
    return keys, dictionary


def dictionary_blocks(values: pa.Array) -> tuple[FixedWidthBlock, DataBlock]:
    """(indices, items) of a dictionary array, normalised as Lance normalises them.

    The indices keep the key type's width (an int8-keyed array gives 8-bit indices);
    null slots keep their key (or 0 when it would point outside the dictionary).
    """
    values = strip_extension(values)
    if not pa.types.is_dictionary(values.type):
        raise InvalidInputError(f"expected a dictionary array, got {values.type}")
    keys, dictionary = _normalize_dictionary(values)
    idx = FixedWidthBlock(np.ascontiguousarray(keys).view(np.uint8), keys.dtype.itemsize * 8, len(keys))
    return idx, arrow_to_block(dictionary)


def leaf_blocks(values: pa.Array) -> tuple[DataBlock | None, DataBlock | None]:
    """(values block, dictionary items block or None) of any leaf; (None, None) for null."""
    values = strip_extension(values)
    if pa.types.is_null(values.type):
        return None, None
    if pa.types.is_dictionary(values.type):
        return dictionary_blocks(values)
    return arrow_to_block(values), None
