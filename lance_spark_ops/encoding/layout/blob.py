"""Blob page layout (file versions 2.1 / 2.2): large binary values stored out of line.

``BlobLayout`` = ``inner_layout`` (a ``PageLayout`` describing the page's own buffers) +
``layers`` (the rep/def meaning of the *blob* column). The page buffers hold only one
descriptor per item, a struct ``{position: u64, size: u64}``; pylance writes it as a
mini-block ``PackedStruct(u64, u64)`` page with layers [ALL_VALID_ITEM]. The payloads are
elsewhere in the same file, at absolute offsets (read with ``Fetch`` buffer index -1).

Null and empty values are smuggled into the descriptor:

    size > 0                  value = file[position : position + size], rep = def = 0
    size == 0, position == 0  empty value, rep = def = 0
    size == 0, position != 0  no value: rep = position & 0xFFFF, def = (position >> 16) & 0xFFFF

Example: a nullable ``large_binary`` column with ``lance-encoding:blob = true`` holding
``[b"abc", None, b""]`` has descriptors ``(P, 3), (0x10000, 0), (0, 0)`` where P is where
the writer put ``abc`` (before the page's own buffers).

Decoded like pylance's ``LanceFileReader`` reads such a column: the payload bytes, as a
``VariableWidthBlock`` with u64 offsets (Arrow ``large_binary``), one value per item; def
levels are returned unless the layers are a lone ALL_VALID_ITEM. Repetition is refused:
the descriptor cannot carry the rep level of a non-empty value, so Lance has no way to
store blobs inside lists.
"""

from __future__ import annotations

import numpy as np

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import FixedWidthBlock, StructBlock, VariableWidthBlock
from lance_spark_ops.encoding.layout import PageDecoder
from lance_spark_ops.encoding.layout.fullzip import join_u8, level_info, page_message, row_runs
from lance_spark_ops.encoding.page import Fetch, PageData
from lance_spark_ops.errors import CorruptFileError, UnsupportedError


def inner_decoder(layout: pb.PageLayout, num_rows: int, sizes: list[int], version: str) -> PageDecoder:
    kind = layout.WhichOneof("layout")
    if kind == "mini_block_layout":
        from lance_spark_ops.encoding.layout.miniblock import MiniBlockDecoder

        return MiniBlockDecoder(layout.mini_block_layout, num_rows, sizes, version)
    if kind == "full_zip_layout":
        from lance_spark_ops.encoding.layout.fullzip import FullZipDecoder

        return FullZipDecoder(layout.full_zip_layout, num_rows, sizes, version)
    if kind == "constant_layout":
        from lance_spark_ops.encoding.layout.constant import ConstantDecoder

        return ConstantDecoder(layout.constant_layout, num_rows, sizes, version)
    raise CorruptFileError(f"blob page: descriptors stored as {kind!r}")


def _u64_child(block: object, what: str) -> np.ndarray:
    if not isinstance(block, FixedWidthBlock) or block.bits_per_value != 64:
        raise CorruptFileError(f"blob page: {what} are not u64 values")
    return np.ascontiguousarray(block.data[: block.num_values * 8]).view("<u8")


class BlobDecoder(PageDecoder):
    """Decoder of one ``BlobLayout`` page: descriptors from the inner layout, payloads by
    absolute file offset."""

    def __init__(self, layout: object, num_rows: int, buffer_sizes: list[int], version: str) -> None:
        super().__init__(layout, num_rows, buffer_sizes, version)
        msg = page_message(layout, "blob_layout")
        self.info = level_info(msg.layers, "blob page")
        if self.info.max_rep:
            raise UnsupportedError("blob page: blobs inside lists are not supported")
        if not msg.HasField("inner_layout"):
            raise CorruptFileError("blob page: no inner layout")
        self.inner = inner_decoder(msg.inner_layout, num_rows, buffer_sizes, version)
        self.layers = list(self.info.layers)
        self._descriptors: tuple[np.ndarray, np.ndarray] | None = None

    def _read_descriptors(self, fetch: Fetch, rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        page = self.inner.decode(fetch, rows)
        values = page.values
        if not isinstance(values, StructBlock) or len(values.children) != 2:
            raise CorruptFileError("blob page: descriptors are not a (position, size) struct")
        if page.rep is not None or (page.def_ is not None and page.def_.any()):
            raise CorruptFileError("blob page: descriptor column has rep/def levels")
        pos = _u64_child(values.children[0], "positions")
        size = _u64_child(values.children[1], "sizes")
        n = self.num_rows if rows is None else int(np.asarray(rows).size)
        if pos.size != n or size.size != n:
            raise CorruptFileError(f"blob page: {pos.size} descriptors for {n} rows")
        return pos, size

    def load_search_cache(self, fetch: Fetch) -> None:
        if self._descriptors is None:
            self.inner.load_search_cache(fetch)
            self._descriptors = self._read_descriptors(fetch, None)

    def decode(self, fetch: Fetch, rows: np.ndarray | None) -> PageData:
        if rows is not None:
            row_runs(rows, self.num_rows, "blob page")
            rows = np.asarray(rows, dtype=np.int64)
        if self._descriptors is not None:
            pos, size = self._descriptors
            if rows is not None:
                pos, size = pos[rows], size[rows]
        else:
            pos, size = self._read_descriptors(fetch, rows)
        n = pos.size
        has = size > 0
        if has.any() and ((pos[has] > np.uint64(2**62)) | (size[has] > np.uint64(2**62))).any():
            raise CorruptFileError("blob page: payload position / size out of range")
        smuggled = ~has & (pos != 0)
        rep = (pos & np.uint64(0xFFFF)).astype(np.uint16)
        def_ = ((pos >> np.uint64(16)) & np.uint64(0xFFFF)).astype(np.uint16)
        rep[~smuggled] = 0
        def_[~smuggled] = 0
        if rep.any():
            raise CorruptFileError("blob page: repetition level smuggled into a descriptor without lists")
        max_def = sum({pb.REPDEF_NULLABLE_ITEM: 1}.get(x, 0) for x in self.info.layers)
        if def_.size and int(def_.max()) > max_def:
            raise CorruptFileError(f"blob page: definition level {int(def_.max())} above {max_def}")
        if smuggled.any() and (def_[smuggled] == 0).any():
            raise CorruptFileError("blob page: descriptor with size 0 and a non-zero position but no level")
        take = np.flatnonzero(has)
        starts = pos[take].astype(np.int64)
        lens = size[take].astype(np.int64)
        ranges = [(-1, s, length) for s, length in zip(starts.tolist(), lens.tolist(), strict=True)]
        got = fetch(ranges) if ranges else []
        if len(got) != len(ranges):
            raise CorruptFileError("blob page: fetch returned the wrong number of payloads")
        got_lens = np.fromiter((len(g) for g in got), dtype=np.int64, count=len(got))
        if (got_lens != lens).any():
            raise CorruptFileError("blob page: short read of a blob payload")
        data = join_u8(list(got)) if got else np.zeros(0, np.uint8)
        lengths = np.zeros(n, dtype=np.uint64)
        lengths[take] = lens.astype(np.uint64)
        offsets = np.zeros(n + 1, dtype=np.uint64)
        offsets[1:] = np.cumsum(lengths)
        all_valid = self.info.layers == (pb.REPDEF_ALL_VALID_ITEM,)
        return PageData(
            num_rows=n,
            values=VariableWidthBlock(offsets, data, n),
            rep=None,
            def_=None if all_valid else def_,
            layers=self.layers,
        )
