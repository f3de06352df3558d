"""Vectorised operations on data blocks that layouts need for random access.

``take_block`` selects values by position from any ``DataBlock`` (fixed width of any bit
width, variable width, fixed-size lists with item validity, packed structs, constants).
"""

from __future__ import annotations

import numpy as np

from lance_spark_ops.encoding.blocks import (
    ConstantBlock,
    DataBlock,
    FixedSizeListBlock,
    FixedWidthBlock,
    StructBlock,
    VariableWidthBlock,
)
from lance_spark_ops.encoding.compression._arrays import as_u8, ragged_arange
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
    offsets = block.offsets
    if len(offsets) != block.num_values + 1:
        raise CorruptFileError(f"variable-width block: {len(offsets)} offsets for {block.num_values} values")
    starts = offsets[idx].astype(np.int64)
    lengths = offsets[idx + 1].astype(np.int64) - starts
    if (lengths < 0).any():
        raise CorruptFileError("variable-width block: offsets decrease")
    new_offsets = np.zeros(len(idx) + 1, dtype=offsets.dtype)
    np.cumsum(lengths, out=new_offsets[1:], dtype=offsets.dtype)
    data = as_u8(block.data)
    if len(starts) and int((starts + lengths).max(initial=0)) > len(data):
        raise CorruptFileError("variable-width block: offsets overrun the data")
    return VariableWidthBlock(new_offsets, data[ragged_arange(starts, lengths)], len(idx))


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
