"""FixedSizeList: lists of ``items_per_value`` items over a Flat leaf (``FixedSizeList {
items_per_value, values: Flat | FixedSizeList, has_validity }``).

Nested FSLs form a chain of layers, outermost first; layer i has dimension d_i and
``cum_i = d_0 * ... * d_i`` items per row below it. Item nulls are *not* rep/def levels: a
layer with ``has_validity`` stores an LSB-first bitmap of its ``rows * cum_i`` items.
(Nulls of whole rows are def levels of the layout, and null rows still occupy their items.)

Mini-block: a chunk holds whole rows and has one buffer per layer with validity (outermost
first), each ``ceil(rows * cum_i / 8)`` bytes, then the leaf values
(``rows * cum_last`` values of the leaf's bits).

Per-value (full-zip): each row is zipped as ``[validity bytes of each validity layer,
ceil(cum_i / 8) each][leaf bytes of the row]``; ``bits_per_value`` of the row covers all of it.

Block context: only lists without validity (the items back to back).

Worked example (fixed_size_list<int32, 4> with item nulls, 256 rows per chunk): a chunk has
buffers of 128 bytes (1024 validity bits) and 4096 bytes (1024 int32).

pylance picks it for every fixed_size_list of fixed-width items: mini-block for narrow rows
(e.g. 4 x int32), full-zip for wide ones (e.g. 128 x float32 vectors).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import DataBlock, FixedSizeListBlock, FixedWidthBlock
from lance_spark_ops.encoding.compression._arrays import as_u8, check_chunk_counts, gather_bit_runs
from lance_spark_ops.encoding.compression.value import concat_fixed_chunks
from lance_spark_ops.errors import CorruptFileError, UnsupportedError


def _layers(msg: pb.FixedSizeList) -> tuple[list[tuple[int, bool]], int]:
    """[(dimension, has_validity)] outermost first, and the leaf's bits per value."""
    layers: list[tuple[int, bool]] = []
    cur = msg
    while True:
        dim = int(cur.items_per_value)
        if dim <= 0:
            raise CorruptFileError(f"fixed size list with {dim} items per value")
        layers.append((dim, bool(cur.has_validity)))
        kind = cur.values.WhichOneof("compression")
        if kind == "fixed_size_list":
            cur = cur.values.fixed_size_list
        elif kind == "flat":
            if cur.values.flat.HasField("data"):
                raise UnsupportedError("fixed size list over a compressed Flat is not supported")
            bits = int(cur.values.flat.bits_per_value)
            if bits <= 0:
                raise CorruptFileError(f"fixed size list leaf with {bits} bits per value")
            return layers, bits
        else:
            raise UnsupportedError(f"fixed size list over {kind!r} values is not supported")


def _nest(
    layers: list[tuple[int, bool]], items: DataBlock, validity: list[np.ndarray | None], rows: int
) -> FixedSizeListBlock:
    """Build the FixedSizeListBlock chain from the innermost layer outwards."""
    block: DataBlock = items
    cum = int(np.prod([d for d, _ in layers], dtype=np.int64))
    for (dim, _), valid in zip(reversed(layers), reversed(validity), strict=True):
        cum //= dim
        block = FixedSizeListBlock(block, dim, rows * cum, valid)
    assert isinstance(block, FixedSizeListBlock)
    return block


def decode_fixed_size_list_miniblock(
    msg: pb.FixedSizeList, chunks: Sequence[Sequence[memoryview]], counts: np.ndarray
) -> FixedSizeListBlock:
    layers, bits = _layers(msg)
    nvalid = sum(v for _, v in layers)
    counts = check_chunk_counts(chunks, counts, nvalid + 1, "fixed size list mini-block")
    rows = int(counts.sum())
    validity: list[np.ndarray | None] = []
    cum, buf_no = 1, 0
    for dim, has_validity in layers:
        cum *= dim
        if has_validity:
            validity.append(
                gather_bit_runs(
                    [c[buf_no] for c in chunks], counts * cum, f"fixed size list validity (layer of {dim})"
                )
            )
            buf_no += 1
        else:
            validity.append(None)
    items = concat_fixed_chunks([c[nvalid] for c in chunks], counts * cum, bits, "fixed size list items")
    return _nest(layers, items, validity, rows)


def decode_fixed_size_list_block(
    msg: pb.FixedSizeList, buffer: memoryview, num_values: int
) -> FixedSizeListBlock:
    layers, bits = _layers(msg)
    if any(v for _, v in layers):
        raise UnsupportedError("fixed size list with item validity in a block context is not supported")
    cum = int(np.prod([d for d, _ in layers], dtype=np.int64))
    need = (num_values * cum * bits + 7) // 8
    if len(buffer) < need:
        raise CorruptFileError(f"fixed size list block: {len(buffer)} bytes, {num_values} lists need {need}")
    items = FixedWidthBlock(as_u8(buffer)[:need], bits, num_values * cum)
    return _nest(layers, items, [None] * len(layers), num_values)


def decode_fixed_size_list_per_value(msg: pb.FixedSizeList, block: DataBlock) -> FixedSizeListBlock:
    layers, bits = _layers(msg)
    if not isinstance(block, FixedWidthBlock):
        raise CorruptFileError(f"fixed size list per-value decoding got a {type(block).__name__}")
    rows = block.num_values
    cum = int(np.prod([d for d, _ in layers], dtype=np.int64))
    if not any(v for _, v in layers):
        if block.bits_per_value != bits * cum:
            raise CorruptFileError(
                f"fixed size list per-value: {block.bits_per_value}-bit rows, "
                f"{cum} items of {bits} bits expected"
            )
        return _nest(layers, FixedWidthBlock(block.data, bits, rows * cum), [None] * len(layers), rows)
    if bits % 8:
        raise UnsupportedError(f"fixed size list per-value with validity over {bits}-bit items")
    vbytes, c = [], 1
    for dim, has_validity in layers:
        c *= dim
        vbytes.append((c + 7) // 8 if has_validity else 0)
    row_bytes = sum(vbytes) + bits // 8 * cum
    if block.bits_per_value != row_bytes * 8:
        raise CorruptFileError(
            f"fixed size list per-value: {block.bits_per_value}-bit rows, layout needs {row_bytes * 8}"
        )
    data = as_u8(block.data)
    if len(data) < rows * row_bytes:
        raise CorruptFileError(f"fixed size list per-value: {len(data)} bytes for {rows} rows of {row_bytes}")
    table = data[: rows * row_bytes].reshape(rows, row_bytes)
    validity: list[np.ndarray | None] = []
    col, c = 0, 1
    for (dim, has_validity), nb in zip(layers, vbytes, strict=True):
        c *= dim
        if has_validity:
            bits_2d = np.unpackbits(table[:, col : col + nb], axis=1, bitorder="little")[:, :c]
            validity.append(bits_2d.reshape(-1).view(bool))
            col += nb
        else:
            validity.append(None)
    items = FixedWidthBlock(np.ascontiguousarray(table[:, col:]).reshape(-1), bits, rows * cum)
    return _nest(layers, items, validity, rows)
