"""DataBlock -> Arrow for leaf columns: the one place where Arrow types meet decoded bytes.

Blocks are type-erased (bits per value, offsets + bytes, ...); the Arrow type requested by
the schema decides the interpretation, as in Lance (a string stored with 32-bit offsets may
be read as ``large_string`` and the other way round). Arrays are built with
``pa.Array.from_buffers`` over the numpy buffers, so fixed-width and matching-offset
variable-width data are not copied. Every size is checked against the block before Arrow
sees it: a mismatch raises ``CorruptFileError`` instead of an Arrow crash or wrong rows.
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
from lance_spark_ops.errors import CorruptFileError, UnsupportedError

_I32_MAX = 2**31 - 1


def validity_buffer(validity: np.ndarray | None) -> pa.Buffer | None:
    """Arrow validity bitmap (LSB first) of a bool array; None when absent or all valid."""
    if validity is None:
        return None
    v = np.asarray(validity, dtype=bool)
    if v.all():
        return None
    return pa.py_buffer(np.packbits(v, bitorder="little"))


def _aligned(data: np.ndarray, align: int) -> np.ndarray:
    """``data`` itself when its address is a multiple of ``align``, else an aligned copy."""
    if align > 1 and data.ctypes.data % align:
        out = np.empty(len(data), np.uint8)
        out[:] = data
        return out
    return data


def _bit_width(t: pa.DataType) -> int | None:
    try:
        return int(t.bit_width)
    except ValueError:
        return None


def _is_variable(t: pa.DataType) -> bool:
    return (pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t)
            or pa.types.is_large_binary(t))


def _check_validity(validity: np.ndarray | None, n: int, what: str) -> None:
    if validity is not None and len(validity) != n:
        raise CorruptFileError(f"{what}: {len(validity)} validity entries for {n} values")


def block_num_values(block: DataBlock | None) -> int:
    """How many values a block holds (0 for None)."""
    return 0 if block is None else int(block.num_values)


def block_to_arrow(
    block: DataBlock | None,
    arrow_type: pa.DataType,
    validity: np.ndarray | None = None,
    dictionary: DataBlock | None = None,
) -> pa.Array:
    """Interpret ``block`` as ``arrow_type`` with the given item validity.

    With ``dictionary`` the block holds integer indices into it: a dictionary Arrow type
    keeps them as a ``DictionaryArray``, any other type is decoded (``take``). A dictionary
    Arrow type over plain values is dictionary-encoded (order of first appearance).
    ``validity`` (bool per value, None = all valid) must match the block's value count.
    """
    if validity is not None:
        validity = np.asarray(validity, dtype=bool)
    if dictionary is not None:
        return _from_dictionary(block, arrow_type, validity, dictionary)
    if pa.types.is_dictionary(arrow_type):
        values = block_to_arrow(block, arrow_type.value_type, validity, None)
        enc = values.dictionary_encode()
        if enc.type.index_type != arrow_type.index_type:
            enc = pa.DictionaryArray.from_arrays(enc.indices.cast(arrow_type.index_type), enc.dictionary)
        return enc
    if block is None:
        n = 0 if validity is None else len(validity)
        return pa.nulls(n, arrow_type)
    n = int(block.num_values)
    _check_validity(validity, n, str(arrow_type))
    if pa.types.is_null(arrow_type):
        return pa.nulls(n)
    if isinstance(block, ConstantBlock):
        return _from_constant(block, arrow_type, validity)
    if _is_variable(arrow_type):
        if not isinstance(block, VariableWidthBlock):
            raise CorruptFileError(
                f"{arrow_type} data decoded as {type(block).__name__}, expected variable width")
        return _from_variable(block, arrow_type, validity)
    if pa.types.is_fixed_size_list(arrow_type):
        return _from_fsl(block, arrow_type, validity)
    if pa.types.is_struct(arrow_type):
        return _from_struct(block, arrow_type, validity)
    bw = _bit_width(arrow_type)
    if bw is None:
        raise UnsupportedError(f"cannot build {arrow_type} from a {type(block).__name__}")
    if not isinstance(block, FixedWidthBlock):
        raise CorruptFileError(f"{arrow_type} data decoded as {type(block).__name__}, expected fixed width")
    return _from_fixed(block, arrow_type, bw, validity)


def _from_fixed(block: FixedWidthBlock, t: pa.DataType, bw: int, validity: np.ndarray | None) -> pa.Array:
    n = int(block.num_values)
    if block.bits_per_value != bw:
        raise CorruptFileError(f"{t} needs {bw} bits per value, page has {block.bits_per_value}")
    need = (n * bw + 7) // 8
    data = np.asarray(block.data)
    if data.dtype != np.uint8:
        data = data.reshape(-1).view(np.uint8)
    if len(data) < need:
        raise CorruptFileError(f"{n} values of {bw} bits need {need} bytes, block has {len(data)}")
    data = _aligned(data[:need], min(bw // 8, 8))
    return pa.Array.from_buffers(t, n, [validity_buffer(validity), pa.py_buffer(data)])


def _from_variable(block: VariableWidthBlock, t: pa.DataType, validity: np.ndarray | None) -> pa.Array:
    n = int(block.num_values)
    offs = np.asarray(block.offsets)
    if offs.dtype.kind not in "ui" or offs.dtype.itemsize not in (4, 8):
        raise CorruptFileError(f"variable-width offsets must be 32 or 64-bit integers, got {offs.dtype}")
    if len(offs) < n + 1:
        raise CorruptFileError(f"{n} variable-width values need {n + 1} offsets, block has {len(offs)}")
    offs = offs[: n + 1]
    data = np.asarray(block.data)
    if data.dtype != np.uint8:
        data = data.reshape(-1).view(np.uint8)
    first, last = int(offs[0]), int(offs[-1])
    if first < 0 or last > len(data) or (n and bool(np.any(offs[1:] < offs[:-1]))):
        raise CorruptFileError(
            f"variable-width offsets {first}..{last} are decreasing or exceed the {len(data)} data bytes")
    large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
    target = np.dtype(np.int64 if large else np.int32)
    if offs.dtype.itemsize == target.itemsize and (large or last <= _I32_MAX):
        out_offs = _aligned(offs.view(np.uint8), target.itemsize).view(target)
    else:
        if not large and last - first > _I32_MAX:
            raise UnsupportedError(
                f"{last - first} bytes of {t} do not fit 32-bit offsets; read the column as large_{t}")
        if first:
            data = data[first:last]
            offs = offs - offs.dtype.type(first)
        out_offs = offs.astype(target)
    buffers = [validity_buffer(validity), pa.py_buffer(out_offs), pa.py_buffer(data)]
    return pa.Array.from_buffers(t, n, buffers)


def _from_fsl(block: DataBlock, t: pa.FixedSizeListType, validity: np.ndarray | None) -> pa.Array:
    n = int(block.num_values)
    dim = t.list_size
    child_t = t.value_type
    if isinstance(block, FixedSizeListBlock):
        if block.dimension != dim:
            raise CorruptFileError(f"{t} read from fixed-size lists of dimension {block.dimension}")
        items = block.items
        if block_num_values(items) != n * dim:
            raise CorruptFileError(
                f"{n} lists of {dim} need {n * dim} items, block has {block_num_values(items)}")
        item_validity = block.item_validity
        if item_validity is not None and len(item_validity) != n * dim:
            raise CorruptFileError(f"{len(item_validity)} item validity entries for {n * dim} items")
        child = block_to_arrow(items, child_t, item_validity)
    elif isinstance(block, FixedWidthBlock):
        # A flat block of whole lists (e.g. full-zip data): split each value into items.
        if block.bits_per_value % dim:
            raise CorruptFileError(f"{block.bits_per_value} bits per value is not {dim} items of {t}")
        child_block = FixedWidthBlock(block.data, block.bits_per_value // dim, n * dim)
        child = block_to_arrow(child_block, child_t, None)
    else:
        raise CorruptFileError(f"{t} data decoded as {type(block).__name__}")
    return pa.Array.from_buffers(t, n, [validity_buffer(validity)], children=[child])


def _from_struct(block: DataBlock, t: pa.StructType, validity: np.ndarray | None) -> pa.Array:
    n = int(block.num_values)
    nf = t.num_fields
    if isinstance(block, StructBlock):
        if len(block.children) != nf:
            raise CorruptFileError(f"packed struct has {len(block.children)} children, {t} has {nf} fields")
        children = []
        for i, child in enumerate(block.children):
            if block_num_values(child) != n:
                raise CorruptFileError(
                    f"packed struct child {t.field(i).name!r} has {block_num_values(child)} values, "
                    f"struct has {n}")
            children.append(block_to_arrow(child, t.field(i).type, None))
    elif isinstance(block, FixedWidthBlock):
        # Row-major packed rows of fixed-width children: split the columns apart.
        widths = [_bit_width(t.field(i).type) for i in range(nf)]
        if any(w is None or w % 8 for w in widths) or sum(widths) != block.bits_per_value:
            raise CorruptFileError(f"{block.bits_per_value}-bit packed rows do not match {t}")
        row = block.bits_per_value // 8
        data = np.asarray(block.data)[: n * row]
        if len(data) < n * row:
            raise CorruptFileError(
                f"{n} packed rows of {row} bytes need {n * row} bytes, block has {len(data)}")
        rows = data.reshape(n, row)
        children, pos = [], 0
        for i, w in enumerate(widths):
            col = np.ascontiguousarray(rows[:, pos:pos + w // 8]).reshape(-1)
            children.append(block_to_arrow(FixedWidthBlock(col, w, n), t.field(i).type, None))
            pos += w // 8
    else:
        raise CorruptFileError(f"{t} data decoded as {type(block).__name__}")
    if nf == 0:
        return pa.Array.from_buffers(t, n, [validity_buffer(validity)], children=[])
    return pa.Array.from_buffers(t, n, [validity_buffer(validity)], children=children)


def _from_constant(block: ConstantBlock, t: pa.DataType, validity: np.ndarray | None) -> pa.Array:
    n = int(block.num_values)
    if block.value is None:
        return pa.nulls(n, t)
    value = bytes(block.value)
    if _is_variable(t):
        offs = np.arange(n + 1, dtype=np.int64) * len(value)
        data = np.frombuffer(value * n, np.uint8) if n else np.zeros(0, np.uint8)
        return _from_variable(VariableWidthBlock(offs, data, n), t, validity)
    if pa.types.is_boolean(t):
        if len(value) < 1:
            raise CorruptFileError("constant boolean value has no bytes")
        bits = np.full(n, bool(value[0] & 1))
        return block_to_arrow(FixedWidthBlock(np.packbits(bits, bitorder="little"), 1, n), t, validity)
    width = len(value) * 8
    data = np.tile(np.frombuffer(value, np.uint8), n) if n else np.zeros(0, np.uint8)
    return block_to_arrow(FixedWidthBlock(data, width, n), t, validity)


def _indices_np(block: DataBlock | None) -> np.ndarray:
    """Dictionary indices of a block (unsigned, as stored; int64 for constants)."""
    if block is None:
        return np.zeros(0, np.int64)
    if isinstance(block, ConstantBlock):
        if block.value is None:
            return np.zeros(int(block.num_values), np.int64)
        v = int.from_bytes(bytes(block.value), "little")
        return np.full(int(block.num_values), v, np.int64)
    if not isinstance(block, FixedWidthBlock) or block.bits_per_value not in (8, 16, 32, 64):
        raise CorruptFileError(f"dictionary indices must be 8-64 bit integers, got {block!r:.80}")
    dt = np.dtype(f"<u{block.bits_per_value // 8}")
    n = int(block.num_values)
    data = np.asarray(block.data)
    if len(data) < n * dt.itemsize:
        raise CorruptFileError(f"{n} dictionary indices need {n * dt.itemsize} bytes, block has {len(data)}")
    return _aligned(data[: n * dt.itemsize], dt.itemsize).view(dt)


def _from_dictionary(block: DataBlock | None, t: pa.DataType, validity: np.ndarray | None,
                     dictionary: DataBlock) -> pa.Array:
    idx = _indices_np(block)
    n = len(idx)
    _check_validity(validity, n, f"dictionary indices of {t}")
    value_t = t.value_type if pa.types.is_dictionary(t) else t
    dict_arr = block_to_arrow(dictionary, value_t, None, None)
    if validity is not None and not validity.all():
        idx = np.where(validity, idx, idx.dtype.type(0))
    if n and (int(idx.max()) >= len(dict_arr) or int(idx.min()) < 0):
        raise CorruptFileError(
            f"dictionary index {int(idx.max())} outside a dictionary of {len(dict_arr)} values")
    mask = None if validity is None or validity.all() else ~validity
    if pa.types.is_dictionary(t):
        index_t = t.index_type
        np_index = np.dtype(index_t.to_pandas_dtype())
        if n and int(idx.max()) > np.iinfo(np_index).max:
            raise UnsupportedError(f"dictionary index {int(idx.max())} does not fit {index_t}")
        indices = pa.array(idx.astype(np_index), index_t, mask=mask)
        return pa.DictionaryArray.from_arrays(indices, dict_arr, safe=False)
    if idx.dtype.kind == "u" and idx.dtype.itemsize == 8:
        idx = idx.astype(np.int64)  # < len(dict_arr), checked above
    return dict_arr.take(pa.array(idx, mask=mask))


def carried_dictionary_array(block: DataBlock | None, value_type: pa.DataType,
                             dictionary: DataBlock) -> pa.DictionaryArray:
    """Dictionary indices and items (no nulls) kept as a ``dictionary<int32, value_type>``
    array instead of decoded (``encoding.carried_dictionary``)."""
    idx = _indices_np(block)
    dict_arr = block_to_arrow(dictionary, value_type, None, None)
    if len(idx) and int(idx.max()) >= len(dict_arr):
        raise CorruptFileError(
            f"dictionary index {int(idx.max())} outside a dictionary of {len(dict_arr)} values")
    return pa.DictionaryArray.from_arrays(pa.array(idx.astype(np.int32, copy=False)), dict_arr, safe=False)
