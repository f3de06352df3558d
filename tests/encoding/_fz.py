"""Test helpers for the full-zip / constant / blob layouts: write a file with pylance, decode
its pages with our page decoders (through a logging, bounds-checking Fetch over the file's
bytes), assemble Arrow with ``structural.build_array`` and compare with pylance's read."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
from google.protobuf.message import Message

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.layout import PageDecoder
from lance_spark_ops.encoding.page import PageData
from lance_spark_ops.encoding.structural import build_array, leaf_fields
from lance_spark_ops.errors import CorruptFileError
from lance_spark_ops.file.columns import make_page_decoder, page_layout
from lance_spark_ops.file.container import parse_column_metadata, parse_footer, parse_offset_table
from tests.conftest import pylance_read, pylance_write


def meta_table(arr: pa.Array, name: str = "a", **meta: str) -> pa.Table:
    md = {f"lance-encoding:{k.replace('_', '-')}": v for k, v in meta.items()}
    return pa.table([arr], schema=pa.schema([pa.field(name, arr.type, True, md or None)]))


def oneofs(msg: Message) -> list[str]:
    """Every set oneof member in an encoding tree (depth first)."""
    out: list[str] = []
    for fd, value in msg.ListFields():
        if fd.containing_oneof is not None:
            out.append(fd.name)
        if fd.message_type is not None:
            for v in value if fd.is_repeated else [value]:
                if isinstance(v, Message):
                    out.extend(oneofs(v))
    return out


@dataclass
class FetchLog:
    calls: list[list[tuple[int, int, int]]] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(s for call in self.calls for _, _, s in call)


@dataclass
class Page:
    column: int
    index: int
    first_row: int
    num_rows: int
    layout: pb.PageLayout
    offsets: list[int]
    sizes: list[int]
    data: bytes

    def fetch(self, log: FetchLog | None = None, data: bytes | None = None):
        data = self.data if data is None else data

        def fetch(ranges):
            ranges = list(ranges)
            if log is not None:
                log.calls.append(ranges)
            out = []
            for b, off, size in ranges:
                assert size >= 0 and off >= 0, (b, off, size)
                if b == -1:  # like the object store: an absolute range outside the file is an error
                    if off + size > len(data):
                        raise CorruptFileError(f"bytes {off}..{off + size} outside the file")
                    out.append(memoryview(data)[off : off + size])
                else:
                    assert 0 <= b < len(self.sizes) and off + size <= self.sizes[b], (
                        b,
                        off,
                        size,
                        self.sizes,
                    )
                    start = self.offsets[b] + off
                    out.append(memoryview(data)[start : start + size])
            return out

        return fetch

    def decoder(self, version: str) -> PageDecoder:
        return make_page_decoder(self.layout, self.num_rows, list(self.sizes), version, "test", "page")

    @property
    def encodings(self) -> list[str]:
        return oneofs(self.layout)


class Written:
    """A file written by pylance, its pages and pylance's own read."""

    def __init__(self, path: str, version: str, expected: pa.Table | None = None) -> None:
        self.path = path
        self.version = version
        self.data = Path(path).read_bytes()
        size = len(self.data)
        foot = parse_footer(self.data[-40:], size, path)
        cmo = parse_offset_table(self.data[foot.cmo_table_pos :], foot.num_columns, size, "column", path)
        self.expected = pylance_read(path) if expected is None else expected
        self.columns: list[list[Page]] = []
        for c, (pos, sz) in enumerate(cmo):
            meta = parse_column_metadata(self.data[pos : pos + sz], c, size, path)
            pages, first = [], 0
            for p, pm in enumerate(meta.pages):
                layout = page_layout(pm, path, f"column {c} page {p}")
                pages.append(
                    Page(
                        c,
                        p,
                        first,
                        int(pm.length),
                        layout,
                        list(pm.buffer_offsets),
                        list(pm.buffer_sizes),
                        self.data,
                    )
                )
                first += int(pm.length)
            self.columns.append(pages)

    @classmethod
    def of(cls, tmp: Path, table: pa.Table, version: str, name: str = "t") -> Written:
        return cls(pylance_write(tmp / f"{name}_{version}.lance", table, version), version)

    def encodings(self, column: int = 0) -> set[str]:
        return {e for p in self.columns[column] for e in p.encodings}

    def layouts(self, column: int = 0) -> list[pb.PageLayout]:
        return [p.layout for p in self.columns[column]]

    def decode(
        self,
        column: int = 0,
        rows: np.ndarray | None = None,
        cache: bool = False,
        log: FetchLog | None = None,
    ) -> list[PageData]:
        out = []
        for page in self.columns[column]:
            dec = page.decoder(self.version)
            if cache:
                dec.load_search_cache(page.fetch())
            if rows is None:
                out.append(dec.decode(page.fetch(log), None))
                continue
            sel = rows[(rows >= page.first_row) & (rows < page.first_row + page.num_rows)] - page.first_row
            if sel.size:
                out.append(dec.decode(page.fetch(log), sel))
        return out

    def read(
        self,
        field_index: int = 0,
        rows: np.ndarray | None = None,
        cache: bool = False,
        log: FetchLog | None = None,
    ) -> pa.Array:
        """Our read of one top-level field (its columns in leaf order)."""
        fld = self.expected.schema.field(field_index)
        first = sum(len(leaf_fields(self.expected.schema.field(i))) for i in range(field_index))
        n = len(leaf_fields(fld))
        leaves = [self.decode(first + k, rows, cache, log) for k in range(n)]
        return build_array(fld, leaves)

    def check(self, rows_list: list[np.ndarray] | None = None) -> None:
        """Full read, and takes with and without the search cache, equal pylance's."""
        for i in range(self.expected.num_columns):
            want = self.expected.column(i).combine_chunks()
            got = self.read(i)
            assert got.equals(want), f"field {i}: full read differs"
            for rows in rows_list or default_rows(self.expected.num_rows):
                for cache in (False, True):
                    got = self.read(i, rows, cache)
                    assert got.equals(want.take(pa.array(rows))), f"field {i}: take {rows[:10]} cache={cache}"


def default_rows(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(n)
    picks = [
        np.array([0]),
        np.array([n - 1]),
        np.arange(min(n, 5)),
        np.unique(rng.integers(0, n, min(n, 17))),
    ]
    if n > 10:
        picks.append(np.array([1, 2, 3, n // 2, n // 2 + 1, n - 2]))
    return picks
