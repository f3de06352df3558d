"""Run a strategy's ``Codec`` tree through the codec modules' encoders.

Each codec module (``compression/<module>.py``, module per oneof as in
``decompress.CODEC_MODULES``) exposes ``encode_<kind>_miniblock(block, params)``,
``encode_<kind>_block(block, params)`` and ``encode_<kind>_per_value(block, params)``.
This module only dispatches: it picks the function for a tree node, hands General its
inner codec's encoder as a callable (mini-block, block) - per-value General compresses
the raw values itself -, passes General's scheme / level in the params and out-of-line
bitpacking its page-wide width. A codec that is not implemented raises
``UnsupportedError`` naming the missing function.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import DataBlock, StructBlock
from lance_spark_ops.encoding.compression.decompress import CODEC_MODULES
from lance_spark_ops.encoding.compression.encoded import CompressionParams, MiniBlockCompressed
from lance_spark_ops.encoding.compression.strategy import Codec
from lance_spark_ops.errors import UnsupportedError

_PACKAGE = "lance_spark_ops.encoding.compression"


def encoder(kind: str, context: str) -> Callable[..., Any]:
    """``encode_<kind>_<context>`` of the codec module implementing ``kind``."""
    module_name = CODEC_MODULES.get(kind)
    if module_name is None:
        raise UnsupportedError(f"no codec module implements compression {kind!r}")
    name = f"encode_{kind}_{context}"
    try:
        module = importlib.import_module(f"{_PACKAGE}.{module_name}")
    except ImportError as e:  # pragma: no cover - module missing entirely
        raise UnsupportedError(f"codec module {_PACKAGE}.{module_name} cannot be imported: {e}") from e
    fn = getattr(module, name, None)
    if fn is None:
        raise UnsupportedError(
            f"compression {kind!r} has no {context} encoder ({_PACKAGE}.{module_name}.{name})")
    return fn


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
