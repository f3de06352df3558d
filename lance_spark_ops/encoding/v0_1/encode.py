"""Encode Arrow arrays as legacy (v1) pages, as pylance 14's v1 ``FileWriter`` does.

``encode_field`` turns one field's values of one batch into ``(field id, bytes, length)``
pages, depth first (a list: its offsets page, then the item pages; a struct: only its
children). Each page's recorded position is where its bytes start, except var-binary whose
position is that of its positions array (after the bytes). Plain values carry no validity:
nulls are written as the Arrow buffer holds them (booleans: false), exactly what pylance
writes and reads back. See ``decode`` for the layouts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_spark_ops.encoding.v0_1.decode import fixed_width_bits
from lance_spark_ops.errors import UnsupportedError
from lance_spark_ops.file.schema import LanceField


@dataclass
class LegacyPage:
    """One page: ``data`` written at some file offset ``o``; recorded position ``o + anchor``."""

    field_id: int
    data: bytes
    anchor: int  # offset of the recorded position inside ``data`` (var-binary: the positions)
    length: int  # rows (list offsets: rows + 1)
    relocate: bool = False  # var-binary: positions are absolute, fixed up once ``o`` is known


def plain_bytes(arr: pa.Array) -> bytes:
    """Raw values of a fixed-stride array (no validity), its offset honoured."""
    dt = arr.type
    if pa.types.is_fixed_size_list(dt):
        values = arr.values.slice(arr.offset * dt.list_size, len(arr) * dt.list_size)
        return plain_bytes(values)
    if pa.types.is_boolean(dt):
        filled = pc.fill_null(arr, False) if arr.null_count else arr
        return np.packbits(filled.to_numpy(zero_copy_only=False), bitorder="little").tobytes()
    width = fixed_width_bits(dt) // 8
    buf = arr.buffers()[1]
    if buf is None:
        return bytes(len(arr) * width)
    return buf.slice(arr.offset * width, len(arr) * width).to_pybytes()  # only this slice is copied


def binary_parts(arr: pa.Array) -> tuple[bytes, np.ndarray]:
    """(value bytes, int64 offsets from 0) of a string / binary array (nulls are empty)."""
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64 if large else np.int32,
                            count=len(arr) + 1, offset=arr.offset * (8 if large else 4)).astype(np.int64)
    data = arr.buffers()[2]
    span = int(offsets[-1] - offsets[0])
    body = data.slice(int(offsets[0]), span).to_pybytes() if data is not None else b""
    rel = offsets - offsets[0]
    if arr.null_count:  # a null's bytes (if any) are dropped: it reads back as empty / null
        lengths = np.diff(rel)
        lengths[~arr.is_valid().to_numpy(zero_copy_only=False)] = 0
        keep = np.repeat(arr.is_valid().to_numpy(zero_copy_only=False), np.diff(rel))
        body = np.frombuffer(body, dtype=np.uint8)[keep].tobytes()
        rel = np.concatenate([[0], np.cumsum(lengths)])
    return body, rel


def binary_page(field_id: int, arr: pa.Array) -> LegacyPage:
    body, rel = binary_parts(arr)
    return LegacyPage(field_id, body + rel.astype("<i8").tobytes(), len(body), len(arr), relocate=True)


def place(page: LegacyPage, offset: int) -> tuple[bytes, int]:
    """Bytes to write at file ``offset`` and the position to record for them."""
    if not page.relocate:
        return page.data, offset + page.anchor
    positions = np.frombuffer(page.data, dtype="<i8", offset=page.anchor) + offset
    return page.data[:page.anchor] + positions.astype("<i8").tobytes(), offset + page.anchor


def encode_field(field: LanceField, arr: pa.Array) -> list[LegacyPage]:
    """Pages of one batch of ``field`` (depth first, as the v1 writer orders them)."""
    dt = arr.type
    if pa.types.is_struct(dt):
        pages: list[LegacyPage] = []
        for child in field.children:
            pages += encode_field(child, arr.field(child.name))
        return pages
    if pa.types.is_null(dt):
        return [LegacyPage(field.id, b"", 0, len(arr))]
    if pa.types.is_list(dt) or pa.types.is_large_list(dt):
        large = pa.types.is_large_list(dt)
        offsets = arr.offsets.to_numpy().astype(np.int64)
        items = arr.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
        rel = (offsets - offsets[0]).astype("<i8" if large else "<i4")
        return [LegacyPage(field.id, rel.tobytes(), 0, len(arr) + 1)] + encode_field(field.children[0], items)
    if pa.types.is_dictionary(dt):
        return [LegacyPage(field.id, plain_bytes(arr.indices), 0, len(arr))]
    if pa.types.is_string(dt) or pa.types.is_binary(dt) or pa.types.is_large_string(dt) \
            or pa.types.is_large_binary(dt):
        return [binary_page(field.id, arr)]
    if fixed_width_bits(dt) is not None:
        return [LegacyPage(field.id, plain_bytes(arr), 0, len(arr))]
    raise UnsupportedError(f"field {field.name!r}: type {dt} cannot be written in legacy (0.1) files")


def dictionary_values_page(field_id: int, values: pa.Array) -> LegacyPage:
    """The dictionary values of a dictionary field (plain or var-binary)."""
    if fixed_width_bits(values.type) is not None:
        return LegacyPage(field_id, plain_bytes(values), 0, len(values))
    return binary_page(field_id, values)
