"""Helpers every page decoder of the structural layouts uses: accepting a ``PageLayout`` or
its inner message, viewing fetched buffers as bytes, and validating the rows asked for."""

from __future__ import annotations

import numpy as np

from lance_spark_ops.errors import CorruptFileError, InvalidInputError


def page_message(layout: object, field: str) -> object:
    """Accept either a ``PageLayout`` or the inner layout message itself."""
    if hasattr(layout, "WhichOneof") and field in type(layout).DESCRIPTOR.fields_by_name:
        if layout.WhichOneof("layout") != field:
            raise CorruptFileError(f"expected a {field} page, found {layout.WhichOneof('layout')}")
        return getattr(layout, field)
    return layout


def as_u8(buf: object) -> np.ndarray:
    """A fetched buffer (bytes, memoryview or array) as a flat uint8 array (no copy)."""
    if isinstance(buf, np.ndarray):
        return buf.view(np.uint8).reshape(-1)
    return np.frombuffer(buf, dtype=np.uint8)  # type: ignore[arg-type]


def join_u8(bufs: list) -> np.ndarray:
    """Fetched buffers as one uint8 array (no copy for a single buffer)."""
    if len(bufs) == 1:
        return as_u8(bufs[0])
    return np.frombuffer(b"".join(bufs), dtype=np.uint8) if bufs else np.zeros(0, np.uint8)


def row_runs(rows: np.ndarray, num_rows: int, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Validate sorted unique page-relative rows; return runs of consecutive rows [a, b)."""
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    if rows.size and (rows[0] < 0 or rows[-1] >= num_rows or (np.diff(rows) <= 0).any()):
        raise InvalidInputError(f"{what}: rows must be sorted, unique and in [0, {num_rows})")
    if rows.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    starts = rows[np.concatenate(([0], breaks))]
    ends = rows[np.concatenate((breaks - 1, [rows.size - 1]))] + 1
    return starts, ends
