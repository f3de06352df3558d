"""Read several small data files of one schema as if they were one file.

On datasets of many small fragments the fixed cost of decoding a page (chunk metadata,
level and value decoders, array assembly) is paid per file and column, and dwarfs the work
on the few rows of each page. Here each leaf column's pages from all the files are decoded
in one vectorised pass (``miniblock.decode_whole_pages``) and each field is assembled once;
the pages of twin files (``FileMetadata.shares_layout_with``) are cut from their bytes at offsets
found once.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from lance_spark_ops.encoding.layout.miniblock import can_decode_together, decode_whole_pages
from lance_spark_ops.encoding.page import Fetch, PageData
from lance_spark_ops.encoding.structural import build_array
from lance_spark_ops.errors import CorruptFileError
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
    decoders: list = []
    sources: list = []  # per page: its buffers 0 and 1 (twins), or a Fetch
    joins: list[bool] = []  # per page: whether it decodes together with the next one
    for group in _twin_runs(readers):
        r = group[0]
        r._page_starts_of(column)  # noqa: SLF001 - checks the pages hold the file's rows (twins: all)
        meta = r.metadata
        pages = [(p, page) for p, page in enumerate(meta.column(column).pages)  # parsed once, shared
                 if page.length != 0]
        if not pages:
            continue
        decs = [r._page_decoder(column, p, cache=False) for p, _ in pages]  # noqa: SLF001
        if len(group) > 1 and _repeatable(decs, pages):
            # twins: the same pages at the same offsets in each file, decoded as one run
            spans = [(int(page.buffer_offsets[b]), int(page.buffer_sizes[b])) for _, page in pages
                     for b in (0, 1)]
            for twin in group:
                tail = twin.metadata._tail  # noqa: SLF001 - a twin is read whole
                for k, dec in enumerate(decs):
                    (o0, s0), (o1, s1) = spans[2 * k], spans[2 * k + 1]
                    decoders.append(dec)
                    sources.append((tail[o0:o0 + s0], tail[o1:o1 + s1]))
                    joins.append(True)
            joins[-1] = False
            continue
        for t in group:  # one file, or twins whose pages do not run together
            for (p, page), dec in zip(pages, decs, strict=True):
                decoders.append(dec if t is r else t._page_decoder(column, p, cache=False))  # noqa: SLF001
                sources.append(page_fetch(t._store, t._rel, page, t.metadata.cached_ranges))  # noqa: SLF001
                joins.append(False)
    for i in range(len(decoders) - 1):
        if not joins[i]:
            joins[i] = can_decode_together(decoders[i], decoders[i + 1])
    out: list[PageData] = []
    i = 0
    while i < len(decoders):  # consecutive pages of one layout go together
        j = i + 1
        while j < len(decoders) and joins[j - 1]:
            j += 1
        if j - i > 1:
            out.append(_decode_run(decoders[i:j], sources[i:j]))
        else:
            out.append(decoders[i].decode(_as_fetch(sources[i]), None))
        i = j
    return out


def _twin_runs(readers: Sequence[LanceFileReader]) -> list[list[LanceFileReader]]:
    """``readers`` cut into runs of consecutive twins (``FileMetadata.shares_layout_with``)."""
    runs: list[list[LanceFileReader]] = []
    for r in readers:
        if runs and r.metadata.shares_layout_with(runs[-1][0].metadata):
            runs[-1].append(r)
        else:
            runs.append([r])
    return runs


def _repeatable(decs: list, pages: list) -> bool:
    """Whether a file's pages, repeated file after file, form one run ``decode_whole_pages``
    takes: each page decodes together with the next, the last with the first, and has the
    two buffers it reads."""
    ring = [*decs, decs[0]]
    return (all(can_decode_together(a, b) for a, b in zip(ring[:-1], ring[1:], strict=True))
            and all(len(page.buffer_offsets) >= 2 and len(page.buffer_sizes) >= 2 for _, page in pages))


def _as_fetch(source: Fetch | tuple[memoryview, memoryview]) -> Fetch:
    if not isinstance(source, tuple):
        return source
    bufs = source

    def fetch(ranges: Sequence[tuple[int, int, int]]) -> list[memoryview]:
        out = []
        for buf, off, size in ranges:
            if buf not in (0, 1) or off < 0 or size < 0 or off + size > len(bufs[buf]):
                raise CorruptFileError(f"range {off}..{off + size} of page buffer {buf} is not held here")
            out.append(bufs[buf][off:off + size])
        return out

    return fetch


def _decode_run(decoders: list, sources: list) -> PageData:
    """A run of pages that decode together (each with the next, ``can_decode_together``) as
    one PageData; their buffers 0 and 1 at hand (twins) or fetched."""
    buffers = [s if isinstance(s, tuple)
               else tuple(s([(0, 0, d.buffer_sizes[0]), (1, 0, d.buffer_sizes[1])]))
               for d, s in zip(decoders, sources, strict=True)]
    return decode_whole_pages(decoders, buffers)[0]
