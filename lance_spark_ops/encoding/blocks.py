"""Data blocks: the uncompressed, type-erased buffers that compression codecs produce and
consume (Lance's ``DataBlock``). Arrow types are applied only at the edge (``arrow.py``).

All buffers are numpy arrays; ``data`` buffers are ``uint8`` views over the page bytes
wherever no copy is needed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class FixedWidthBlock:
    """``num_values`` values of ``bits_per_value`` bits each, packed little endian in ``data``.

    ``bits_per_value`` is 1 for booleans (LSB-first bitmap), otherwise a multiple of 8.
    """

    data: np.ndarray  # uint8
    bits_per_value: int
    num_values: int

    def as_dtype(self, dtype: np.dtype | str) -> np.ndarray:
        """The values as a numpy array of ``dtype`` (whose itemsize must match)."""
        dt = np.dtype(dtype)
        assert dt.itemsize * 8 == self.bits_per_value
        return self.data[: self.num_values * dt.itemsize].view(dt)


@dataclass
class VariableWidthBlock:
    """``num_values`` variable-length values: value i is ``data[offsets[i]:offsets[i+1]]``.

    ``offsets`` is uint32 or uint64 with ``num_values + 1`` entries; it need not start at 0.
    """

    offsets: np.ndarray
    data: np.ndarray  # uint8
    num_values: int


@dataclass
class FixedSizeListBlock:
    """``num_values`` lists of ``dimension`` items; ``items`` holds num_values * dimension items.

    ``item_validity`` (bool per item) is present when the items are nullable (has_validity).
    """

    items: DataBlock
    dimension: int
    num_values: int
    item_validity: np.ndarray | None = None


@dataclass
class StructBlock:
    """Packed struct: one child block per field, each with ``num_values`` values."""

    children: list[DataBlock]
    num_values: int


@dataclass
class ConstantBlock:
    """``num_values`` copies of one value (``value`` is the raw bytes of one element).

    For variable-width data ``value`` is the whole element; ``None`` means all null.
    """

    value: bytes | None
    num_values: int
    variable: bool = False


DataBlock = FixedWidthBlock | VariableWidthBlock | FixedSizeListBlock | StructBlock | ConstantBlock


def empty_fixed(bits_per_value: int) -> FixedWidthBlock:
    return FixedWidthBlock(np.zeros(0, np.uint8), bits_per_value, 0)
