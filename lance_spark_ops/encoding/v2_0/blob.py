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

Writing (pylance's 2.0 ``BlobFieldEncoder``): any field with the key ``lance-encoding:blob``
(whatever its value) must be ``large_binary``. Each non-empty, non-null value becomes one
payload, 64-byte aligned, written before the page. ``BlobPayloads`` hands a page's payloads
to the writer as ONE ``EncodedPage.external`` buffer (the alignment padding inside it, built
with one vectorised ``np.insert``); the descriptions are made by ``EncodedPage.finalize``
once the writer knows the file offset that buffer landed at.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lance_spark_ops._pb import encodings_v2_0_pb2 as pb
from lance_spark_ops.encoding.v2_0.arrays import (
    concat,
    gather_slices,
    valid_mask,
    variable_array,
    variable_parts,
)
from lance_spark_ops.encoding.v2_0.buffers import BufferData, ColumnPages
from lance_spark_ops.encoding.v2_0.physical import decode_packed_struct, describe_basic, packed_rows
from lance_spark_ops.errors import CorruptFileError, InvalidInputError

BLOB_ALIGN = 64

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
    reads = col.fetch([(int(a), int(b - a)) for a, b in zip(g_start, g_end, strict=True)])
    lengths = np.array([len(r) for r in reads], dtype=np.int64)
    if (lengths != g_end - g_start).any():
        raise CorruptFileError(f"{col.name}: short read of blob payloads")
    joined = np.concatenate([np.frombuffer(r, dtype=np.uint8) for r in reads])
    g_base = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    src = np.zeros(len(pos), dtype=np.int64)
    src[order] = g_base[group] + (s - g_start[group])
    return gather_slices(joined, src, size)


# -- encoding ------------------------------------------------------------------------------
class BlobPayloads:
    """The payloads of one blob page and its ``(position, size)`` descriptions.

    ``external`` is one buffer: every non-empty, non-null value back to back, each padded to
    64 bytes (pylance writes each payload 64-byte aligned); the writer writes it (aligned)
    before the page and ``descriptions(offset)`` gives the page buffer once ``offset``, the
    file position it landed at, is known.
    """

    def __init__(self, arr: pa.Array) -> None:
        offsets, data = variable_parts(arr)
        sizes = np.diff(offsets)
        valid = valid_mask(arr)
        sizes[~valid] = 0
        self._take = sizes > 0
        self._sizes = sizes.astype(np.uint64)
        self._null = ~valid
        lengths = sizes[self._take]
        self.external: list[BufferData] = []
        self._rel = np.zeros(len(lengths), np.int64)
        if len(lengths):
            if int(lengths.sum()) != data.size:  # bytes under null slots: leave them out
                data, _ = gather_slices(data, offsets[:-1][self._take], lengths)
            padded = -(-lengths // BLOB_ALIGN) * BLOB_ALIGN
            pads = (padded - lengths)[:-1]
            if pads.any():
                data = np.insert(data, np.repeat(np.cumsum(lengths)[:-1], pads), np.uint8(0))
            np.cumsum(padded[:-1], out=self._rel[1:])
            self.external.append(data)

    def descriptions(self, offsets: list[int]) -> np.ndarray:
        """The page buffer: u64 ``(position, size)`` per row, payloads at ``offsets[0]``."""
        if len(offsets) != len(self.external):
            raise InvalidInputError(f"blob page: {len(offsets)} payload offsets for "
                                    f"{len(self.external)} buffers")
        rows = np.zeros((len(self._sizes), 2), dtype="<u8")
        rows[self._null, 0] = 1
        if self.external:
            rows[self._take, 0] = (self._rel + int(offsets[0])).astype(np.uint64)
        rows[:, 1] = self._sizes
        return rows.view(np.uint8).reshape(-1)


def blob_encoding() -> pb.ArrayEncoding:
    """``PackedStruct(position: u64, size: u64)`` over page buffer 0."""
    enc = pb.ArrayEncoding()
    for _ in range(2):
        enc.packed_struct.inner.append(describe_basic(pa.uint64()))
    enc.packed_struct.buffer.SetInParent()
    return enc
