"""Block statistics the compression strategy decides on (Lance's ``statistics.rs``), and
the dictionary-encoding transform (``primitive/dict.rs``). All vectorised.

| statistic              | meaning                                                        |
| ---------------------- | -------------------------------------------------------------- |
| ``bit_widths``         | per 1024-value chunk, bits needed by the OR of its values      |
|                        | (values read as unsigned: negative ints need the full width)   |
| ``run_count``          | number of runs of equal consecutive values                     |
| ``rle_entries``        | RLE entries with 8-bit run lengths (runs split at 255 and at   |
|                        | ``max_segment`` values)                                        |
| ``byte_entropy``       | Shannon entropy (x1000, truncated) of each byte position over  |
|                        | the first 64 values                                            |
| ``max_length``         | largest value in bytes (fixed: bits // 8, fsl: x dimension,    |
|                        | packed struct: sum of children)                                |
| ``data_size``          | bytes of the block (variable: value bytes + offsets)           |
| ``sample_unique_ratio``| distinct / sampled over 32 evenly spaced runs of a 4096-value  |
|                        | sample (None under 1024 values)                                |

Example: ``bit_widths`` of 2048 uint32 values 0..2047 is ``[10, 11]``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lance_spark_ops.cache import region
from lance_spark_ops.encoding.blocks import (
    ConstantBlock,
    DataBlock,
    FixedSizeListBlock,
    FixedWidthBlock,
    StructBlock,
    VariableWidthBlock,
)
from lance_spark_ops.encoding.compression._arrays import UINT_BY_BITS, as_u8
from lance_spark_ops.errors import UnsupportedError

CHUNK_VALUES = 1024
_POW2 = np.array([1 << k for k in range(64)], dtype=np.uint64)
U8_MAX_RUN = 255


def uint_values(block: FixedWidthBlock) -> np.ndarray | None:
    """The block's values as unsigned ints (8/16/32/64 bits), else None."""
    dt = UINT_BY_BITS.get(int(block.bits_per_value))
    if dt is None:
        return None
    data = as_u8(block.data)[: block.num_values * dt.itemsize]
    if data.ctypes.data % dt.itemsize:
        data = data.copy()
    return data.view(dt)


def bit_length(values: np.ndarray) -> np.ndarray:
    """Bits needed for each unsigned value (0 for 0)."""
    return np.searchsorted(_POW2, values.astype(np.uint64), side="right").astype(np.int64)


def bit_widths(block: FixedWidthBlock) -> np.ndarray:
    """Max bit width of each 1024-value chunk ([bits_per_value] for other widths)."""
    v = uint_values(block)
    if v is None:
        return np.array([block.bits_per_value], dtype=np.int64)
    if len(v) == 0:
        return np.zeros(1, dtype=np.int64)
    ors = np.bitwise_or.reduceat(v, np.arange(0, len(v), CHUNK_VALUES))
    return bit_length(ors)


def _rows(block: FixedWidthBlock) -> np.ndarray:
    """Values as comparable numpy items (unsigned ints or byte rows)."""
    v = uint_values(block)
    if v is not None:
        return v
    width = block.bits_per_value // 8
    return as_u8(block.data)[: block.num_values * width].reshape(block.num_values, width)


def _changes(block: FixedWidthBlock) -> np.ndarray:
    """Bool per value after the first: differs from its predecessor."""
    v = _rows(block)
    change = v[1:] != v[:-1]
    return change.any(axis=1) if change.ndim > 1 else change


def run_lengths(block: FixedWidthBlock, changes: np.ndarray | None = None) -> np.ndarray:
    """Lengths of the runs of equal consecutive values (``changes``: ``_changes(block)``
    when the caller has it already)."""
    n = int(block.num_values)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    bounds = np.flatnonzero(_changes(block) if changes is None else changes) + 1
    return np.diff(bounds, prepend=0, append=n).astype(np.int64)


def run_count_and_changes(block: FixedWidthBlock) -> tuple[int, np.ndarray | None]:
    """``run_count`` and, for 8..128-bit values, the change flags it counted (so a caller
    that goes on to ``run_lengths`` compares the values once)."""
    if block.bits_per_value not in (8, 16, 32, 64, 128):
        return int(block.num_values), None
    if block.num_values == 0:
        return 0, None
    changes = _changes(block)
    return int(np.count_nonzero(changes)) + 1, changes


def run_count(block: FixedWidthBlock) -> int:
    """Number of runs (Lance's RunCount; other widths count every value as a run)."""
    return run_count_and_changes(block)[0]


def rle_entries(runs: np.ndarray, max_segment: int | None, max_run: int = U8_MAX_RUN) -> int:
    """Entries RLE writes for ``runs`` when each run is cut into segments of at most
    ``max_segment`` values and each entry holds at most ``max_run`` values."""
    runs = np.asarray(runs, dtype=np.int64)
    if len(runs) and int(runs.max()) <= min(max_run, max_segment or max_run):
        return len(runs)  # no run needs splitting
    if max_segment is None:
        return int(((runs + max_run - 1) // max_run).sum())
    seg = max(int(max_segment), 1)
    full, rem = runs // seg, runs % seg
    per_full = (seg + max_run - 1) // max_run
    return int((full * per_full + (rem + max_run - 1) // max_run).sum())


def byte_entropy(block: FixedWidthBlock, sample: int = 64) -> np.ndarray:
    """Entropy (bits x 1000, truncated) of each byte position over the first values."""
    width = block.bits_per_value // 8
    k = min(int(block.num_values), sample)
    if k == 0 or width == 0:
        return np.zeros(0, dtype=np.int64)
    rows = as_u8(block.data)[: k * width].reshape(k, width)
    out = np.zeros(width, dtype=np.int64)
    for pos in range(width):  # at most 32 byte positions
        counts = np.bincount(rows[:, pos], minlength=256)
        p = counts[counts > 0] / k
        out[pos] = int(-(p * np.log2(p)).sum() * 1000.0)
    return out


def max_length(block: DataBlock) -> int:
    """Largest value in bytes (Lance's MaxLength)."""
    if isinstance(block, FixedWidthBlock):
        return block.bits_per_value // 8
    if isinstance(block, VariableWidthBlock):
        if block.num_values == 0:
            return 0
        offs = np.asarray(block.offsets).astype(np.int64)
        return int(np.diff(offs).max())
    if isinstance(block, FixedSizeListBlock):
        return max_length(block.items) * block.dimension
    if isinstance(block, StructBlock):
        return sum(max_length(c) for c in block.children)
    if isinstance(block, ConstantBlock):
        return len(block.value or b"")
    raise UnsupportedError(f"no max length for a {type(block).__name__}")


def value_bytes(block: VariableWidthBlock) -> int:
    offs = np.asarray(block.offsets)
    return int(offs[-1]) - int(offs[0]) if len(offs) else 0


def data_size(block: DataBlock) -> int:
    """Bytes of a block as Lance counts them (``DataBlock::data_size``)."""
    if isinstance(block, FixedWidthBlock):
        return (block.num_values * block.bits_per_value + 7) // 8
    if isinstance(block, VariableWidthBlock):
        return value_bytes(block) + (block.num_values + 1) * np.asarray(block.offsets).dtype.itemsize
    if isinstance(block, FixedSizeListBlock):
        extra = 0 if block.item_validity is None else (len(block.item_validity) + 7) // 8
        return data_size(block.items) + extra
    if isinstance(block, StructBlock):
        return sum(data_size(c) for c in block.children)
    if isinstance(block, ConstantBlock):
        return len(block.value or b"")
    raise UnsupportedError(f"no data size for a {type(block).__name__}")


# ----------------------------------------------------------------------------------------
# dictionary support
# ----------------------------------------------------------------------------------------


def _as_arrow(block: DataBlock) -> pa.Array | None:
    """A zero-copy Arrow view of a 64/128-bit or variable-width block (for hashing)."""
    if isinstance(block, FixedWidthBlock):
        if block.bits_per_value == 64:
            return pa.array(uint_values(block), pa.uint64())
        if block.bits_per_value == 128:
            data = as_u8(block.data)[: block.num_values * 16]
            return pa.Array.from_buffers(pa.binary(16), block.num_values, [None, pa.py_buffer(data)])
        return None
    if isinstance(block, VariableWidthBlock):
        offs = np.asarray(block.offsets)
        t = pa.large_binary() if offs.dtype.itemsize == 8 else pa.binary()
        data = as_u8(block.data)
        return pa.Array.from_buffers(t, block.num_values, [None, pa.py_buffer(offs), pa.py_buffer(data)])
    return None


_SAMPLES = region("encoding.sample_positions", max_entries=64)
_NONE = np.zeros(0, np.int64)  # a cached "too few values"


def _sample_indices(n: int, max_samples: int) -> np.ndarray | None:
    """Lance's deterministic sample positions for a block of ``n`` values (None: too few):
    ``min(32, sample)`` evenly spaced runs of ``sample // runs`` values. Pages of a column
    share their length, so this is computed once per length."""
    hit = _SAMPLES.get((n, max_samples))
    if hit is None:
        hit = _sample_positions(n, max_samples)
        _SAMPLES.put((n, max_samples), _NONE if hit is None else hit, 64 + (0 if hit is None else hit.nbytes))
    return None if hit is _NONE else hit


def _sample_positions(n: int, max_samples: int) -> np.ndarray | None:
    sample = min(n, max_samples)
    if sample < 1024:
        return None
    blocks = min(32, sample, n)
    per = max(sample // blocks, 1)
    b = np.arange(blocks, dtype=np.int64)
    starts = b * n // blocks
    lens = np.minimum(per, (b + 1) * n // blocks - starts)
    idx = (starts[:, None] + np.arange(per)[None, :])
    idx = idx[np.arange(per)[None, :] < lens[:, None]]
    if len(idx) < 1024:
        return None
    idx.flags.writeable = False
    return idx


def sample_unique_ratio(block: DataBlock, max_samples: int = 4096) -> float | None:
    """Distinct / sampled values over Lance's deterministic block sample (None when fewer
    than 1024 values would be sampled or the block cannot be dictionary encoded)."""
    idx = _sample_indices(int(block.num_values), max_samples)
    if idx is None:
        return None
    if isinstance(block, FixedWidthBlock) and block.bits_per_value == 64:
        sample = np.sort(uint_values(block)[idx])  # a 4096-value sort beats Arrow's hash set here
        return (int(np.count_nonzero(sample[1:] != sample[:-1])) + 1) / len(idx)
    arr = _as_arrow(block)
    if arr is None:
        return None
    return len(arr.take(pa.array(idx)).unique()) / len(idx)


def dictionary_encode(block: DataBlock, max_entries: int,
                      max_encoded_size: int) -> tuple[FixedWidthBlock, DataBlock] | None:
    """(32-bit indices, items in order of first appearance), or None when the dictionary
    would exceed ``max_entries`` items or ``max_encoded_size`` bytes (items + offsets +
    4 bytes per index), as Lance's ``dictionary_encode`` aborts."""
    arr = _as_arrow(block)
    if arr is None or max_entries <= 0:
        return None
    enc = arr.dictionary_encode()
    items = enc.dictionary
    card = len(items)
    if card > max_entries:
        return None
    n = int(block.num_values)
    if isinstance(block, FixedWidthBlock):
        size = card * (block.bits_per_value // 8) + 4 * n
    else:
        width = np.asarray(block.offsets).dtype.itemsize
        item_offs = np.frombuffer(items.buffers()[1], np.int64 if width == 8 else np.int32)
        item_bytes = int(item_offs[items.offset + card] - item_offs[items.offset]) if card else 0
        size = item_bytes + (card + 1) * width + 4 * n
    if size > max_encoded_size:
        return None
    idx = np.frombuffer(enc.indices.buffers()[1], np.int32)[enc.indices.offset:enc.indices.offset + n]
    indices = FixedWidthBlock(idx.view(np.uint8), 32, n)
    if isinstance(block, FixedWidthBlock):
        w = block.bits_per_value // 8
        raw = as_u8(np.frombuffer(items.buffers()[1], np.uint8))[items.offset * w:(items.offset + card) * w]
        return indices, FixedWidthBlock(raw, block.bits_per_value, card)
    width = np.asarray(block.offsets).dtype
    offs = np.frombuffer(items.buffers()[1], np.int64 if width.itemsize == 8 else np.int32)
    offs = offs[items.offset:items.offset + card + 1]
    base = int(offs[0]) if card else 0
    data = np.frombuffer(items.buffers()[2], np.uint8)[base:int(offs[-1])] if card else np.zeros(0, np.uint8)
    return indices, VariableWidthBlock((offs - base).astype(width), data, card)
