"""Lance file version 2.0 (legacy ``ArrayEncoding`` pages), fenced off from 2.1+: decoders
and the encoders the file writer uses.

API used by the file reader:

- ``count_columns_2_0(field)``: how many consecutive 2.0 columns a top-level field uses.
- ``ColumnPages(meta, fetch, file_buffers=None, index=None)``: one column's
  ``ColumnMetadata`` and ``fetch(ranges: list[(offset, size)]) -> list[memoryview]`` over
  absolute file ranges.
- ``decode_field_2_0(field, columns, rows=None)``: rows ``(start, stop)`` (default all) of the
  field as an Arrow array, reading only the pages that overlap them.

API used by the file writer (``encoder``):

- ``encode_field_2_0(field, array)``: one page of a top-level field as one ``EncodedPage``
  per 2.0 column; ``column_encodings_2_0(field)``: each column's ``ColumnEncoding``;
  ``is_struct_header_2_0`` / ``struct_header_encoding_2_0``: struct header pages, merged by
  the writer into one page per column; ``check_field_2_0`` / ``check_array_2_0``: refusals.

Modules (encoder and decoder of an encoding together): ``buffers`` (columns, pages, buffer
references, zstd/lz4 framing), ``physical`` (Flat, Nullable, FixedSizeList, FixedSizeBinary,
PackedStruct, Constant), ``binary`` (Binary, Dictionary), ``fields`` (column mapping, List,
SimpleStruct), ``blob``, ``encoder`` (field walk and refusals), ``arrays`` (Arrow helpers).
"""

from lance_spark_ops.encoding.v2_0.buffers import ColumnPages, Fetch
from lance_spark_ops.encoding.v2_0.fields import count_columns_2_0, decode_field_2_0, is_packed_struct_2_0

__all__ = ["ColumnPages", "Fetch", "count_columns_2_0", "decode_field_2_0", "is_packed_struct_2_0"]
