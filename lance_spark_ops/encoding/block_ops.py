"""Vectorised operations on data blocks that layouts need for random access.

``take_block`` selects values by position from any ``DataBlock`` (fixed width of any bit
width, variable width, fixed-size lists with item validity, packed structs, constants).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lance_spark_ops.encoding.blocks import (
    ConstantBlock,
    DataBlock,
    FixedSizeListBlock,
    FixedWidthBlock,
    StructBlock,
    VariableWidthBlock,
)
from lance_spark_ops.encoding.compression._arrays import as_u8
from lance_spark_ops.errors import CorruptFileError, UnsupportedError


def _take_fixed(block: FixedWidthBlock, idx: np.ndarray) -> FixedWidthBlock:
    bits = block.bits_per_value
    data = as_u8(block.data)
    if bits % 8 == 0:
        width = bits // 8
        need = block.num_values * width
        if len(data) < need:
            raise CorruptFileError(
                f"fixed-width block of {len(data)} bytes cannot hold {block.num_values} values of {bits} bits"
            )
        rows = data[:need].reshape(block.num_values, width)
        return FixedWidthBlock(rows[idx].reshape(-1), bits, len(idx))
    flat = np.unpackbits(data, count=block.num_values * bits, bitorder="little")
    picked = flat.reshape(block.num_values, bits)[idx].reshape(-1)
    return FixedWidthBlock(np.packbits(picked, bitorder="little"), bits, len(idx))


def _take_variable(block: VariableWidthBlock, idx: np.ndarray) -> VariableWidthBlock:
    """Arrow's ``take`` copies each value with one memcpy (a byte-index gather costs 16
    bytes of index per data byte); the offsets are checked first, as Arrow trusts them."""
    offsets = np.asarray(block.offsets)
    if len(offsets) != block.num_values + 1:
        raise CorruptFileError(f"variable-width block: {len(offsets)} offsets for {block.num_values} values")
    data = as_u8(block.data)
    if len(offsets) > 1 and (np.diff(offsets.astype(np.int64, copy=False)) < 0).any():
        raise CorruptFileError("variable-width block: offsets decrease")
    end = int(offsets[-1]) if len(offsets) else 0
    if (len(offsets) and int(offsets[0]) < 0) or end > len(data):
        raise CorruptFileError("variable-width block: offsets overrun the data")
    if not len(idx):
        return VariableWidthBlock(np.zeros(1, offsets.dtype), data[:0], 0)
    if end < 2**31 and offsets.dtype.itemsize == 4:
        arrow_type, arrow_offsets = pa.binary(), offsets.view(np.int32)
    else:
        arrow_type, arrow_offsets = pa.large_binary(), offsets.astype(np.int64, copy=False)
    values = pa.Array.from_buffers(arrow_type, block.num_values,
                                   [None, pa.py_buffer(arrow_offsets), pa.py_buffer(data[:end])])
    picked = values.take(pa.array(idx))
    off_type = np.int32 if arrow_type == pa.binary() else np.int64
    new_offsets = np.frombuffer(picked.buffers()[1], off_type)[picked.offset : picked.offset + len(idx) + 1]
    new_offsets = new_offsets - new_offsets[0] if new_offsets[0] else new_offsets
    out = np.frombuffer(picked.buffers()[2], np.uint8) if picked.buffers()[2] is not None else data[:0]
    return VariableWidthBlock(new_offsets.astype(offsets.dtype), out[: int(new_offsets[-1])], len(idx))


def take_block(block: DataBlock, idx: np.ndarray) -> DataBlock:
    """Values ``idx`` (int positions, any order, repeats allowed) of ``block``."""
    idx = np.asarray(idx, dtype=np.int64).reshape(-1)
    n = block.num_values
    if len(idx) and (idx.min() < 0 or idx.max() >= n):
        raise CorruptFileError(f"position {int(idx.max())} outside a block of {n} values")
    if isinstance(block, FixedWidthBlock):
        return _take_fixed(block, idx)
    if isinstance(block, VariableWidthBlock):
        return _take_variable(block, idx)
    if isinstance(block, FixedSizeListBlock):
        dim = block.dimension
        item_idx = (idx[:, None] * dim + np.arange(dim, dtype=np.int64)[None, :]).reshape(-1)
        validity = None if block.item_validity is None else np.asarray(block.item_validity)[item_idx]
        return FixedSizeListBlock(take_block(block.items, item_idx), dim, len(idx), validity)
    if isinstance(block, StructBlock):
        return StructBlock([take_block(c, idx) for c in block.children], len(idx))
    if isinstance(block, ConstantBlock):
        return ConstantBlock(block.value, len(idx), block.variable)
    raise UnsupportedError(f"cannot select values from a {type(block).__name__}")
