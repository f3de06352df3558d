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

Writing (Lance's ``ValueEncoder::chunk_fsl``): rows per chunk come from the Flat rule (see
``value.py``) applied to a row of ``sum(ceil(cum_i / 8))`` validity bytes plus the leaf
bytes (counted per 8 rows when a row is not a whole number of bytes), e.g. 512 rows for
``fixed_size_list<int32, 3>`` with item nulls (13 bytes a row), 4096 for 5 booleans. Each
chunk's validity bitmaps are re-cut to start on a byte; the leaf buffer is the leaf data
itself. The items are never compressed further.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import DataBlock, FixedSizeListBlock, FixedWidthBlock
from lance_spark_ops.encoding.compression._arrays import (
    as_u8,
    check_chunk_counts,
    check_range_counts,
    exclusive_cumsum,
    gather_bit_ranges,
    join_with_starts,
    pack_bit_ranges,
)
from lance_spark_ops.encoding.compression.contexts import CodecEncoders
from lance_spark_ops.encoding.compression.encoded import CodecLookup, CompressionParams, MiniBlockCompressed
from lance_spark_ops.encoding.compression.strategy import Codec
from lance_spark_ops.encoding.compression.value import chunk_log_values, concat_fixed_ranges, fixed_chunks
from lance_spark_ops.errors import CorruptFileError, InvalidInputError, UnsupportedError


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
    msg: pb.FixedSizeList, chunks: Sequence[Sequence[memoryview]], counts: np.ndarray,
    codecs: CodecLookup | None = None
) -> FixedSizeListBlock:
    layers, _ = _layers(msg)
    nvalid = sum(v for _, v in layers)
    counts = check_chunk_counts(chunks, counts, nvalid + 1, "fixed size list mini-block")
    if not len(chunks):
        empty = np.zeros((0, nvalid + 1), np.int64)
        return decode_fixed_size_list_miniblock_ranges(msg, np.zeros(0, np.uint8), empty, empty, counts)
    parts = [join_with_starts([c[j] for c in chunks]) for j in range(nvalid + 1)]
    # one joined array per buffer slot: decode each slot's ranges against its own array
    return _decode_ranges(msg, [p[0] for p in parts], np.stack([p[1] for p in parts], axis=1),
                          np.stack([p[2] for p in parts], axis=1), counts)


def decode_fixed_size_list_miniblock_ranges(
    msg: pb.FixedSizeList, data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, counts: np.ndarray,
    codecs: CodecLookup | None = None
) -> FixedSizeListBlock:
    """Mini-block chunks given as ``(k, buffers)`` byte ranges of ``data``."""
    layers, _ = _layers(msg)
    nvalid = sum(v for _, v in layers)
    counts = check_range_counts(starts, sizes, counts, nvalid + 1, "fixed size list mini-block")
    return _decode_ranges(msg, [data] * (nvalid + 1), starts, sizes, counts)


def _decode_ranges(
    msg: pb.FixedSizeList, datas: list[np.ndarray], starts: np.ndarray, sizes: np.ndarray, counts: np.ndarray
) -> FixedSizeListBlock:
    """Buffer slot j of chunk i is ``datas[j][starts[i, j]:+sizes[i, j]]``."""
    layers, bits = _layers(msg)
    nvalid = sum(v for _, v in layers)
    rows = int(counts.sum())
    validity: list[np.ndarray | None] = []
    cum, buf_no = 1, 0
    for dim, has_validity in layers:
        cum *= dim
        if has_validity:
            validity.append(
                gather_bit_ranges(
                    datas[buf_no], starts[:, buf_no], sizes[:, buf_no], counts * cum,
                    f"fixed size list validity (layer of {dim})",
                )
            )
            buf_no += 1
        else:
            validity.append(None)
    items = concat_fixed_ranges(
        datas[nvalid], starts[:, nvalid], sizes[:, nvalid], counts * cum, bits, "fixed size list items"
    )
    return _nest(layers, items, validity, rows)


def decode_fixed_size_list_block(
    msg: pb.FixedSizeList, buffer: memoryview, num_values: int, codecs: CodecLookup | None = None
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


def decode_fixed_size_list_per_value(
    msg: pb.FixedSizeList, block: DataBlock, codecs: CodecLookup | None = None
) -> FixedSizeListBlock:
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


# ---------------------------------------------------------------------------- encoders


def _chain(block: DataBlock) -> tuple[list[tuple[int, np.ndarray | None]], FixedWidthBlock, int]:
    """[(dimension, item validity)] outermost first, the leaf block and the row count."""
    if not isinstance(block, FixedSizeListBlock):
        raise InvalidInputError(
            f"fixed size list encoding needs a FixedSizeListBlock, got {type(block).__name__}"
        )
    rows = block.num_values
    layers: list[tuple[int, np.ndarray | None]] = []
    cur: DataBlock = block
    cum = 1
    while isinstance(cur, FixedSizeListBlock):
        if cur.dimension <= 0:
            raise InvalidInputError(f"fixed size list of dimension {cur.dimension}")
        cum *= cur.dimension
        valid = None if cur.item_validity is None else np.asarray(cur.item_validity, dtype=bool)
        if valid is not None and len(valid) < rows * cum:
            raise InvalidInputError(f"fixed size list validity has {len(valid)} bits for {rows * cum} items")
        layers.append((cur.dimension, valid))
        cur = cur.items
    if not isinstance(cur, FixedWidthBlock):
        raise UnsupportedError(f"fixed size list over {type(cur).__name__} items is not supported")
    if cur.num_values < rows * cum:
        raise InvalidInputError(f"fixed size list leaf has {cur.num_values} items for {rows} rows of {cum}")
    return layers, cur, rows


def fixed_size_list_encoding(layers: list[tuple[int, bool]], bits: int) -> pb.CompressiveEncoding:
    enc = pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=int(bits)))
    for dim, has_validity in reversed(layers):
        enc = pb.CompressiveEncoding(
            fixed_size_list=pb.FixedSizeList(items_per_value=int(dim), values=enc, has_validity=has_validity)
        )
    return enc


def _encoding_of(layers: list[tuple[int, np.ndarray | None]], bits: int) -> pb.CompressiveEncoding:
    return fixed_size_list_encoding([(d, v is not None) for d, v in layers], bits)


def encode_fixed_size_list_miniblock(
    block: DataBlock, params: CompressionParams | None = None,
    codec: Codec | None = None, codecs: CodecEncoders | None = None
) -> MiniBlockCompressed:
    """Chunks of whole rows: validity bitmaps then the leaf values (module doc)."""
    layers, leaf, rows = _chain(block)
    bits = leaf.bits_per_value
    cums = np.cumprod([d for d, _ in layers]).tolist()
    validity_bytes = sum((c + 7) // 8 for c, (_, v) in zip(cums, layers, strict=True) if v is not None)
    row_bits = bits * cums[-1]
    bytes_per_word, per_word = (row_bits // 8, 1) if row_bits % 8 == 0 else (row_bits, 8)
    log = chunk_log_values(validity_bytes * per_word + bytes_per_word, per_word)
    per = 1 << log
    leaf_bytes = (rows * row_bits + 7) // 8
    data = as_u8(leaf.data)[:leaf_bytes]
    sizes, logs = fixed_chunks(rows, log, per * row_bits // 8, leaf_bytes)
    chunk_rows = np.full(len(sizes), per, dtype=np.int64)
    if len(chunk_rows) and rows % per:
        chunk_rows[-1] = rows % per
    row_starts = exclusive_cumsum(chunk_rows)
    buffers: list[np.ndarray] = []
    columns: list[np.ndarray] = []
    for cum, (_, valid) in zip(cums, layers, strict=True):
        if valid is not None:
            packed, nbytes = pack_bit_ranges(valid, row_starts * cum, chunk_rows * cum)
            buffers.append(packed)
            columns.append(nbytes)
    buffers.append(data)
    columns.append(sizes)
    return MiniBlockCompressed(buffers, np.stack(columns, axis=1), logs, rows, _encoding_of(layers, bits))


def encode_fixed_size_list_block(
    block: DataBlock, params: CompressionParams | None = None,
    codec: Codec | None = None, codecs: CodecEncoders | None = None
) -> tuple[np.ndarray, pb.CompressiveEncoding]:
    """The items back to back (lists without item validity only)."""
    layers, leaf, rows = _chain(block)
    if any(v is not None for _, v in layers):
        raise UnsupportedError("fixed size list with item validity in a block context is not supported")
    cum = int(np.prod([d for d, _ in layers]))
    return as_u8(leaf.data)[: (rows * cum * leaf.bits_per_value + 7) // 8], _encoding_of(
        layers, leaf.bits_per_value
    )


def encode_fixed_size_list_per_value(
    block: DataBlock, params: CompressionParams | None = None,
    codec: Codec | None = None, codecs: CodecEncoders | None = None
) -> tuple[FixedWidthBlock, pb.CompressiveEncoding]:
    """One fixed-width value per row: its validity bytes per validity layer, then its items."""
    layers, leaf, rows = _chain(block)
    bits = leaf.bits_per_value
    cums = np.cumprod([d for d, _ in layers]).tolist()
    cum = cums[-1]
    enc = _encoding_of(layers, bits)
    if all(v is None for _, v in layers):
        return FixedWidthBlock(as_u8(leaf.data)[: (rows * cum * bits + 7) // 8], bits * cum, rows), enc
    if bits % 8:
        raise UnsupportedError(f"fixed size list per-value with validity over {bits}-bit items")
    parts = []
    for c, (_, valid) in zip(cums, layers, strict=True):
        if valid is not None:
            nb = (c + 7) // 8
            grid = np.zeros((rows, nb * 8), dtype=bool)
            grid[:, :c] = valid[: rows * c].reshape(rows, c)
            parts.append(np.packbits(grid, axis=1, bitorder="little"))
    parts.append(as_u8(leaf.data)[: rows * cum * bits // 8].reshape(rows, cum * bits // 8))
    table = np.hstack(parts)
    return FixedWidthBlock(table.reshape(-1), table.shape[1] * 8, rows), enc
