"""Full-zip page layout (file versions 2.1 / 2.2): large values zipped with their levels.

Page buffers::

    buffer 0  zipped data: for every item, in order
                [control word: 0/1/2/4 bytes]            (absent when bits_rep = bits_def = 0)
                [value]                                  (only for *visible* items, see below)
    buffer 1  repetition index (optional): (num_rows + 1) byte-packed unsigned ints, each the
              offset of a row's first byte in buffer 0; the last entry is buffer 0's size.
              Width = size / (num_rows + 1), one of 1, 2, 4, 8 (pylance picks the narrowest
              that holds buffer 0's size, so small pages get u16, large ones u32).

Control word (Lance ``ControlWordParser``): ``bits_rep + bits_def`` bits, stored little endian in
1 byte (<= 8 bits), 2 bytes (<= 16) or 4 bytes. With both levels ``word = rep << bits_def | def``;
with only one kind of level the word *is* that level. Levels are u16.

Which items carry a value (the writer's rule, ``SerializedRepDefs::max_visible_level``):

- an item is *visible* unless it stands for a null / empty list, i.e. unless there are list layers
  and ``def`` exceeds the def levels of the layers below the first list layer;
- fixed width (``bits_per_value``): every visible item has exactly ``bits_per_value / 8`` bytes,
  null items included (their bytes are garbage / zero);
- variable width (``bits_per_offset`` = 32 / 64): a visible item with ``def == 0`` has a u32 / u64
  length prefix and then that many bytes; visible null items have nothing after the control
  word but still get an (empty) value slot.

A row starts at an item whose rep equals ``max_rep`` (the number of list layers); without
repetition each item is one row. The repetition index exists whenever there is repetition or
the values are variable width.

Worked example (``list<string>``, bits_rep 1, bits_def 2, layers [ALL_VALID_ITEM,
NULL_AND_EMPTY_LIST]): rows ``[[], None, ["ab"]]`` zip to ``06 | 05 | 04 02000000 61 62``
(empty list rep 1 def 2, null list rep 1 def 1, item rep 1 def 0 with length 2) and the
repetition index ``00 01 02 09`` (u8).

Writing: ``encode_fullzip_page`` (in ``fullzip_encode``) produces exactly
these bytes, with the control-word and repetition-index widths pylance picks.

Decoding is vectorised across rows: each pass of the item walk parses one item of every row
still open, so the number of passes is the largest number of items in one row (1 without
repetition). Only a variable-width page *without* a repetition index (never written by Lance)
falls back to one pass per item.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lance_spark_ops.encoding.blocks import DataBlock, FixedWidthBlock, VariableWidthBlock
from lance_spark_ops.encoding.compression._arrays import ragged_arange
from lance_spark_ops.encoding.compression.registry import CODECS, CodecRegistry
from lance_spark_ops.encoding.compression.variable import gather_segments
from lance_spark_ops.encoding.layers import LevelInfo, level_info
from lance_spark_ops.encoding.layout import PageDecoder
from lance_spark_ops.encoding.layout.pages import as_u8, join_u8, page_message, row_runs
from lance_spark_ops.encoding.page import Fetch, PageData
from lance_spark_ops.errors import CorruptFileError, UnsupportedError


def read_uint(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """Little-endian unsigned ints of ``width`` (1/2/4/8) bytes at byte positions ``pos``
    (caller bounds-checks) as uint64."""
    pos = np.asarray(pos, dtype=np.int64)
    out = buf[pos].astype(np.uint64)
    for k in range(1, width):
        out |= buf[pos + k].astype(np.uint64) << np.uint64(8 * k)
    return out


def unpack_uints(data: np.ndarray, width: int, what: str) -> np.ndarray:
    """A byte-packed array of ``width``-byte little-endian ints as int64."""
    if width not in (1, 2, 4, 8):
        raise CorruptFileError(f"{what}: {width}-byte entries (expected 1, 2, 4 or 8)")
    if data.size % width:
        raise CorruptFileError(f"{what}: {data.size} bytes is not a multiple of {width}")
    vals = data.view(np.dtype(f"<u{width}"))
    if width == 8 and vals.size and int(vals.max()) >= 2**63:
        raise CorruptFileError(f"{what}: offset {int(vals.max())} is out of range")
    return vals.astype(np.int64)


# ----------------------------------------------------------------------------- control words


@dataclass(frozen=True)
class ControlWords:
    bits_rep: int
    bits_def: int

    @property
    def width(self) -> int:
        total = self.bits_rep + self.bits_def
        return 0 if total == 0 else 1 if total <= 8 else 2 if total <= 16 else 4

    def split(self, words: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
        """(rep, def) u16 levels from control words (uint64)."""
        rep = def_ = None
        if self.bits_rep and self.bits_def:
            rep = words >> np.uint64(self.bits_def)
            def_ = words & np.uint64((1 << self.bits_def) - 1)
        elif self.bits_rep:
            rep = words
        elif self.bits_def:
            def_ = words
        for lv in (rep, def_):
            if lv is not None and lv.size and int(lv.max()) > 0xFFFF:
                raise CorruptFileError(f"control word level {int(lv.max())} exceeds 16 bits")
        return (
            None if rep is None else rep.astype(np.uint16),
            None if def_ is None else def_.astype(np.uint16),
        )


def control_words(bits_rep: int, bits_def: int, what: str) -> ControlWords:
    if bits_rep > 16 or bits_def > 16 or bits_rep + bits_def > 32:
        raise CorruptFileError(f"{what}: control word of {bits_rep} rep + {bits_def} def bits")
    return ControlWords(int(bits_rep), int(bits_def))


# ----------------------------------------------------------------------------- item walk


@dataclass
class Items:
    """Parsed items of a zipped buffer, in order."""

    rep: np.ndarray | None
    def_: np.ndarray | None
    visible: np.ndarray  # bool per item
    valid: np.ndarray  # bool per item (def == 0)
    value_start: np.ndarray  # byte position of the value (payload after any length prefix)
    value_len: np.ndarray  # payload bytes (0 for items without a value)
    buf: np.ndarray | None = None  # the bytes positions refer to

    @property
    def count(self) -> int:
        return int(self.visible.size)


def walk_items(
    buf: np.ndarray,
    row_starts: np.ndarray,
    row_ends: np.ndarray,
    cw: ControlWords,
    info: LevelInfo,
    fixed_bytes: int | None,
    length_bytes: int,
    rows_are_items: bool,
    what: str,
) -> Items:
    """Parse the items of rows ``[row_starts[i], row_ends[i])`` of ``buf``.

    One pass per item position within a row, vectorised over the rows still open.
    ``rows_are_items``: each row must be exactly one item (no repetition); with False and no
    repetition the "rows" are arbitrary spans walked item by item (fallback, no checks on
    row starts).
    """
    width = cw.width
    pos = np.asarray(row_starts, dtype=np.int64).copy()
    ends = np.asarray(row_ends, dtype=np.int64)
    if pos.size and (int(ends.max()) > buf.size or (ends < pos).any()):
        raise CorruptFileError(f"{what}: row byte ranges exceed the {buf.size}-byte data buffer")
    active = np.flatnonzero(pos < ends)
    if rows_are_items and active.size != pos.size:
        raise CorruptFileError(f"{what}: a row has no bytes")
    check_rows = cw.bits_rep > 0 and rows_are_items is False and info.max_rep > 0
    parts: list[tuple[np.ndarray, ...]] = []
    first = True
    while active.size:
        cur = pos[active]
        end = ends[active]
        if width and (cur + width > end).any():
            raise CorruptFileError(f"{what}: control word runs past the end of its row")
        words = read_uint(buf, cur, width) if width else np.zeros(cur.size, np.uint64)
        rep, def_ = cw.split(words)
        if rep is not None and check_rows:
            new_row = rep == info.max_rep
            if first and not new_row.all():
                raise CorruptFileError(f"{what}: a row does not start with rep level {info.max_rep}")
            if not first and new_row.any():
                raise CorruptFileError(f"{what}: a new row starts inside a repetition-index row")
        vis = info.visible(def_, cur.size) if rep is not None else np.ones(cur.size, dtype=bool)
        valid = def_ == 0 if def_ is not None else np.ones(cur.size, dtype=bool)
        vstart = cur + width
        if fixed_bytes is not None:
            vlen = np.where(vis, fixed_bytes, 0).astype(np.int64)
            size = width + vlen
        else:
            has = vis & valid
            if (vstart[has] + length_bytes > end[has]).any():
                raise CorruptFileError(f"{what}: value length prefix runs past the end of its row")
            vlen = np.zeros(cur.size, dtype=np.int64)
            if has.any():
                lens = read_uint(buf, vstart[has], length_bytes)
                if int(lens.max()) > buf.size:
                    raise CorruptFileError(f"{what}: value length {int(lens.max())} exceeds the buffer")
                vlen[has] = lens.astype(np.int64)
            vstart = vstart + np.where(has, length_bytes, 0)
            size = (vstart - cur) + vlen
        if (size <= 0).any():
            raise CorruptFileError(f"{what}: zero-sized item (no control word and no value)")
        new_pos = cur + size
        if (new_pos > end).any():
            raise CorruptFileError(f"{what}: a value runs past the end of its row")
        if rows_are_items and (new_pos != end).any():
            raise CorruptFileError(f"{what}: trailing bytes after a row's only item")
        pos[active] = new_pos
        parts.append((cur, words, vis, valid, vstart, vlen))
        active = active[new_pos < end]
        first = False
    if not parts:
        z = np.zeros(0, np.int64)
        e16 = np.zeros(0, np.uint16)
        return Items(
            e16 if cw.bits_rep else None,
            e16 if cw.bits_def else None,
            z.astype(bool),
            z.astype(bool),
            z,
            z,
            buf,
        )
    cols = [np.concatenate(c) for c in zip(*parts, strict=True)] if len(parts) > 1 else list(parts[0])
    if len(parts) > 1:
        order = np.argsort(cols[0], kind="stable")
        cols = [c[order] for c in cols]
    _, words, vis, valid, vstart, vlen = cols
    rep, def_ = cw.split(words)
    return Items(rep, def_, vis, valid, vstart, vlen, buf)


# ----------------------------------------------------------------------------- decoder


class FullZipDecoder(PageDecoder):
    """Decoder of one ``FullZipLayout`` page (see the module docstring for the bytes)."""

    def __init__(self, layout: object, num_rows: int, buffer_sizes: list[int], version: str,
                 codecs: CodecRegistry = CODECS) -> None:
        super().__init__(layout, num_rows, buffer_sizes, version)
        self.codecs = codecs
        fz = page_message(layout, "full_zip_layout")
        self.fz = fz
        what = "full-zip page"
        self.what = what
        self.info = level_info(fz.layers, what)
        self.cw = control_words(fz.bits_rep, fz.bits_def, what)
        if not fz.HasField("value_compression"):
            raise CorruptFileError(f"{what}: no value_compression")
        kind = fz.WhichOneof("details")
        if kind == "bits_per_value":
            bpv = int(fz.bits_per_value)
            if bpv <= 0:
                raise CorruptFileError(f"{what}: bits_per_value {bpv}")
            if bpv % 8:
                raise UnsupportedError(f"{what}: bit-packed full-zip values ({bpv} bits) are not supported")
            self.fixed_bytes: int | None = bpv // 8
            self.length_bytes = 0
        elif kind == "bits_per_offset":
            bpo = int(fz.bits_per_offset)
            if bpo not in (32, 64):
                raise UnsupportedError(f"{what}: {bpo}-bit value lengths (expected 32 or 64)")
            self.fixed_bytes = None
            self.length_bytes = bpo // 8
        else:
            raise CorruptFileError(f"{what}: neither bits_per_value nor bits_per_offset is set")
        if (self.cw.bits_rep > 0) != (self.info.max_rep > 0):
            raise CorruptFileError(
                f"{what}: bits_rep {self.cw.bits_rep} does not match {self.info.max_rep} list layers"
            )
        if not buffer_sizes:
            raise CorruptFileError(f"{what}: page has no buffers")
        if len(buffer_sizes) > 2:
            raise CorruptFileError(f"{what}: {len(buffer_sizes)} buffers (expected 1 or 2)")
        self.data_size = int(buffer_sizes[0])
        self.index_width = 0
        if len(buffer_sizes) == 2:
            size = int(buffer_sizes[1])
            if size % (num_rows + 1):
                raise CorruptFileError(
                    f"{what}: repetition index of {size} bytes does not hold {num_rows + 1} entries"
                )
            self.index_width = size // (num_rows + 1)
            if self.index_width not in (1, 2, 4, 8):
                raise CorruptFileError(f"{what}: repetition index entries of {self.index_width} bytes")
        elif self.cw.bits_rep:
            raise CorruptFileError(f"{what}: repetition but no repetition index")
        self.rep_index: np.ndarray | None = None

    # -- search cache

    def _check_index(self, ri: np.ndarray, full: bool) -> np.ndarray:
        if ri.size and ((np.diff(ri) < 0).any() or int(ri[-1]) > self.data_size or int(ri[0]) < 0):
            raise CorruptFileError(f"{self.what}: repetition index is not monotonic within the data buffer")
        if full and ri.size and (int(ri[0]) != 0 or int(ri[-1]) != self.data_size):
            raise CorruptFileError(
                f"{self.what}: repetition index spans {int(ri[0])}..{int(ri[-1])}, data buffer has "
                f"{self.data_size} bytes"
            )
        return ri

    def load_search_cache(self, fetch: Fetch) -> None:
        if self.index_width and self.rep_index is None:
            (raw,) = fetch([(1, 0, int(self.buffer_sizes[1]))])
            ri = unpack_uints(as_u8(raw), self.index_width, f"{self.what} repetition index")
            self.rep_index = self._check_index(ri, full=True)

    # -- decode

    def decode(self, fetch: Fetch, rows: np.ndarray | None) -> PageData:
        if rows is None:
            return self._decode_all(fetch)
        starts, ends = row_runs(rows, self.num_rows, self.what)
        n = int((ends - starts).sum())
        if n == 0:
            return self._finish(
                self._walk(np.zeros(0, np.uint8), np.zeros(0, np.int64), np.zeros(0, np.int64)), 0
            )
        if not self.index_width:
            if self.fixed_bytes is None:
                return self._finish(self._fallback_subset(fetch, np.asarray(rows, np.int64)), n)
            stride = self.cw.width + self.fixed_bytes
            if int(ends[-1]) * stride > self.data_size:
                raise CorruptFileError(f"{self.what}: data buffer too small for {self.num_rows} rows")
            ranges = [(0, int(a) * stride, int(b - a) * stride) for a, b in zip(starts, ends, strict=True)]
            bufs = fetch(ranges)
            buf = join_u8(bufs)
            bounds = np.arange(n + 1, dtype=np.int64) * stride
            return self._finish(self._walk(buf, bounds[:-1], bounds[1:]), n)
        # Row starts from the repetition index (cached, or the entries of each run).
        counts = ends - starts + 1
        if self.rep_index is not None:
            entries = self.rep_index[ragged_arange(starts, counts)]
        else:
            w = self.index_width
            raw = fetch([(1, int(a) * w, int(c) * w) for a, c in zip(starts, counts, strict=True)])
            entries = unpack_uints(join_u8(raw), w, f"{self.what} repetition index")
            if entries.size != int(counts.sum()):
                raise CorruptFileError(f"{self.what}: short read of the repetition index")
        run_id = np.repeat(np.arange(starts.size), counts)
        first_idx = np.concatenate(([0], np.cumsum(counts)[:-1]))
        last_idx = np.cumsum(counts) - 1
        lo, hi = entries[first_idx], entries[last_idx]
        if (np.diff(entries)[np.diff(run_id) == 0] < 0).any() or int(hi.max()) > self.data_size:
            raise CorruptFileError(f"{self.what}: repetition index is not monotonic within the data buffer")
        data = join_u8(fetch([(0, int(a), int(b - a)) for a, b in zip(lo, hi, strict=True)]))
        if data.size != int((hi - lo).sum()):
            raise CorruptFileError(f"{self.what}: short read of the data buffer")
        base = np.concatenate(([0], np.cumsum(hi - lo)[:-1]))
        adj = entries - lo[run_id] + base[run_id]
        is_last = np.zeros(entries.size, bool)
        is_last[last_idx] = True
        is_first = np.zeros(entries.size, bool)
        is_first[first_idx] = True
        return self._finish(self._walk(data, adj[~is_last], adj[~is_first]), n)

    def _decode_all(self, fetch: Fetch) -> PageData:
        n = self.num_rows
        ranges = [(0, 0, self.data_size)]
        if self.index_width and self.rep_index is None:
            ranges.append((1, 0, int(self.buffer_sizes[1])))
        got = fetch(ranges)
        if len(got) != len(ranges):
            raise CorruptFileError(
                f"{self.what}: fetch returned {len(got)} buffers for {len(ranges)} requests"
            )
        buf = as_u8(got[0])
        if buf.size != self.data_size:
            raise CorruptFileError(f"{self.what}: read {buf.size} bytes of a {self.data_size}-byte buffer")
        if self.index_width:
            if self.rep_index is not None:
                ri = self.rep_index
            else:
                ri = unpack_uints(as_u8(got[1]), self.index_width, f"{self.what} repetition index")
                ri = self._check_index(ri, full=True)
            items = self._walk(buf, ri[:-1], ri[1:])
        elif self.fixed_bytes is not None:
            stride = self.cw.width + self.fixed_bytes
            if n * stride != buf.size:
                raise CorruptFileError(
                    f"{self.what}: {buf.size} data bytes, expected {n} rows x {stride} bytes"
                )
            items = self._fixed_no_rep(buf, n, stride)
        else:
            items = self._walk_fallback(buf)
            if items.count != n:
                raise CorruptFileError(f"{self.what}: {items.count} values for {n} rows")
        if items.count != int(self.fz.num_items):
            raise CorruptFileError(
                f"{self.what}: parsed {items.count} items, layout says {self.fz.num_items}"
            )
        nvis = int(items.visible.sum())
        if nvis != int(self.fz.num_visible_items):
            raise CorruptFileError(
                f"{self.what}: parsed {nvis} visible items, layout says {self.fz.num_visible_items}"
            )
        return self._finish(items, n)

    # -- helpers

    def _walk(self, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> Items:
        if self.fixed_bytes is not None and not self.cw.bits_rep and starts.size:
            stride = self.cw.width + self.fixed_bytes
            if bool((ends - starts == stride).all()) and bool((starts[1:] == ends[:-1]).all()):
                items = self._fixed_no_rep(buf[int(starts[0]) : int(ends[-1])], starts.size, stride)
                items.buf = buf[int(starts[0]) :]
                return items
        return walk_items(
            buf,
            starts,
            ends,
            self.cw,
            self.info,
            self.fixed_bytes,
            self.length_bytes,
            rows_are_items=not self.cw.bits_rep,
            what=self.what,
        )

    def _fixed_no_rep(self, buf: np.ndarray, n: int, stride: int) -> Items:
        """Fast path: fixed-width values, no repetition -> a (rows, stride) matrix."""
        width = self.cw.width
        mat = buf[: n * stride].reshape(n, stride)
        def_ = None
        if width:
            words = mat[:, 0].astype(np.uint64)
            for k in range(1, width):
                words |= mat[:, k].astype(np.uint64) << np.uint64(8 * k)
            _, def_ = self.cw.split(words)
        starts = np.arange(n, dtype=np.int64) * stride + width
        valid = def_ == 0 if def_ is not None else np.ones(n, bool)
        return Items(None, def_, np.ones(n, bool), valid, starts, np.full(n, self.fixed_bytes, np.int64), buf)

    def _walk_fallback(self, buf: np.ndarray) -> Items:
        """Variable width without a repetition index (Lance always writes one): item by item."""
        return walk_items(
            buf,
            np.zeros(1, np.int64),
            np.full(1, buf.size, np.int64),
            self.cw,
            self.info,
            self.fixed_bytes,
            self.length_bytes,
            rows_are_items=False,
            what=self.what,
        )

    def _fallback_subset(self, fetch: Fetch, rows: np.ndarray) -> Items:
        (raw,) = fetch([(0, 0, self.data_size)])
        buf = as_u8(raw)
        items = self._walk_fallback(buf)
        if items.count != self.num_rows:
            raise CorruptFileError(f"{self.what}: {items.count} values for {self.num_rows} rows")
        pick = lambda a: None if a is None else a[rows]  # noqa: E731
        return Items(
            pick(items.rep),
            pick(items.def_),
            items.visible[rows],
            items.valid[rows],
            items.value_start[rows],
            items.value_len[rows],
            buf,
        )

    def _finish(self, items: Items, num_rows: int) -> PageData:
        buf = items.buf if items.buf is not None else np.zeros(0, np.uint8)
        vis = items.visible
        if self.fixed_bytes is not None:
            data = gather_segments(buf, items.value_start[vis], items.value_len[vis])
            block: DataBlock = FixedWidthBlock(data, self.fixed_bytes * 8, int(vis.sum()))
        else:
            lens = np.where(items.valid, items.value_len, 0)[vis]
            data = gather_segments(buf, items.value_start[vis], lens)
            odt = np.uint32 if self.length_bytes == 4 and data.size < 2**32 else np.uint64
            offsets = np.zeros(lens.size + 1, dtype=odt)
            offsets[1:] = np.cumsum(lens)
            block = VariableWidthBlock(offsets, data, int(lens.size))
        values = self.codecs.decompress_per_value(self.fz.value_compression, block)
        return PageData(
            num_rows=num_rows,
            values=values,
            rep=items.rep,
            def_=items.def_,
            layers=list(self.info.layers),
        )
