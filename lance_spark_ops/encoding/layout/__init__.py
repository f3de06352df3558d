"""Structural page layouts of file versions 2.1 / 2.2: mini-block, full-zip, constant
(all-null), blob. Each turns a ``PageLayout`` plus the page's buffers into ``PageData``."""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from lance_spark_ops.encoding.page import Fetch, PageData


class PageDecoder(ABC):
    """Decoder for one page.

    ``load_search_cache`` reads what random access needs (chunk metadata, repetition
    index, dictionary) once; ``decode`` may then be called many times. A full scan calls
    ``decode(fetch, None)`` directly and may skip the search cache.
    """

    def __init__(self, layout: object, num_rows: int, buffer_sizes: list[int], version: str) -> None:
        self.layout = layout
        self.num_rows = num_rows
        self.buffer_sizes = buffer_sizes
        self.version = version  # "2.1" or "2.2"

    def load_search_cache(self, fetch: Fetch) -> None:  # noqa: B027 - optional hook
        """Load and keep the per-page state needed for random access."""

    @abstractmethod
    def decode(self, fetch: Fetch, rows: np.ndarray | None) -> PageData:
        """Decode all rows (``rows is None``) or the given sorted, unique page-relative rows."""


def decoder_for(layout: object, num_rows: int, buffer_sizes: list[int], version: str) -> PageDecoder:
    """The decoder of a ``PageLayout`` (UnsupportedError for layouts this library lacks)."""
    from lance_spark_ops.errors import UnsupportedError

    kind = layout.WhichOneof("layout")  # type: ignore[attr-defined]
    if kind == "mini_block_layout":
        from lance_spark_ops.encoding.layout.miniblock import MiniBlockDecoder

        return MiniBlockDecoder(layout.mini_block_layout, num_rows, buffer_sizes, version)  # type: ignore[attr-defined]
    if kind == "full_zip_layout":
        from lance_spark_ops.encoding.layout.fullzip import FullZipDecoder

        return FullZipDecoder(layout.full_zip_layout, num_rows, buffer_sizes, version)  # type: ignore[attr-defined]
    if kind == "constant_layout":
        from lance_spark_ops.encoding.layout.constant import ConstantDecoder

        return ConstantDecoder(layout.constant_layout, num_rows, buffer_sizes, version)  # type: ignore[attr-defined]
    if kind == "blob_layout":
        from lance_spark_ops.encoding.layout.blob import BlobDecoder

        return BlobDecoder(layout.blob_layout, num_rows, buffer_sizes, version)  # type: ignore[attr-defined]
    raise UnsupportedError(f"page layout {kind!r} is not supported")
