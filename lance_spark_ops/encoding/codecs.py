"""Run a strategy's ``Codec`` tree through the encoders of the codec registry
(``compression/registry.py``, the same table the reader decodes with).

For each tree node it takes the node's encoder for the context (mini-block, block,
per-value), hands General its inner codec's encoder as a callable (mini-block, block) -
per-value General compresses the raw values itself -, passes General's scheme / level in
the params, out-of-line bitpacking its page-wide width and VariablePackedStruct its
fields' per-value results. A codec that is not implemented raises ``UnsupportedError``
naming the encoding and the context.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import DataBlock, StructBlock
from lance_spark_ops.encoding.compression.encoded import CompressionParams, MiniBlockCompressed
from lance_spark_ops.encoding.compression.registry import CODECS
from lance_spark_ops.encoding.compression.strategy import Codec
from lance_spark_ops.errors import UnsupportedError


def encoder(kind: str, context: str) -> Callable[..., Any]:
    """The registry's encoder of compression ``kind`` for ``context`` (miniblock, block, per_value)."""
    return CODECS.encoder(kind, context)


def missing_encoders(codec: Codec, context: str) -> list[str]:
    """Names of the encoder functions ``codec`` needs that do not exist (for tests)."""
    out = []
    node: Codec | None = codec
    while node is not None:
        try:
            encoder(node.kind, context)
        except UnsupportedError as e:
            out.append(str(e))
        if node.kind != "general":
            break
        node = node.inner
    return out


def node_params(codec: Codec, params: CompressionParams) -> CompressionParams:
    """``params`` as the codec node sees them (General's scheme and level)."""
    if codec.kind != "general":
        return params
    return dataclasses.replace(params, compression=codec.scheme, compression_level=codec.level)


def _inner(codec: Codec) -> Codec:
    if codec.inner is None:
        raise UnsupportedError(f"{codec.kind} codec without an inner codec")
    return codec.inner


def compress_miniblock(codec: Codec, block: DataBlock, params: CompressionParams) -> MiniBlockCompressed:
    """Mini-block compression of ``block`` by ``codec``."""
    fn = encoder(codec.kind, "miniblock")
    if codec.kind == "general":
        inner = _inner(codec)
        return fn(block, node_params(codec, params), lambda b: compress_miniblock(inner, b, params))
    return fn(block, params)


def compress_block(codec: Codec, block: DataBlock,
                   params: CompressionParams) -> tuple[np.ndarray, pb.CompressiveEncoding]:
    """Whole-buffer compression of ``block`` by ``codec`` -> (bytes, encoding)."""
    fn = encoder(codec.kind, "block")
    if codec.kind == "general":
        inner = _inner(codec)
        return fn(block, node_params(codec, params), lambda b: compress_block(inner, b, params))
    if codec.kind == "out_of_line_bitpacking" and codec.compressed_bits is not None:
        return fn(block, params, width=codec.compressed_bits)
    return fn(block, params)


def compress_per_value(codec: Codec, block: DataBlock,
                       params: CompressionParams) -> tuple[DataBlock, pb.CompressiveEncoding]:
    """Transparent per-value compression of ``block`` (full-zip) -> (values, encoding)."""
    fn = encoder(codec.kind, "per_value")
    if codec.kind == "general":
        return fn(block, node_params(codec, params))
    if codec.kind == "variable_packed_struct":
        if not isinstance(block, StructBlock) or len(block.children) != len(codec.children):
            raise UnsupportedError("variable packed struct codec needs a struct block matching its fields")
        kids = [compress_per_value(c, b, p)
                for c, b, p in zip(codec.children, block.children, codec.child_params, strict=True)]
        return fn(block, params, children=kids)
    return fn(block, params)
