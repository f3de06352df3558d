"""Dispatch a ``CompressiveEncoding`` to its codec, in the three contexts Lance uses them
(spec "Compression"):

- mini-block: a chunk's value buffers -> the chunk's values. Batched over many chunks so a
  codec can decode all chunks of a page in a few vectorised steps.
- block: one opaque buffer -> values (rep/def levels, dictionaries, nested buffers).
- per-value (full-zip): values already cut out of the zipped buffer -> decompressed values.

Each codec module exposes, for every message it implements, up to three functions named
``decode_<message>_miniblock(msg, chunks, counts)``, ``decode_<message>_block(msg, buffer,
num_values)`` and ``decode_<message>_per_value(msg, block)``, where ``<message>`` is the
oneof field name in ``CompressiveEncoding`` (``flat``, ``inline_bitpacking`` ...).
Codecs raise ``CorruptFileError`` / ``UnsupportedError``; the reader adds file, column
and page to the message.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import DataBlock
from lance_spark_ops.errors import CorruptFileError, UnsupportedError

# CompressiveEncoding oneof name -> module (in this package) implementing it.
CODEC_MODULES: dict[str, str] = {
    "flat": "value",
    "variable": "variable",
    "constant": "constant",
    "out_of_line_bitpacking": "bitpacking",
    "inline_bitpacking": "bitpacking",
    "fsst": "fsst",
    "dictionary": "dictionary",
    "rle": "rle",
    "byte_stream_split": "byte_stream_split",
    "general": "general",
    "fixed_size_list": "fixed_size_list",
    "packed_struct": "packed_struct",
    "variable_packed_struct": "variable_packed_struct",
}


def _codec(enc: pb.CompressiveEncoding, context: str) -> tuple[Callable[..., DataBlock], Any]:
    kind = enc.WhichOneof("compression")
    if kind is None:
        raise CorruptFileError("compressive encoding is empty (no compression set)")
    module_name = CODEC_MODULES.get(kind)
    fn = None
    if module_name is not None:
        module = importlib.import_module(f"lance_spark_ops.encoding.compression.{module_name}")
        fn = getattr(module, f"decode_{kind}_{context}", None)
    if fn is None:
        raise UnsupportedError(f"compression '{kind}' is not supported in a {context} context")
    return fn, getattr(enc, kind)


def decompress_miniblock_chunks(
    enc: pb.CompressiveEncoding,
    chunks: Sequence[Sequence[memoryview]],
    counts: np.ndarray,
) -> DataBlock:
    """Decode many mini-block chunks at once.

    ``chunks[i]`` holds the value buffers of chunk i (``num_buffers`` of them, rep/def
    excluded); ``counts[i]`` is its number of values. Returns one block holding the values
    of all chunks in order.
    """
    fn, msg = _codec(enc, "miniblock")
    return fn(msg, chunks, counts)


def decompress_block(enc: pb.CompressiveEncoding, buffer: memoryview, num_values: int) -> DataBlock:
    """Decode one buffer compressed as a whole (levels, dictionary, nested parts)."""
    fn, msg = _codec(enc, "block")
    return fn(msg, buffer, num_values)


def decompress_per_value(enc: pb.CompressiveEncoding, block: DataBlock) -> DataBlock:
    """Undo transparent per-value compression of full-zip values (Flat, Variable, Fsst,
    General over Variable, FixedSizeList, VariablePackedStruct)."""
    fn, msg = _codec(enc, "per_value")
    return fn(msg, block)
