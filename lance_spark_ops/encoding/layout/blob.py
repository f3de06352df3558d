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

Writing (``encode_blob_page``) follows ``lance.file.LanceFileWriter`` for
``lance-encoding:blob`` in both 2.1 and 2.2 (the blob v2 struct descriptors and sidecar
``.blob`` files belong to 2.2 *datasets*, not to the file writer): every non-empty payload
is placed before the page's own buffers, 64-byte aligned, in row order; the page is written
as one external buffer (payloads at 64-aligned offsets inside it), and ``finalize`` turns
its file offset into absolute positions, then encodes the descriptors as an inner
mini-block ``PackedStruct(u64, u64)`` page (``encode_packed_struct_miniblock`` +
``encode_miniblock_page``) with layers [ALL_VALID_ITEM]. Only ``large_binary`` is
accepted, as pylance refuses plain binary blob columns.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import FixedWidthBlock, StructBlock, VariableWidthBlock
from lance_spark_ops.encoding.layers import level_info
from lance_spark_ops.encoding.layout import PageDecoder, decoder_for
from lance_spark_ops.encoding.layout.pages import join_u8, page_message, row_runs
from lance_spark_ops.encoding.page import EncodedPage, Fetch, PageData
from lance_spark_ops.errors import CorruptFileError, InvalidInputError, UnsupportedError


def inner_decoder(layout: pb.PageLayout, num_rows: int, sizes: list[int], version: str) -> PageDecoder:
    """Decoder of the descriptions page a blob layout wraps (never another blob layout)."""
    if layout.WhichOneof("layout") == "blob_layout":
        raise CorruptFileError("blob page: descriptors stored as another blob layout")
    return decoder_for(layout, num_rows, sizes, version)


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


# ----------------------------------------------------------------------------- encoder

BLOB_ALIGN = 64


def blob_descriptors(
    lengths: np.ndarray, def_: np.ndarray | None, base: int, rel: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(position, size) per item: payloads at ``base + rel``; empty values (0, 0); null
    items (def level << 16, 0)."""
    lengths = np.asarray(lengths, dtype=np.uint64)
    pos = np.where(lengths > 0, np.uint64(base) + rel.astype(np.uint64), np.uint64(0))
    if def_ is not None:
        null = np.asarray(def_) != 0
        pos = np.where(null, np.asarray(def_).astype(np.uint64) << np.uint64(16), pos)
        lengths = np.where(null, np.uint64(0), lengths)
    return pos.astype(np.uint64), lengths


def _payloads(values: pa.Array, def_: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(one buffer holding every non-empty payload 64-byte aligned, each item's size, each
    item's offset in that buffer)."""
    from lance_spark_ops.encoding.blocks_from_arrow import arrow_to_block, strip_extension
    from lance_spark_ops.encoding.compression._arrays import as_u8, exclusive_cumsum, scatter_ragged

    values = strip_extension(values)
    if not pa.types.is_large_binary(values.type):
        raise UnsupportedError(f"blob columns must be large_binary, got {values.type} (as pylance requires)")
    block = arrow_to_block(values)
    offs = np.asarray(block.offsets).astype(np.int64)
    lens = np.diff(offs)
    if def_ is not None:
        lens = np.where(np.asarray(def_) != 0, 0, lens)
    slot = np.where(lens > 0, (lens + BLOB_ALIGN - 1) // BLOB_ALIGN * BLOB_ALIGN, 0)
    rel = exclusive_cumsum(slot)
    keep = np.flatnonzero(lens > 0)
    total = int(rel[keep[-1]] + lens[keep[-1]]) if keep.size else 0
    out = np.zeros(total, np.uint8)
    scatter_ragged(out, rel[keep], as_u8(block.data), offs[:-1][keep], lens[keep])
    return out, lens, rel


def encode_blob_page(
    num_rows: int,
    values: pa.Array,
    rep: np.ndarray | None,
    def_: np.ndarray | None,
    layers: list[int],
    version: str,
) -> EncodedPage:
    """A blob page for ``values`` (one per item, nulls included) with def levels ``def_``.

    The returned page carries the payloads as one external buffer; the container writes it,
    then calls ``finalize`` with its offset, which fills in the descriptor page.
    """
    if version not in ("2.1", "2.2"):
        raise UnsupportedError(f"blob pages exist in file versions 2.1 and 2.2, not {version}")
    if rep is not None:
        raise UnsupportedError("blob columns inside lists are not supported (as in Lance)")
    info = level_info(layers, "blob page")
    if info.max_rep:
        raise UnsupportedError("blob columns inside lists are not supported (as in Lance)")
    if len(values) != num_rows or (def_ is not None and len(def_) != num_rows):
        raise InvalidInputError(f"blob page: {len(values)} values / levels for {num_rows} rows")
    payload, lens, rel = _payloads(values, def_)
    page = EncodedPage(num_rows, [], None, external=[payload] if payload.size else [])

    def finalize(offsets: list[int]) -> None:
        base = int(offsets[0]) if offsets else 0
        pos, size = blob_descriptors(lens, def_, base, rel)
        inner = _descriptor_page(num_rows, pos, size, version)
        page.buffers = inner.buffers
        blob = pb.BlobLayout(inner_layout=inner.encoding, layers=list(layers))
        page.encoding = pb.PageLayout(blob_layout=blob)

    page.finalize = finalize
    if not page.external:
        finalize([])
    return page


def _descriptor_page(num_rows: int, pos: np.ndarray, size: np.ndarray, version: str) -> EncodedPage:
    from lance_spark_ops.encoding.compression.packed_struct import encode_packed_struct_miniblock
    from lance_spark_ops.encoding.layout.miniblock_encode import encode_miniblock_page

    fields = [
        FixedWidthBlock(np.ascontiguousarray(a, "<u8").view(np.uint8), 64, num_rows) for a in (pos, size)
    ]
    values = encode_packed_struct_miniblock(StructBlock(fields, num_rows))
    return encode_miniblock_page(num_rows, values, None, None, [pb.REPDEF_ALL_VALID_ITEM], version)
