"""Decode one field of one batch of a legacy (v1) file into Arrow, as pylance 14 reads it.

Encodings (Lance ``lance-io/src/encodings``), per page of ``length`` rows at ``position``:

* plain (fixed stride: numbers, temporals, decimals, fixed-size binary, booleans as LSB bits,
  fixed-size lists as their flattened items): the raw values, no validity. Nulls were written
  as whatever the Arrow buffer held (booleans: false), and read back as such.
* var-binary (strings, binary, large variants): the bytes, then ``length + 1`` i64 absolute
  file positions; ``position`` points at the positions. A nullable field reads an empty value
  as null (that is how v1 stores a null).
* dictionary: plain keys of the index type; the values (plain or var-binary, empty = null)
  at the field's dictionary (offset, length) in the file's schema.
* list / large list: the field's page holds ``rows + 1`` i32 / i64 offsets (from 0 per batch),
  the item field its own page; no validity (a null list reads as empty).
* struct: no page; children only, no validity. null type: only a row count.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_spark_ops.errors import CorruptFileError, UnsupportedError
from lance_spark_ops.file.schema import LanceField

Fetch = Callable[[Sequence[tuple[int, int]]], list[memoryview]]


@dataclass
class PageSource:
    """Where a field's pages and dictionaries are, and how to read bytes of the file."""

    page: Callable[[int, int], tuple[int, int]]  # (field id, batch) -> (position, length)
    dictionary: Callable[[int], tuple[int, int]]  # field id -> (position, length)
    fetch: Fetch
    path: str


def fixed_width_bits(dt: pa.DataType) -> int | None:
    """Bits per value of a plain-encoded type, None when it is not fixed stride."""
    if pa.types.is_boolean(dt):
        return 1
    if pa.types.is_fixed_size_list(dt):
        inner = fixed_width_bits(dt.value_type)
        return None if inner is None else inner * dt.list_size
    if pa.types.is_fixed_size_binary(dt):
        return dt.byte_width * 8
    if pa.types.is_dictionary(dt) or pa.types.is_null(dt) or pa.types.is_nested(dt):
        return None
    try:
        return dt.bit_width
    except ValueError:
        return None


def _plain(dt: pa.DataType, n: int, data: memoryview | bytes) -> pa.Array:
    """``n`` plain values of ``dt`` from ``data`` (exactly the bytes of the page)."""
    if pa.types.is_fixed_size_list(dt):
        items = _plain(dt.value_type, n * dt.list_size, data)
        return pa.FixedSizeListArray.from_arrays(items, type=dt)
    need = (n + 7) // 8 if pa.types.is_boolean(dt) else n * fixed_width_bits(dt) // 8
    if len(data) < need:
        raise CorruptFileError(f"plain page of {n} {dt} values needs {need} bytes, has {len(data)}")
    return pa.Array.from_buffers(dt, n, [None, pa.py_buffer(data[:need])])


def _read_plain(src: PageSource, dt: pa.DataType, pos: int, n: int) -> pa.Array:
    nbytes = (n + 7) // 8 if pa.types.is_boolean(dt) else n * fixed_width_bits(dt) // 8
    (data,) = src.fetch([(pos, nbytes)])
    return _plain(dt, n, data)


def _read_binary(src: PageSource, dt: pa.DataType, pos: int, n: int, nullable: bool) -> pa.Array:
    (raw,) = src.fetch([(pos, 8 * (n + 1))])
    positions = np.frombuffer(raw, dtype="<i8", count=n + 1)
    start, end = int(positions[0]), int(positions[-1])
    if (np.diff(positions) < 0).any() or start < 0 or end > pos:
        raise CorruptFileError(f"var-binary positions at {pos} are not ascending within the page")
    (data,) = src.fetch([(start, end - start)]) if end > start else (b"",)
    large = pa.types.is_large_string(dt) or pa.types.is_large_binary(dt)
    offsets = (positions - start).astype(np.int64 if large else np.int32)
    mask = None
    if nullable:
        empty = offsets[1:] == offsets[:-1]
        if empty.any():
            mask = pa.py_buffer(np.packbits(~empty, bitorder="little").tobytes())
    buffers = [mask, pa.py_buffer(offsets.tobytes()), pa.py_buffer(bytes(data))]
    return pa.Array.from_buffers(dt, n, buffers, null_count=int(empty.sum()) if mask is not None else 0)


def _read_dictionary(src: PageSource, field: LanceField, dt: pa.DictionaryType, pos: int, n: int) -> pa.Array:
    keys = _read_plain(src, dt.index_type, pos, n)
    dpos, dlen = src.dictionary(field.id)
    vt = dt.value_type
    if fixed_width_bits(vt) is not None:
        values = _read_plain(src, vt, dpos, dlen)
    elif pa.types.is_binary(vt) or pa.types.is_string(vt) or pa.types.is_large_binary(vt) \
            or pa.types.is_large_string(vt):
        values = _read_binary(src, vt, dpos, dlen, nullable=True)
    else:
        raise UnsupportedError(f"dictionary values of type {vt} are not supported")
    if n and len(values) and (pc.max(keys).as_py() >= len(values) or pc.min(keys).as_py() < 0):
        raise CorruptFileError(f"dictionary key outside the {len(values)} dictionary values")
    return pa.DictionaryArray.from_arrays(keys, values)


def dictionary_values(value_type: pa.DataType, data: bytes | memoryview, position: int,
                      length: int) -> pa.Array:
    """Dictionary values stored at ``position`` of the in-memory file ``data`` (a legacy
    manifest file keeps them there)."""
    view = memoryview(data)

    def fetch(ranges: Sequence[tuple[int, int]]) -> list[memoryview]:
        out = []
        for off, size in ranges:
            if off < 0 or size < 0 or off + size > len(view):
                raise CorruptFileError(f"dictionary bytes {off}..{off + size} lie outside the file")
            out.append(view[off:off + size])
        return out

    src = PageSource(lambda *_: (0, 0), lambda _: (0, 0), fetch, "")
    if fixed_width_bits(value_type) is not None:
        return _read_plain(src, value_type, position, length)
    return _read_binary(src, value_type, position, length, nullable=True)


def decode_field(field: LanceField, src: PageSource, batch: int) -> pa.Array:
    """All rows of ``field`` in ``batch``, typed as the field's Arrow type."""
    dt = field.arrow_type()
    lt = field.logical_type
    if lt == "struct":
        children = [decode_field(c, src, batch) for c in field.children]
        return pa.StructArray.from_arrays(children, fields=list(dt))
    pos, n = src.page(field.id, batch)
    if pa.types.is_null(dt):
        return pa.nulls(n)
    if pa.types.is_list(dt) or pa.types.is_large_list(dt):
        return _read_list(field, dt, src, batch, pos, n)
    if pa.types.is_dictionary(dt):
        return _read_dictionary(src, field, dt, pos, n)
    if pa.types.is_string(dt) or pa.types.is_binary(dt) or pa.types.is_large_string(dt) \
            or pa.types.is_large_binary(dt):
        return _read_binary(src, dt, pos, n, field.nullable)
    if fixed_width_bits(dt) is not None:
        return _read_plain(src, dt, pos, n)
    raise UnsupportedError(f"field {field.name!r}: type {dt} is not supported in legacy files")


def _read_list(field: LanceField, dt: pa.DataType, src: PageSource, batch: int, pos: int, n: int) -> pa.Array:
    large = pa.types.is_large_list(dt)
    if n < 1:
        raise CorruptFileError(f"list field {field.name!r}: offsets page has no entries")
    offsets = _read_plain(src, pa.int64() if large else pa.int32(), pos, n).to_numpy()
    items = decode_field(field.children[0], src, batch)
    first, last = int(offsets[0]), int(offsets[-1])
    if (np.diff(offsets) < 0).any() or first < 0 or last > len(items):
        raise CorruptFileError(f"list field {field.name!r}: offsets {first}..{last} do not fit "
                               f"{len(items)} items")
    rel = pa.array(offsets - first, pa.int64() if large else pa.int32())
    cls = pa.LargeListArray if large else pa.ListArray
    return cls.from_arrays(rel, items.slice(first, last - first), type=dt)
