"""Test helper: Arrow leaf array -> (DataBlock, dictionary block) as a page decoder would
hand them over (values only; validity travels in def levels)."""

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


def arrow_to_block(arr: pa.Array) -> tuple[DataBlock | None, DataBlock | None]:
    """(values block, dictionary block or None) of a leaf array; None for the null type."""
    t = arr.type
    n = len(arr)
    if pa.types.is_null(t):
        return None, None
    if pa.types.is_dictionary(t):
        idx, _ = arrow_to_block(arr.indices.cast(pa.uint32()))
        dic, _ = arrow_to_block(arr.dictionary)
        return idx, dic
    if pa.types.is_boolean(t):
        bits = np.unpackbits(np.frombuffer(arr.buffers()[1], np.uint8), bitorder="little")
        bits = bits[arr.offset: arr.offset + n]
        return FixedWidthBlock(np.packbits(bits, bitorder="little"), 1, n), None
    large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
    if pa.types.is_string(t) or pa.types.is_binary(t) or large:
        all_offs = np.frombuffer(arr.buffers()[1], np.int64 if large else np.int32)
        offs = all_offs[arr.offset: arr.offset + n + 1]
        data = arr.buffers()[2]
        data = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
        return VariableWidthBlock(offs.astype(np.uint64 if large else np.uint32), data, n), None
    if pa.types.is_fixed_size_list(t):
        dim = t.list_size
        child = arr.values.slice(arr.offset * dim, n * dim)
        items, _ = arrow_to_block(child)
        iv = None
        if child.null_count:
            iv = child.is_valid().to_numpy(zero_copy_only=False)
        return FixedSizeListBlock(items, dim, n, iv), None
    if pa.types.is_struct(t):
        kids = [arrow_to_block(arr.field(i))[0] for i in range(t.num_fields)]
        return StructBlock(kids, n), None
    w = t.bit_width // 8
    data = np.frombuffer(arr.buffers()[1], np.uint8)[arr.offset * w: (arr.offset + n) * w]
    return FixedWidthBlock(data.copy(), t.bit_width, n), None
