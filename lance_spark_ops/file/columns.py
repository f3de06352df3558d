"""Which file columns belong to which field, and how to fetch and decode one page.

File version 2.1+ ("structural" encodings) gives each leaf its own column: structs and
lists have no column of their own (their validity and offsets live in the leaves'
rep/def levels), a packed struct is one column. Version 2.0 is mapped by ``v2_0``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pyarrow as pa

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb21
from lance_spark_ops._pb import file2_pb2
from lance_spark_ops.cache import parsed_size, region
from lance_spark_ops.encoding.layout import PageDecoder, decoder_for
from lance_spark_ops.encoding.page import Fetch
from lance_spark_ops.encoding.structural import field_leaf_count, is_packed_struct
from lance_spark_ops.errors import CorruptFileError, UnsupportedError
from lance_spark_ops.file.container import unpack_any
from lance_spark_ops.file.schema import LanceField
from lance_spark_ops.io.storage import ObjectStore

__all__ = [
    "column_ranges",
    "data_file_field_ids",
    "field_leaf_count",
    "is_packed_struct",
    "make_page_decoder",
    "page_fetch",
    "page_layout",
]


def column_ranges(schema: pa.Schema, version: str) -> list[tuple[int, int]]:
    """(first column, column count) of each top-level field, in schema order."""
    if version == "2.0":
        from lance_spark_ops.encoding.v2_0 import count_columns_2_0

        counts = [count_columns_2_0(f) for f in schema]
    else:
        counts = [field_leaf_count(f) for f in schema]
    out, start = [], 0
    for c in counts:
        out.append((start, c))
        start += c
    return out


# Parsed page layouts by their encoding's bytes: the pages of many small files of one writer
# share a few layouts, parsed once each. Read-only.
_LAYOUTS = region("file.page_layouts", max_entries=1024, max_entry_bytes=parsed_size(1024))


def page_layout(page: file2_pb2.ColumnMetadata.Page, path: str, where: str) -> pb21.PageLayout:
    key = page.encoding.SerializeToString()
    hit = _LAYOUTS.get(key)
    if hit is not None:
        return hit
    layout = _parse_page_layout(page, path, where)
    _LAYOUTS.put(key, layout, parsed_size(len(key)))  # larger layouts (over 1 KiB) are not kept
    return layout


def _parse_page_layout(page: file2_pb2.ColumnMetadata.Page, path: str, where: str) -> pb21.PageLayout:
    type_name, payload = unpack_any(page.encoding, path, where)
    if type_name != "lance.encodings21.PageLayout":
        raise UnsupportedError(
            f"{where}: expected a 2.1+ PageLayout, found encoding {type_name!r}", path=path
        )
    layout = pb21.PageLayout()
    try:
        layout.ParseFromString(payload)
    except Exception as e:
        raise CorruptFileError(f"{where}: page layout does not parse ({e})", path=path) from e
    return layout


def make_page_decoder(layout: pb21.PageLayout, num_rows: int, sizes: list[int], version: str, path: str,
                      where: str) -> PageDecoder:
    try:
        return decoder_for(layout, num_rows, sizes, version)
    except UnsupportedError as e:
        raise UnsupportedError(f"{where}: {e}", path=path) from e


def page_fetch(store: ObjectStore, rel: str, page: file2_pb2.ColumnMetadata.Page,
               cached: Callable[[list[tuple[int, int]]], list[memoryview] | None] | None = None) -> Fetch:
    """A Fetch over one page's buffers (buffer_index -1: absolute file offsets); ``cached``
    serves absolute ranges from memory when it can (None: read them)."""
    offsets = list(page.buffer_offsets)
    sizes = list(page.buffer_sizes)

    def fetch(ranges: Sequence[tuple[int, int, int]]) -> list[memoryview]:
        absolute = []
        for buf, off, size in ranges:
            if buf == -1:
                absolute.append((off, size))
                continue
            if not 0 <= buf < len(offsets):
                raise CorruptFileError(f"page has {len(offsets)} buffers, buffer {buf} requested")
            if off < 0 or size < 0 or off + size > sizes[buf]:
                raise CorruptFileError(
                    f"range {off}..{off + size} outside page buffer {buf} of {sizes[buf]} bytes"
                )
            absolute.append((offsets[buf] + off, size))
        got = cached(absolute) if cached is not None else None
        return got if got is not None else store.read_ranges(rel, absolute)

    return fetch


def data_file_field_ids(fields: Sequence[LanceField], version: str) -> tuple[list[int], list[int]]:
    """(field ids, column indices) a dataset's ``DataFile`` records for a file holding
    ``fields`` (top-level, in file order), as pylance records them: version 2.0 lists every
    field of the tree (each has a column); 2.1+ lists only the fields that own a column
    (leaves, and packed structs / single-leaf nodes)."""
    ids: list[int] = []
    if version == "2.0":
        def visit_2_0(node: LanceField) -> None:
            ids.append(node.id)
            if not is_packed_struct(node.to_arrow()):  # a packed struct is one column
                for child in node.children:
                    visit_2_0(child)

        for f in fields:
            visit_2_0(f)
        return ids, list(range(len(ids)))

    def visit(node: LanceField) -> None:
        arrow_field = node.to_arrow()
        if field_leaf_count(arrow_field) == 1 and _owns_column(arrow_field):
            ids.append(node.id)
            return
        for child in node.children:
            visit(child)

    for f in fields:
        visit(f)
    return ids, list(range(len(ids)))


def _owns_column(field: pa.Field) -> bool:
    """A field whose own id labels its column: anything but a struct/list wrapper around it."""
    dt = field.type
    if is_packed_struct(field):
        return True
    if pa.types.is_struct(dt):
        return dt.num_fields == 0
    return not (pa.types.is_list(dt) or pa.types.is_large_list(dt) or pa.types.is_map(dt))
