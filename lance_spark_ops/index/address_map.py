"""Old -> new row addresses of a rewrite (compaction), as numpy arrays (no I/O).

A rewrite group writes the live rows of its old fragments, fragment by fragment in offset
order, into its new fragments in order; so the k-th surviving old address of a group maps to
the k-th row of the concatenated new fragments. A row address is ``fragment_id << 32 | offset``.
Addresses of the group's old fragments that are not surviving rows were deleted (they map to
nothing); addresses of other fragments are left unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def addresses(fragment_id: int, offsets: np.ndarray) -> np.ndarray:
    return (np.uint64(fragment_id) << np.uint64(32)) | offsets.astype(np.uint64)


def surviving_addresses(fragment_ids: Sequence[int], live_masks: Sequence[np.ndarray]) -> np.ndarray:
    """Row addresses of the live rows of ``fragment_ids`` (in that order), uint64."""
    parts = [addresses(f, np.flatnonzero(m)) for f, m in zip(fragment_ids, live_masks, strict=True)]
    return np.concatenate(parts) if parts else np.zeros(0, np.uint64)


def new_addresses(new_fragments: Sequence[tuple[int, int]]) -> np.ndarray:
    """Every row address of ``(fragment id, physical rows)`` in order, uint64."""
    parts = [addresses(f, np.arange(n, dtype=np.uint64)) for f, n in new_fragments]
    return np.concatenate(parts) if parts else np.zeros(0, np.uint64)


@dataclass
class RowAddressMap:
    """Sorted old addresses -> new ones, for the old fragments ``old_fragment_ids``."""

    old: np.ndarray  # uint64, sorted
    new: np.ndarray  # uint64, same order
    old_fragment_ids: np.ndarray  # uint32, sorted

    @classmethod
    def from_pairs(cls, old: np.ndarray, new: np.ndarray, old_fragment_ids: Sequence[int]) -> RowAddressMap:
        if old.size != new.size:
            raise ValueError(f"{old.size} surviving old rows but {new.size} new rows")
        order = np.argsort(old, kind="stable")
        return cls(old[order], new[order], np.unique(np.asarray(old_fragment_ids, dtype=np.uint32)))

    @classmethod
    def concat(cls, maps: Sequence[RowAddressMap]) -> RowAddressMap:
        if not maps:
            return cls(np.zeros(0, np.uint64), np.zeros(0, np.uint64), np.zeros(0, np.uint32))
        return cls.from_pairs(np.concatenate([m.old for m in maps]), np.concatenate([m.new for m in maps]),
                              np.concatenate([m.old_fragment_ids for m in maps]).tolist())

    def apply(self, addrs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(keep mask over ``addrs``, the kept addresses remapped); deleted rows are dropped."""
        addrs = np.asarray(addrs, dtype=np.uint64)
        frag = (addrs >> np.uint64(32)).astype(np.uint32)
        moved = np.isin(frag, self.old_fragment_ids)
        pos = np.searchsorted(self.old, addrs[moved])
        pos_c = np.minimum(pos, max(self.old.size - 1, 0))
        found = (pos < self.old.size) & (self.old[pos_c] == addrs[moved]) if self.old.size else \
            np.zeros(pos.size, bool)
        keep = np.ones(addrs.size, dtype=bool)
        keep[np.flatnonzero(moved)[~found]] = False
        out = addrs.copy()
        out[np.flatnonzero(moved)[found]] = self.new[pos_c[found]]
        return keep, out[keep]
