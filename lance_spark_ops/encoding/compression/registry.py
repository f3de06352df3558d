"""The one codec registry: each ``CompressiveEncoding`` oneof case -> the functions that decode
and encode it, per context (spec "Compression"). Reader and writer both go through it.

Decode contexts (``msg`` is the case's message, e.g. ``enc.inline_bitpacking``):

- ``miniblock(msg, chunks, counts)``: ``chunks[i]`` = chunk i's value buffers, ``counts[i]``
  its values -> one block of all chunks' values (batched, so codecs vectorise over chunks);
- ``miniblock_ranges(msg, data, starts, sizes, counts)``: the same chunks as ``(k, buffers)``
  byte ranges of one array (fast path; without it the registry cuts per-chunk views);
- ``block(msg, buffer, num_values)``: one buffer compressed whole (levels, dictionaries);
- ``blocks_ranges(msg, data, starts, sizes, counts)``: one such block per chunk, all in one
  vectorised call (fast path for mini-block levels; without it ``block`` runs per chunk);
- ``per_value(msg, block)``: undo transparent per-value compression of full-zip values.

Encode contexts: ``encode_miniblock(block, params)``, ``encode_block(block, params)``,
``encode_per_value(block, params)`` (``codecs.py`` walks a strategy's ``Codec`` tree through
them) and ``encode_blocks(values, counts, codec)`` (one block per chunk; mini-block levels).

Codecs wrapping another encoding (``nested``: General, Fsst, PackedStruct,
VariablePackedStruct) get the registry as their last argument and decode their inner
encoding through it, so no codec imports a dispatcher or a layout. A case or context
without a function raises ``UnsupportedError`` naming the encoding (e.g. ``dictionary``,
which Lance only writes as a layout-level dictionary).

``CODECS`` is the registry the library uses; ``PER_CHUNK_CODECS`` ignores the fast
``*_ranges`` paths (tests decode the same pages both ways).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import DataBlock
from lance_spark_ops.encoding.compression import (
    bitpacking,
    byte_stream_split,
    constant,
    fixed_size_list,
    fsst,
    general,
    packed_struct,
    rle,
    value,
    variable,
    variable_packed_struct,
)
from lance_spark_ops.encoding.compression._arrays import ranges_to_chunks
from lance_spark_ops.encoding.compression.strategy import Codec
from lance_spark_ops.errors import CorruptFileError, UnsupportedError

Fn = Callable[..., Any]
DECODE_CONTEXTS = ("miniblock", "miniblock_ranges", "block", "blocks_ranges", "per_value")
ENCODE_CONTEXTS = ("encode_miniblock", "encode_block", "encode_per_value", "encode_blocks")


@dataclass(frozen=True)
class CodecFns:
    """What one ``CompressiveEncoding`` case implements (None: not in that context)."""

    miniblock: Fn | None = None
    miniblock_ranges: Fn | None = None
    block: Fn | None = None
    blocks_ranges: Fn | None = None
    per_value: Fn | None = None
    encode_miniblock: Fn | None = None
    encode_block: Fn | None = None
    encode_per_value: Fn | None = None
    encode_blocks: Fn | None = None
    nested: bool = False  # decoders take the registry as their last argument


# ---------------------------------------------------------------------------- level blocks
# encode_blocks(values, counts, codec) -> (bytes of every block, bytes per block, encoding)


def _flat_blocks(values: np.ndarray, counts: np.ndarray, codec: Codec) -> tuple[np.ndarray, np.ndarray, Any]:
    data, sizes = value.encode_flat_blocks(values, counts)
    return data, sizes, value.flat_encoding(values.dtype.itemsize * 8)


def _inline_blocks(values: np.ndarray, counts: np.ndarray,
                   codec: Codec) -> tuple[np.ndarray, np.ndarray, Any]:
    data, sizes = bitpacking.encode_inline_bitpacking_blocks(values, counts)
    return data, sizes, bitpacking.inline_bitpacking_encoding(values.dtype.itemsize * 8)


def _out_of_line_blocks(values: np.ndarray, counts: np.ndarray,
                        codec: Codec) -> tuple[np.ndarray, np.ndarray, Any]:
    if codec.compressed_bits is None:
        raise UnsupportedError("out-of-line bitpacking codec without a packed width")
    width = int(codec.compressed_bits)
    data, sizes = bitpacking.encode_out_of_line_bitpacking_blocks(values, counts, width)
    return data, sizes, bitpacking.out_of_line_bitpacking_encoding(values.dtype.itemsize * 8, width)


def _rle_blocks(values: np.ndarray, counts: np.ndarray, codec: Codec) -> tuple[np.ndarray, np.ndarray, Any]:
    data, sizes = rle.encode_rle_blocks(values, counts)
    return data, sizes, rle.rle_encoding(values.dtype.itemsize * 8)


# ---------------------------------------------------------------------------- the table

TABLE: Mapping[str, CodecFns] = {
    "flat": CodecFns(
        miniblock=value.decode_flat_miniblock,
        miniblock_ranges=value.decode_flat_miniblock_ranges,
        block=value.decode_flat_block,
        blocks_ranges=value.decode_flat_blocks_ranges,
        per_value=value.decode_flat_per_value,
        encode_miniblock=value.encode_flat_miniblock,
        encode_block=value.encode_flat_block,
        encode_per_value=value.encode_flat_per_value,
        encode_blocks=_flat_blocks,
    ),
    "variable": CodecFns(
        miniblock=variable.decode_variable_miniblock,
        miniblock_ranges=variable.decode_variable_miniblock_ranges,
        block=variable.decode_variable_block,
        per_value=variable.decode_variable_per_value,
        encode_miniblock=variable.encode_variable_miniblock,
        encode_block=variable.encode_variable_block,
        encode_per_value=variable.encode_variable_per_value,
    ),
    "constant": CodecFns(
        miniblock=constant.decode_constant_miniblock,
        block=constant.decode_constant_block,
        per_value=constant.decode_constant_per_value,
    ),
    "out_of_line_bitpacking": CodecFns(
        miniblock=bitpacking.decode_out_of_line_bitpacking_miniblock,
        miniblock_ranges=bitpacking.decode_out_of_line_bitpacking_miniblock_ranges,
        block=bitpacking.decode_out_of_line_bitpacking_block,
        blocks_ranges=bitpacking.decode_out_of_line_bitpacking_blocks_ranges,
        encode_block=bitpacking.encode_out_of_line_bitpacking_block,
        encode_blocks=_out_of_line_blocks,
    ),
    "inline_bitpacking": CodecFns(
        miniblock=bitpacking.decode_inline_bitpacking_miniblock,
        miniblock_ranges=bitpacking.decode_inline_bitpacking_miniblock_ranges,
        block=bitpacking.decode_inline_bitpacking_block,
        blocks_ranges=bitpacking.decode_inline_bitpacking_blocks_ranges,
        encode_miniblock=bitpacking.encode_inline_bitpacking_miniblock,
        encode_block=bitpacking.encode_inline_bitpacking_block,
        encode_blocks=_inline_blocks,
    ),
    "fsst": CodecFns(
        miniblock=fsst.decode_fsst_miniblock,
        miniblock_ranges=fsst.decode_fsst_miniblock_ranges,
        block=fsst.decode_fsst_block,
        per_value=fsst.decode_fsst_per_value,
        encode_miniblock=fsst.encode_fsst_miniblock,
        encode_per_value=fsst.encode_fsst_per_value,
        nested=True,
    ),
    "rle": CodecFns(
        miniblock=rle.decode_rle_miniblock,
        miniblock_ranges=rle.decode_rle_miniblock_ranges,
        block=rle.decode_rle_block,
        blocks_ranges=rle.decode_rle_blocks_ranges,
        encode_miniblock=rle.encode_rle_miniblock,
        encode_block=rle.encode_rle_block,
        encode_blocks=_rle_blocks,
    ),
    "byte_stream_split": CodecFns(
        miniblock=byte_stream_split.decode_byte_stream_split_miniblock,
        miniblock_ranges=byte_stream_split.decode_byte_stream_split_miniblock_ranges,
        encode_miniblock=byte_stream_split.encode_byte_stream_split_miniblock,
    ),
    "general": CodecFns(
        miniblock=general.decode_general_miniblock,
        block=general.decode_general_block,
        per_value=general.decode_general_per_value,
        encode_miniblock=general.encode_general_miniblock,
        encode_block=general.encode_general_block,
        encode_per_value=general.encode_general_per_value,
        nested=True,
    ),
    "fixed_size_list": CodecFns(
        miniblock=fixed_size_list.decode_fixed_size_list_miniblock,
        miniblock_ranges=fixed_size_list.decode_fixed_size_list_miniblock_ranges,
        block=fixed_size_list.decode_fixed_size_list_block,
        per_value=fixed_size_list.decode_fixed_size_list_per_value,
        encode_miniblock=fixed_size_list.encode_fixed_size_list_miniblock,
        encode_block=fixed_size_list.encode_fixed_size_list_block,
        encode_per_value=fixed_size_list.encode_fixed_size_list_per_value,
    ),
    "packed_struct": CodecFns(
        miniblock=packed_struct.decode_packed_struct_miniblock,
        miniblock_ranges=packed_struct.decode_packed_struct_miniblock_ranges,
        block=packed_struct.decode_packed_struct_block,
        per_value=packed_struct.decode_packed_struct_per_value,
        encode_miniblock=packed_struct.encode_packed_struct_miniblock,
        encode_block=packed_struct.encode_packed_struct_block,
        nested=True,
    ),
    "variable_packed_struct": CodecFns(
        per_value=variable_packed_struct.decode_variable_packed_struct_per_value,
        encode_per_value=variable_packed_struct.encode_variable_packed_struct_per_value,
        nested=True,
    ),
    # "dictionary": no codec - Lance writes dictionaries as a mini-block layout field.
}


class CodecRegistry:
    """Looks codecs up in a table; ``use_ranges=False`` ignores the ``*_ranges`` fast paths."""

    def __init__(self, table: Mapping[str, CodecFns], use_ranges: bool = True) -> None:
        self.table = table
        self.use_ranges = use_ranges

    # -- lookup
    def lookup(self, kind: str, context: str) -> Fn:
        """The function of case ``kind`` for ``context``; UnsupportedError naming both if absent."""
        fns = self.table.get(kind)
        if fns is None:
            raise UnsupportedError(f"compression {kind!r} is not supported")
        fn = getattr(fns, context, None)
        if fn is None:
            raise UnsupportedError(f"compression {kind!r} is not supported in a {context} context")
        return fn

    def _has(self, kind: str, context: str) -> bool:
        fns = self.table.get(kind)
        return fns is not None and getattr(fns, context, None) is not None

    def _call(self, enc: pb.CompressiveEncoding, context: str, *args: Any) -> Any:
        kind = _kind(enc)
        fn = self.lookup(kind, context)
        if self.table[kind].nested:
            return fn(getattr(enc, kind), *args, self)
        return fn(getattr(enc, kind), *args)

    # -- decoding
    def decompress_miniblock_chunks(
        self, enc: pb.CompressiveEncoding, chunks: Sequence[Sequence[memoryview]], counts: np.ndarray
    ) -> DataBlock:
        """Decode many mini-block chunks at once (value buffers only, rep/def excluded)."""
        return self._call(enc, "miniblock", chunks, counts)

    def decode_miniblock_ranges(self, enc: pb.CompressiveEncoding, data: np.ndarray, starts: np.ndarray,
                                sizes: np.ndarray, counts: np.ndarray) -> DataBlock:
        """Mini-block chunks whose buffer j of chunk i is ``data[starts[i, j]:+sizes[i, j]]``."""
        if self.use_ranges and self._has(_kind(enc), "miniblock_ranges"):
            return self._call(enc, "miniblock_ranges", data, starts, sizes, counts)
        return self.decompress_miniblock_chunks(enc, ranges_to_chunks(data, starts, sizes), counts)

    def decompress_block(self, enc: pb.CompressiveEncoding, buffer: memoryview, num_values: int) -> DataBlock:
        """Decode one buffer compressed as a whole (levels, dictionary, nested parts)."""
        return self._call(enc, "block", buffer, num_values)

    def decode_blocks_ranges(self, enc: pb.CompressiveEncoding, data: np.ndarray, starts: np.ndarray,
                             sizes: np.ndarray, counts: np.ndarray) -> list[DataBlock]:
        """One block per range ``data[starts[i]:+sizes[i]]`` of ``counts[i]`` values, as one
        block (fast path) or one per range."""
        if self.use_ranges and self._has(_kind(enc), "blocks_ranges"):
            return [self._call(enc, "blocks_ranges", data, starts, sizes, counts)]
        bufs = [c[0] for c in ranges_to_chunks(data, starts[:, None], sizes[:, None])]
        return [self.decompress_block(enc, b, int(n)) for b, n in zip(bufs, counts, strict=True)]

    def decompress_per_value(self, enc: pb.CompressiveEncoding, block: DataBlock) -> DataBlock:
        """Undo transparent per-value compression of full-zip values."""
        return self._call(enc, "per_value", block)

    # -- encoding
    def encoder(self, kind: str, context: str) -> Fn:
        """``encode_<context>`` function of case ``kind`` (context: miniblock, block, per_value, blocks)."""
        return self.lookup(kind, f"encode_{context}")

    def encode_blocks(self, codec: Codec, values: np.ndarray,
                      counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, pb.CompressiveEncoding]:
        """``counts[i]`` consecutive ``values`` per block, compressed by ``codec`` (levels)."""
        return self.encoder(codec.kind, "blocks")(values, counts, codec)


def _kind(enc: pb.CompressiveEncoding) -> str:
    kind = enc.WhichOneof("compression")
    if kind is None:
        raise CorruptFileError("compressive encoding is empty (no compression set)")
    return kind


CODECS = CodecRegistry(TABLE)
PER_CHUNK_CODECS = CodecRegistry(TABLE, use_ranges=False)


def decompress_miniblock_chunks(enc: pb.CompressiveEncoding, chunks: Sequence[Sequence[memoryview]],
                                counts: np.ndarray) -> DataBlock:
    """``CODECS.decompress_miniblock_chunks``."""
    return CODECS.decompress_miniblock_chunks(enc, chunks, counts)


def decompress_block(enc: pb.CompressiveEncoding, buffer: memoryview, num_values: int) -> DataBlock:
    """``CODECS.decompress_block``."""
    return CODECS.decompress_block(enc, buffer, num_values)


def decompress_per_value(enc: pb.CompressiveEncoding, block: DataBlock) -> DataBlock:
    """``CODECS.decompress_per_value``."""
    return CODECS.decompress_per_value(enc, block)
