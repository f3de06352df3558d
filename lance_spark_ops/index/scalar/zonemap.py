"""ZONEMAP index file (``zonemap.lance``, no I/O).

Columns ``min`` / ``max`` (the column's type, nullable), ``null_count`` / ``nan_count``
(uint32), ``fragment_id`` / ``zone_start`` / ``zone_length`` (uint64), one row per zone
(``zoned``); schema metadata ``rows_per_zone`` and ``null_bitmap``. ``min`` / ``max`` order
floats totally with NaN above every number (a zone holding a NaN has a NaN ``max``; its
``min`` is NaN only when it holds nothing else); a zone of nulls only has null bounds.
Details ``ZoneMapIndexDetails``: rows_per_zone (1), use_seeds (2: true for variable-width
types and fixed-width ones wider than 8 bytes), has_null_bitmap (3: true).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_spark_ops.index.scalar.zoned import NULL_BITMAP_KEY
from lance_spark_ops.pb_wire import encode_varint

ZONEMAP_FILE = "zonemap.lance"
DEFAULT_ROWS_PER_ZONE = 8192
TYPE_URL = "/lance.table.ZoneMapIndexDetails"


def schema(value_type: pa.DataType, rows_per_zone: int) -> pa.Schema:
    fields = [pa.field("min", value_type, True), pa.field("max", value_type, True),
              pa.field("null_count", pa.uint32(), False), pa.field("nan_count", pa.uint32(), False),
              pa.field("fragment_id", pa.uint64(), False), pa.field("zone_start", pa.uint64(), False),
              pa.field("zone_length", pa.uint64(), False)]
    return pa.schema(fields, metadata={"rows_per_zone": str(rows_per_zone), NULL_BITMAP_KEY: "1"})


def zone_stats(values: pa.Array) -> tuple[pa.Scalar, pa.Scalar, int, int]:
    """(min, max, null_count, nan_count) of one zone, as pylance computes them."""
    t = values.type
    nulls = values.null_count
    nans = 0
    if pa.types.is_floating(t):
        nan = pc.fill_null(pc.is_nan(values), False)
        nans = int(pc.sum(nan).as_py() or 0)
        finite = values.filter(pc.invert(nan)) if nans else values
    else:
        finite = values
    mm = pc.min_max(finite)
    lo, hi = mm["min"], mm["max"]
    if nans:
        nan_scalar = pa.scalar(float("nan"), t)
        hi = nan_scalar
        if not lo.is_valid:
            lo = nan_scalar
    return lo.cast(t), hi.cast(t), nulls, nans


def use_seeds(value_type: pa.DataType) -> bool:
    t = value_type
    if (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t) or pa.types.is_string_view(t) or pa.types.is_binary_view(t)):
        return True
    try:
        return t.bit_width > 64
    except ValueError:
        return True


def details_value(rows_per_zone: int, value_type: pa.DataType) -> bytes:
    """``ZoneMapIndexDetails`` serialized: three varint fields, as pylance writes them
    (every field present, false included)."""
    return (b"\x08" + encode_varint(rows_per_zone) + b"\x10" + encode_varint(int(use_seeds(value_type)))
            + b"\x18\x01")


def details_rows_per_zone(value: bytes) -> int | None:
    """Field 1 of a serialized ``ZoneMapIndexDetails`` (None when absent)."""
    pos = 0
    while pos < len(value):
        key, pos = _read_varint(value, pos)
        if key & 7 != 0:
            return None
        v, pos = _read_varint(value, pos)
        if key >> 3 == 1:
            return v
    return None


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while pos < len(data):
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
    return result, pos


def table(rows: list[tuple], value_type: pa.DataType, rows_per_zone: int) -> pa.Table:
    """The file's rows from (min, max, null_count, nan_count, fragment_id, start, length)."""
    s = schema(value_type, rows_per_zone)
    cols = list(zip(*rows, strict=True)) if rows else [[] for _ in range(7)]
    arrays = [pa.array([v.as_py() if isinstance(v, pa.Scalar) else v for v in cols[0]], value_type),
              pa.array([v.as_py() if isinstance(v, pa.Scalar) else v for v in cols[1]], value_type)]
    arrays += [pa.array(np.asarray(c, dtype=np.uint32), pa.uint32()) for c in cols[2:4]]
    arrays += [pa.array(np.asarray(c, dtype=np.uint64), pa.uint64()) for c in cols[4:7]]
    return pa.Table.from_arrays(arrays, schema=s)
