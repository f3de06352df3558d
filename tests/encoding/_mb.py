"""Test helpers for the mini-block layout: write with pylance, decode pages with our
MiniBlockDecoder, and turn PageData into plain Python / numpy for comparison (a tiny
reference rep/def interpreter, independent of ``encoding/repdef.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import DataBlock, FixedWidthBlock
from lance_spark_ops.encoding.compression.registry import CODECS, CodecRegistry
from lance_spark_ops.encoding.layout.miniblock import MiniBlockDecoder
from lance_spark_ops.encoding.page import PageData
from lance_spark_ops.file.columns import page_fetch, page_layout
from lance_spark_ops.file.inspect import describe_pages
from lance_spark_ops.file.metadata import load_metadata
from lance_spark_ops.io.storage import ObjectStore
from tests.conftest import pylance_read, pylance_write


def table_with_meta(arr: pa.Array, name: str = "x", **meta: str) -> pa.Table:
    md = {f"lance-encoding:{k.replace('_', '-')}": v for k, v in meta.items()}
    return pa.table([arr], schema=pa.schema([pa.field(name, arr.type, True, md or None)]))


@dataclass
class Page:
    column: int
    index: int
    num_rows: int
    layout: pb.PageLayout
    encodings: tuple[str, ...]
    decoder: MiniBlockDecoder | None
    fetch: object

    def decode(self, rows: np.ndarray | None = None) -> PageData:
        assert self.decoder is not None, f"page uses {self.layout.WhichOneof('layout')}"
        if rows is not None:
            self.decoder.load_search_cache(self.fetch)
        return self.decoder.decode(self.fetch, rows)


# The registry mini-block pages decode with; the ``codec_path`` fixture (conftest.py) swaps in
# the per-chunk registry so the same tests check the fast ``*_ranges`` paths against it.
CODECS_UNDER_TEST: CodecRegistry = CODECS


class Written:
    """A file written by pylance plus its pages and pylance's own read."""

    def __init__(self, path: str) -> None:
        self.path = path
        store, rel = ObjectStore.for_file(path)
        self.meta = load_metadata(store, rel)
        infos = {(i.column, i.page): i for i in describe_pages(self.meta)}
        self.pages: list[Page] = []
        for c in range(self.meta.num_columns):
            for p, pmeta in enumerate(self.meta.column(c).pages):
                layout = page_layout(pmeta, path, f"column {c} page {p}")
                dec = None
                if layout.WhichOneof("layout") == "mini_block_layout":
                    dec = MiniBlockDecoder(
                        layout.mini_block_layout,
                        int(pmeta.length),
                        list(pmeta.buffer_sizes),
                        self.meta.version,
                        CODECS_UNDER_TEST,
                    )
                self.pages.append(
                    Page(
                        c,
                        p,
                        int(pmeta.length),
                        layout,
                        infos[(c, p)].encodings,
                        dec,
                        page_fetch(store, rel, pmeta),
                    )
                )
        self.expected = pylance_read(path)

    def column_pages(self, column: int = 0) -> list[Page]:
        return [p for p in self.pages if p.column == column]

    def encodings(self, column: int = 0) -> set[str]:
        return {e for p in self.column_pages(column) for e in p.encodings}


def write(tmp_path: Path, table: pa.Table, version: str, name: str = "t") -> Written:
    return Written(pylance_write(tmp_path / f"{name}-{version}.lance", table, version))


def block_numpy(block: DataBlock, dtype: np.dtype | str) -> np.ndarray:
    """Values of a fixed-width block as numpy (bool for 1-bit blocks)."""
    assert isinstance(block, FixedWidthBlock), type(block)
    if block.bits_per_value == 1:
        return np.unpackbits(
            np.asarray(block.data, np.uint8), count=block.num_values, bitorder="little"
        ).astype(bool)
    dt = np.dtype(dtype)
    assert dt.itemsize * 8 == block.bits_per_value, (dt, block.bits_per_value)
    return np.asarray(block.data).view(np.uint8)[: block.num_values * dt.itemsize].view(dt)


def item_values(pd: PageData, dtype: np.dtype | str, dict_dtype: np.dtype | str | None = None) -> np.ndarray:
    """Values of the visible items, resolving a dictionary when present."""
    assert pd.values is not None
    if pd.dictionary is None:
        return block_numpy(pd.values, dtype)
    idx = block_numpy(pd.values, f"<u{pd.values.bits_per_value // 8}").astype(np.int64)
    return block_numpy(pd.dictionary, dict_dtype or dtype)[idx]


def nullable_column(pages: list[PageData], dtype: np.dtype | str) -> list:
    """Python values of a nullable primitive column (layers [NULLABLE_ITEM] or [ALL_VALID_ITEM])."""
    out: list = []
    for pd in pages:
        vals = item_values(pd, dtype)
        assert len(vals) == pd.num_rows  # null items keep a value slot
        valid = np.ones(pd.num_rows, bool) if pd.def_ is None else pd.def_ == 0
        out.extend(v if ok else None for v, ok in zip(vals.tolist(), valid.tolist(), strict=True))
    return out


def list_column(pd: PageData, dtype: np.dtype | str) -> list:
    """Rows of a list<primitive> page: layers [item layer, list layer]. Reference interpreter
    written from Lance's repdef.rs: item layer NULLABLE_ITEM uses def 1 for a null item; the
    list layer's null / empty levels follow (null first, then empty)."""
    layers = list(pd.layers)
    assert len(layers) == 2 and pd.rep is not None
    item_levels = 1 if layers[0] == pb.REPDEF_NULLABLE_ITEM else 0
    list_kind = layers[1]
    null_level = empty_level = -1
    if list_kind == pb.REPDEF_NULL_AND_EMPTY_LIST:
        null_level, empty_level = item_levels + 1, item_levels + 2
    elif list_kind == pb.REPDEF_NULLABLE_LIST:
        null_level = item_levels + 1
    elif list_kind == pb.REPDEF_EMPTYABLE_LIST:
        empty_level = item_levels + 1
    vals = item_values(pd, dtype).tolist()
    defs = np.zeros(len(pd.rep), np.int64) if pd.def_ is None else pd.def_.astype(np.int64)
    rows: list = []
    vi = 0
    for r, d in zip(pd.rep.tolist(), defs.tolist(), strict=True):
        if d == null_level:
            assert r == 1
            rows.append(None)
            continue
        if d == empty_level:
            assert r == 1
            rows.append([])
            continue
        if r == 1:
            rows.append([])
        rows[-1].append(vals[vi] if d == 0 else None)
        vi += 1
    assert vi == len(vals)
    assert len(rows) == pd.num_rows
    return rows
