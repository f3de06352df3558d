"""Test helpers for the mini-block *writer*: Arrow -> blocks (a small converter of its own,
independent of the pipeline), one mini-block page per column written through
``ContainerWriter`` into a real .lance file, and the raw page buffers of any file (ours or
pylance's) for byte-level comparison."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from lance_spark_ops._pb import file_pb2
from lance_spark_ops.encoding.blocks import DataBlock, FixedSizeListBlock, FixedWidthBlock, StructBlock
from lance_spark_ops.encoding.compression.encoded import MiniBlockCompressed
from lance_spark_ops.encoding.compression.strategy import level_codec
from lance_spark_ops.encoding.layout.miniblock_encode import encode_miniblock_page
from lance_spark_ops.encoding.page import EncodedPage
from lance_spark_ops.encoding.repdef import levels_from_arrow
from lance_spark_ops.file.columns import page_layout
from lance_spark_ops.file.container_writer import ContainerWriter
from lance_spark_ops.file.metadata import load_metadata
from lance_spark_ops.file.schema import schema_from_arrow, schema_to_pb
from lance_spark_ops.io.storage import ObjectStore

Encoder = Callable[[DataBlock], MiniBlockCompressed]


def _u8(buf: pa.Buffer | None) -> np.ndarray:
    return np.zeros(0, np.uint8) if buf is None else np.frombuffer(buf, dtype=np.uint8)


def to_block(arr: pa.Array) -> DataBlock:
    """Values of a leaf array as a block, bytes under nulls kept (as Lance does)."""
    t = arr.type
    if pa.types.is_boolean(t):
        bits = np.unpackbits(_u8(arr.buffers()[1]), bitorder="little")[arr.offset : arr.offset + len(arr)]
        return FixedWidthBlock(np.packbits(bits, bitorder="little"), 1, len(arr))
    if pa.types.is_fixed_size_list(t):
        dim = t.list_size
        items = arr.values.slice(arr.offset * dim, len(arr) * dim)
        validity = None
        if items.null_count:
            validity = np.asarray(items.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        return FixedSizeListBlock(to_block(items), dim, len(arr), validity)
    if pa.types.is_struct(t):
        return StructBlock([to_block(arr.field(i)) for i in range(t.num_fields)], len(arr))
    width = t.bit_width // 8
    data = _u8(arr.buffers()[1])[arr.offset * width : (arr.offset + len(arr)) * width]
    return FixedWidthBlock(data, t.bit_width, len(arr))


def encode_column(arr: pa.Array, field: pa.Field, version: str, encoder: Encoder) -> EncodedPage:
    """One mini-block page holding the whole (single-leaf) column."""
    (leaf,) = levels_from_arrow(arr, field)
    values = encoder(to_block(leaf.values))
    return encode_miniblock_page(leaf.num_rows, values, leaf.rep, leaf.def_, leaf.layers, version,
                                 **level_codecs(leaf.rep, leaf.def_, version))


def level_codecs(rep: np.ndarray | None, def_: np.ndarray | None, version: str) -> dict:
    """The page plan's level codecs (``strategy.level_codec``) as ``encode_*_page`` keywords."""
    return {"rep_codec": None if rep is None else level_codec(rep, version),
            "def_codec": None if def_ is None else level_codec(def_, version)}


def write_file(path: Path | str, table: pa.Table, version: str, encoder: Encoder | list[Encoder]) -> str:
    """Write ``table`` (one page per column, single-leaf columns) with our encoders."""
    encoders = encoder if isinstance(encoder, list) else [encoder] * table.num_columns
    with open(path, "wb") as out:
        writer = ContainerWriter(out, table.num_columns, version)
        for c, (f, enc) in enumerate(zip(table.schema, encoders, strict=True)):
            page = encode_column(table.column(c).combine_chunks(), f, version, enc)
            writer.write_encoded_page(c, page, 0)
        descriptor = file_pb2.FileDescriptor(length=table.num_rows)
        descriptor.schema.fields.extend(schema_to_pb(schema_from_arrow(table.schema)))
        writer.finish([descriptor.SerializeToString()])
    return str(path)


@dataclass
class RawPage:
    layout: object
    buffers: list[bytes]


def raw_pages(path: str, column: int = 0) -> list[RawPage]:
    """Every page of a column: its layout message and its buffers' bytes."""
    store, rel = ObjectStore.for_file(path)
    meta = load_metadata(store, rel)
    raw = Path(path).read_bytes()
    out = []
    for p, page in enumerate(meta.column(column).pages):
        bufs = [raw[o : o + s] for o, s in zip(page.buffer_offsets, page.buffer_sizes, strict=True)]
        out.append(RawPage(page_layout(page, path, f"column {column} page {p}"), bufs))
    return out


def page_bytes(page: EncodedPage) -> list[bytes]:
    return [bytes(np.asarray(b).view(np.uint8)) if not isinstance(b, bytes) else b for b in page.buffers]
