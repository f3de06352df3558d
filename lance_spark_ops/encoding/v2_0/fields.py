"""Map an Arrow field onto its 2.0 columns and decode a row range of it.

Column mapping (the 2.0 writer, Rust ``previous/encoder.rs``, and reader, ``decoder.rs``
``create_legacy_field_scheduler``): every field of the schema tree gets columns in depth-first
order.

=============================================  =========================================
field                                          columns
=============================================  =========================================
fixed width, bool, null, fixed_size_binary,    1 (pages hold the values)
fixed_size_list<fixed width>, string/binary
(large too), dictionary, blob
list / large_list                              1 (``List`` offsets pages) + the item's
non-packed struct                              1 (``SimpleStruct`` header pages, no
                                               buffers) + each child's, in order
packed struct                                  1 (``PackedStruct`` pages)
=============================================  =========================================

A struct is packed when its metadata has ``packed`` = ``true`` or (without ``packed``) the key
``lance-encoding:packed`` with any value - the writer's rule. Map, nullable struct, and
fixed_size_list of non-fixed-width items cannot be written in 2.0.

Rows: a list's offsets column has one row per list; its items column has one row per item
and pages of its own. Offsets page p references ``List.num_items`` items, so its items
start at ``sum(num_items of pages < p)``. A struct's children have the struct's rows.

Worked example: ``list<int32>`` rows ``[[1, 2], null, [], [3]]`` in one page::

    column 0 page: list { offsets { nullable { no_nulls { values { flat { bits_per_value: 64 }}}}}
                          null_offset_adjustment: 4  num_items: 3 }
                   buffer 0 (u64) = [2, 6, 2, 3]       # 6 = 2 + 4: row 1 is null
    column 1 page: nullable { no_nulls { values { flat { bits_per_value: 32 }}}}  = [1, 2, 3]

Rows 2..4 read offsets [1, 4) = [6, 2, 3] -> ends mod 4 = [2, 2, 3], valid [T, T] -> items
2..3 of column 1 -> ``[[], [3]]``.

Writing mirrors that: ``encode_list_offsets`` gives the offsets page of a list page (ends
relative to the page, nulls shifted by ``num_items + 1``, Arrow's items under null lists
kept) and the items to encode into the item's own columns, one page for this offsets page
(pylance never shares an items page between two offsets pages; a page with no items still
gets an empty items page).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lance_spark_ops._pb import encodings_v2_0_pb2 as pb
from lance_spark_ops.encoding.v2_0.arrays import concat, fixed_bit_width, valid_mask, validity_buffer
from lance_spark_ops.encoding.v2_0.buffers import ColumnPages, PageBuffers
from lance_spark_ops.encoding.v2_0.flat import decode_ints, encode_uints
from lance_spark_ops.encoding.v2_0.physical import decode_array
from lance_spark_ops.errors import CorruptFileError, InvalidInputError, LanceError, UnsupportedError

PACKED_KEY = b"lance-encoding:packed"
PACKED_LEGACY_KEY = b"packed"
BLOB_KEY = b"lance-encoding:blob"


def is_packed_struct_2_0(field: pa.Field) -> bool:
    """Whether the 2.0 writer stored this struct field as one ``PackedStruct`` column."""
    if not pa.types.is_struct(field.type):
        return False
    meta = field.metadata or {}
    if PACKED_LEGACY_KEY in meta:
        return meta[PACKED_LEGACY_KEY] == b"true"
    return PACKED_KEY in meta


def is_primitive_2_0(dt: pa.DataType) -> bool:
    """The writer's "primitive" types: one column whose pages hold the values."""
    if pa.types.is_fixed_size_list(dt):
        return is_primitive_2_0(dt.value_type)
    return pa.types.is_null(dt) or fixed_bit_width(dt) is not None


def count_columns_2_0(field: pa.Field) -> int:
    """Number of 2.0 columns ``field`` (and its children) occupy."""
    dt = field.type
    if is_primitive_2_0(dt):
        return 1
    if pa.types.is_fixed_size_list(dt):
        raise UnsupportedError(f"field {field.name!r}: fixed_size_list of {dt.value_type} cannot be "
                               "stored in a 2.0 file")
    if pa.types.is_string(dt) or pa.types.is_large_string(dt) or pa.types.is_binary(dt) \
            or pa.types.is_large_binary(dt) or pa.types.is_dictionary(dt):
        return 1
    if pa.types.is_list(dt) or pa.types.is_large_list(dt):
        return 1 + count_columns_2_0(dt.value_field)
    if pa.types.is_struct(dt):
        if is_packed_struct_2_0(field):
            return 1
        return 1 + sum(count_columns_2_0(dt.field(i)) for i in range(dt.num_fields))
    raise UnsupportedError(f"field {field.name!r}: type {dt} cannot be stored in a 2.0 file")


def decode_field_2_0(field: pa.Field, columns: list[ColumnPages],
                     rows: tuple[int, int] | None = None) -> pa.Array:
    """Rows ``[start, stop)`` (default: all) of a top-level field from its 2.0 columns.

    ``columns`` are the consecutive columns of this field (``count_columns_2_0(field)`` of
    them, in file order). Only pages overlapping the rows are read.
    """
    need = count_columns_2_0(field)
    if len(columns) != need:
        raise InvalidInputError(f"field {field.name!r} ({field.type}) needs {need} 2.0 columns, "
                                f"{len(columns)} given")
    total = columns[0].num_rows
    start, stop = (0, total) if rows is None else (int(rows[0]), int(rows[1]))
    if not 0 <= start <= stop <= total:
        raise InvalidInputError(f"field {field.name!r}: rows {start}..{stop} requested, it has {total}")
    try:
        arr = _decode(field, columns, 0, start, stop)
    except LanceError:
        raise
    except (ValueError, IndexError, OverflowError, TypeError, MemoryError, pa.ArrowException) as e:
        raise CorruptFileError(f"field {field.name!r}: cannot decode rows {start}..{stop} "
                               f"({type(e).__name__}: {e})") from e
    if len(arr) != stop - start:
        raise CorruptFileError(f"field {field.name!r}: decoded {len(arr)} rows, expected {stop - start}")
    return arr


def _decode(field: pa.Field, cols: list[ColumnPages], i: int, start: int, stop: int) -> pa.Array:
    """Rows ``[start, stop)`` of ``field`` whose first column is ``cols[i]``."""
    dt = field.type
    if pa.types.is_list(dt) or pa.types.is_large_list(dt):
        return _decode_list(field, cols, i, start, stop)
    if pa.types.is_struct(dt) and not is_packed_struct_2_0(field):
        return _decode_struct(field, cols, i, start, stop)
    return _decode_leaf(field, cols[i], start, stop)


def _decode_leaf(field: pa.Field, col: ColumnPages, start: int, stop: int) -> pa.Array:
    colenc = col.column_encoding()
    kind = colenc.WhichOneof("column_encoding")
    if kind == "blob":
        from lance_spark_ops.encoding.v2_0.blob import decode_blob

        return decode_blob(field, col, start, stop)
    if kind not in (None, "values"):
        raise UnsupportedError(f"{col.name}: column encoding {kind!r} is not supported")
    pieces = []
    for p, lo, hi in col.pages_in(start, stop):
        arr = decode_array(col.encoding(p), col.context(p), field.type, lo, hi)
        if len(arr) != hi - lo:
            raise CorruptFileError(f"{col.name} page {p}: decoded {len(arr)} rows, expected {hi - lo}")
        pieces.append(arr)
    return concat(pieces, field.type)


def _check_values_column(col: ColumnPages) -> None:
    kind = col.column_encoding().WhichOneof("column_encoding")
    if kind not in (None, "values"):
        raise CorruptFileError(f"{col.name}: column encoding {kind!r} on a struct/list column")


def _decode_struct(field: pa.Field, cols: list[ColumnPages], i: int, start: int, stop: int) -> pa.Array:
    header = cols[i]
    _check_values_column(header)
    for p, _, _ in header.pages_in(start, stop):
        kind = header.encoding(p).WhichOneof("array_encoding")
        if kind != "struct":
            raise CorruptFileError(f"{header.name} page {p}: struct field {field.name!r} expects a "
                                   f"SimpleStruct header page, found {kind!r}")
    dt = field.type
    children, j = [], i + 1
    for k in range(dt.num_fields):
        child = dt.field(k)
        arr = _decode(child, cols, j, start, stop)
        if len(arr) != stop - start:
            raise CorruptFileError(f"struct {field.name!r} child {child.name!r}: {len(arr)} rows, "
                                   f"expected {stop - start}")
        children.append(arr)
        j += count_columns_2_0(child)
    if not children:
        return pa.StructArray.from_buffers(dt, stop - start, [None], children=[])
    return pa.StructArray.from_arrays(children, fields=[dt.field(k) for k in range(dt.num_fields)])


def _decode_list(field: pa.Field, cols: list[ColumnPages], i: int, start: int, stop: int) -> pa.Array:
    dt = field.type
    offs = cols[i]
    _check_values_column(offs)
    starts = offs.page_starts()
    # Item position of each offsets page's first item: the running sum of num_items.
    lens, valids, ranges = [], [], []
    items_base = None
    for p, lo, hi in offs.pages_in(start, stop):
        if items_base is None:  # items referenced by the (non-empty) pages before this one
            items_base = sum(int(_list_msg(offs, q).num_items) for q in range(p) if starts[q + 1] > starts[q])
        msg = _list_msg(offs, p)
        ctx = offs.context(p)
        adj = int(msg.null_offset_adjustment)
        if adj == 0:
            raise CorruptFileError(f"{ctx.where}: list page with rows has null_offset_adjustment 0")
        first = lo - 1 if lo > 0 else 0
        raw, raw_valid = decode_ints(msg.offsets, ctx, first, hi)
        if raw_valid is not None and not raw_valid.all():
            raise CorruptFileError(f"{ctx.where}: list offsets contain nulls")
        raw = raw.astype(np.uint64, copy=False)
        ends = (raw % np.uint64(adj)).astype(np.int64)
        valid = raw < np.uint64(adj)
        if lo > 0:
            base = int(ends[0])
            ends, valid = ends[1:], valid[1:]
        else:
            base = 0
        bounds = np.concatenate([[base], ends])
        page_lens = np.diff(bounds)
        if (page_lens < 0).any() or int(bounds.max()) > msg.num_items:
            raise CorruptFileError(f"{ctx.where}: list offsets decrease or exceed the page's "
                                   f"{msg.num_items} items")
        lens.append(page_lens)
        valids.append(valid)
        a, b = items_base + base, items_base + int(bounds[-1])
        if b > a:
            if ranges and ranges[-1][1] == a:
                ranges[-1] = (ranges[-1][0], b)
            else:
                ranges.append((a, b))
        items_base += int(msg.num_items)
    lengths = np.concatenate(lens) if lens else np.zeros(0, np.int64)
    valid = np.concatenate(valids) if valids else np.zeros(0, bool)
    item_field = dt.value_field
    items = concat([_decode(item_field, cols, i + 1, a, b) for a, b in ranges], item_field.type)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if int(offsets[-1]) != len(items):
        raise CorruptFileError(f"list {field.name!r}: offsets reference {int(offsets[-1])} items, "
                               f"{len(items)} decoded")
    if pa.types.is_list(dt):
        if int(offsets[-1]) > 2**31 - 1:
            raise UnsupportedError(f"list {field.name!r}: {int(offsets[-1])} items do not fit int32 "
                                   "offsets; read fewer rows at a time")
        off_buf = pa.py_buffer(offsets.astype(np.int32))
    else:
        off_buf = pa.py_buffer(offsets)
    return pa.Array.from_buffers(dt, len(lengths), [validity_buffer(valid), off_buf], children=[items])


def _list_msg(col: ColumnPages, page: int) -> pb.List:
    enc = col.encoding(page)
    kind = enc.WhichOneof("array_encoding")
    if kind != "list":
        raise CorruptFileError(f"{col.name} page {page}: list offsets column has a {kind!r} page")
    return enc.list


def encode_list_offsets(arr: pa.Array, pages: PageBuffers) -> tuple[pb.ArrayEncoding, pa.Array]:
    """The ``List`` encoding of a (large) list page and the items its rows span."""
    n = len(arr)
    raw = arr.offsets.to_numpy(zero_copy_only=False) if n else np.zeros(1, np.int64)
    base, end = int(raw[0]), int(raw[-1])
    num_items = end - base
    ends = (raw[1:].astype(np.int64) - base).astype(np.uint64)
    adjustment = num_items + 1
    if arr.null_count:
        ends[~valid_mask(arr)] += np.uint64(adjustment)
    enc = pb.ArrayEncoding()
    enc.list.offsets.CopyFrom(encode_uints(ends, pages))
    enc.list.null_offset_adjustment = adjustment
    enc.list.num_items = num_items
    return enc, arr.values.slice(base, num_items)
