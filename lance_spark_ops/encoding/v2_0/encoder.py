"""Encode one page of a top-level field into Lance 2.0 pages, one per 2.0 column.

``encode_field_2_0(field, array)`` walks the field the way pylance's 2.0 writer
(``previous/encoder.rs``, ``CoreFieldEncodingStrategy``) maps it onto columns (see
``fields.py``) and returns one ``EncodedPage`` per column, in column order:

=============================  =============================================  ============
column                         page encoding                                  ``num_rows``
=============================  =============================================  ============
struct header                  ``struct {}``, no buffers                      rows
list / large_list offsets      ``List`` (``fields.encode_list_offsets``)      rows
list items (each column)       whatever the item type gets                    items
packed struct                  ``PackedStruct`` (``physical``)                rows
blob (``lance-encoding:blob``) ``PackedStruct(position, size)`` (``blob``)    rows
string / binary                ``Dictionary`` or ``Binary`` (``binary``)      rows
Arrow dictionary               ``Dictionary`` (``binary``)                    rows
anything else                  ``Nullable(Flat | FixedSizeList)``             rows
=============================  =============================================  ============

Worked example: ``list<int32>`` rows ``[[1, 2], null]`` give two pages::

    EncodedPage(2, [u64 [2, 5]], list { offsets {..flat 64..} null_offset_adjustment: 3
                                        num_items: 2 })
    EncodedPage(2, [i32 [1, 2]], nullable { no_nulls { values { flat { bits_per_value: 32 }}}})

A struct header column must hold exactly ONE page for the whole file (pylance writes it at
``finish`` and its reader refuses more): the writer must not write the ``struct {}`` pages
returned per call (``is_struct_header_2_0``) but add up their ``num_rows`` per column and
write one ``struct_header_encoding_2_0()`` page with the total at close.

Blob pages carry their payloads as ``EncodedPage.external`` (one buffer per page) and
fill in their only buffer in ``finalize(offsets)`` once the writer has written them; until
then ``buffers`` is empty, so a page written without ``finalize`` cannot be read as if it
were right. The writer must also set the columns' ``ColumnEncoding`` from
``column_encodings_2_0`` (``blob { inner { values {} } }`` for blob columns).

``check_field_2_0`` / ``check_array_2_0`` refuse what 2.0 cannot hold, as pylance does:
``SchemaError`` for struct validity, maps, packed structs whose children are not whole-byte
fixed width (or hold nulls) and blob fields that are not ``large_binary``;
``UnsupportedError`` for what pylance cannot write either (fixed-size lists of variable or
nested items, dictionaries of nested values, zero-width binary) or this writer does not.
"""

from __future__ import annotations

import pyarrow as pa

from lance_spark_ops._pb import encodings_v2_0_pb2 as pb
from lance_spark_ops.encoding.page import EncodedPage
from lance_spark_ops.encoding.v2_0.arrays import fixed_byte_width
from lance_spark_ops.encoding.v2_0.binary import encode_arrow_dictionary, encode_variable, is_variable_width
from lance_spark_ops.encoding.v2_0.blob import BlobPayloads, blob_encoding
from lance_spark_ops.encoding.v2_0.buffers import PageBuffers
from lance_spark_ops.encoding.v2_0.fields import (
    BLOB_KEY,
    count_columns_2_0,
    encode_list_offsets,
    is_packed_struct_2_0,
    is_primitive_2_0,
)
from lance_spark_ops.encoding.v2_0.flat import encode_basic, fsl_items
from lance_spark_ops.encoding.v2_0.physical import encode_packed_struct
from lance_spark_ops.errors import SchemaError, UnsupportedError

__all__ = [
    "check_array_2_0",
    "check_field_2_0",
    "column_encodings_2_0",
    "encode_field_2_0",
    "is_struct_header_2_0",
    "struct_header_encoding_2_0",
]


def is_blob_2_0(field: pa.Field) -> bool:
    """pylance's 2.0 rule: a ``large_binary`` field with the key ``lance-encoding:blob``
    (any value). On structs, lists and dictionaries the key is ignored; on other leaf types
    ``check_field_2_0`` refuses it."""
    return BLOB_KEY in (field.metadata or {}) and pa.types.is_large_binary(field.type)


def _is_list(dt: pa.DataType) -> bool:
    return pa.types.is_list(dt) or pa.types.is_large_list(dt)


# -- encoding ------------------------------------------------------------------------------
def encode_field_2_0(field: pa.Field, array: pa.Array) -> list[EncodedPage]:
    """One page of ``field`` (``array``: its rows, possibly a slice) as one ``EncodedPage``
    per 2.0 column of the field, in column order."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if not array.type.equals(field.type):
        raise SchemaError(f"field {field.name!r} is {field.type} but the page holds {array.type}")
    check_array_2_0(field, array)
    out: list[EncodedPage] = []
    _encode(field, array, out)
    return out


def _encode(field: pa.Field, arr: pa.Array, out: list[EncodedPage]) -> None:
    dt = field.type
    n = len(arr)
    if _is_list(dt):
        pages = PageBuffers()
        enc, items = encode_list_offsets(arr, pages)
        out.append(EncodedPage(n, pages.buffers, enc))
        _encode(dt.value_field, items, out)
    elif pa.types.is_struct(dt) and not is_packed_struct_2_0(field):
        out.append(EncodedPage(n, [], struct_header_encoding_2_0()))
        for k in range(dt.num_fields):
            _encode(dt.field(k), arr.field(k), out)
    else:
        out.append(_encode_leaf(field, arr))


def struct_header_encoding_2_0() -> pb.ArrayEncoding:
    """``struct {}``: the encoding of a struct header column's single page."""
    enc = pb.ArrayEncoding()
    enc.struct.SetInParent()
    return enc


def is_struct_header_2_0(encoding: object) -> bool:
    """Whether a page encoding is a struct header (to be merged into one page per column)."""
    return isinstance(encoding, pb.ArrayEncoding) and encoding.WhichOneof("array_encoding") == "struct"


def _encode_leaf(field: pa.Field, arr: pa.Array) -> EncodedPage:
    """The single page of a field that is one column (pylance's "primitive" fields)."""
    dt = field.type
    if is_blob_2_0(field):
        return _blob_page(arr)
    pages = PageBuffers()
    if pa.types.is_struct(dt):
        enc = encode_packed_struct(arr, pages)
    elif pa.types.is_dictionary(dt):
        enc = encode_arrow_dictionary(arr, pages)
    elif is_variable_width(dt):
        enc = encode_variable(arr, field.metadata, pages)
    else:
        enc = encode_basic(arr, pages)
    return EncodedPage(len(arr), pages.buffers, enc)


def _blob_page(arr: pa.Array) -> EncodedPage:
    payloads = BlobPayloads(arr)
    page = EncodedPage(len(arr), [], blob_encoding(), external=payloads.external)

    def finalize(offsets: list[int]) -> None:
        page.buffers = [payloads.descriptions(offsets)]

    if payloads.external:
        page.finalize = finalize
    else:  # no payloads: the writer will not call finalize
        page.buffers = [payloads.descriptions([])]
    return page


def column_encodings_2_0(field: pa.Field) -> list[pb.ColumnEncoding]:
    """The ``ColumnEncoding`` of each 2.0 column of ``field``: ``values {}``, or
    ``blob { inner { values {} } }`` for blob columns."""
    out: list[pb.ColumnEncoding] = []
    _column_encodings(field, out)
    return out


def _column_encodings(field: pa.Field, out: list[pb.ColumnEncoding]) -> None:
    dt = field.type
    children: list[pa.Field] = []
    if _is_list(dt):
        children = [dt.value_field]
    elif pa.types.is_struct(dt) and not is_packed_struct_2_0(field):
        children = [dt.field(k) for k in range(dt.num_fields)]
    enc = pb.ColumnEncoding()
    if not children and is_blob_2_0(field):
        enc.blob.inner.values.SetInParent()
    else:
        enc.values.SetInParent()
    out.append(enc)
    for child in children:
        _column_encodings(child, out)


# -- what 2.0 cannot hold ------------------------------------------------------------------
def check_field_2_0(field: pa.Field, path: str = "") -> None:
    """Raise ``SchemaError`` / ``UnsupportedError`` when no 2.0 file can hold ``field``."""
    name = f"{path}.{field.name}" if path else field.name
    dt = field.type
    if pa.types.is_map(dt):
        raise SchemaError(f"field {name!r}: map types cannot be stored in file version 2.0; use 2.2")
    if BLOB_KEY in (field.metadata or {}) and not _is_nested(dt) and not pa.types.is_large_binary(dt):
        raise SchemaError(f"field {name!r}: a 2.0 blob field (lance-encoding:blob) must be large_binary, "
                          f"found {dt}")
    if pa.types.is_struct(dt) and is_packed_struct_2_0(field):
        _check_packable(name, dt)
        return
    if pa.types.is_fixed_size_binary(dt) and dt.byte_width == 0:
        raise UnsupportedError(f"field {name!r}: fixed_size_binary(0) cannot be stored in a 2.0 file")
    if pa.types.is_fixed_size_list(dt) and not is_primitive_2_0(dt.value_type):
        raise UnsupportedError(f"field {name!r}: a fixed_size_list of {dt.value_type} cannot be stored in a "
                               "2.0 file (only fixed-width items)")
    values = dt.value_type if pa.types.is_dictionary(dt) else None
    if values is not None and not (is_primitive_2_0(values) or is_variable_width(values)):
        raise UnsupportedError(f"field {name!r}: a dictionary of {dt.value_type} cannot be stored in a "
                               "2.0 file")
    if _is_list(dt):
        check_field_2_0(dt.value_field, name)
    elif pa.types.is_struct(dt):
        for k in range(dt.num_fields):
            check_field_2_0(dt.field(k), name)
    else:
        count_columns_2_0(field)  # raises UnsupportedError for types 2.0 has no encoding for


def _is_nested(dt: pa.DataType) -> bool:
    return pa.types.is_nested(dt) or pa.types.is_dictionary(dt)


def _check_packable(name: str, dt: pa.StructType) -> None:
    if dt.num_fields == 0:
        raise SchemaError(f"packed struct {name!r} has no children")
    for k in range(dt.num_fields):
        child = dt.field(k)
        if fixed_byte_width(child.type) in (None, 0) or pa.types.is_struct(child.type):
            raise SchemaError(f"packed struct {name!r}: child {child.name!r} of type {child.type} is not "
                              "whole-byte fixed width; file version 2.0 can only pack such children")


def check_array_2_0(field: pa.Field, array: pa.Array) -> None:
    """``check_field_2_0`` plus the data-dependent refusals: struct rows that are null and
    null values inside a packed struct."""
    check_field_2_0(field)
    _check_data(field, array, field.name)


def _check_data(field: pa.Field, arr: pa.Array, name: str) -> None:
    dt = field.type
    if pa.types.is_struct(dt):
        if arr.null_count:
            raise SchemaError(f"struct field {name!r} contains {arr.null_count} null value(s), but file "
                              "version 2.0 does not encode struct validity; use 2.1 or later")
        packed = is_packed_struct_2_0(field)
        for k in range(dt.num_fields):
            child = dt.field(k)
            values = arr.field(k)
            if packed:
                _check_packed_child(name, child, values)
            else:
                _check_data(child, values, f"{name}.{child.name}")
    elif _is_list(dt):
        offsets = arr.offsets
        base = offsets[0].as_py() if len(offsets) else 0
        end = offsets[-1].as_py() if len(offsets) else 0
        _check_data(dt.value_field, arr.values.slice(base, end - base), name)


def _check_packed_child(name: str, child: pa.Field, values: pa.Array) -> None:
    while True:
        if values.null_count:
            raise SchemaError(f"packed struct {name!r}: child {child.name!r} holds null values; file version "
                              "2.0 packs only non-null fixed-width values")
        if not pa.types.is_fixed_size_list(values.type):
            return
        values = fsl_items(values)
