"""Full-zip page encoder (the bytes are described in ``fullzip.py``'s docstring).

``encode_fullzip_page`` zips per-value compressed values (one value per *visible* item)
with the items' control words, as Lance's ``serialize_full_zip_fixed`` /
``serialize_full_zip_variable`` do:

- control word width: ``bits_rep = bit_length(max rep)``, ``bits_def = bit_length(max def)``
  over the page's levels (so a page whose lists are never null gets fewer bits); 1, 2 or 4
  bytes when the sum is <= 8, <= 16 or more; ``word = rep << bits_def | def``;
- fixed width: every visible item carries ``bits_per_value / 8`` bytes (null items too);
- variable width: a visible *valid* item carries a u32 / u64 length (the offsets' width)
  and its bytes; visible null items carry nothing after their control word;
- repetition index: the byte offset of every row's first item, then the buffer size,
  byte-packed in 1, 2, 4 or 8 bytes chosen from an *upper bound* of the buffer size (as
  Lance's ``BytepackedIntegerEncoder``): fixed width: the exact size, and only when there
  is repetition; variable width: value bytes + control words + one length per value,
  always.

Worked example (``list<string>`` page, rows ``[["ab"], None]``, layers [ALL_VALID_ITEM,
NULLABLE_LIST]; rep ``[1, 1]``, def ``[0, 1]``): bits_rep 1, bits_def 1, words ``02`` and
``03``; zipped ``02 02000000 6162 | 03``; the bound 2 + 2 + 4 = 8 selects u8 entries
``00 07 08``.

Everything is vectorised: item sizes -> ``cumsum`` -> control words and length prefixes
scattered byte-column by byte-column, value bytes copied with one ragged scatter.
"""

from __future__ import annotations

import numpy as np

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import DataBlock, FixedWidthBlock, VariableWidthBlock
from lance_spark_ops.encoding.compression._arrays import as_u8, exclusive_cumsum, scatter_ragged
from lance_spark_ops.encoding.compression.variable import gather_segments
from lance_spark_ops.encoding.layers import level_info
from lance_spark_ops.encoding.page import EncodedPage
from lance_spark_ops.errors import InvalidInputError, UnsupportedError


def bytepack_width(max_value: int) -> int:
    """Bytes per entry Lance's ``BytepackedIntegerEncoder`` picks for ``max_value``."""
    if max_value <= 0:
        return 0
    return 1 if max_value < 2**8 else 2 if max_value < 2**16 else 4 if max_value < 2**32 else 8


def _levels(levels: np.ndarray | None, what: str) -> np.ndarray | None:
    if levels is None:
        return None
    lv = np.asarray(levels)
    if lv.ndim != 1 or (lv.size and (int(lv.min()) < 0 or int(lv.max()) > 0xFFFF)):
        raise InvalidInputError(f"full-zip page: {what} levels must be one u16 per item")
    return lv.astype(np.uint16, copy=False)


def control_words(
    rep: np.ndarray | None, def_: np.ndarray | None, count: int
) -> tuple[np.ndarray, int, int, int]:
    """(words as uint32, bits_rep, bits_def, bytes per word) of the page's items."""
    bits_rep = int(rep.max()).bit_length() if rep is not None and rep.size else 0
    bits_def = int(def_.max()).bit_length() if def_ is not None and def_.size else 0
    total = bits_rep + bits_def
    if bits_rep > 16 or bits_def > 16:
        raise UnsupportedError(f"full-zip page: {bits_rep} rep + {bits_def} def bits per control word")
    width = 0 if total == 0 else 1 if total <= 8 else 2 if total <= 16 else 4
    words = np.zeros(count, np.uint32)
    if rep is not None and bits_rep:
        words |= rep.astype(np.uint32) << np.uint32(bits_def)
    if def_ is not None and bits_def:
        words |= def_.astype(np.uint32)
    return words, bits_rep, bits_def, width


def _scatter_le(out: np.ndarray, pos: np.ndarray, values: np.ndarray, width: int) -> None:
    """Write ``values`` as ``width``-byte little-endian ints at byte positions ``pos``."""
    v = values.astype(np.uint64)
    for k in range(width):
        out[pos + k] = ((v >> np.uint64(8 * k)) & np.uint64(0xFF)).astype(np.uint8)


def _value_payload(values: DataBlock, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, str]:
    """(payload bytes of every visible item, payload byte source, length-prefix width, kind)
    for fixed or variable per-value output."""
    if isinstance(values, FixedWidthBlock):
        if values.bits_per_value <= 0 or values.bits_per_value % 8:
            raise UnsupportedError(f"full-zip page: {values.bits_per_value}-bit values are not byte aligned")
        bpv = values.bits_per_value // 8
        data = as_u8(values.data)
        if data.size < values.num_values * bpv:
            raise InvalidInputError(f"full-zip page: {data.size} bytes for {values.num_values} values")
        return np.full(values.num_values, bpv, np.int64), data[: values.num_values * bpv], 0, "fixed"
    if isinstance(values, VariableWidthBlock):
        offs = np.asarray(values.offsets)
        lw = offs.dtype.itemsize
        if lw not in (4, 8):
            raise UnsupportedError(f"full-zip page: {lw * 8}-bit value offsets (expected 32 or 64)")
        o = offs.astype(np.int64)
        data = as_u8(values.data)
        if o.size != values.num_values + 1 or (o.size and (o[0] < 0 or o[-1] > data.size)):
            raise InvalidInputError("full-zip page: value offsets do not match the value bytes")
        lens = np.diff(o)
        if (lens < 0).any():
            raise InvalidInputError("full-zip page: value offsets are not monotonic")
        lens = np.where(valid, lens, 0)
        if (lens == np.diff(o)).all():
            payload = data[int(o[0]) : int(o[-1])] if o.size else data[:0]
        else:  # bytes under null values are not written
            payload = gather_segments(data, o[:-1], lens)
        return lens, payload, lw, "variable"
    raise UnsupportedError(f"full-zip page: per-value output of type {type(values).__name__}")


def encode_fullzip_page(
    num_rows: int,
    values: DataBlock,
    value_encoding: pb.CompressiveEncoding,
    rep: np.ndarray | None,
    def_: np.ndarray | None,
    layers: list[int],
    num_items: int,
    num_visible_items: int,
    version: str,
) -> EncodedPage:
    """One full-zip page from per-value compressed ``values`` (one per visible item) and the
    page's levels (one u16 per item; ``None``: no lists / all valid)."""
    if version not in ("2.1", "2.2"):
        raise UnsupportedError(f"full-zip pages exist in file versions 2.1 and 2.2, not {version}")
    info = level_info(layers, "full-zip page")
    rep, def_ = _levels(rep, "rep"), _levels(def_, "def")
    if def_ is not None and def_.size and not def_.any():
        def_ = None  # no null / empty item: no def bits (Lance never writes 0-bit levels)
    count = len(rep) if rep is not None else values.num_values
    if def_ is not None and len(def_) != count:
        raise InvalidInputError(f"full-zip page: {len(def_)} def levels for {count} items")
    visible = np.ones(count, bool) if rep is None or def_ is None else def_ <= info.max_visible_def
    nvis = int(visible.sum())
    if nvis != values.num_values:
        raise InvalidInputError(f"full-zip page: {values.num_values} values for {nvis} visible items")
    if (num_items, num_visible_items) != (count, nvis):
        raise InvalidInputError(
            f"full-zip page: told {num_items} items / {num_visible_items} visible, "
            f"levels give {count} / {nvis}"
        )
    if rep is None and count != num_rows:
        raise InvalidInputError(f"full-zip page: {count} items for {num_rows} rows without repetition")
    words, bits_rep, bits_def, width = control_words(rep, def_, count)
    valid_vis = (def_ == 0)[visible] if def_ is not None else np.ones(nvis, bool)
    plen, payload, lw, kind = _value_payload(values, valid_vis)
    zipped, item_start = _zip(words, width, visible, plen, payload, lw, valid_vis)
    layout = pb.FullZipLayout(
        bits_rep=bits_rep,
        bits_def=bits_def,
        num_items=count,
        num_visible_items=nvis,
        value_compression=value_encoding,
        layers=list(layers),
    )
    buffers: list[np.ndarray | bytes] = [zipped]
    if kind == "fixed":
        layout.bits_per_value = int(values.bits_per_value)
        bound = zipped.size if rep is not None else 0
    else:
        layout.bits_per_offset = lw * 8
        bound = as_u8(values.data).size + width * count + lw * values.num_values
    index_width = bytepack_width(bound)
    if index_width:
        starts = item_start if rep is None else item_start[rep == info.max_rep]
        if len(starts) != num_rows:
            raise InvalidInputError(f"full-zip page: levels start {len(starts)} rows, page has {num_rows}")
        entries = np.append(starts, zipped.size).astype(f"<u{index_width}")
        buffers.append(entries.view(np.uint8))
    return EncodedPage(num_rows, buffers, pb.PageLayout(full_zip_layout=layout))


def _zip(
    words: np.ndarray,
    width: int,
    visible: np.ndarray,
    plen: np.ndarray,
    payload: np.ndarray,
    lw: int,
    valid_vis: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The zipped buffer and each item's byte offset in it."""
    count = len(words)
    has_prefix = np.zeros(count, bool)
    item_payload = np.zeros(count, np.int64)
    vis_idx = np.flatnonzero(visible)
    item_payload[vis_idx] = plen
    if lw:
        has_prefix[vis_idx] = valid_vis
    header = width + lw * has_prefix
    sizes = header + item_payload
    if width == 0 and lw == 0:  # fixed width, no levels: the values are the buffer
        return np.ascontiguousarray(payload), np.arange(count, dtype=np.int64) * (plen[0] if count else 0)
    item_start = exclusive_cumsum(sizes)
    total = int(sizes.sum())
    if lw == 0 and visible.all():  # fixed width behind control words: a (items, width + bpv) matrix
        bpv = int(plen[0]) if count else 0
        mat = np.empty((count, width + bpv), np.uint8)
        for k in range(width):
            mat[:, k] = (words >> np.uint32(8 * k)).astype(np.uint8)
        mat[:, width:] = payload.reshape(count, bpv)
        return mat.reshape(-1), item_start
    out = np.empty(total, np.uint8)
    _scatter_le(out, item_start, words, width)
    if lw:
        pre = np.flatnonzero(has_prefix)
        _scatter_le(out, item_start[pre] + width, item_payload[pre], lw)
    scatter_ragged(out, item_start + header, payload, exclusive_cumsum(item_payload), item_payload)
    return out, item_start
