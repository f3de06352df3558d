"""Constant compressive encoding: every value equals ``Constant.value`` (absent: all null).

No bytes are stored for the values; the message carries the one value (the raw bytes of a
fixed-width element). Example: ``Constant { value: 07000000 }`` over 1000 int32 values
decodes to 1000 sevens without reading the page buffer.

pylance 14 was never seen writing it (all-null and constant pages use the 2.1 AllNull / 2.2
ConstantLayout *page layout* instead, see ``layout/constant.py``); Lance's reader accepts it
in block and fixed per-value contexts, so this decoder does too. The result is a
``ConstantBlock`` (``value`` None when all null).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import ConstantBlock, DataBlock
from lance_spark_ops.encoding.compression.encoded import CodecLookup


def _value(msg: pb.Constant) -> bytes | None:
    return bytes(msg.value) if msg.HasField("value") else None


def decode_constant_block(
    msg: pb.Constant, buffer: memoryview, num_values: int, codecs: CodecLookup | None = None
) -> DataBlock:
    return ConstantBlock(_value(msg), int(num_values))


def decode_constant_per_value(
    msg: pb.Constant, block: DataBlock, codecs: CodecLookup | None = None
) -> DataBlock:
    return ConstantBlock(_value(msg), int(block.num_values))


def decode_constant_miniblock(
    msg: pb.Constant, chunks: Sequence[Sequence[memoryview]], counts: np.ndarray,
    codecs: CodecLookup | None = None
) -> DataBlock:
    return ConstantBlock(_value(msg), int(np.asarray(counts, dtype=np.int64).sum()))
