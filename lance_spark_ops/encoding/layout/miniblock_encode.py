"""Writing mini-block pages (``MiniBlockLayout``, 2.1 and 2.2) - the encoder half of
``miniblock.py``, whose docstring describes the page buffers and the chunk format.

``encode_miniblock_page`` takes the values already compressed into chunks by a codec
(``MiniBlockCompressed``) and, as Lance's ``PrimitiveStructuralEncoder::encode_miniblock``:

1. cuts the rep / def levels into one slice per value chunk: a chunk gets the levels up to
   and including its last *visible* item; invisible levels (null / empty lists) at a chunk
   boundary go to the next chunk, and the last chunk takes every remaining level;
2. compresses each slice as a block with the codec the page plan chose for all of its
   levels (``PagePlan.rep_codec`` / ``def_codec``, from ``strategy.level_codec`` - Lance's
   ``compress_levels`` + the versions' block strategies: 2.2 Rle when ``8 + 3 x entries``
   beats raw u16 and the bitpacking estimate; bitpacking unless at most 1024 levels would
   not shrink - InlineBitpacking for <= 1024 levels, else OutOfLineBitpacking at the page's
   max width -; else Flat 16), through the registry's ``encode_blocks``;
3. computes the repetition index (rep pages): per chunk the rows that *finish* in it and
   the levels left over after its last row start, corrected when the next chunk begins
   with a new row; the last chunk finishes its row;
4. serialises every chunk (header, 0xfe padding to 8 bytes, rep, def, value buffers, each
   padded to 8) and the chunk metadata words.

Worked example (2.1, int32 ``[1, None, 3]`` with Flat values, as pylance writes it): 3 def
levels do not shrink under inline bitpacking (130 bytes > 6), so def is Flat 16. The one
chunk is ``03 00 | 06 00 | 0c 00 | fe fe`` (3 levels, 6 bytes of def, 12 bytes of values),
``00 00 01 00 00 00 fe fe``, ``01 00 00 00 00 00 00 00 03 00 00 00 fe fe fe fe`` - 32 bytes,
so the metadata word is ``(32 / 8 - 1) << 4 | 0`` = ``30 00``.

Vectorised: levels are sliced with one ``cumsum``, level codecs run over every chunk in
one call, headers are built as one byte matrix; only the final copy of each chunk's
buffers into place is a loop over chunks (memcpy-sized slices).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.compression._arrays import (
    exclusive_cumsum,
    pad_to,
    ragged_arange,
    scatter_ragged,
)
from lance_spark_ops.encoding.compression.encoded import MiniBlockCompressed
from lance_spark_ops.encoding.compression.registry import CODECS, CodecRegistry
from lance_spark_ops.encoding.compression.strategy import Codec
from lance_spark_ops.encoding.layers import max_rep, max_visible_def
from lance_spark_ops.encoding.layout.miniblock import ALIGN
from lance_spark_ops.encoding.page import EncodedPage
from lance_spark_ops.errors import InvalidInputError, UnsupportedError

FILL = 0xFE
LARGE_CHUNK_VERSIONS = frozenset({"2.2"})
MAX_CHUNK_BYTES = {False: 32 * 1024, True: (1 << 28) * ALIGN}
U16 = 0xFFFF


@dataclass
class CompressedLevels:
    """One compressed level buffer per chunk: ``data`` holds them back to back."""

    data: np.ndarray  # uint8
    sizes: np.ndarray  # bytes per chunk
    encoding: pb.CompressiveEncoding


# ------------------------------------------------------------------------------ levels


def compress_levels(levels: np.ndarray, counts: np.ndarray, codec: Codec,
                    codecs: CodecRegistry = CODECS) -> CompressedLevels:
    """Compress ``counts[i]`` consecutive levels per chunk with the page's level ``codec``
    (the plan's choice, ``strategy.level_codec``)."""
    levels = np.ascontiguousarray(levels, dtype=np.uint16)
    data, sizes, enc = codecs.encode_blocks(codec, levels, counts)
    if len(sizes) and int(sizes.max()) > U16:
        raise UnsupportedError(f"a chunk's levels compress to {int(sizes.max())} bytes, over the u16 limit")
    return CompressedLevels(data, np.asarray(sizes, dtype=np.int64), enc)


def level_counts(
    value_counts: np.ndarray, num_levels: int, def_: np.ndarray | None, max_visible: int | None,
    invisible: np.ndarray | None = None,
) -> np.ndarray:
    """Levels of each chunk (module doc, step 1). ``max_visible`` is None without lists;
    ``invisible``: the positions of the levels with def > ``max_visible`` when known."""
    if max_visible is None or def_ is None:
        if num_levels != int(value_counts.sum()):
            raise InvalidInputError(f"{num_levels} levels for {int(value_counts.sum())} values without lists")
        return value_counts.astype(np.int64)
    last = np.cumsum(value_counts)[:-1] - 1  # ordinal of each chunk's last visible item
    if invisible is None:
        visible = np.flatnonzero(def_ <= max_visible)
        num_visible = len(visible)
    else:  # the j-th visible level is j + the invisible levels with fewer visible ones before them
        num_visible = num_levels - len(invisible)
        visible_before = np.asarray(invisible, dtype=np.int64) - np.arange(len(invisible))
        visible = None
    if num_visible != int(value_counts.sum()):
        raise InvalidInputError(
            f"levels have {num_visible} visible items but the values chunks hold {int(value_counts.sum())}"
        )
    if visible is not None:
        ends = visible[last] + 1
    else:
        ends = last + np.searchsorted(visible_before, last, side="right") + 1
    return np.diff(np.concatenate([[0], ends, [num_levels]])).astype(np.int64)


def repetition_index(rep: np.ndarray, counts: np.ndarray, max_rep: int,
                     row_starts: np.ndarray | None = None) -> np.ndarray:
    """(chunks, 2) u64: rows finishing in each chunk, levels left over (module doc, step 3).
    ``row_starts``: the levels with rep == ``max_rep`` when known."""
    starts = exclusive_cumsum(counts)
    ends = starts + counts
    if row_starts is None:
        row_starts = np.flatnonzero(rep == max_rep)  # level of each row's first entry
    before_start = np.searchsorted(row_starts, starts)  # rows starting before each chunk
    before_end = np.searchsorted(row_starts, ends)
    padded = np.append(row_starts, -1)  # index -1 / len(row_starts): no such row (-1)
    first = padded[before_start] == starts  # the chunk begins with a row start
    rows = before_end - before_start - first
    last_row = np.where(before_end > before_start, padded[before_end - 1], -1)  # last row start inside
    leftover = np.where(last_row >= starts, ends - last_row, counts)
    leftover[-1] = 0
    fix = np.flatnonzero(first[1:] & (leftover[:-1] != 0))
    rows[fix] += 1
    leftover[fix] = 0
    rows[-1] += 1
    return np.stack([rows, leftover], axis=1).astype("<u8")


# ------------------------------------------------------------------------------ chunks


def _value_counts(values: MiniBlockCompressed) -> np.ndarray:
    logs = np.asarray(values.chunk_log_values, dtype=np.int64)
    counts = np.left_shift(1, logs)
    if len(counts):
        counts[-1] = values.num_values - int(counts[:-1].sum())
    if len(counts) == 0 or counts[-1] <= 0 or (logs[-1] and counts[-1] != 1 << int(logs[-1])):
        raise InvalidInputError(
            f"mini-block chunks (logs {logs.tolist()}) do not describe {values.num_values} values"
        )
    return counts


def _header(sections: list[np.ndarray], widths: list[int]) -> np.ndarray:
    """(chunks, padded header size) bytes: the little-endian fields, then 0xfe padding."""
    size = sum(widths)
    cols = [
        np.asarray(s, dtype=f"<u{w}").view(np.uint8).reshape(-1, w)
        for s, w in zip(sections, widths, strict=True)
    ]
    out = np.full((len(sections[0]), int(pad_to(size, ALIGN))), FILL, dtype=np.uint8)
    out[:, :size] = np.hstack(cols)
    return out


def serialize_chunks(
    num_levels: np.ndarray, parts: list[tuple[np.ndarray, np.ndarray, int]], logs: np.ndarray, large: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Chunk bytes and metadata words. ``parts``: (data, per-chunk sizes, header width) for
    rep, def and each value buffer in order."""
    if (num_levels > U16).any():
        raise UnsupportedError(f"a mini-block chunk holds {int(num_levels.max())} levels, over the u16 limit")
    for _, sizes, width in parts:
        if len(sizes) and int(sizes.max()) >= 1 << (8 * width):
            raise UnsupportedError(
                f"a chunk buffer of {int(sizes.max())} bytes does not fit {8 * width} bits"
            )
    header = _header([num_levels] + [s for _, s, _ in parts], [2] + [w for _, _, w in parts])
    padded = [pad_to(s.astype(np.int64), ALIGN) for _, s, _ in parts]
    chunk_sizes = header.shape[1] + (np.sum(padded, axis=0) if padded else 0)
    if int(chunk_sizes.max()) > MAX_CHUNK_BYTES[large]:
        raise UnsupportedError(
            f"a mini-block chunk of {int(chunk_sizes.max())} bytes exceeds the version's limit"
        )
    starts = exclusive_cumsum(chunk_sizes)
    # every byte is written below: headers, each buffer's bytes, then FILL up to its padding
    out = np.empty(int(chunk_sizes.sum()), dtype=np.uint8)
    out[starts[:, None] + np.arange(header.shape[1])[None, :]] = header
    pos = starts + header.shape[1]
    gaps = []
    for (data, sizes, _), pad in zip(parts, padded, strict=True):
        scatter_ragged(out, pos, np.asarray(data).view(np.uint8).reshape(-1), exclusive_cumsum(sizes), sizes)
        gaps.append((pos + sizes, pad - sizes))
        pos = pos + pad
    if gaps:
        out[ragged_arange(np.concatenate([g[0] for g in gaps]), np.concatenate([g[1] for g in gaps]))] = FILL
    words = ((chunk_sizes // ALIGN - 1) << 4) | logs.astype(np.int64)
    return out, words.astype("<u4" if large else "<u2")


# ------------------------------------------------------------------------------ page


@dataclass
class PageLevels:
    """The levels of a page cut per chunk and compressed."""

    counts: np.ndarray  # levels per chunk (zeros without levels)
    rep: CompressedLevels | None = None
    def_: CompressedLevels | None = None


def _page_levels(
    value_counts: np.ndarray, rep: np.ndarray | None, def_: np.ndarray | None, layers: list[int],
    rep_codec: Codec | None, def_codec: Codec | None,
) -> PageLevels:
    out = _page_level_counts(value_counts, rep, def_, layers, rep_codec, def_codec)
    if rep is not None and rep_codec is not None:
        out.rep = compress_levels(rep, out.counts, rep_codec)
    if def_ is not None and def_codec is not None:
        out.def_ = compress_levels(def_, out.counts, def_codec)
    return out


# level codecs whose chunks are compressed independently of each other (encode_blocks)
_BATCHED_LEVEL_CODECS = frozenset({"flat", "inline_bitpacking", "out_of_line_bitpacking", "rle"})


@dataclass
class LevelPage:
    """What ``page_levels_many`` needs of one mini-block page."""

    values: MiniBlockCompressed
    rep: np.ndarray | None
    def_: np.ndarray | None
    layers: list[int]
    rep_codec: Codec | None
    def_codec: Codec | None
    invisible: np.ndarray | None = None  # positions of the invisible levels, when known


def page_levels_many(pages: list[LevelPage]) -> list[PageLevels]:
    """The levels of several pages (the pages one flush of a leaf splits into), cut per
    chunk and compressed: consecutive pages whose levels use an equal codec (the usual
    case) are compressed in one ``encode_blocks`` call over all their chunks, then the
    bytes are cut back per page - the same bytes as page by page (chunks are compressed
    independently), without the codec's fixed costs per page."""
    out = [_page_level_counts(_value_counts(p.values), p.rep, p.def_, p.layers, p.rep_codec, p.def_codec,
                              p.invisible) for p in pages]
    for attr, codec_attr in (("rep", "rep_codec"), ("def_", "def_codec")):
        i = 0
        while i < len(pages):
            codec = getattr(pages[i], codec_attr)
            if getattr(pages[i], attr) is None or codec is None:
                i += 1
                continue
            j = i + 1
            if codec.kind in _BATCHED_LEVEL_CODECS:
                while (j < len(pages) and getattr(pages[j], attr) is not None
                       and getattr(pages[j], codec_attr) == codec):
                    j += 1
            if j == i + 1:
                setattr(out[i], attr, compress_levels(getattr(pages[i], attr), out[i].counts, codec))
            else:
                levels = np.concatenate([np.asarray(getattr(p, attr), dtype=np.uint16) for p in pages[i:j]])
                both = compress_levels(levels, np.concatenate([o.counts for o in out[i:j]]), codec)
                ends = np.concatenate(([0], np.cumsum(both.sizes)))
                c0 = 0
                for o in out[i:j]:
                    c1 = c0 + len(o.counts)
                    setattr(o, attr, CompressedLevels(both.data[int(ends[c0]):int(ends[c1])],
                                                      both.sizes[c0:c1], both.encoding))
                    c0 = c1
            i = j
    return out


def _page_level_counts(
    value_counts: np.ndarray, rep: np.ndarray | None, def_: np.ndarray | None, layers: list[int],
    rep_codec: Codec | None, def_codec: Codec | None, invisible: np.ndarray | None = None,
) -> PageLevels:
    """The page's levels per chunk, checked, not yet compressed."""
    reps = max_rep(layers)
    max_visible = max_visible_def(layers) if reps else None
    if rep is not None and not reps:
        raise InvalidInputError("repetition levels given but no list layer")
    if rep is None and reps:
        raise InvalidInputError("list layers given without repetition levels")
    if rep is not None and def_ is not None and len(rep) != len(def_):
        raise InvalidInputError(f"{len(rep)} repetition levels but {len(def_)} definition levels")
    levels = rep if rep is not None else def_
    if levels is None:
        return PageLevels(np.zeros(len(value_counts), dtype=np.int64))
    if (rep is not None and rep_codec is None) or (def_ is not None and def_codec is None):
        raise InvalidInputError("mini-block levels need their codecs (PagePlan.rep_codec / def_codec)")
    return PageLevels(level_counts(value_counts, len(levels), def_, max_visible, invisible))


def encode_miniblock_page(
    num_rows: int,
    values: MiniBlockCompressed,
    rep: np.ndarray | None,
    def_: np.ndarray | None,
    layers: list[int],
    version: str,
    dictionary: tuple[np.ndarray, pb.CompressiveEncoding, int] | None = None,
    num_items: int | None = None,
    *,
    rep_codec: Codec | None = None,
    def_codec: Codec | None = None,
    levels: PageLevels | None = None,
    row_starts: np.ndarray | None = None,
) -> EncodedPage:
    """One mini-block page from compressed value chunks and the page's levels.

    ``rep`` / ``def_`` hold one u16 per level (None: no lists / all valid); ``layers`` are
    ``RepDefLayer`` values innermost first; ``dictionary`` is (encoded buffer, its
    encoding, number of items) when ``values`` are dictionary indices; ``num_items``
    defaults to the number of values; ``rep_codec`` / ``def_codec`` are the plan's level
    codecs (``PagePlan.rep_codec`` / ``def_codec``), required when those levels are given;
    ``levels``: the levels already cut and compressed by ``page_levels_many``;
    ``row_starts``: the levels with rep == max rep, when known.
    """
    if version not in ("2.1", "2.2"):
        raise UnsupportedError(f"mini-block pages are written for versions 2.1 and 2.2, not {version}")
    large = version in LARGE_CHUNK_VERSIONS
    counts = _value_counts(values)
    if levels is None:
        levels = _page_levels(counts, rep, def_, layers, rep_codec, def_codec)
    parts = [(c.data, c.sizes, 2) for c in (levels.rep, levels.def_) if c is not None]
    sizes = np.asarray(values.chunk_buffer_sizes, dtype=np.int64).reshape(len(counts), -1)
    parts += [(buf, sizes[:, j], 4 if large else 2) for j, buf in enumerate(values.buffers)]
    chunks, words = serialize_chunks(levels.counts, parts, np.asarray(values.chunk_log_values), large)
    layout = pb.MiniBlockLayout(
        value_compression=values.encoding,
        rep_compression=levels.rep.encoding if levels.rep else None,
        def_compression=levels.def_.encoding if levels.def_ else None,
        layers=layers,
        num_buffers=len(values.buffers),
        num_items=values.num_values if num_items is None else num_items,
        has_large_chunk=large,
    )
    buffers: list[np.ndarray | bytes] = [words.view(np.uint8), chunks]
    if dictionary is not None:
        data, enc, n = dictionary
        layout.dictionary.CopyFrom(enc)
        layout.num_dictionary_items = int(n)
        buffers.append(data)
    if rep is not None:
        index = repetition_index(np.asarray(rep), levels.counts, max_rep(layers), row_starts)
        if int(index[:, 0].sum()) != num_rows:
            raise InvalidInputError(f"levels start {int(index[:, 0].sum())} rows, page has {num_rows}")
        layout.repetition_index_depth = 1
        buffers.append(index.view(np.uint8).reshape(-1))
    elif values.num_values != num_rows:
        raise InvalidInputError(f"page without lists has {values.num_values} values but {num_rows} rows")
    return EncodedPage(num_rows, buffers, pb.PageLayout(mini_block_layout=layout))
