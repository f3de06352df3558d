"""Which compression each buffer gets: Lance's ``DefaultCompressionStrategy`` as composed
by the 2.1 and 2.2 file writers of pylance 14 (``lance-file/src/versions/v2_x``), plus the
field-metadata parameters that steer it.

A choice is a ``Codec`` tree (the shape of the ``CompressiveEncoding`` that will be
written); ``encoding.codecs`` runs it. Three contexts, as in Lance:

mini-block values (same in 2.1 and 2.2), first that applies:
  1. ``compression = none`` -> Flat (fixed width) / Variable
  2. byte-stream-split when general compression is asked for and BSS is ``on`` or
     ``auto`` with a mean byte entropy (first 64 values) under 4 bits; 32/64-bit only
  3. RLE (8-bit run lengths) when its size, runs cut every 4096 values, beats both the
     raw size and the inline-bitpacking estimate; a user ``rle-threshold`` additionally
     requires runs < threshold x values
  4. inline bitpacking when it is smaller than raw (per 1024 values: one word + the
     packed words)
  5. Flat; variable width: FSST for non-binary types with a value >= 5 bytes and
     >= 32 KiB of data, else Variable; packed structs -> PackedStruct, fixed-size lists ->
     FixedSizeList(Flat)
  then General(scheme, level) around it when ``compression`` names lz4 / zstd.
full-zip values: Flat / FixedSizeList raw; variable width: General zstd (level 0, or the
  asked zstd level) when a value exceeds 32 KiB or lz4/zstd is asked and there is at least
  32 KiB, else FSST as above, else Variable; packed structs with a variable child ->
  VariablePackedStruct (2.2).
block (rep/def levels, dictionary items): 2.1: bitpacking (inline up to 1024 values, else
  out-of-line at the page's max width), else raw. 2.2: RLE first (whole block, +8 bytes
  header, must beat raw and the bitpacking estimate), bitpacking, then General when asked
  (dictionary items: ``dict-values-compression``, default lz4) or over 32 KiB, else raw.

The layout decision (mini-block / full-zip / constant / dictionary) is ``encoding.plan``;
page splitting by the rep/def level budget is ``encoding.page_split``. pylance 14 ignores
``lance-encoding:general`` (kept in ``params.extra``), and so do we.

Example: 5000 int64 values 0..99 in 2.1 give ``inline_bitpacking(64)``; 5000 values
``repeat(arange(20), 250)`` give ``rle(flat64, flat8)``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from lance_spark_ops.encoding.blocks import (
    DataBlock,
    FixedSizeListBlock,
    FixedWidthBlock,
    StructBlock,
    VariableWidthBlock,
)
from lance_spark_ops.encoding.compression import stats
from lance_spark_ops.encoding.compression.encoded import CompressionParams
from lance_spark_ops.errors import InvalidInputError, SchemaError, UnsupportedError

PREFIX = "lance-encoding:"
MINIBLOCK_MAX_VALUES = 4096  # LANCE_MINIBLOCK_MAX_VALUES default
FSST_MIN_MAX_LEN = 5
FSST_MIN_SIZE = 32 * 1024
PER_VALUE_GENERAL_MAX_LEN = 32 * 1024
AUTO_GENERAL_MIN_SIZE = 32 * 1024
RLE_BLOCK_HEADER = 8
SCHEMES = ("none", "fsst", "zstd", "lz4")
DEFAULT_DICT_VALUES_COMPRESSION = "lz4"
LZ4_MAX_INPUT_SIZE = 0x7E000000


@dataclass(frozen=True)
class Codec:
    """One node of a compression choice; ``kind`` is the ``CompressiveEncoding`` oneof.

    ``bits``: Flat width, a bitpacking / BSS / RLE value width, or a FixedSizeList's item
    count (``items``); ``compressed_bits``: out-of-line bitpacking's packed width;
    ``scheme`` / ``level``: General's buffer compression.
    """

    kind: str
    inner: Codec | None = None
    bits: int | None = None
    compressed_bits: int | None = None
    scheme: str | None = None
    level: int | None = None
    has_validity: bool = False
    children: tuple[Codec, ...] = ()
    child_params: tuple[CompressionParams, ...] = ()

    def chain(self) -> tuple[str, ...]:
        """Oneof names from the outside in, e.g. ``("general", "variable")``."""
        return (self.kind, *(self.inner.chain() if self.inner else ()))

    def __str__(self) -> str:
        arg = self.scheme if self.kind == "general" else self.bits
        head = f"{self.kind}({arg})" if arg is not None else self.kind
        return f"{head}>{self.inner}" if self.inner else head


FLAT16 = Codec("flat", bits=16)


# ----------------------------------------------------------------------------------------
# parameters
# ----------------------------------------------------------------------------------------


def _meta(field: pa.Field | None) -> dict[str, str]:
    raw: Mapping[bytes | str, bytes | str] = (field.metadata or {}) if field is not None else {}
    return {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in raw.items()}


def _parse(value: str, kind: type, key: str) -> object | None:
    try:
        return kind(value.strip())
    except ValueError:
        return None  # Lance ignores values that do not parse (`.parse().ok()`)


def params_from_metadata(field: pa.Field | None, root: pa.Field | None = None) -> CompressionParams:
    """``CompressionParams`` from a leaf field's metadata (and the top-level field's
    ``structural-encoding``, which Lance reads from the root field).

    Unknown compression schemes raise ``SchemaError`` (pylance refuses them too).
    Keys whose value does not parse are ignored, as in Lance. ``extra`` keeps the raw
    keys the strategy needs to know were given (``rle-threshold``) and the dictionary
    knobs (``dict-size-ratio``, ``dict-values-compression[-level]``, ``general``,
    ``minichunk-size``).
    """
    meta = _meta(field)
    p = CompressionParams()
    comp = meta.get(PREFIX + "compression")
    if comp is not None:
        if comp not in SCHEMES:
            raise SchemaError(f"field {field.name!r}: unknown compression scheme {comp!r} "
                              f"(expected one of {', '.join(SCHEMES)})")
        p.compression = comp
    level = meta.get(PREFIX + "compression-level")
    if level is not None:
        p.compression_level = _parse(level, int, "compression-level")
    thr = meta.get(PREFIX + "rle-threshold")
    if thr is not None and _parse(thr, float, "rle-threshold") is not None:
        p.rle_threshold = float(thr)
        p.extra["rle-threshold"] = thr
    bss = meta.get(PREFIX + "bss")
    if bss is not None and bss.lower() in ("off", "on", "auto"):
        p.bss = bss.lower()
    div = meta.get(PREFIX + "dict-divisor")
    if div is not None and _parse(div, int, "dict-divisor") is not None:
        p.dict_divisor = int(div)
        p.extra["dict-divisor"] = div
    for key in ("dict-size-ratio", "dict-values-compression", "dict-values-compression-level",
                "general", "minichunk-size", "blob"):
        if PREFIX + key in meta:
            p.extra[key] = meta[PREFIX + key]
    packed = meta.get(PREFIX + "packed", meta.get("packed"))
    p.packed = packed is not None and packed.lower() == "true"
    p.blob = PREFIX + "blob" in meta
    root_meta = _meta(root) if root is not None else meta
    se = root_meta.get(PREFIX + "structural-encoding")
    if se is not None:
        p.structural_encoding = se.lower()
    return p


def dictionary_values_params(params: CompressionParams, items: DataBlock) -> CompressionParams:
    """Parameters of the synthetic field Lance compresses dictionary items with."""
    comp = params.extra.get("dict-values-compression") or os.environ.get(
        "LANCE_ENCODING_DICT_VALUES_COMPRESSION")
    if comp is None:
        comp = DEFAULT_DICT_VALUES_COMPRESSION if _serialized_size(items) <= LZ4_MAX_INPUT_SIZE else "zstd"
    if comp not in SCHEMES:
        raise SchemaError(f"unknown dictionary values compression {comp!r}")
    level = params.extra.get("dict-values-compression-level") or os.environ.get(
        "LANCE_ENCODING_DICT_VALUES_COMPRESSION_LEVEL")
    return CompressionParams(compression=comp,
                             compression_level=None if level is None else _parse(level, int, ""))


def _serialized_size(block: DataBlock) -> int:
    if isinstance(block, VariableWidthBlock):
        return stats.value_bytes(block) + (block.num_values + 1) * np.asarray(block.offsets).dtype.itemsize
    return stats.data_size(block)


def _general(inner: Codec, params: CompressionParams) -> Codec:
    if params.compression in (None, "none", "fsst"):
        return inner
    return Codec("general", inner, scheme=params.compression, level=params.compression_level)


# ----------------------------------------------------------------------------------------
# size estimates (compression.rs)
# ----------------------------------------------------------------------------------------


def inline_bitpacking_estimate(block: FixedWidthBlock) -> int | None:
    """Bytes of inline bitpacking (None when not applicable or not smaller than raw)."""
    bits = block.bits_per_value
    if bits not in (8, 16, 32, 64) or block.num_values == 0:
        return None
    widths = stats.bit_widths(block)
    words = int((1 + (1024 * widths) // bits).sum())
    est = words * (bits // 8)
    return est if est < stats.data_size(block) else None


def _ool_words(n: int, width: int, bits: int) -> int | None:
    if width >= bits:
        return None
    chunks = -(-n // 1024)
    per_chunk = -(-(1024 * width) // bits)
    if n % 1024 == 0:
        return chunks * per_chunk
    rem = n - (chunks - 1) * 1024
    tail = per_chunk if width * (1024 - rem) < (bits - width) * rem else rem
    return (chunks - 1) * per_chunk + tail


def block_bitpacking_estimate(block: FixedWidthBlock) -> int | None:
    """Bytes of block bitpacking (inline <= 1024 values, else out-of-line)."""
    bits = block.bits_per_value
    if bits not in (8, 16, 32, 64) or block.num_values == 0:
        return None
    width = int(stats.bit_widths(block).max())
    if block.num_values <= 1024:
        words = 1 + (1024 * width) // bits
    else:
        words = _ool_words(block.num_values, width, bits)
        if words is None:
            return None
    est = words * (bits // 8)
    return est if est < stats.data_size(block) else None


def _rle_runs(block: FixedWidthBlock, params: CompressionParams, header: int) -> np.ndarray | None:
    """Run lengths when RLE may apply and could beat raw, else None (cheap rejection)."""
    if block.bits_per_value not in (8, 16, 32, 64) or block.num_values == 0:
        return None
    count, changes = stats.run_count_and_changes(block)
    width = block.bits_per_value // 8
    if "rle-threshold" in params.extra and not count < block.num_values * params.rle_threshold:
        return None  # a user threshold is an extra guard
    if count * (width + 1) + header >= block.num_values * width:
        return None  # at least one entry per run: cannot beat raw
    return stats.run_lengths(block, changes)


def _miniblock_rle_wins(block: FixedWidthBlock, params: CompressionParams) -> bool:
    runs = _rle_runs(block, params, 0)
    if runs is None:
        return False
    raw = block.num_values * (block.bits_per_value // 8)
    rle = stats.rle_entries(runs, MINIBLOCK_MAX_VALUES) * (block.bits_per_value // 8 + 1)
    if rle >= raw:
        return False
    bp = inline_bitpacking_estimate(block)
    return not (bp is not None and bp < rle)


def _block_rle_wins(block: FixedWidthBlock, params: CompressionParams) -> bool:
    runs = _rle_runs(block, params, RLE_BLOCK_HEADER)
    if runs is None:
        return False
    raw = block.num_values * (block.bits_per_value // 8)
    rle = stats.rle_entries(runs, None) * (block.bits_per_value // 8 + 1) + RLE_BLOCK_HEADER
    if rle >= raw:
        return False
    bp = block_bitpacking_estimate(block)
    return not (bp is not None and bp < rle)


def use_bss(block: FixedWidthBlock, params: CompressionParams) -> bool:
    """Byte-stream-split decision (needs general compression to be asked for)."""
    if params.compression in (None, "none") or block.bits_per_value not in (32, 64):
        return False
    mode = params.bss or "auto"
    if mode == "off":
        return False
    if mode == "on":
        return True
    ent = stats.byte_entropy(block)
    return bool(len(ent)) and float(ent.sum()) / len(ent) / 1000.0 < 0.5 * 8.0


def _is_binary_type(arrow_type: pa.DataType | None) -> bool:
    return arrow_type is not None and (pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type))


def _use_fsst(block: VariableWidthBlock, params: CompressionParams, arrow_type: pa.DataType | None) -> bool:
    if params.compression == "fsst":
        return True
    return (params.compression is None and not _is_binary_type(arrow_type)
            and stats.max_length(block) >= FSST_MIN_MAX_LEN and stats.data_size(block) >= FSST_MIN_SIZE)


def _offset_bits(block: VariableWidthBlock) -> int:
    return np.asarray(block.offsets).dtype.itemsize * 8


def _variable(block: VariableWidthBlock) -> Codec:
    return Codec("variable", Codec("flat", bits=_offset_bits(block)))


# ----------------------------------------------------------------------------------------
# the three contexts
# ----------------------------------------------------------------------------------------


def miniblock_codec(block: DataBlock, params: CompressionParams, arrow_type: pa.DataType | None = None,
                    version: str = "2.2") -> Codec:
    """Compression of mini-block values (the same in 2.1 and 2.2)."""
    if isinstance(block, FixedWidthBlock):
        bits = block.bits_per_value
        if params.compression == "none":
            return Codec("flat", bits=bits)
        if use_bss(block, params):
            base = Codec("byte_stream_split", Codec("flat", bits=bits), bits=bits)
        elif _miniblock_rle_wins(block, params):
            base = Codec("rle", Codec("flat", bits=bits), bits=bits)
        elif inline_bitpacking_estimate(block) is not None:
            base = Codec("inline_bitpacking", bits=bits)
        else:
            base = Codec("flat", bits=bits)
        return _general(base, params)
    if isinstance(block, VariableWidthBlock):
        if _offset_bits(block) not in (32, 64):
            raise UnsupportedError(f"variable-width data with {_offset_bits(block)}-bit offsets")
        if params.compression == "none":
            return _variable(block)
        inner = Codec("fsst", _variable(block)) if _use_fsst(block, params, arrow_type) else _variable(block)
        return _general(inner, params)
    if isinstance(block, StructBlock):
        if any(isinstance(c, VariableWidthBlock) for c in block.children):
            raise InvalidInputError("packed struct mini-block encoding supports only fixed-width children")
        return Codec("packed_struct", Codec("flat"))
    if isinstance(block, FixedSizeListBlock):
        return _fsl_codec(block)
    raise UnsupportedError(f"mini-block compression of a {type(block).__name__} is not supported")


def _fsl_codec(block: FixedSizeListBlock) -> Codec:
    items = block.items
    inner = _fsl_codec(items) if isinstance(items, FixedSizeListBlock) else Codec(
        "flat", bits=getattr(items, "bits_per_value", None))
    return Codec("fixed_size_list", inner, bits=block.dimension, has_validity=block.item_validity is not None)


def per_value_codec(block: DataBlock, params: CompressionParams, arrow_type: pa.DataType | None = None,
                    version: str = "2.2") -> Codec:
    """Compression of full-zip values (transparent, one value at a time)."""
    if isinstance(block, FixedWidthBlock):
        return Codec("flat", bits=8 if block.bits_per_value == 1 else block.bits_per_value)
    if isinstance(block, FixedSizeListBlock):
        return _fsl_codec(block)
    if isinstance(block, StructBlock):
        if not any(isinstance(c, VariableWidthBlock) for c in block.children):
            raise InvalidInputError("a packed struct of fixed-width fields with rows of 256 bytes or more "
                                    "would need full-zip, which Lance refuses for such structs")
        if version == "2.1":
            raise SchemaError("a packed struct with variable-width fields needs file version 2.2")
        fields = [arrow_type.field(i) if arrow_type is not None and pa.types.is_struct(arrow_type) else None
                  for i in range(len(block.children))]
        cparams = tuple(params_from_metadata(f) for f in fields)
        kids = tuple(per_value_codec(c, p, None if f is None else f.type, version)
                     for c, p, f in zip(block.children, cparams, fields, strict=True))
        return Codec("variable_packed_struct", children=kids, child_params=cparams)
    if isinstance(block, VariableWidthBlock):
        if params.compression == "none":
            return _variable(block)
        asked = params.compression is not None and params.compression != "fsst"
        big = stats.max_length(block) > PER_VALUE_GENERAL_MAX_LEN
        if (big or asked) and stats.data_size(block) >= FSST_MIN_SIZE:
            level = params.compression_level if params.compression == "zstd" else 0
            return Codec("general", _variable(block), scheme="zstd", level=0 if level is None else level)
        if _use_fsst(block, params, arrow_type):
            return Codec("fsst", _variable(block))
        return _variable(block)
    raise UnsupportedError(f"full-zip compression of a {type(block).__name__} is not supported")


def block_codec(block: DataBlock, params: CompressionParams, version: str) -> Codec:
    """Compression of a whole buffer (dictionary items, rep/def levels)."""
    if isinstance(block, FixedWidthBlock):
        if version != "2.1" and _block_rle_wins(block, params):
            bits = block.bits_per_value
            return Codec("rle", Codec("flat", bits=bits), bits=bits)
        bp = _block_bitpacking(block)
        if bp is not None:
            return bp
        raw = Codec("flat", bits=block.bits_per_value)
    elif isinstance(block, VariableWidthBlock):
        raw = _variable(block)
    else:
        raise UnsupportedError(f"block compression of a {type(block).__name__} is not supported")
    if version != "2.1":
        if params.compression not in (None, "none"):
            if params.compression == "fsst":
                raise InvalidInputError("fsst is not usable as a general buffer compressor")
            return Codec("general", raw, scheme=params.compression, level=params.compression_level)
        if params.compression is None and stats.data_size(block) > AUTO_GENERAL_MIN_SIZE:
            return Codec("general", raw, scheme="zstd", level=0)
    return raw


def _block_bitpacking(block: FixedWidthBlock) -> Codec | None:
    bits = block.bits_per_value
    if bits not in (8, 16, 32, 64) or block.num_values == 0:
        return None
    widths = stats.bit_widths(block)
    width = int(widths.max())
    if width >= bits:
        return None
    if len(widths) == 1 and math.ceil(1024 * int(widths[0]) / 8) >= stats.data_size(block):
        return None
    if block.num_values <= 1024:
        return Codec("inline_bitpacking", bits=bits)
    return Codec("out_of_line_bitpacking", Codec("flat", bits=width), bits=bits, compressed_bits=width)


def level_codec(levels: np.ndarray, version: str) -> Codec:
    """Compression of a page's rep or def levels (u16), chosen once for the whole page."""
    lv = np.ascontiguousarray(levels, dtype=np.uint16)
    block = FixedWidthBlock(lv.view(np.uint8), 16, len(lv))
    return block_codec(block, CompressionParams(), version)


def level_codecs(levels: np.ndarray, bounds: np.ndarray, version: str) -> list[Codec]:
    """``level_codec`` of each page ``levels[bounds[i]:bounds[i + 1]]`` (consecutive pages
    of one flush), their statistics - runs, RLE entries, bit widths - computed over the
    whole flush at once instead of page by page; the same choices (default parameters)."""
    lv = np.ascontiguousarray(levels, dtype=np.uint16)
    bounds = np.asarray(bounds, dtype=np.int64)
    lo, n = bounds[:-1], np.diff(bounds)
    if len(n) == 0 or (n <= 0).any() or int(bounds[0]) != 0 or int(bounds[-1]) != len(lv):
        return [level_codec(lv[a:b], version) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    bits, vbytes = 16, 2
    raw = n * vbytes
    # bit width of a page = bit length of its largest value (the max over its 1024-chunks)
    widths = stats.bit_length(np.maximum.reduceat(lv, lo))
    bp = _bitpacking_bytes(n, widths, bits)  # -1: no bitpacking estimate
    rle_wins = np.zeros(len(n), dtype=bool)
    if version != "2.1":
        is_start = np.empty(len(lv), dtype=bool)  # a run starts here (value change or page start)
        is_start[0] = True
        np.not_equal(lv[1:], lv[:-1], out=is_start[1:])
        is_start[lo] = True
        edges = bounds.tolist()
        count = np.array([np.count_nonzero(is_start[a:b]) for a, b in zip(edges, edges[1:], strict=False)],
                         dtype=np.int64)
        least = count * (vbytes + 1) + RLE_BLOCK_HEADER  # one entry per run at least
        # RLE needs to beat raw, and bitpacking below even its least size beats it anyway
        rle_wins = (least < raw) & ~((bp >= 0) & (bp < least))
        if rle_wins.any():
            run_starts = np.flatnonzero(is_start)
            run_len = np.diff(run_starts, append=len(lv))
            entries = count
            if int(run_len.max()) > stats.U8_MAX_RUN:  # long runs take several entries
                page_of_run = np.searchsorted(lo, run_starts, side="right") - 1
                pieces = (run_len + stats.U8_MAX_RUN - 1) // stats.U8_MAX_RUN
                entries = np.bincount(page_of_run, weights=pieces, minlength=len(n)).astype(np.int64)
            rle = entries * (vbytes + 1) + RLE_BLOCK_HEADER
            rle_wins &= (rle < raw) & ~((bp >= 0) & (bp < rle))
    out = []
    for i in range(len(n)):
        if rle_wins[i]:
            out.append(Codec("rle", Codec("flat", bits=bits), bits=bits))
            continue
        size, width = int(n[i]), int(widths[i])
        if width < bits and not (size <= 1024 and math.ceil(1024 * width / 8) >= size * vbytes):
            out.append(Codec("inline_bitpacking", bits=bits) if size <= 1024 else
                       Codec("out_of_line_bitpacking", Codec("flat", bits=width), bits=bits,
                             compressed_bits=width))
            continue
        flat = Codec("flat", bits=bits)
        if version != "2.1" and size * vbytes > AUTO_GENERAL_MIN_SIZE:
            flat = Codec("general", flat, scheme="zstd", level=0)
        out.append(flat)
    return out


def _bitpacking_bytes(n: np.ndarray, width: np.ndarray, bits: int) -> np.ndarray:
    """``block_bitpacking_estimate`` of pages of ``n`` values of bit width ``width``
    (vectorised ``_ool_words``; -1 where there is no estimate)."""
    n, width = np.asarray(n, dtype=np.int64), np.asarray(width, dtype=np.int64)
    chunks = -(-n // 1024)
    per_chunk = -(-(1024 * width) // bits)
    rem = n - (chunks - 1) * 1024
    tail = np.where(width * (1024 - rem) < (bits - width) * rem, per_chunk, rem)
    ool = np.where(n % 1024 == 0, chunks * per_chunk, (chunks - 1) * per_chunk + tail)
    words = np.where(n <= 1024, 1 + (1024 * width) // bits, ool)
    est = words * (bits // 8)
    ok = (n > 0) & ((n <= 1024) | (width < bits)) & (est < n * (bits // 8))
    return np.where(ok, est, -1)
