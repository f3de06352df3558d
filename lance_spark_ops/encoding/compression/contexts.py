"""One typed contract per codec context (Lance: one trait per context), the shape every
function in the codec registry (``registry.py``) has for its context.

Every decoder takes the case's message and, last, the registry (``CodecLookup``): codecs
wrapping another encoding (General, Fsst, PackedStruct, VariablePackedStruct) decode their
inner encoding through it, the others ignore it - the same call for every case, as Lance
hands its ``DecompressionStrategy`` to every decompressor it creates.

Every encoder takes the strategy's ``Codec`` node (General's scheme and inner codec,
out-of-line bitpacking's width, VariablePackedStruct's fields) and, for the miniblock /
block / per-value contexts, the registry's encode half (``CodecEncoders``) through which a
wrapping codec compresses its inner values. Like Lance's compressors, every encoder returns
its data *and* the ``CompressiveEncoding`` it wrote.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

import numpy as np

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import DataBlock
from lance_spark_ops.encoding.compression.encoded import CodecLookup, CompressionParams, MiniBlockCompressed
from lance_spark_ops.encoding.compression.strategy import Codec

M = TypeVar("M", contravariant=True)  # the oneof case's message (pb.Flat, pb.Rle, ...)

# ------------------------------------------------------------------------------ decoding


class MiniBlockDecoder(Protocol[M]):
    """``chunks[i]`` = chunk i's value buffers, ``counts[i]`` its values -> one block of all of
    them (batched so that codecs vectorise over chunks)."""

    def __call__(self, msg: M, chunks: Sequence[Sequence[memoryview]], counts: np.ndarray,
                 codecs: CodecLookup, /) -> DataBlock: ...


class MiniBlockRangesDecoder(Protocol[M]):
    """The same chunks as byte ranges of one array: buffer j of chunk i is
    ``data[starts[i, j]:+sizes[i, j]]`` (fast path)."""

    def __call__(self, msg: M, data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, counts: np.ndarray,
                 codecs: CodecLookup, /) -> DataBlock: ...


class BlockDecoder(Protocol[M]):
    """One buffer compressed whole (levels, dictionaries, nested parts)."""

    def __call__(self, msg: M, buffer: memoryview, num_values: int, codecs: CodecLookup, /) -> DataBlock: ...


class BlocksRangesDecoder(Protocol[M]):
    """One block per range ``data[starts[i]:+sizes[i]]`` of ``counts[i]`` values, decoded in one
    vectorised call into one block (fast path for mini-block levels)."""

    def __call__(self, msg: M, data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, counts: np.ndarray,
                 codecs: CodecLookup, /) -> DataBlock: ...


class PerValueDecoder(Protocol[M]):
    """Undo transparent per-value compression of full-zip values."""

    def __call__(self, msg: M, block: DataBlock, codecs: CodecLookup, /) -> DataBlock: ...


# ------------------------------------------------------------------------------ encoding


class CodecEncoders(Protocol):
    """The encode half of ``registry.CodecRegistry``: a ``Codec`` tree node's compression in
    each context, as wrapping encoders receive it for their inner codec."""

    def compress_miniblock(self, codec: Codec, block: DataBlock,
                           params: CompressionParams) -> MiniBlockCompressed: ...

    def compress_block(self, codec: Codec, block: DataBlock,
                       params: CompressionParams) -> tuple[np.ndarray, pb.CompressiveEncoding]: ...

    def compress_per_value(self, codec: Codec, block: DataBlock,
                           params: CompressionParams) -> tuple[DataBlock, pb.CompressiveEncoding]: ...


class MiniBlockEncoder(Protocol):
    """Mini-block compression of ``block`` -> its chunks' buffers and the encoding."""

    def __call__(self, block: DataBlock, params: CompressionParams, codec: Codec,
                 codecs: CodecEncoders, /) -> MiniBlockCompressed: ...


class BlockEncoder(Protocol):
    """Whole-buffer compression of ``block`` -> (bytes, encoding)."""

    def __call__(self, block: DataBlock, params: CompressionParams, codec: Codec,
                 codecs: CodecEncoders, /) -> tuple[np.ndarray, pb.CompressiveEncoding]: ...


class PerValueEncoder(Protocol):
    """Transparent per-value compression of full-zip values -> (values, encoding)."""

    def __call__(self, block: DataBlock, params: CompressionParams, codec: Codec,
                 codecs: CodecEncoders, /) -> tuple[DataBlock, pb.CompressiveEncoding]: ...


class BlocksEncoder(Protocol):
    """``counts[i]`` consecutive ``values`` per block, each block compressed on its own
    (mini-block levels) -> (bytes of every block, bytes per block, encoding)."""

    def __call__(self, values: np.ndarray, counts: np.ndarray,
                 codec: Codec, /) -> tuple[np.ndarray, np.ndarray, pb.CompressiveEncoding]: ...
