"""What codecs exchange: encoder outputs, field knobs, and the registry interface nested
codecs decode their inner encoding through (``registry.py`` holds the table).

Each codec module exposes, for every message it can write, up to three encoders:

- ``encode_<message>_miniblock(block, params) -> MiniBlockCompressed``
- ``encode_<message>_block(block, params) -> tuple[np.ndarray, CompressiveEncoding]``
- ``encode_<message>_per_value(block, params) -> tuple[DataBlock, CompressiveEncoding]``

(their full, typed shape per context, as the registry calls them, is in ``contexts.py``).
Like Lance's compressors, every encoder returns its data *and* the encoding description it
wrote, so the layout stores exactly what was produced. ``params`` is a
``CompressionParams`` built from field metadata (``strategy.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import DataBlock


@dataclass
class CompressionParams:
    """Field-metadata knobs (spec "Compression Configuration"); None = Lance's default."""

    compression: str | None = None  # "zstd" | "lz4" | "none" | None
    compression_level: int | None = None
    rle_threshold: float = 0.5
    bss: str = "auto"  # "off" | "on" | "auto"
    dict_divisor: int = 2
    packed: bool = False
    structural_encoding: str | None = None  # "miniblock" | "fullzip" | None
    blob: bool = False
    extra: dict[str, str] = field(default_factory=dict)


@dataclass
class MiniBlockCompressed:
    """Output of a mini-block compressor, not yet serialised into chunks.

    ``buffers[j]`` holds buffer j of every chunk back to back; chunk i's part of it is
    ``chunk_buffer_sizes[i, j]`` bytes. Chunk i holds ``2**chunk_log_values[i]`` values,
    except the last chunk whose log is 0 when its count is not a power of two (the page's
    value count fixes it).
    """

    buffers: list[np.ndarray]
    chunk_buffer_sizes: np.ndarray  # (num_chunks, num_buffers) int64
    chunk_log_values: np.ndarray  # (num_chunks,) uint8
    num_values: int
    encoding: pb.CompressiveEncoding


class CodecLookup(Protocol):
    """The decode half of ``registry.CodecRegistry``, as nested codecs (General, Fsst,
    PackedStruct, VariablePackedStruct) receive it for their inner encoding."""

    def decompress_miniblock_chunks(self, enc: pb.CompressiveEncoding, chunks: Sequence[Sequence[memoryview]],
                                    counts: np.ndarray) -> DataBlock: ...

    def decode_miniblock_ranges(self, enc: pb.CompressiveEncoding, data: np.ndarray, starts: np.ndarray,
                                sizes: np.ndarray, counts: np.ndarray) -> DataBlock: ...

    def decompress_block(self, enc: pb.CompressiveEncoding, buffer: memoryview,
                         num_values: int) -> DataBlock: ...

    def decompress_per_value(self, enc: pb.CompressiveEncoding, block: DataBlock) -> DataBlock: ...
