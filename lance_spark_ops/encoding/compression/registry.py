"""The one codec registry: each ``CompressiveEncoding`` oneof case -> the functions that decode
and encode it, one typed field per context (spec "Compression"; the contracts are in
``contexts.py``, Lance's one trait per context). Reader and writer both go through it.

Decode contexts (``msg`` is the case's message, e.g. ``enc.inline_bitpacking``; ``codecs``
is this registry, through which wrapping codecs - General, Fsst, PackedStruct,
VariablePackedStruct - decode their inner encoding, so no codec imports a dispatcher):

- ``miniblock(msg, chunks, counts, codecs)``: ``chunks[i]`` = chunk i's value buffers,
  ``counts[i]`` its values -> one block of all chunks' values (batched, so codecs
  vectorise over chunks);
- ``miniblock_ranges(msg, data, starts, sizes, counts, codecs)``: the same chunks as
  ``(k, buffers)`` byte ranges of one array (fast path; without it the registry cuts
  per-chunk views);
- ``block(msg, buffer, num_values, codecs)``: one buffer compressed whole (levels,
  dictionaries);
- ``blocks_ranges(msg, data, starts, sizes, counts, codecs)``: one such block per chunk, all in
  one vectorised call (fast path for mini-block levels; without it ``block`` runs per chunk);
- ``per_value(msg, block, codecs)``: undo transparent per-value compression of full-zip values.

Encode contexts, each returning its data and the encoding it wrote:
``encode_miniblock`` / ``encode_block`` / ``encode_per_value(block, params, codec, codecs)``
(``codec`` the strategy's node; ``compress_*`` below walk a ``Codec`` tree through them) and
``encode_blocks(values, counts, codec)`` (one block per chunk; mini-block levels).

A case or context without a function raises ``UnsupportedError`` naming the encoding (e.g.
``dictionary``, which Lance only writes as a layout-level dictionary).

``CODECS`` is the registry the library uses; ``PER_CHUNK_CODECS`` ignores the fast
``*_ranges`` paths (tests decode the same pages both ways).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

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
from lance_spark_ops.encoding.compression.contexts import (
    BlockDecoder,
    BlockEncoder,
    BlocksEncoder,
    BlocksRangesDecoder,
    MiniBlockDecoder,
    MiniBlockEncoder,
    MiniBlockRangesDecoder,
    PerValueDecoder,
    PerValueEncoder,
)
from lance_spark_ops.encoding.compression.encoded import CompressionParams, MiniBlockCompressed
from lance_spark_ops.encoding.compression.strategy import Codec
from lance_spark_ops.errors import CorruptFileError, UnsupportedError

Msg = TypeVar("Msg")
T = TypeVar("T")


@dataclass(frozen=True)
class CodecFns(Generic[Msg]):
    """What one ``CompressiveEncoding`` case implements, per context (None: not in that context)."""

    miniblock: MiniBlockDecoder[Msg] | None = None
    miniblock_ranges: MiniBlockRangesDecoder[Msg] | None = None
    block: BlockDecoder[Msg] | None = None
    blocks_ranges: BlocksRangesDecoder[Msg] | None = None
    per_value: PerValueDecoder[Msg] | None = None
    encode_miniblock: MiniBlockEncoder | None = None
    encode_block: BlockEncoder | None = None
    encode_per_value: PerValueEncoder | None = None
    encode_blocks: BlocksEncoder | None = None


# ---------------------------------------------------------------------------- the table

TABLE: Mapping[str, CodecFns[Any]] = {
    "flat": CodecFns(
        miniblock=value.decode_flat_miniblock,
        miniblock_ranges=value.decode_flat_miniblock_ranges,
        block=value.decode_flat_block,
        blocks_ranges=value.decode_flat_blocks_ranges,
        per_value=value.decode_flat_per_value,
        encode_miniblock=value.encode_flat_miniblock,
        encode_block=value.encode_flat_block,
        encode_per_value=value.encode_flat_per_value,
        encode_blocks=value.encode_flat_blocks,
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
        encode_blocks=bitpacking.encode_out_of_line_bitpacking_codec_blocks,
    ),
    "inline_bitpacking": CodecFns(
        miniblock=bitpacking.decode_inline_bitpacking_miniblock,
        miniblock_ranges=bitpacking.decode_inline_bitpacking_miniblock_ranges,
        block=bitpacking.decode_inline_bitpacking_block,
        blocks_ranges=bitpacking.decode_inline_bitpacking_blocks_ranges,
        encode_miniblock=bitpacking.encode_inline_bitpacking_miniblock,
        encode_block=bitpacking.encode_inline_bitpacking_block,
        encode_blocks=bitpacking.encode_inline_bitpacking_blocks,
    ),
    "fsst": CodecFns(
        miniblock=fsst.decode_fsst_miniblock,
        miniblock_ranges=fsst.decode_fsst_miniblock_ranges,
        block=fsst.decode_fsst_block,
        per_value=fsst.decode_fsst_per_value,
        encode_miniblock=fsst.encode_fsst_miniblock,
        encode_per_value=fsst.encode_fsst_per_value,
    ),
    "rle": CodecFns(
        miniblock=rle.decode_rle_miniblock,
        miniblock_ranges=rle.decode_rle_miniblock_ranges,
        block=rle.decode_rle_block,
        blocks_ranges=rle.decode_rle_blocks_ranges,
        encode_miniblock=rle.encode_rle_miniblock,
        encode_block=rle.encode_rle_block,
        encode_blocks=rle.encode_rle_blocks,
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
        encode_miniblock=general.encode_general_codec_miniblock,
        encode_block=general.encode_general_codec_block,
        encode_per_value=general.encode_general_codec_per_value,
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
    ),
    "variable_packed_struct": CodecFns(
        per_value=variable_packed_struct.decode_variable_packed_struct_per_value,
        encode_per_value=variable_packed_struct.encode_variable_packed_struct_codec_per_value,
    ),
    # "dictionary": no codec - Lance writes dictionaries as a mini-block layout field.
}


class CodecRegistry:
    """Looks codecs up in a table; ``use_ranges=False`` ignores the ``*_ranges`` fast paths.
    Implements ``CodecLookup`` (decode) and ``CodecEncoders`` (encode) for wrapping codecs."""

    def __init__(self, table: Mapping[str, CodecFns[Any]], use_ranges: bool = True) -> None:
        self.table = table
        self.use_ranges = use_ranges

    # -- lookup: one typed accessor per context
    def codec(self, kind: str) -> CodecFns[Any]:
        """The functions of case ``kind``; UnsupportedError naming it if the case has none."""
        fns = self.table.get(kind)
        if fns is None:
            raise UnsupportedError(f"compression {kind!r} is not supported")
        return fns

    def miniblock_decoder(self, kind: str) -> MiniBlockDecoder[Any]:
        return _need(self.codec(kind).miniblock, kind, "miniblock")

    def miniblock_ranges_decoder(self, kind: str) -> MiniBlockRangesDecoder[Any]:
        return _need(self.codec(kind).miniblock_ranges, kind, "miniblock_ranges")

    def block_decoder(self, kind: str) -> BlockDecoder[Any]:
        return _need(self.codec(kind).block, kind, "block")

    def blocks_ranges_decoder(self, kind: str) -> BlocksRangesDecoder[Any]:
        return _need(self.codec(kind).blocks_ranges, kind, "blocks_ranges")

    def per_value_decoder(self, kind: str) -> PerValueDecoder[Any]:
        return _need(self.codec(kind).per_value, kind, "per_value")

    def miniblock_encoder(self, kind: str) -> MiniBlockEncoder:
        return _need(self.codec(kind).encode_miniblock, kind, "encode_miniblock")

    def block_encoder(self, kind: str) -> BlockEncoder:
        return _need(self.codec(kind).encode_block, kind, "encode_block")

    def per_value_encoder(self, kind: str) -> PerValueEncoder:
        return _need(self.codec(kind).encode_per_value, kind, "encode_per_value")

    def blocks_encoder(self, kind: str) -> BlocksEncoder:
        return _need(self.codec(kind).encode_blocks, kind, "encode_blocks")

    # -- decoding
    def decompress_miniblock_chunks(
        self, enc: pb.CompressiveEncoding, chunks: Sequence[Sequence[memoryview]], counts: np.ndarray
    ) -> DataBlock:
        """Decode many mini-block chunks at once (value buffers only, rep/def excluded)."""
        kind, msg = _case(enc)
        return self.miniblock_decoder(kind)(msg, chunks, counts, self)

    def decode_miniblock_ranges(self, enc: pb.CompressiveEncoding, data: np.ndarray, starts: np.ndarray,
                                sizes: np.ndarray, counts: np.ndarray) -> DataBlock:
        """Mini-block chunks whose buffer j of chunk i is ``data[starts[i, j]:+sizes[i, j]]``."""
        kind, msg = _case(enc)
        fast = self.codec(kind).miniblock_ranges if self.use_ranges else None
        if fast is not None:
            return fast(msg, data, starts, sizes, counts, self)
        return self.decompress_miniblock_chunks(enc, ranges_to_chunks(data, starts, sizes), counts)

    def decompress_block(self, enc: pb.CompressiveEncoding, buffer: memoryview, num_values: int) -> DataBlock:
        """Decode one buffer compressed as a whole (levels, dictionary, nested parts)."""
        kind, msg = _case(enc)
        return self.block_decoder(kind)(msg, buffer, num_values, self)

    def decode_blocks_ranges(self, enc: pb.CompressiveEncoding, data: np.ndarray, starts: np.ndarray,
                             sizes: np.ndarray, counts: np.ndarray) -> list[DataBlock]:
        """One block per range ``data[starts[i]:+sizes[i]]`` of ``counts[i]`` values, as one
        block (fast path) or one per range."""
        kind, msg = _case(enc)
        fast = self.codec(kind).blocks_ranges if self.use_ranges else None
        if fast is not None:
            return [fast(msg, data, starts, sizes, counts, self)]
        bufs = [c[0] for c in ranges_to_chunks(data, starts[:, None], sizes[:, None])]
        return [self.decompress_block(enc, b, int(n)) for b, n in zip(bufs, counts, strict=True)]

    def decompress_per_value(self, enc: pb.CompressiveEncoding, block: DataBlock) -> DataBlock:
        """Undo transparent per-value compression of full-zip values."""
        kind, msg = _case(enc)
        return self.per_value_decoder(kind)(msg, block, self)

    # -- encoding: a strategy's ``Codec`` node through its case's encoder
    def compress_miniblock(self, codec: Codec, block: DataBlock,
                           params: CompressionParams) -> MiniBlockCompressed:
        """Mini-block compression of ``block`` by ``codec``."""
        return self.miniblock_encoder(codec.kind)(block, params, codec, self)

    def compress_block(self, codec: Codec, block: DataBlock,
                       params: CompressionParams) -> tuple[np.ndarray, pb.CompressiveEncoding]:
        """Whole-buffer compression of ``block`` by ``codec`` -> (bytes, encoding)."""
        return self.block_encoder(codec.kind)(block, params, codec, self)

    def compress_per_value(self, codec: Codec, block: DataBlock,
                           params: CompressionParams) -> tuple[DataBlock, pb.CompressiveEncoding]:
        """Transparent per-value compression of ``block`` (full-zip) -> (values, encoding)."""
        return self.per_value_encoder(codec.kind)(block, params, codec, self)

    def encode_blocks(self, codec: Codec, values: np.ndarray,
                      counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, pb.CompressiveEncoding]:
        """``counts[i]`` consecutive ``values`` per block, compressed by ``codec`` (levels)."""
        return self.blocks_encoder(codec.kind)(values, counts, codec)


# every context's accessor, for tests that walk the table
DECODE_CONTEXTS: tuple[Callable[[CodecRegistry, str], object], ...] = (
    CodecRegistry.miniblock_decoder, CodecRegistry.miniblock_ranges_decoder, CodecRegistry.block_decoder,
    CodecRegistry.blocks_ranges_decoder, CodecRegistry.per_value_decoder,
)
ENCODE_CONTEXTS: tuple[Callable[[CodecRegistry, str], object], ...] = (
    CodecRegistry.miniblock_encoder, CodecRegistry.block_encoder, CodecRegistry.per_value_encoder,
    CodecRegistry.blocks_encoder,
)


def _need(fn: T | None, kind: str, context: str) -> T:
    if fn is None:
        raise UnsupportedError(f"compression {kind!r} is not supported in a {context} context")
    return fn


def _case(enc: pb.CompressiveEncoding) -> tuple[str, Any]:
    """The set oneof case's name and message; CorruptFileError when none is set."""
    kind = enc.WhichOneof("compression")
    if kind is None:
        raise CorruptFileError("compressive encoding is empty (no compression set)")
    return kind, getattr(enc, kind)


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
