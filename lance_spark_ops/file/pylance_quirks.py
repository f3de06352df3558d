"""Data files that follow the format but pylance 14 cannot read, found from their page layouts.

Our writer never writes them (``encoding.repdef``, ``file.writer``); pylance's own binary-copy
compaction does, and so did ours before 2026-12. ``validate`` reports them so a table's owner
learns before a pylance reader fails; a re-encoding rewrite of the fragment makes it readable.
"""

from __future__ import annotations

import pyarrow as pa

from lance_spark_ops.encoding.layers import struct_validity_conflict
from lance_spark_ops.encoding.leaves import is_single_leaf
from lance_spark_ops.file.columns import column_ranges, page_layout
from lance_spark_ops.file.metadata import FileMetadata

# the 2.1+ layouts whose pages carry rep/def ``layers``
LAYERED_LAYOUTS = ("mini_block_layout", "constant_layout", "full_zip_layout")


def page_layers(meta: FileMetadata, column: int) -> list[tuple[int, ...]]:
    """The rep/def layers of each page of one column (pages without layers left out)."""
    out = []
    for p, page in enumerate(meta.column(column).pages):
        layout = page_layout(page, meta.path, f"column {column} page {p}")
        which = layout.WhichOneof("layout")
        if which in LAYERED_LAYOUTS:
            out.append(tuple(getattr(layout, which).layers))
    return out


def struct_validity_mixes(meta: FileMetadata, schema: pa.Schema) -> list[tuple[int, str]]:
    """(column, top-level field) of each column whose pages mix an ALL_VALID and a NULLABLE
    struct over a list the way pylance 14 cannot read (``layers.struct_validity_conflict``).
    2.1+ files only: 2.0 and legacy files have no such pages."""
    if meta.version in ("0.1", "2.0"):
        return []
    out = []
    for field, (first, count) in zip(schema, column_ranges(schema, meta.version), strict=True):
        if is_single_leaf(field):  # no rep/def layers: nothing to mix
            continue
        out.extend((c, field.name) for c in range(first, first + count)
                   if struct_validity_conflict(page_layers(meta, c)))
    return out
