"""Encoder-side counterparts of the decode contexts (see ``decompress.py``).

Each codec module exposes, for every message it can write, up to three functions:

- ``encode_<message>_miniblock(block, params) -> MiniBlockCompressed``
- ``encode_<message>_block(block, params) -> tuple[np.ndarray, CompressiveEncoding]``
- ``encode_<message>_per_value(block, params) -> tuple[DataBlock, CompressiveEncoding]``

Like Lance's compressors, every encoder returns its data *and* the encoding description it
wrote, so the layout stores exactly what was produced. ``params`` is a
``CompressionParams`` built from field metadata (``strategy.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb


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
