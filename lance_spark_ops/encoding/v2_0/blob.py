"""2.0 blob columns (``ColumnEncoding.blob``): descriptions in the pages, payloads elsewhere.

A ``large_binary`` field with the metadata key ``lance-encoding:blob`` is written as one
column whose ``ColumnEncoding`` is ``blob { inner { values {} } }``. Its pages are
``PackedStruct(position: u64, size: u64)`` - 16 bytes per row - and each payload lies at the
absolute file offset ``position`` (the writer puts payloads before the pages, 64-byte
aligned). A null row is ``(1, 0)``; an empty value is ``(0, 0)``.

Worked example: rows ``[null, b"", b"abc", b"defg"]`` written at file offsets 0 and 64::

    page buffer 0 (u64 pairs) = (1, 0) (0, 0) (0, 3) (64, 4)

Reading all rows fetches file bytes 0..3 and 64..68 (ranges are merged when close) and
returns a large_binary array ``[null, b"", b"abc", b"defg"]``. A struct field (the
descriptions themselves) gets ``{position, size}`` instead.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lance_spark_ops.encoding.v2_0.arrays import concat, gather_slices, variable_array
from lance_spark_ops.encoding.v2_0.buffers import ColumnPages
from lance_spark_ops.encoding.v2_0.physical import decode_packed_struct, packed_rows
from lance_spark_ops.errors import CorruptFileError

# Payload ranges closer than this are fetched as one read.
MERGE_GAP = 64 * 1024


def decode_blob(field: pa.Field, col: ColumnPages, start: int, stop: int) -> pa.Array:
    """Rows ``[start, stop)`` of a blob column as ``field.type`` (binary-like, or a struct to
    get the raw ``{position, size}`` descriptions)."""
    dt = field.type
    pos_parts, size_parts, struct_parts = [], [], []
    for p, lo, hi in col.pages_in(start, stop):
        enc = col.encoding(p)
        ctx = col.context(p)
        if enc.WhichOneof("array_encoding") != "packed_struct":
            raise CorruptFileError(f"{ctx.where}: blob column page must be a packed struct of "
                                   f"(position, size), found {enc.WhichOneof('array_encoding')!r}")
        if pa.types.is_struct(dt):
            struct_parts.append(decode_packed_struct(enc.packed_struct, ctx, dt, lo, hi))
            continue
        pos, size = packed_rows(enc.packed_struct, ctx, [8, 8], lo, hi)
        pos_parts.append(pos.view("<u8"))
        size_parts.append(size.view("<u8"))
    if pa.types.is_struct(dt):
        return concat(struct_parts, dt)
    positions = np.concatenate(pos_parts) if pos_parts else np.zeros(0, np.uint64)
    sizes = np.concatenate(size_parts) if size_parts else np.zeros(0, np.uint64)
    valid = ~((positions == 1) & (sizes == 0))
    data, offsets = _fetch_payloads(col, positions, sizes)
    return variable_array(dt, offsets, data, valid)


def _fetch_payloads(col: ColumnPages, positions: np.ndarray,
                    sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Read every non-empty payload with few merged reads; (data, int64 offsets)."""
    big = np.iinfo(np.int64).max
    if (positions > big).any() or (sizes > big).any() or (positions + sizes < positions).any():
        raise CorruptFileError(f"{col.name}: blob position/size out of range")
    pos = positions.astype(np.int64)
    size = sizes.astype(np.int64)
    size = np.where((positions == 1) & (sizes == 0), 0, size)
    want = np.flatnonzero(size > 0)
    if want.size == 0:
        offsets = np.zeros(len(pos) + 1, dtype=np.int64)
        return np.zeros(0, np.uint8), offsets
    order = want[np.argsort(pos[want], kind="stable")]
    s, e = pos[order], pos[order] + size[order]
    reach = np.maximum.accumulate(e)
    new_group = np.ones(len(order), dtype=bool)
    new_group[1:] = s[1:] > reach[:-1] + MERGE_GAP
    group = np.cumsum(new_group) - 1
    g_start = s[new_group]
    g_end = np.maximum.reduceat(e, np.flatnonzero(new_group))
    reads = col.fetch([(int(a), int(b - a)) for a, b in zip(g_start, g_end)])
    lengths = np.array([len(r) for r in reads], dtype=np.int64)
    if (lengths != g_end - g_start).any():
        raise CorruptFileError(f"{col.name}: short read of blob payloads")
    joined = np.concatenate([np.frombuffer(r, dtype=np.uint8) for r in reads])
    g_base = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    src = np.zeros(len(pos), dtype=np.int64)
    src[order] = g_base[group] + (s - g_start[group])
    return gather_slices(joined, src, size)
