"""Zones of ZONEMAP and BLOOMFILTER indices (no I/O).

What pylance 14 does: each fragment's live rows, in offset order, are cut into zones of
``rows_per_zone`` live rows (the last zone of a fragment is shorter; a zone never spans two
fragments). A zone records ``fragment_id``, ``zone_start`` = the offset of its first live row
and ``zone_length`` = its last live row's offset + 1 - ``zone_start`` (deleted rows inside
count). Both files keep the row addresses of the live rows whose value is null as a
``RowIdTreeMap`` in global buffer 1 (schema metadata ``null_bitmap`` = ``1``).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

NULL_BITMAP_KEY = "null_bitmap"


def zones(values: pa.Array, offsets: np.ndarray, rows_per_zone: int) -> Iterator[tuple[pa.Array, int, int]]:
    """(values, zone_start, zone_length) of each zone of one fragment's live rows."""
    for lo in range(0, len(values), rows_per_zone):
        hi = min(lo + rows_per_zone, len(values))
        start = int(offsets[lo])
        yield values.slice(lo, hi - lo), start, int(offsets[hi - 1]) + 1 - start


def null_addresses(values: pa.Array, addresses: np.ndarray) -> np.ndarray:
    nulls = np.asarray(values.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    return addresses[nulls]
