"""Constant / all-null page layout: ``PageLayout`` oneof slot 2.

File version 2.1 calls it ``AllNullLayout`` (only ``layers``, field 5); 2.2 turned it into
``ConstantLayout``: ``layers`` (5), ``inline_value`` (6, optional bytes), ``rep_compression``
(7), ``def_compression`` (8), ``num_rep_values`` (9), ``num_def_values`` (10). No values are
stored per item; the page is one scalar (or none: all null) plus optional rep/def levels.

Page buffers, decided by whether ``inline_value`` is set and the buffer count:

    inline, 0 buffers     scalar = inline_value, no levels (constant ints / fixed binary <= 32 B)
    inline, 2 buffers     scalar = inline_value, [rep][def]
    no inline, 0 buffers  all null, no levels (2.1 / 2.2 simple all-null column)
    no inline, 1 buffer   [scalar value block], no levels (constant strings, fixed binary > 32 B)
    no inline, 2 buffers  all null, [rep][def] (all-null lists / structs)
    no inline, 3 buffers  [scalar value block][rep][def]

A level buffer of 0 bytes means "no such levels". Levels are raw little-endian u16 unless
``rep_compression`` / ``def_compression`` is set (2.2, e.g. Rle or InlineBitpacking in block
form), in which case the buffer decompresses to ``num_rep_values`` / ``num_def_values`` u16s.

Scalar value block (the Arrow buffers of a length-1 array)::

    u32 num_buffers, u32 size * num_buffers, buffer bytes...

One buffer: the fixed-width value (e.g. ``binary(64)``: ``01000000 40000000`` + 64 bytes).
Two buffers: offsets (``[0, len]`` as u32, or u64 for large types) + the bytes, e.g. "hello":
``02000000 08000000 05000000 00000000 05000000 68656c6c6f``. A bool scalar is a 1-byte bitmap
(bit 0 is the value).

Decoded ``PageData.values`` is a ``ConstantBlock`` holding the scalar and the number of
visible items (``None`` for an all-null page). A simple all-null page (layers
[NULLABLE_ITEM], no levels stored) gets synthesized def levels of 1 so every item reads null.

Writing (``encode_constant_page``), as pylance 14 does:

- all null, no lists, one NULLABLE_ITEM layer: no buffers at all (2.1 and 2.2);
- all null with levels (null / empty lists, null structs): 2.1 ``[rep][def]`` raw u16 (an
  empty buffer for absent levels); 2.2 each level buffer compressed on its own with the
  block codec the page plan chose (``PagePlan.rep_codec`` / ``def_codec`` from
  ``strategy.level_codec``: Rle for long runs, bitpacking, Flat for tiny pages),
  ``num_rep_values`` / ``num_def_values`` set;
- a constant (2.2 only): fixed-width values of <= 32 bytes inline (ints, decimals, bools as
  a 1-byte bitmap), anything else as a scalar value block; levels stay raw u16 with no
  counts. Example: 1000 x "hello" -> one 25-byte buffer
  ``02000000 08000000 05000000 00000000 05000000 68656c6c6f`` and layers [ALL_VALID_ITEM].
"""

from __future__ import annotations

import numpy as np

from lance_spark_ops._pb import encodings_v2_1_pb2 as pb
from lance_spark_ops.encoding.blocks import ConstantBlock, FixedWidthBlock
from lance_spark_ops.encoding.codecs import compress_block
from lance_spark_ops.encoding.compression._arrays import ragged_arange
from lance_spark_ops.encoding.compression.encoded import CompressionParams
from lance_spark_ops.encoding.compression.registry import CODECS, CodecRegistry
from lance_spark_ops.encoding.compression.strategy import Codec
from lance_spark_ops.encoding.layers import level_info
from lance_spark_ops.encoding.layout import PageDecoder
from lance_spark_ops.encoding.layout.pages import as_u8, page_message, row_runs
from lance_spark_ops.encoding.page import EncodedPage, Fetch, PageData
from lance_spark_ops.errors import CorruptFileError, InvalidInputError, UnsupportedError


def parse_scalar_block(raw: np.ndarray, what: str) -> tuple[bytes, bool]:
    """(value bytes, is variable width) of a scalar value block."""
    if raw.size < 4:
        raise CorruptFileError(f"{what}: scalar value block of {raw.size} bytes")
    nbuf = int(raw[:4].view("<u4")[0])
    head = 4 + 4 * nbuf
    if nbuf > 16 or raw.size < head:
        raise CorruptFileError(f"{what}: scalar value block claims {nbuf} buffers in {raw.size} bytes")
    sizes = raw[4:head].view("<u4").astype(np.int64)
    if head + int(sizes.sum()) != raw.size:
        raise CorruptFileError(
            f"{what}: scalar value block buffers total {int(sizes.sum())} bytes, block has {raw.size - head}"
        )
    bufs = np.split(raw[head:], np.cumsum(sizes)[:-1]) if nbuf else []
    if nbuf == 1:
        return bufs[0].tobytes(), False
    if nbuf == 2:
        off, data = bufs
        if off.size == 8:
            a, b = (int(x) for x in off.view("<u4"))
        elif off.size == 16:
            a, b = (int(x) for x in off.view("<u8"))
        else:
            raise CorruptFileError(f"{what}: scalar offsets buffer of {off.size} bytes (expected 8 or 16)")
        if not 0 <= a <= b <= data.size:
            raise CorruptFileError(f"{what}: scalar offsets [{a}, {b}] outside {data.size} value bytes")
        return data[a:b].tobytes(), True
    raise UnsupportedError(f"{what}: scalar value block with {nbuf} buffers")


class ConstantDecoder(PageDecoder):
    """Decoder of a 2.1 ``AllNullLayout`` / 2.2 ``ConstantLayout`` page."""

    def __init__(self, layout: object, num_rows: int, buffer_sizes: list[int], version: str,
                 codecs: CodecRegistry = CODECS) -> None:
        super().__init__(layout, num_rows, buffer_sizes, version)
        self.codecs = codecs
        msg = page_message(layout, "constant_layout")
        self.msg = msg
        self.what = (
            "constant page"
            if msg.HasField("inline_value") or len(buffer_sizes) in (1, 3)
            else "all-null page"
        )
        self.info = level_info(msg.layers, self.what)
        self.inline = bytes(msg.inline_value) if msg.HasField("inline_value") else None
        n = len(buffer_sizes)
        self.value_idx: int | None = None
        self.rep_idx: int | None = None
        self.def_idx: int | None = None
        if self.inline is not None:
            if n == 2:
                self.rep_idx, self.def_idx = 0, 1
            elif n != 0:
                raise CorruptFileError(f"{self.what}: inline value with {n} buffers (expected 0 or 2)")
        elif n == 1:
            self.value_idx = 0
        elif n == 2:
            self.rep_idx, self.def_idx = 0, 1
        elif n == 3:
            self.value_idx, self.rep_idx, self.def_idx = 0, 1, 2
        elif n != 0:
            raise CorruptFileError(f"{self.what}: {n} buffers (expected 0 to 3)")
        self._state: tuple[bytes | None, bool, np.ndarray | None, np.ndarray | None] | None = None

    # -- loading

    def _levels(
        self, raw: memoryview | None, enc_field: str, count_field: str, kind: str
    ) -> np.ndarray | None:
        if raw is None or len(raw) == 0:
            return None
        data = as_u8(raw)
        expected = int(getattr(self.msg, count_field))
        if self.msg.HasField(enc_field):
            if expected <= 0:
                raise CorruptFileError(f"{self.what}: compressed {kind} levels but {count_field} is 0")
            block = self.codecs.decompress_block(getattr(self.msg, enc_field), raw, expected)
            if (
                not isinstance(block, FixedWidthBlock)
                or block.bits_per_value != 16
                or block.num_values != expected
            ):
                raise CorruptFileError(
                    f"{self.what}: {kind} levels did not decompress to {expected} u16 values"
                )
            return np.ascontiguousarray(block.as_dtype("<u2")).astype(np.uint16)
        if data.size % 2:
            raise CorruptFileError(f"{self.what}: {kind} level buffer of odd size {data.size}")
        levels = data.view("<u2").astype(np.uint16)
        if expected and levels.size != expected:
            raise CorruptFileError(f"{self.what}: {levels.size} {kind} levels, layout says {expected}")
        return levels

    def _load(self, fetch: Fetch) -> tuple[bytes | None, bool, np.ndarray | None, np.ndarray | None]:
        if self._state is not None:
            return self._state
        wanted = [
            i for i in (self.value_idx, self.rep_idx, self.def_idx) if i is not None and self.buffer_sizes[i]
        ]
        res = fetch([(i, 0, int(self.buffer_sizes[i])) for i in wanted]) if wanted else []
        if len(res) != len(wanted):
            raise CorruptFileError(
                f"{self.what}: fetch returned {len(res)} buffers for {len(wanted)} requests"
            )
        got = dict(zip(wanted, res, strict=True))
        value, variable = self.inline, False
        if self.value_idx is not None:
            value, variable = parse_scalar_block(as_u8(got.get(self.value_idx, b"")), self.what)
        rep = self._levels(got.get(self.rep_idx), "rep_compression", "num_rep_values", "rep")  # type: ignore[arg-type]
        def_ = self._levels(got.get(self.def_idx), "def_compression", "num_def_values", "def")  # type: ignore[arg-type]
        self._check_levels(rep, def_)
        if (
            value is None
            and def_ is None
            and rep is None
            and self.info.layers[:1] == (pb.REPDEF_NULLABLE_ITEM,)
        ):
            def_ = np.ones(self.num_rows, dtype=np.uint16)
        self._state = (value, variable, rep, def_)
        return self._state

    def _check_levels(self, rep: np.ndarray | None, def_: np.ndarray | None) -> None:
        if rep is not None and def_ is not None and rep.size != def_.size:
            raise CorruptFileError(f"{self.what}: {rep.size} rep levels but {def_.size} def levels")
        if rep is None:
            if self.info.max_rep:
                raise CorruptFileError(f"{self.what}: list layers but no repetition levels")
            if def_ is not None and def_.size != self.num_rows:
                raise CorruptFileError(f"{self.what}: {def_.size} def levels for {self.num_rows} rows")
        else:
            starts = int((rep == self.info.max_rep).sum())
            if starts != self.num_rows or (rep.size and rep[0] != self.info.max_rep):
                raise CorruptFileError(
                    f"{self.what}: repetition levels describe {starts} rows, page has {self.num_rows}"
                )
            if rep.size and int(rep.max()) > self.info.max_rep:
                raise CorruptFileError(f"{self.what}: repetition level above {self.info.max_rep}")

    def load_search_cache(self, fetch: Fetch) -> None:
        self._load(fetch)

    # -- decode

    def decode(self, fetch: Fetch, rows: np.ndarray | None) -> PageData:
        value, variable, rep, def_ = self._load(fetch)
        num_rows = self.num_rows
        if rows is not None:
            starts, ends = row_runs(rows, self.num_rows, self.what)
            num_rows = int((ends - starts).sum())
            if rep is not None:
                row_start = np.append(np.flatnonzero(rep == self.info.max_rep), rep.size)
                lo, hi = row_start[starts], row_start[ends]
                sel = ragged_arange(lo, hi - lo)
            else:
                sel = ragged_arange(starts, ends - starts)
            rep = None if rep is None else rep[sel]
            def_ = None if def_ is None else def_[sel]
        count = rep.size if rep is not None else def_.size if def_ is not None else num_rows
        visible = int(self.info.visible(def_, count).sum()) if rep is not None else count
        values = None if value is None else ConstantBlock(value, visible, variable)
        return PageData(num_rows=num_rows, values=values, rep=rep, def_=def_, layers=list(self.info.layers))


# ----------------------------------------------------------------------------- encoder

MAX_INLINE_VALUE = 32


def scalar_block(value: bytes, variable: bool, offset_bits: int = 32) -> bytes:
    """The scalar value block of one value: ``u32 #buffers, u32 sizes..., buffers``;
    variable-width values as offsets ``[0, len]`` (u32, or u64 for large types) + bytes."""
    if not variable:
        return np.array([1, len(value)], "<u4").tobytes() + value
    if offset_bits not in (32, 64):
        raise InvalidInputError(f"constant page: {offset_bits}-bit offsets (expected 32 or 64)")
    offsets = np.array([0, len(value)], f"<u{offset_bits // 8}").tobytes()
    return np.array([2, len(offsets), len(value)], "<u4").tobytes() + offsets + value


def _raw_levels(levels: np.ndarray | None) -> np.ndarray:
    if levels is None:
        return np.zeros(0, np.uint8)
    return np.ascontiguousarray(levels, dtype="<u2").view(np.uint8)


def _compressed_levels(
    levels: np.ndarray | None, codec: Codec | None, what: str
) -> tuple[np.ndarray, pb.CompressiveEncoding | None, int]:
    """(buffer, its compression, count) of one level buffer of a 2.2 all-null page,
    compressed by the plan's ``codec``."""
    if levels is None:
        return np.zeros(0, np.uint8), None, 0
    if codec is None:
        raise InvalidInputError(f"constant page: {what} levels need their codec (PagePlan.{what}_codec)")
    lv = np.ascontiguousarray(levels, dtype="<u2")
    data, enc = compress_block(codec, FixedWidthBlock(lv.view(np.uint8), 16, len(lv)), CompressionParams())
    return as_u8(data), enc, len(lv)


def _levels_in(levels: np.ndarray | None, what: str) -> np.ndarray | None:
    if levels is None:
        return None
    lv = np.asarray(levels)
    if lv.ndim != 1 or (lv.size and (int(lv.min()) < 0 or int(lv.max()) > 0xFFFF)):
        raise InvalidInputError(f"constant page: {what} levels must be one u16 per item")
    return lv.astype(np.uint16, copy=False)


def encode_constant_page(
    num_rows: int,
    value: bytes | None,
    variable: bool,
    rep: np.ndarray | None,
    def_: np.ndarray | None,
    layers: list[int],
    version: str,
    offset_bits: int = 32,
    *,
    rep_codec: Codec | None = None,
    def_codec: Codec | None = None,
) -> EncodedPage:
    """An all-null (``value`` None) or constant page (see the module docstring).

    ``rep`` / ``def_``: one u16 per item (None: absent); ``variable``: the value is a string
    / binary (stored with ``offset_bits`` offsets, 64 for large types); ``rep_codec`` /
    ``def_codec``: the plan's level codecs, needed for 2.2 all-null pages with levels.
    """
    if version not in ("2.1", "2.2"):
        raise UnsupportedError(f"constant / all-null pages exist in file versions 2.1 and 2.2, not {version}")
    rep, def_ = _levels_in(rep, "rep"), _levels_in(def_, "def")
    layers = [int(x) for x in layers]
    info = level_info(layers, "constant page")
    if rep is None and info.max_rep:
        raise InvalidInputError("constant page: list layers but no repetition levels")
    count = len(rep) if rep is not None else len(def_) if def_ is not None else num_rows
    if rep is not None and def_ is not None and len(def_) != count:
        raise InvalidInputError(f"constant page: {len(rep)} rep levels but {len(def_)} def levels")
    if rep is None and count != num_rows:
        raise InvalidInputError(f"constant page: {count} levels for {num_rows} rows without repetition")
    if rep is not None and int((rep == info.max_rep).sum()) != num_rows:
        starts = int((rep == info.max_rep).sum())
        raise InvalidInputError(f"constant page: levels start {starts} rows, not {num_rows}")
    msg = pb.ConstantLayout(layers=layers)
    simple = rep is None and layers == [pb.REPDEF_NULLABLE_ITEM] and (def_ is None or bool((def_ == 1).all()))
    if value is None:
        if simple:
            return EncodedPage(num_rows, [], pb.PageLayout(constant_layout=msg))
        if version == "2.1":
            levels = [_raw_levels(rep), _raw_levels(def_)]
            return EncodedPage(num_rows, levels, pb.PageLayout(constant_layout=msg))
        rbuf, renc, nrep = _compressed_levels(rep, rep_codec, "rep")
        dbuf, denc, ndef = _compressed_levels(def_, def_codec, "def")
        if renc is not None:
            msg.rep_compression.CopyFrom(renc)
            msg.num_rep_values = nrep
        if denc is not None:
            msg.def_compression.CopyFrom(denc)
            msg.num_def_values = ndef
        return EncodedPage(num_rows, [rbuf, dbuf], pb.PageLayout(constant_layout=msg))
    if version == "2.1":
        raise UnsupportedError("file version 2.1 has no constant layout (only all-null pages)")
    buffers: list[np.ndarray | bytes] = []
    if not variable and len(value) <= MAX_INLINE_VALUE:
        msg.inline_value = bytes(value)
    else:
        buffers.append(scalar_block(bytes(value), variable, offset_bits))
    if rep is not None or def_ is not None:
        buffers += [_raw_levels(rep), _raw_levels(def_)]
    return EncodedPage(num_rows, buffers, pb.PageLayout(constant_layout=msg))
