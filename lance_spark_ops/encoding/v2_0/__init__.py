"""Decoders for Lance file version 2.0 (legacy ``ArrayEncoding`` pages), fenced off from 2.1+.

API used by the file reader:

- ``count_columns_2_0(field)``: how many consecutive 2.0 columns a top-level field uses.
- ``ColumnPages(meta, fetch, file_buffers=None, index=None)``: one column's
  ``ColumnMetadata`` and ``fetch(ranges: list[(offset, size)]) -> list[memoryview]`` over
  absolute file ranges.
- ``decode_field_2_0(field, columns, rows=None)``: rows ``(start, stop)`` (default all) of the
  field as an Arrow array, reading only the pages that overlap them.

Modules: ``buffers`` (columns, pages, buffer references, zstd/lz4 framing), ``physical``
(Flat, Nullable, FixedSizeList, FixedSizeBinary, PackedStruct, Constant), ``binary``
(Binary, Dictionary), ``fields`` (column mapping, List, SimpleStruct), ``blob``.
"""

from lance_spark_ops.encoding.v2_0.buffers import ColumnPages, Fetch
from lance_spark_ops.encoding.v2_0.fields import count_columns_2_0, decode_field_2_0, is_packed_struct_2_0

__all__ = ["ColumnPages", "Fetch", "count_columns_2_0", "decode_field_2_0", "is_packed_struct_2_0"]
