"""What a page layout decoder hands to the structural (rep/def -> Arrow) stage.

A ``Fetch`` callable reads byte ranges of the page's buffers; layouts never touch storage
themselves, so the same decoder serves full scans (whole buffers) and ``take`` (only the
chunks that hold the requested rows).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from lance_spark_ops.encoding.blocks import DataBlock

# fetch([(buffer_index, offset_in_buffer, size), ...]) -> bytes for each range, in order.
# buffer_index -1 means an absolute file offset (blob payloads, external buffers).
Fetch = Callable[[Sequence[tuple[int, int, int]]], list[memoryview]]


@dataclass
class PageData:
    """Decoded contents of (part of) one page of one leaf column.

    ``rep`` / ``def_`` are uint16 levels, one per item (``None``: no repetition / all valid).
    ``values`` holds one value per *visible* item (items that are not null/empty lists);
    when ``dictionary`` is set, ``values`` are integer indices into it.
    ``layers`` are ``RepDefLayer`` enum values, innermost first (encodings_v2_1.proto).
    """

    num_rows: int
    values: DataBlock | None
    rep: np.ndarray | None = None
    def_: np.ndarray | None = None
    layers: list[int] = field(default_factory=list)
    dictionary: DataBlock | None = None


@dataclass
class EncodedPage:
    """What a layout encoder hands to the container writer: the page's buffers in order and
    its ``PageLayout`` (2.1+) or ``ArrayEncoding`` (2.0) message.

    Blob pages also carry ``external`` payloads: the container writes them first and passes
    their absolute file offsets to ``finalize``, which fills in ``buffers`` / ``encoding``
    (the descriptions store absolute positions).
    """

    num_rows: int
    buffers: list[np.ndarray | bytes]
    encoding: object
    external: list[np.ndarray | bytes] = field(default_factory=list)
    finalize: Callable[[list[int]], None] | None = None
