"""Read several small data files of one schema as if they were one file.

On datasets of many small fragments the fixed cost of decoding a page (chunk metadata,
level and value decoders, array assembly) is paid per file and column, and dwarfs the work
on the few rows of each page. Here each leaf column's pages from all the files are decoded
in one vectorised pass (``miniblock.decode_pages_together``) and each field is assembled once.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from lance_spark_ops.encoding.layout.miniblock import can_decode_together, decode_pages_together
from lance_spark_ops.encoding.page import PageData
from lance_spark_ops.encoding.structural import build_array
from lance_spark_ops.file.columns import page_fetch
from lance_spark_ops.file.reader import LanceFileReader


def read_files_together(readers: Sequence[LanceFileReader], names: Sequence[str]) -> list[pa.Array] | None:
    """The top-level fields ``names`` over all rows of ``readers``, files in order; None when
    the files do not share one parsed schema (``file.metadata`` shares it among files of one
    schema) and a 2.1+ file version. Errors are the decoders' own, without the file named:
    callers that need the precise error read the files one by one."""
    first = readers[0]
    if first.version == "2.0" or any(r.version != first.version or r.schema is not first.schema
                                     for r in readers):
        return None
    out = []
    for name in names:
        i = first.schema.get_field_index(name)
        field = first.schema.field(i)
        start, count = first._ranges[i]  # noqa: SLF001 - same module family, one schema
        leaves = [_leaf_pages(readers, c) for c in range(start, start + count)]
        arr = build_array(field, leaves)
        out.append(arr if arr.type == field.type else arr.cast(field.type))
    return out


def _leaf_pages(readers: Sequence[LanceFileReader], column: int) -> list[PageData]:
    """Every page of one leaf column of all the files: one PageData per run of pages that
    decode together."""
    decoders, fetches = [], []
    for r in readers:
        r._page_starts_of(column)  # noqa: SLF001 - checks the pages hold the file's rows
        meta = r.metadata
        for p, page in enumerate(meta.column(column).pages):  # parsed once per file, cached
            if page.length == 0:
                continue
            decoders.append(r._page_decoder(column, p, cache=False))  # noqa: SLF001
            fetches.append(page_fetch(r._store, r._rel, page, meta.cached_ranges))  # noqa: SLF001
    out: list[PageData] = []
    i = 0
    while i < len(decoders):  # consecutive pages of one layout go together
        j = i + 1
        while j < len(decoders) and can_decode_together(decoders[i], decoders[j]):
            j += 1
        merged = decode_pages_together(decoders[i:j], fetches[i:j]) if j - i > 1 else None
        if merged is not None:
            out.append(merged)
        else:
            out.extend(d.decode(f, None) for d, f in zip(decoders[i:j], fetches[i:j], strict=True))
        i = j
    return out
