"""The writer's way into the codec registry's encoders (``compression/registry.py``, the
same table the reader decodes with): a strategy's ``Codec`` tree node compressed in the
mini-block, block or per-value context. Each node's encoder takes the node itself and the
registry, so wrapping codecs (General, VariablePackedStruct) compress their inner codecs
through it; a codec that is not implemented raises ``UnsupportedError`` naming the
encoding and the context.
"""

from __future__ import annotations

import numpy as np

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import DataBlock
from lance_spark_ops.encoding.compression.encoded import CompressionParams, MiniBlockCompressed
from lance_spark_ops.encoding.compression.registry import CODECS
from lance_spark_ops.encoding.compression.strategy import Codec


def compress_miniblock(codec: Codec, block: DataBlock, params: CompressionParams) -> MiniBlockCompressed:
    """Mini-block compression of ``block`` by ``codec``."""
    return CODECS.compress_miniblock(codec, block, params)


def compress_block(codec: Codec, block: DataBlock,
                   params: CompressionParams) -> tuple[np.ndarray, pb.CompressiveEncoding]:
    """Whole-buffer compression of ``block`` by ``codec`` -> (bytes, encoding)."""
    return CODECS.compress_block(codec, block, params)


def compress_per_value(codec: Codec, block: DataBlock,
                       params: CompressionParams) -> tuple[DataBlock, pb.CompressiveEncoding]:
    """Transparent per-value compression of ``block`` (full-zip) -> (values, encoding)."""
    return CODECS.compress_per_value(codec, block, params)
