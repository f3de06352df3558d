"""Mini-block page layout (``MiniBlockLayout``, file versions 2.1 and 2.2).

Page buffers::

    [0] chunk metadata: one little-endian word per chunk, u16 in 2.1, u32 when the layout sets
        ``has_large_chunk`` (every 2.2 page). word = (size_in_8_byte_words - 1) << 4 | log2(values);
        every chunk but the last holds 2**log2 values, the last holds the rest of ``num_items``
        (its log2 is 0 unless it happens to be full).
    [1] the chunks, back to back, each a multiple of 8 bytes.
    [2] dictionary (only when ``dictionary`` is set), decoded as a block of
        ``num_dictionary_items`` values.
    [2 or 3] repetition index (only when ``repetition_index_depth`` > 0): per chunk
        ``depth + 1`` u64 values; [0] = rows that *finish* in the chunk, [1] = items left over
        after the last finished row (a row continuing into the next chunk).

Chunk::

    u16 num_levels                       (0 when there are neither rep nor def levels)
    u16 rep_bytes                        (only with rep_compression)
    u16 def_bytes                        (only with def_compression)
    num_buffers x value buffer size      (u16; u32 when has_large_chunk)
    padding (0xfe) to 8 bytes
    rep | pad 8 | def | pad 8 | buffer 0 | pad 8 | ... | buffer n-1 | pad 8

Worked example (2.2, int32 0..36 repeating, no nulls): metadata word ``1a 06 00 00`` = 98
words (784 bytes), 2**10 values; the chunk starts ``00 00 | 04 03 00 00 | 00 00 fe fe`` (no
levels, one 772-byte buffer) followed by the inline-bitpacked values (bit width 6).

Levels are u16 and decoded through the codec registry as one block per chunk (``num_levels``
values; OutOfLineBitpacking, or Rle in 2.2); values as mini-block chunks,
batched over every chunk of the page.

Which items have value slots (from Lance's ``RepDefSlicer`` and ``map_range``, confirmed on
pylance files): a level is *visible* when its def level is <= the sum of the def levels of the
layers below the first list layer (``max_visible``). Visible items have a value slot, including
null items (``NULLABLE_ITEM``) and items under null structs that sit below any list: their slot
holds a placeholder. Invisible items (null lists, empty lists and anything null above a list)
have no value slot. So a chunk holds ``count`` values and ``num_levels >= count`` levels, and
exactly ``count`` of its levels are visible. Invisible levels at a chunk boundary go with the
*next* chunk. Without def levels every level is visible. Rows start where rep == max_rep
(the number of list layers); a row may continue into following chunks.

``decode(fetch, None)`` reads buffers 0, 1 (and the dictionary) in one fetch;
``decode_whole_pages`` decodes several whole pages sharing a layout in one pass (their chunks
joined; dictionaries joined, indices shifted). With ``rows``
the search cache (chunk metadata, repetition index, dictionary) picks the chunks touching
those rows: chunk k covers rows ``[first_row_k - has_preamble_k, first_row_k + starts_k)``.
Only they are fetched and decoded; then levels and values are cut down to exactly the rows.

Writing: ``encode_miniblock_page`` (``miniblock_encode.py``, which imports this module, never
the reverse).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.block_ops import take_block
from lance_spark_ops.encoding.blocks import ConstantBlock, DataBlock, FixedWidthBlock, VariableWidthBlock
from lance_spark_ops.encoding.compression._arrays import (
    exclusive_cumsum,
    join,
    strided_rows,
)
from lance_spark_ops.encoding.compression.registry import CODECS, CodecRegistry
from lance_spark_ops.encoding.layers import max_rep, max_visible_def
from lance_spark_ops.encoding.layout import PageDecoder
from lance_spark_ops.encoding.page import Fetch, PageData
from lance_spark_ops.errors import CorruptFileError

ALIGN = 8


def _pad(n: np.ndarray | int) -> np.ndarray | int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _read_uint(data: np.ndarray, pos: np.ndarray, nbytes: int) -> np.ndarray:
    """Little-endian unsigned ints of ``nbytes`` at byte positions ``pos`` (vectorised)."""
    if nbytes not in (1, 2, 4, 8):
        out = np.zeros(len(pos), dtype=np.int64)
        for k in range(nbytes):
            out |= data[pos + k].astype(np.int64) << (8 * k)
        return out
    rows = np.ascontiguousarray(strided_rows(data, pos, nbytes))  # (k, nbytes), bounds checked
    return rows.view(f"<u{nbytes}").reshape(-1).astype(np.int64)


def decode_levels_ranges(
    enc: pb.CompressiveEncoding, data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, counts: np.ndarray,
    codecs: CodecRegistry = CODECS,
) -> np.ndarray:
    """Decode one level buffer per chunk (byte ranges of ``data``) into one uint16 array
    (bitpacking, rle and flat do all chunks in one vectorised call, others chunk by chunk)."""
    counts = np.asarray(counts, dtype=np.int64)
    blocks = codecs.decode_blocks_ranges(enc, data, starts, sizes, counts)
    parts = []
    for blk in blocks:
        if isinstance(blk, ConstantBlock) and blk.value is not None and len(blk.value) == 2:
            parts.append(np.full(blk.num_values, int.from_bytes(blk.value, "little"), dtype=np.uint16))
            continue
        if not isinstance(blk, FixedWidthBlock) or blk.bits_per_value != 16:
            raise CorruptFileError(
                f"levels decoded to {type(blk).__name__} "
                f"of {getattr(blk, 'bits_per_value', '?')} bits, expected 16-bit values"
            )
        raw = np.asarray(blk.data).view(np.uint8)[: 2 * blk.num_values]
        if len(raw) != 2 * blk.num_values:
            raise CorruptFileError(f"levels decoded to {len(raw)} bytes for {blk.num_values} values")
        parts.append(raw.view("<u2"))
    out = np.concatenate(parts) if len(parts) != 1 else parts[0]
    if len(out) != int(np.sum(counts)):
        raise CorruptFileError(f"levels decoded to {len(out)} values, chunks declare {int(np.sum(counts))}")
    return out.astype(np.uint16, copy=False)


@dataclass
class _ChunkIndex:
    """The search cache: where chunks are and which rows they touch."""

    offsets: np.ndarray  # byte offset of each chunk in buffer 1
    sizes: np.ndarray  # byte size of each chunk
    counts: np.ndarray  # values (items with a value slot) per chunk
    first_row: np.ndarray | None = None  # first row starting in the chunk (rep pages)
    starts: np.ndarray | None = None  # rows starting in the chunk
    has_preamble: np.ndarray | None = None  # chunk begins inside a row from earlier chunks


@dataclass
class _Chunks:
    """Decoded contents of a run of chunks."""

    values: DataBlock
    rep: np.ndarray | None
    def_: np.ndarray | None
    levels: np.ndarray  # levels per chunk


class MiniBlockDecoder(PageDecoder):
    """Decoder of one mini-block page (see module doc)."""

    layout: pb.MiniBlockLayout

    def __init__(
        self, layout: pb.MiniBlockLayout, num_rows: int, buffer_sizes: list[int], version: str,
        codecs: CodecRegistry = CODECS,
    ) -> None:
        super().__init__(layout, num_rows, buffer_sizes, version)
        self.codecs = codecs
        self._large = bool(layout.has_large_chunk)
        self._nbuf = int(layout.num_buffers)
        self._has_rep = layout.HasField("rep_compression")
        self._has_def = layout.HasField("def_compression")
        self._has_dict = layout.HasField("dictionary")
        self._depth = int(layout.repetition_index_depth)
        if not layout.HasField("value_compression"):
            raise CorruptFileError("mini-block page has no value compression")
        layers = [int(lay) for lay in layout.layers]
        self._max_rep = max_rep(layers)
        self._max_visible = max_visible_def(layers)
        if self._has_rep and self._max_rep == 0:
            raise CorruptFileError("mini-block page has repetition levels but no list layer")
        self._dict_buf = 2 if self._has_dict else -1
        self._rep_index_buf = (3 if self._has_dict else 2) if self._depth > 0 else -1
        need = 2 + self._has_dict + (self._depth > 0)
        if len(buffer_sizes) < need:
            raise CorruptFileError(f"mini-block page has {len(buffer_sizes)} buffers, layout needs {need}")
        self._index: _ChunkIndex | None = None
        self._dictionary: DataBlock | None = None
        self._cache_loaded = False
        self._batch_key: bytes | None = None

    # ------------------------------------------------------------------ search cache
    def load_search_cache(self, fetch: Fetch) -> None:
        if self._cache_loaded:
            return
        wanted = [(0, 0, self.buffer_sizes[0])]
        if self._has_dict:
            wanted.append((self._dict_buf, 0, self.buffer_sizes[self._dict_buf]))
        if self._rep_index_buf >= 0:
            wanted.append((self._rep_index_buf, 0, self.buffer_sizes[self._rep_index_buf]))
        got = list(fetch(wanted))
        self._index = self._parse_metadata(got[0])
        if self._has_dict:
            self._dictionary = self._decode_dictionary(got[1])
        self._add_row_index(self._index, got[-1] if self._rep_index_buf >= 0 else None)
        self._cache_loaded = True

    def _parse_metadata(self, buf: memoryview) -> _ChunkIndex:
        wsize = 4 if self._large else 2
        if len(buf) % wsize:
            raise CorruptFileError(
                f"mini-block chunk metadata of {len(buf)} bytes is not a whole number of {wsize}-byte words"
            )
        words = np.frombuffer(buf, dtype="<u4" if self._large else "<u2").astype(np.int64)
        sizes = ((words >> 4) + 1) * ALIGN
        logs = words & 0xF
        counts = np.left_shift(1, logs).astype(np.int64)
        num_items = int(self.layout.num_items)
        if len(words) == 0:
            if num_items:
                raise CorruptFileError(f"mini-block page of {num_items} items has no chunks")
        else:
            counts[-1] = num_items - int(counts[:-1].sum())
            if counts[-1] <= 0 or (logs[-1] and counts[-1] != 1 << int(logs[-1])):
                raise CorruptFileError(
                    f"mini-block chunks declare {int(counts[:-1].sum())} values before the last "
                    f"chunk (log2 {int(logs[-1])}) but the page has {num_items} items"
                )
        if int(sizes.sum()) > self.buffer_sizes[1]:
            raise CorruptFileError(
                f"mini-block chunks add up to {int(sizes.sum())} bytes, chunk buffer has "
                f"{self.buffer_sizes[1]}"
            )
        if not self._has_rep and num_items != self.num_rows:
            raise CorruptFileError(
                f"mini-block page without lists has {num_items} items but {self.num_rows} rows"
            )
        return _ChunkIndex(exclusive_cumsum(sizes), sizes, counts)

    def _add_row_index(self, index: _ChunkIndex, rep_index: memoryview | None) -> None:
        n = len(index.counts)
        if rep_index is None:
            if self._has_rep:
                return  # no repetition index: rows are found by decoding the whole page
            index.first_row = exclusive_cumsum(index.counts)
            index.starts = index.counts
            index.has_preamble = np.zeros(n, dtype=bool)
            return
        stride = self._depth + 1
        if len(rep_index) != n * stride * 8:
            raise CorruptFileError(
                f"repetition index of {len(rep_index)} bytes, expected {n} chunks x {stride} u64 values"
            )
        table = np.frombuffer(rep_index, dtype="<u8").reshape(n, stride)
        if n and (table[:, :2].max() > max(self.num_rows, int(self.layout.num_items))):
            raise CorruptFileError(
                f"repetition index entry {int(table[:, :2].max())} exceeds the page's rows / items"
            )
        table = table.astype(np.int64)
        ends, partial = table[:, 0], table[:, 1]
        trailer = partial > 0
        preamble = np.zeros(n, dtype=bool)
        preamble[1:] = trailer[:-1]
        starts = ends + trailer - preamble
        if (starts < 0).any() or int(starts.sum()) != self.num_rows or (n and trailer[-1]):
            raise CorruptFileError(
                f"repetition index describes {int(starts.sum())} rows (page has "
                f"{self.num_rows}) or a last chunk that does not finish its row"
            )
        index.first_row = exclusive_cumsum(starts)
        index.starts = starts
        index.has_preamble = preamble

    def _decode_dictionary(self, buf: memoryview) -> DataBlock:
        n = int(self.layout.num_dictionary_items)
        block = self.codecs.decompress_block(self.layout.dictionary, buf, n)
        if block.num_values != n:
            raise CorruptFileError(f"dictionary decoded to {block.num_values} items, layout says {n}")
        return block

    # ------------------------------------------------------------------ chunks
    def _header_layout(self) -> tuple[list[tuple[int, int]], int]:
        """[(offset, width)] of the header fields after num_levels, and the padded header size."""
        fields, pos = [], 2
        for present in (self._has_rep, self._has_def):
            if present:
                fields.append((pos, 2))
                pos += 2
        bw = 4 if self._large else 2
        for _ in range(self._nbuf):
            fields.append((pos, bw))
            pos += bw
        return fields, int(_pad(pos))

    def _decode_chunks(
        self,
        data: np.ndarray,
        starts: np.ndarray,
        sizes: np.ndarray,
        counts: np.ndarray,
        chunk_ids: np.ndarray,
    ) -> _Chunks:
        """Decode chunks lying at byte ``starts`` of ``data`` (``chunk_ids`` name them in errors)."""
        fields, header = self._header_layout()
        if len(starts) and int(starts[-1] + sizes[-1]) > len(data):
            raise CorruptFileError(
                f"mini-block chunks need {int(starts[-1] + sizes[-1])} bytes, only {len(data)} were read"
            )
        if (sizes < header).any():
            k = int(chunk_ids[np.argmax(sizes < header)])
            raise CorruptFileError(f"mini-block chunk {k} is smaller than its {header}-byte header")
        num_levels = _read_uint(data, starts, 2)
        section_sizes = [_read_uint(data, starts + off, width) for off, width in fields]
        pos = starts + header
        section_starts = []
        for size in section_sizes:
            section_starts.append(pos)
            pos = pos + _pad(size)
        over = pos > starts + sizes
        if over.any():
            k = int(chunk_ids[np.argmax(over)])
            raise CorruptFileError(
                f"mini-block chunk {k}: buffers need {int((pos - starts)[np.argmax(over)])} bytes, "
                f"chunk has {int(sizes[np.argmax(over)])}"
            )
        sec = 0
        rep = def_ = None
        lay = self.layout
        if self._has_rep:
            rep = decode_levels_ranges(
                lay.rep_compression, data, section_starts[sec], section_sizes[sec], num_levels, self.codecs
            )
            sec += 1
        if self._has_def:
            def_ = decode_levels_ranges(
                lay.def_compression, data, section_starts[sec], section_sizes[sec], num_levels, self.codecs
            )
            sec += 1
        k = len(starts)
        if sec < len(section_starts):
            vstarts = np.stack(section_starts[sec:], axis=1)
            vsizes = np.stack(section_sizes[sec:], axis=1)
        else:
            vstarts = vsizes = np.zeros((k, 0), dtype=np.int64)
        values = self.codecs.decode_miniblock_ranges(lay.value_compression, data, vstarts, vsizes, counts)
        if values.num_values != int(counts.sum()):
            raise CorruptFileError(
                f"mini-block values decoded to {values.num_values} items, chunks declare {int(counts.sum())}"
            )
        self._check_levels(rep, def_, num_levels, counts, chunk_ids)
        return _Chunks(values, rep, def_, num_levels)

    def _check_levels(
        self,
        rep: np.ndarray | None,
        def_: np.ndarray | None,
        num_levels: np.ndarray,
        counts: np.ndarray,
        chunk_ids: np.ndarray,
    ) -> None:
        if rep is None and def_ is None:
            return
        if rep is None or def_ is None:  # every level is visible
            bad = num_levels != counts
        else:
            per_chunk = np.zeros(len(counts), dtype=np.int64)
            nz = num_levels > 0
            if len(rep):
                visible = (def_ <= self._max_visible).astype(np.int64)
                per_chunk[nz] = np.add.reduceat(visible, exclusive_cumsum(num_levels)[nz])
            bad = per_chunk != counts
        if bad.any():
            k = int(np.argmax(bad))
            raise CorruptFileError(
                f"mini-block chunk {int(chunk_ids[k])}: {int(num_levels[k])} levels do not match "
                f"its {int(counts[k])} values"
            )

    # ------------------------------------------------------------------ whole pages together
    def batch_key(self) -> bytes:
        """Pages of one column with equal keys may be decoded together (``decode_whole_pages``):
        the layout but its item and dictionary item counts."""
        if self._batch_key is None:
            lay = pb.MiniBlockLayout()
            lay.CopyFrom(self.layout)
            lay.num_items = 0
            lay.num_dictionary_items = 0
            self._batch_key = lay.SerializeToString(deterministic=True)
        return self._batch_key

    @property
    def has_dictionary(self) -> bool:
        return self._has_dict

    @property
    def dictionary_buffer(self) -> int:
        """Index of the dictionary buffer (-1: none)."""
        return self._dict_buf

    # ------------------------------------------------------------------ decode
    def decode(self, fetch: Fetch, rows: np.ndarray | None) -> PageData:
        if rows is not None:
            rows = np.asarray(rows, dtype=np.int64).reshape(-1)
            if len(rows) and (rows[0] < 0 or rows[-1] >= self.num_rows or (np.diff(rows) <= 0).any()):
                raise CorruptFileError(
                    f"rows must be sorted, unique and inside the page's {self.num_rows} rows"
                )
            if len(rows) < self.num_rows:
                return self._decode_rows(fetch, rows)
        return self._decode_all(fetch)

    def _page_data(self, num_rows: int, chunks: _Chunks) -> PageData:
        return PageData(
            num_rows, chunks.values, chunks.rep, chunks.def_, list(self.layout.layers), self._dictionary
        )

    def _decode_all(self, fetch: Fetch) -> PageData:
        wanted = [(1, 0, self.buffer_sizes[1])]
        if self._index is None:
            wanted.append((0, 0, self.buffer_sizes[0]))
        if self._has_dict and self._dictionary is None:
            wanted.append((self._dict_buf, 0, self.buffer_sizes[self._dict_buf]))
        got = list(fetch(wanted))
        if self._index is None:
            self._index = self._parse_metadata(got[1])
        if self._has_dict and self._dictionary is None:
            self._dictionary = self._decode_dictionary(got[-1])
        index = self._index
        data = np.frombuffer(got[0], dtype=np.uint8)
        chunks = self._decode_chunks(
            data, index.offsets, index.sizes, index.counts, np.arange(len(index.counts))
        )
        if chunks.rep is not None:
            found = int(np.count_nonzero(chunks.rep == self._max_rep))
            if found != self.num_rows:
                raise CorruptFileError(
                    f"mini-block page has {self.num_rows} rows but its levels start {found}"
                )
        return self._page_data(self.num_rows, chunks)

    def _decode_rows(self, fetch: Fetch, rows: np.ndarray) -> PageData:
        self.load_search_cache(fetch)
        index = self._index
        assert index is not None
        if index.first_row is None:  # lists without a repetition index: decode all, then select
            full = self._decode_all(fetch)
            rep = full.rep
            assert rep is not None
            row_of_level = np.cumsum(rep == self._max_rep) - 1
            chunks = _Chunks(full.values, rep, full.def_, np.array([len(rep)]))
            return self._select_rep(chunks, row_of_level, rows)
        assert index.starts is not None and index.has_preamble is not None
        lo = index.first_row - index.has_preamble
        hi = index.first_row + index.starts
        needed = np.searchsorted(rows, lo, "left") < np.searchsorted(rows, hi, "left")
        if not needed.any():
            needed[0] = True  # no rows asked: decode one chunk to get typed, empty results
        sel = np.flatnonzero(needed)
        data = self._fetch_chunks(fetch, sel)
        sizes = index.sizes[sel]
        chunks = self._decode_chunks(data, exclusive_cumsum(sizes), sizes, index.counts[sel], sel)
        if chunks.rep is None:
            return self._select_flat(chunks, sel, rows)
        is_start = chunks.rep == self._max_rep
        starts_per_chunk = np.zeros(len(sel), dtype=np.int64)
        nz = chunks.levels > 0
        starts_per_chunk[nz] = np.add.reduceat(is_start.astype(np.int64), exclusive_cumsum(chunks.levels)[nz])
        if (starts_per_chunk != index.starts[sel]).any():
            k = int(sel[np.argmax(starts_per_chunk != index.starts[sel])])
            raise CorruptFileError(f"mini-block chunk {k}: repetition index disagrees with its rep levels")
        local = np.cumsum(is_start) - np.repeat(exclusive_cumsum(starts_per_chunk), chunks.levels)
        row_of_level = np.repeat(index.first_row[sel], chunks.levels) + local - 1
        return self._select_rep(chunks, row_of_level, rows)

    def _fetch_chunks(self, fetch: Fetch, sel: np.ndarray) -> np.ndarray:
        """Fetch chunks ``sel`` (runs of neighbours in one range each) as one byte array."""
        index = self._index
        assert index is not None
        breaks = np.flatnonzero(np.diff(sel) != 1) + 1
        run_first = sel[np.concatenate([[0], breaks])]
        run_last = sel[np.concatenate([breaks - 1, [len(sel) - 1]])]
        ranges = [
            (1, int(index.offsets[a]), int(index.offsets[b] + index.sizes[b] - index.offsets[a]))
            for a, b in zip(run_first, run_last, strict=True)
        ]
        return join(list(fetch(ranges)))

    def _select_flat(self, chunks: _Chunks, sel: np.ndarray, rows: np.ndarray) -> PageData:
        """No lists: rows are items, located through the chunk counts."""
        index = self._index
        assert index is not None and index.first_row is not None
        chunk_of_row = np.searchsorted(index.first_row, rows, "right") - 1
        base = np.full(len(index.counts), -1, dtype=np.int64)
        base[sel] = exclusive_cumsum(index.counts[sel])
        if len(rows) and (base[chunk_of_row] < 0).any():
            raise CorruptFileError("mini-block row lookup reached a chunk that was not read")
        pos = base[chunk_of_row] + rows - index.first_row[chunk_of_row]
        def_ = None if chunks.def_ is None else chunks.def_[pos]
        return PageData(
            len(rows), take_block(chunks.values, pos), None, def_, list(self.layout.layers), self._dictionary
        )

    def _select_rep(self, chunks: _Chunks, row_of_level: np.ndarray, rows: np.ndarray) -> PageData:
        """Lists: keep the levels of the wanted rows and the values of their visible items."""
        assert chunks.rep is not None
        at = np.minimum(np.searchsorted(rows, row_of_level), max(len(rows) - 1, 0))
        keep = (rows[at] == row_of_level) if len(rows) else np.zeros(len(row_of_level), dtype=bool)
        if chunks.def_ is None:
            value_pos = np.flatnonzero(keep)
            def_ = None
        else:
            visible = chunks.def_ <= self._max_visible
            value_pos = (np.cumsum(visible) - 1)[keep & visible]
            def_ = chunks.def_[keep]
        rep = chunks.rep[keep]
        found = int(np.count_nonzero(rep == self._max_rep))
        if found != len(rows):
            raise CorruptFileError(f"mini-block rows: {len(rows)} rows asked, levels start {found}")
        return PageData(
            len(rows),
            take_block(chunks.values, value_pos),
            rep,
            def_,
            list(self.layout.layers),
            self._dictionary,
        )


def decode_whole_pages(decoders: list[MiniBlockDecoder],
                       buffers: list[tuple[memoryview, ...]]) -> list[PageData]:
    """Consecutive whole pages of one column, decoded as one page: their chunks go through
    the level and value codecs in one pass, so the per-page fixed costs (dozens of numpy
    calls per codec) are paid once per run of pages instead of once per page (a list
    column of 8 MB holds ~20 pages of 65 535 levels). ``buffers`` holds each page's chunk
    metadata and chunk buffers (0 and 1), then its dictionary buffer if it has one; the
    decoders must share ``batch_key``. Dictionary pages keep their own dictionaries: these
    are joined and each page's indices shifted past the dictionaries before it (pages
    whose dictionaries cannot be joined are decoded one by one)."""
    first = decoders[0]
    key = first.batch_key()
    if any(d.batch_key() != key for d in decoders[1:]):
        raise CorruptFileError("mini-block pages decoded together must share their layout")
    dictionary = None
    if first.has_dictionary:
        for dec, bufs in zip(decoders, buffers, strict=True):
            if dec._dictionary is None:
                dec._dictionary = dec._decode_dictionary(bufs[2])
        dictionary = _join_blocks([d._dictionary for d in decoders])
        if dictionary is None:
            return [_decode_whole([d], [b]) for d, b in zip(decoders, buffers, strict=True)]
    return [_decode_whole(decoders, buffers, dictionary)]


def _decode_whole(decoders: list[MiniBlockDecoder], buffers: list[tuple[memoryview, ...]],
                  dictionary: DataBlock | None = None) -> PageData:
    first = decoders[0]
    datas = [np.frombuffer(bufs[1], dtype=np.uint8) for bufs in buffers]
    offsets, sizes, counts = _chunk_index_of_pages(decoders, [bufs[0] for bufs in buffers],
                                                   [len(d) for d in datas])
    data = np.concatenate(datas) if len(datas) > 1 else datas[0]
    chunks = first._decode_chunks(data, offsets, sizes, counts, np.arange(len(counts)))
    num_rows = sum(d.num_rows for d in decoders)
    if chunks.rep is not None:
        found = int(np.count_nonzero(chunks.rep == first._max_rep))
        if found != num_rows:
            raise CorruptFileError(f"mini-block pages hold {num_rows} rows but their levels start {found}")
    values = chunks.values
    if first.has_dictionary:
        if len(decoders) > 1:
            values = _shift_indices(values, [int(d.layout.num_items) for d in decoders],
                                    [d._dictionary.num_values for d in decoders])
        else:
            dictionary = first._dictionary
    return PageData(num_rows, values, chunks.rep, chunks.def_, list(first.layout.layers), dictionary)


def _shift_indices(block: DataBlock, per_page: list[int], dict_sizes: list[int]) -> FixedWidthBlock:
    """Dictionary indices of several pages made to point into their joined dictionaries."""
    if not isinstance(block, FixedWidthBlock) or block.bits_per_value not in (8, 16, 32, 64):
        raise CorruptFileError(f"dictionary indices decoded to {type(block).__name__}, expected integers")
    n = int(block.num_values)
    if sum(per_page) != n:
        raise CorruptFileError(f"pages hold {sum(per_page)} dictionary indices, decoded {n}")
    idx = np.asarray(block.data).view(f"<u{block.bits_per_value // 8}")[:n]
    wide = np.uint64 if block.bits_per_value == 64 or sum(dict_sizes) > 0xFFFFFFFF else np.uint32
    shifted = idx.astype(wide) + np.repeat(exclusive_cumsum(np.array(dict_sizes)).astype(wide), per_page)
    return FixedWidthBlock(shifted.view(np.uint8), np.dtype(wide).itemsize * 8, n)


def _join_blocks(blocks: list[DataBlock | None]) -> DataBlock | None:
    """Blocks of one kind back to back (fixed widths of one width, variable widths with
    one offset type); None when they cannot be joined here."""
    if any(b is None for b in blocks):
        return None
    if all(isinstance(b, FixedWidthBlock) for b in blocks):
        bits = blocks[0].bits_per_value
        if bits % 8 or any(b.bits_per_value != bits for b in blocks):
            return None
        w = bits // 8
        data = np.concatenate([np.asarray(b.data).view(np.uint8)[: b.num_values * w] for b in blocks])
        return FixedWidthBlock(data, bits, sum(b.num_values for b in blocks))
    if all(isinstance(b, VariableWidthBlock) for b in blocks):
        dt = np.asarray(blocks[0].offsets).dtype
        if any(np.asarray(b.offsets).dtype != dt for b in blocks):
            return None
        datas, offs, at = [], [np.zeros(1, np.int64)], 0
        for b in blocks:
            o = np.asarray(b.offsets).astype(np.int64)
            datas.append(np.asarray(b.data).view(np.uint8)[int(o[0]):int(o[-1])])
            offs.append(o[1:] - o[0] + at)
            at += int(o[-1] - o[0])
        if at > np.iinfo(dt).max:
            return None
        return VariableWidthBlock(np.concatenate(offs).astype(dt), np.concatenate(datas),
                                  sum(b.num_values for b in blocks))
    return None


def can_decode_together(a: PageDecoder, b: PageDecoder) -> bool:
    """Whether ``decode_pages_together`` takes pages ``a`` and ``b`` in one pass: mini-block
    pages sharing ``batch_key``, without lists or dictionaries."""
    return (isinstance(a, MiniBlockDecoder) and isinstance(b, MiniBlockDecoder) and not a._has_rep
            and not a._has_dict and a.batch_key() == b.batch_key())


def decode_pages_together(decoders: list[PageDecoder], fetches: list[Fetch]) -> PageData | None:
    """All rows of several mini-block pages (of one column, in row order, possibly of
    different files) as one PageData, through ``decode_whole_pages``: on many small pages
    (datasets of small fragments) the fixed cost of a decode call is most of the work. None
    unless every neighbour pair ``can_decode_together`` (decode them one by one)."""
    if not all(can_decode_together(a, b) for a, b in zip(decoders[:-1], decoders[1:], strict=True)):
        return None
    buffers = [tuple(fetch([(0, 0, d.buffer_sizes[0]), (1, 0, d.buffer_sizes[1])]))
               for d, fetch in zip(decoders, fetches, strict=True)]
    return decode_whole_pages(decoders, buffers)[0]


def _chunk_index_of_pages(decoders: list[MiniBlockDecoder], metas: list[memoryview], data_sizes: list[int]
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``_parse_metadata`` of every page at once: the chunks' byte starts in the pages' chunk
    buffers laid end to end, sizes and value counts. Pages that fail a check here (or have
    no chunks) are parsed one by one, which names what is wrong."""
    large = decoders[0]._large
    wsize = 4 if large else 2
    if any(len(m) % wsize or not len(m) for m in metas):
        return _chunk_index_page_by_page(decoders, metas, data_sizes)
    words = np.frombuffer(b"".join(metas), dtype="<u4" if large else "<u2").astype(np.int64)
    per_page = np.array([len(m) // wsize for m in metas], dtype=np.int64)
    first = exclusive_cumsum(per_page)
    last = first + per_page - 1
    sizes = ((words >> 4) + 1) * ALIGN
    logs = words & 0xF
    counts = np.left_shift(1, logs).astype(np.int64)
    items = np.array([int(d.layout.num_items) for d in decoders], dtype=np.int64)
    rows = np.array([d.num_rows for d in decoders], dtype=np.int64)
    counts[last] = items - (np.add.reduceat(counts, first) - counts[last])
    tail, tail_logs = counts[last], logs[last]
    partial = (tail_logs != 0) & (tail != np.left_shift(1, tail_logs))  # a last chunk must be full
    no_lists = np.array([not d._has_rep for d in decoders])
    page_bytes = np.add.reduceat(sizes, first)
    if ((tail <= 0).any() or partial.any() or (no_lists & (items != rows)).any()
            or (page_bytes > np.array([d.buffer_sizes[1] for d in decoders], dtype=np.int64)).any()):
        return _chunk_index_page_by_page(decoders, metas, data_sizes)
    # chunk starts: within its page, then shifted by the chunk buffers of the pages before
    local = exclusive_cumsum(sizes)
    local -= np.repeat(local[first], per_page)
    starts = local + np.repeat(exclusive_cumsum(np.array(data_sizes, dtype=np.int64)), per_page)
    return starts, sizes, counts


def _chunk_index_page_by_page(decoders: list[MiniBlockDecoder], metas: list[memoryview], data_sizes: list[int]
                              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    indexes = [d._parse_metadata(m) for d, m in zip(decoders, metas, strict=True)]
    base = exclusive_cumsum(np.array(data_sizes, dtype=np.int64))
    return (np.concatenate([ix.offsets + b for ix, b in zip(indexes, base, strict=True)]),
            np.concatenate([ix.sizes for ix in indexes]), np.concatenate([ix.counts for ix in indexes]))
