"""The layout decision for one page of one leaf column (file versions 2.1 / 2.2), ported
from Lance's ``PrimitiveStructuralEncoder`` (``encodings/logical/primitive.rs``) as the
2.1 and 2.2 writers of pylance 14 compose it. First that applies:

1. blob field (``lance-encoding:blob`` on binary) -> blob layout
2. no visible values (only null / empty lists) -> constant (all-null) layout holding the
   rep/def levels: raw u16 in 2.1, compressed (``strategy.level_codec``) in 2.2
3. every visible value null -> all-null layout: no buffers when the leaf is top-level
   (layers [NULLABLE_ITEM]); otherwise as in 2
4. empty struct -> all-null layout ([NULLABLE_ITEM]); refused under lists / null structs
5. 2.2 only: every valid value equal (bool, strings, binary, fixed-width) -> constant
   layout: the value inline (<= 32 bytes) or in a value buffer, rep/def raw
6. packed struct with a variable-width field (2.2) -> full-zip
7. dictionary Arrow type -> mini-block of its indices + the dictionary
8. dictionary encoding when it pays (64-bit values 2.2 only, 128-bit, strings): at least
   100 values; a deterministic 4096-value sample must not look unique (< 98% distinct)
   nor project more than ``values // dict-divisor`` (<= 100 000) distinct values; the
   encode aborts past that many items or past ``dict-size-ratio`` (0.8) x the raw size
   (items + offsets + 4 bytes per index) -> mini-block of 32-bit indices + dictionary
9. ``structural-encoding`` = miniblock, or none given and every value < 256 bytes ->
   mini-block; else (``fullzip`` or none given) full-zip; any other value is refused.

Example: 5000 strings "cat-0".."cat-9" -> step 8: 10 items, mini-block indices
(inline bitpacking) + dictionary (Variable in 2.1, General lz4 over Variable in 2.2).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from lance_spark_ops.encoding.blocks import (
    DataBlock,
    FixedWidthBlock,
    StructBlock,
    VariableWidthBlock,
)
from lance_spark_ops.encoding.blocks_from_arrow import arrow_to_block, dictionary_blocks, strip_extension
from lance_spark_ops.encoding.carried_dictionary import (
    CarriedDictionary,
    carried_stats,
    decode_carried,
    is_carried,
    value_lengths,
)
from lance_spark_ops.encoding.compression import stats
from lance_spark_ops.encoding.compression._arrays import as_u8, ragged_arange
from lance_spark_ops.encoding.compression.encoded import CompressionParams
from lance_spark_ops.encoding.compression.strategy import (
    Codec,
    block_codec,
    dictionary_values_params,
    level_codec,
    miniblock_codec,
    params_from_metadata,
    per_value_codec,
)
from lance_spark_ops.encoding.layers import NULLABLE_ITEM, max_visible_def
from lance_spark_ops.encoding.leaves import is_blob
from lance_spark_ops.encoding.repdef import LeafLevels
from lance_spark_ops.errors import InvalidInputError, SchemaError

MINIBLOCK_MAX_BYTES_PER_VALUE = 256
DICT_TOO_SMALL = 100
DICT_MAX_CARDINALITY = 100_000
DICT_SIZE_RATIO = 0.8
DICT_SAMPLE_UNIQUE_RATIO = 0.98
_I32_MAX = 2**31 - 1


@dataclass
class PagePlan:
    """Everything needed to encode one leaf page: the layout, the (transformed) values and
    the codec chosen for every buffer.

    ``layout``: "all_null" | "constant" | "mini_block" | "full_zip" | "blob".
    ``block`` holds the values to compress (dictionary indices when ``dictionary`` is
    set). ``rep_codec`` / ``def_codec`` are the whole-page level choices (mini-block, and
    2.2 all-null pages); None means absent levels or raw u16 levels.
    """

    layout: str
    version: str
    num_rows: int
    layers: list[int]
    rep: np.ndarray | None
    def_: np.ndarray | None
    params: CompressionParams
    arrow_type: pa.DataType | None = None
    values_array: pa.Array | None = None
    block: DataBlock | None = None
    values: Codec | None = None
    dictionary: DataBlock | None = None
    dictionary_codec: Codec | None = None
    dictionary_params: CompressionParams | None = None
    rep_codec: Codec | None = None
    def_codec: Codec | None = None
    constant: bytes | None = None
    constant_variable: bool = False
    num_items: int = 0
    num_visible_items: int = 0
    notes: list[str] = field(default_factory=list)
    defer_level_codecs: bool = False  # mini-block level codecs left for the caller to set
    row_starts: np.ndarray | None = None  # LeafLevels.row_starts / invisible when known
    invisible: np.ndarray | None = None

    @property
    def num_levels(self) -> int:
        lv = self.rep if self.rep is not None else self.def_
        return self.num_visible_items if lv is None else len(lv)


def _env_num(name: str, kind: type) -> object | None:
    raw = os.environ.get(name)
    if raw is None:
        return None
    try:
        return kind(raw)
    except ValueError:
        return None


def leaf_validity(lv: LeafLevels) -> np.ndarray | None:
    """Validity of each visible value (None: all valid), from the def levels."""
    mv = max_visible_def(lv.layers)
    if lv.def_ is None or mv == 0:  # no layer below the lists can be null: visible defs are 0
        return None
    d = np.asarray(lv.def_)
    visible = d[d <= mv]
    return visible == 0


# ----------------------------------------------------------------------------------------
# constant pages (2.2)
# ----------------------------------------------------------------------------------------


def constant_value(values: pa.Array, valid: np.ndarray | None) -> tuple[bytes, bool] | None:
    """(value bytes, variable) when every valid value is the same, else None.

    Covers the types Lance's constant encoder takes: bool, strings / binary and fixed
    byte widths. Values compare by their bytes (so 0.0 and -0.0 differ, as in Lance).
    """
    values = strip_extension(values)
    t = values.type
    if (pa.types.is_dictionary(t) or pa.types.is_fixed_size_list(t) or pa.types.is_struct(t)
            or pa.types.is_null(t) or len(values) == 0):
        return None
    block = arrow_to_block(values)
    n = len(values)
    # all valid (the common case): no O(n) mask or index arrays, the first value leads
    mask = None if valid is None else np.asarray(valid, bool)
    if mask is None:
        first = 0
    else:
        first = int(np.argmax(mask))
        if not mask[first]:
            return None
    if isinstance(block, FixedWidthBlock) and block.bits_per_value == 1:
        bits = np.unpackbits(as_u8(block.data), count=n, bitorder="little").astype(bool)
        v = bits[first]
        same = bits == v if mask is None else (bits == v) | ~mask
        return (b"\x01" if v else b"\x00", False) if np.all(same) else None
    if isinstance(block, FixedWidthBlock):
        w = block.bits_per_value // 8
        v = stats.uint_values(block)
        rows = v if v is not None else as_u8(block.data)[: n * w].reshape(n, w)
        first_row = rows[first]
        for end in (min(n, 256), n):  # a cheap early rejection first, then every value
            diff = rows[:end] != first_row
            diff = diff.any(axis=1) if diff.ndim > 1 else diff
            if np.any(diff if mask is None else diff & mask[:end]):
                return None
        return as_u8(block.data)[first * w:(first + 1) * w].tobytes(), False
    idx = np.arange(n) if mask is None else np.flatnonzero(mask)
    if isinstance(block, VariableWidthBlock):
        offs = np.asarray(block.offsets).astype(np.int64)
        data = as_u8(block.data)
        length = int(offs[first + 1] - offs[first])
        value = data[int(offs[first]):int(offs[first]) + length]
        for sel in (idx[:256], idx):  # a cheap probe first, then every valid value
            starts, lengths = offs[sel], offs[sel + 1] - offs[sel]
            if np.any(lengths != length):
                return None
            if length and not np.all(data[ragged_arange(starts, lengths)].reshape(len(sel), length) == value):
                return None
        return value.tobytes(), True
    return None


# ----------------------------------------------------------------------------------------
# dictionary decision
# ----------------------------------------------------------------------------------------


def dictionary_candidate(block: DataBlock, params: CompressionParams,
                         version: str) -> tuple[FixedWidthBlock, DataBlock] | None:
    """Lance's ``should_dictionary_encode`` + ``dictionary_encode`` (None: not encoded)."""
    if isinstance(block, FixedWidthBlock):
        if block.bits_per_value not in (64, 128) or (block.bits_per_value == 64 and version == "2.1"):
            return None
    elif isinstance(block, VariableWidthBlock):
        if np.asarray(block.offsets).dtype.itemsize not in (4, 8):
            return None
    else:
        return None
    n = int(block.num_values)
    limits = _dict_limits(n, params)
    if limits is None:
        return None
    threshold, ratio = limits
    size = stats.data_size(block)
    if size == 0:
        return None
    max_size = int(size * ratio)
    unique = stats.sample_unique_ratio(block)
    if unique is not None:
        if unique >= DICT_SAMPLE_UNIQUE_RATIO or math.ceil(unique * n) > threshold:
            return None
    return stats.dictionary_encode(block, min(threshold, _I32_MAX), max_size)


def _dict_limits(n: int, params: CompressionParams) -> tuple[int, float] | None:
    """(most distinct values, size ratio) a dictionary of ``n`` values may reach (None:
    too few values to try)."""
    too_small = _env_num("LANCE_ENCODING_DICT_TOO_SMALL", int)
    if n < (DICT_TOO_SMALL if too_small is None else too_small):
        return None
    divisor = params.dict_divisor if "dict-divisor" in params.extra else (
        _env_num("LANCE_ENCODING_DICT_DIVISOR", int) or params.dict_divisor)
    max_card = _env_num("LANCE_ENCODING_DICT_MAX_CARDINALITY", int)
    threshold = min(n // max(int(divisor), 1), DICT_MAX_CARDINALITY if max_card is None else max_card)
    if threshold <= 0:
        return None
    return threshold, _dict_ratio(params)


def carried_dictionary_candidate(carried: CarriedDictionary, params: CompressionParams
                                 ) -> tuple[FixedWidthBlock, VariableWidthBlock] | None:
    """``dictionary_candidate`` for the decoded values of a carried dictionary array,
    decided and encoded from its indices (same answer, same blocks)."""
    n = carried.num_values
    limits = _dict_limits(n, params)
    if limits is None:
        return None
    threshold, ratio = limits
    size = carried.value_bytes + (n + 1) * carried.offset_width  # stats.data_size
    max_size = int(size * ratio)
    if carried.sample_distinct is not None:
        sampled = len(stats._sample_indices(n, 4096))  # noqa: SLF001 - the same sample
        unique = carried.sample_distinct / sampled
        if unique >= DICT_SAMPLE_UNIQUE_RATIO or math.ceil(unique * n) > threshold:
            return None
    if carried.card > min(threshold, _I32_MAX):  # stats.dictionary_encode's aborts
        return None
    item_bytes = int(value_lengths(carried.items)[carried.present].sum())
    if item_bytes + (carried.card + 1) * carried.offset_width + 4 * n > max_size:
        return None
    return carried.encode()


def _dict_ratio(params: CompressionParams) -> float:
    raw = params.extra.get("dict-size-ratio")
    ratio = None
    if raw is not None:
        try:
            ratio = float(raw)
        except ValueError:
            ratio = None
    if ratio is None:
        ratio = _env_num("LANCE_ENCODING_DICT_SIZE_RATIO", float)
    ratio = DICT_SIZE_RATIO if ratio is None else ratio
    if not 0.0 < ratio <= 1.0:
        raise SchemaError(f"dict-size-ratio is {ratio}, which is not in the range (0, 1]")
    return ratio


# ----------------------------------------------------------------------------------------
# the plan
# ----------------------------------------------------------------------------------------


def _levels_plan(plan: PagePlan) -> PagePlan:
    """All-null page with levels: raw in 2.1, compressed in 2.2."""
    plan.defer_level_codecs = False
    if plan.version != "2.1":
        plan.rep_codec = None if plan.rep is None else level_codec(plan.rep, plan.version)
        plan.def_codec = None if plan.def_ is None else level_codec(plan.def_, plan.version)
    return plan


def plan_page(leaf: pa.Field, root: pa.Field, lv: LeafLevels, version: str,
              row_over_budget: bool = False, defer_level_codecs: bool = False) -> PagePlan:
    """Choose the layout and every compression for one page of one leaf column.

    ``leaf`` is the leaf's field (its metadata holds the compression knobs), ``root`` the
    top-level field (its metadata may force ``structural-encoding``), ``lv`` the leaf's
    levels and values for the page. ``row_over_budget``: one row holds more levels than a
    mini-block chunk can (``page_split``), so the page must be full-zip.
    ``defer_level_codecs``: a mini-block plan leaves ``rep_codec`` / ``def_codec`` unset
    (``defer_level_codecs`` stays True) for the caller to choose them for many pages at
    once (``strategy.level_codecs``).
    """
    if version not in ("2.1", "2.2"):
        raise InvalidInputError(f"structural encoding needs file version 2.1 or 2.2, got {version}")
    params = params_from_metadata(leaf, root)
    values = strip_extension(lv.values)
    if is_carried(values, leaf):
        fast = _plan_carried(leaf, lv, version, params, values, row_over_budget, defer_level_codecs)
        if fast is not None:
            return fast
        values = decode_carried(values)
    _check_fixed_size_list(leaf, values.type, version)
    plan = PagePlan("all_null", version, int(lv.num_rows), list(lv.layers), lv.rep, lv.def_, params,
                    arrow_type=values.type, values_array=values, defer_level_codecs=defer_level_codecs,
                    row_starts=lv.row_starts, invisible=lv.invisible)
    n = len(values)
    plan.num_items = plan.num_visible_items = n
    if is_blob(leaf) and (pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type)):
        plan.layout = "blob"
        return plan
    if n == 0:
        return _levels_plan(plan)
    valid = leaf_validity(lv)
    simple = len(lv.layers) == 1 and lv.rep is None
    if pa.types.is_null(values.type) or (valid is not None and not valid.any()):
        if simple:
            plan.rep = plan.def_ = None
            plan.layers = [NULLABLE_ITEM]
            return plan
        return _levels_plan(plan)
    if pa.types.is_struct(values.type) and values.type.num_fields == 0:
        if not simple or lv.def_ is not None:
            raise SchemaError(f"field {leaf.name!r}: empty structs with nulls or inside lists are not "
                              "supported (as in Lance)")
        plan.rep = plan.def_ = None
        plan.layers = [NULLABLE_ITEM]
        return plan
    if version != "2.1":
        const = constant_value(values, valid)
        if const is not None:
            plan.layout = "constant"
            plan.constant, plan.constant_variable = const
            return plan
    if row_over_budget:
        plan.notes.append("row over the mini-block level budget")
    return _plan_values(plan, values, valid, row_over_budget)


def _plan_carried(leaf: pa.Field, lv: LeafLevels, version: str, params: CompressionParams,
                  values: pa.DictionaryArray, row_over_budget: bool, defer_level_codecs: bool
                  ) -> PagePlan | None:
    """The plan of the decoded values of a carried dictionary array when it is a constant
    (2.2) or a dictionary page (steps 5 and 8), found from the indices; None otherwise (the
    caller decodes the values and plans them as usual)."""
    n = len(values)
    if n == 0 or row_over_budget or is_blob(leaf) or leaf_validity(lv) is not None:
        return None
    carried = carried_stats(values)
    if carried is None:
        return None
    value_type = values.type.value_type
    plan = PagePlan("all_null", version, int(lv.num_rows), list(lv.layers), lv.rep, lv.def_, params,
                    arrow_type=value_type, values_array=values, defer_level_codecs=defer_level_codecs,
                    row_starts=lv.row_starts, invisible=lv.invisible)
    plan.num_items = plan.num_visible_items = n
    if version != "2.1":
        const = carried.constant_value()
        if const is not None:
            plan.layout = "constant"
            plan.constant, plan.constant_variable = const, True
            return plan
    encoded = carried_dictionary_candidate(carried, params)
    if encoded is None:
        return None
    return _miniblock(plan, encoded[0], encoded[1])


def _check_fixed_size_list(leaf: pa.Field, t: pa.DataType, version: str) -> None:
    """Fixed-size lists must hold fixed-width items (pylance refuses FSL<struct> in 2.1 and
    panics on FSL<string>; the 2.2 structural FSL<struct> is not implemented here)."""
    while pa.types.is_fixed_size_list(t):
        t = t.value_type
        if pa.types.is_struct(t):
            raise SchemaError(f"field {leaf.name!r}: fixed_size_list<struct> is not supported in file "
                              f"version {version}")
        if not (pa.types.is_fixed_size_list(t) or pa.types.is_boolean(t) or pa.types.is_null(t)
                or _has_bit_width(t)):
            raise SchemaError(f"field {leaf.name!r}: fixed_size_list items of type {t} cannot be stored "
                              "(only fixed-width items)")


def _has_bit_width(t: pa.DataType) -> bool:
    try:
        return t.bit_width > 0
    except ValueError:
        return False


def _plan_values(plan: PagePlan, values: pa.Array, valid: np.ndarray | None,
                 row_over_budget: bool = False) -> PagePlan:
    version, params = plan.version, plan.params
    if row_over_budget:
        if params.structural_encoding not in (None, "fullzip") or pa.types.is_dictionary(values.type):
            raise SchemaError(f"a row holds {plan.num_levels} rep/def levels, more than a mini-block chunk "
                              "can; this page can only be written full-zip")
        return _fullzip(plan, arrow_to_block(values))
    if pa.types.is_dictionary(values.type):
        indices, items = dictionary_blocks(values)
        return _miniblock(plan, indices, items)
    block = arrow_to_block(values)
    if isinstance(block, StructBlock) and any(isinstance(c, VariableWidthBlock) for c in block.children):
        return _fullzip(plan, block)
    encoded = dictionary_candidate(block, params, version)
    if encoded is not None:
        return _miniblock(plan, encoded[0], encoded[1])
    se = params.structural_encoding
    if se == "miniblock" or (se is None and stats.max_length(block) < MINIBLOCK_MAX_BYTES_PER_VALUE):
        return _miniblock(plan, block, None)
    if se is None or se == "fullzip":
        return _fullzip(plan, block)
    raise SchemaError(f"cannot determine the structural encoding: invalid value {se!r} of "
                      "lance-encoding:structural-encoding (expected miniblock or fullzip)")


def _miniblock(plan: PagePlan, block: DataBlock, dictionary: DataBlock | None) -> PagePlan:
    plan.layout = "mini_block"
    plan.block = block
    arrow_type = plan.arrow_type.value_type if pa.types.is_dictionary(plan.arrow_type) else plan.arrow_type
    plan.values = miniblock_codec(block, plan.params, None if dictionary is not None else arrow_type,
                                  plan.version)
    if dictionary is not None:
        plan.dictionary = dictionary
        plan.dictionary_params = dictionary_values_params(plan.params, dictionary)
        plan.dictionary_codec = block_codec(dictionary, plan.dictionary_params, plan.version)
    if not plan.defer_level_codecs:
        plan.rep_codec = None if plan.rep is None else level_codec(plan.rep, plan.version)
        plan.def_codec = None if plan.def_ is None else level_codec(plan.def_, plan.version)
    return plan


def _fullzip(plan: PagePlan, block: DataBlock) -> PagePlan:
    plan.layout = "full_zip"
    if isinstance(block, FixedWidthBlock) and block.bits_per_value == 1:
        bits = np.unpackbits(as_u8(block.data), count=block.num_values, bitorder="little")
        block = FixedWidthBlock(bits.astype(np.uint8), 8, block.num_values)
    plan.block = block
    plan.values = per_value_codec(block, plan.params, plan.arrow_type, plan.version)
    if plan.rep is not None:
        plan.num_items = len(plan.rep)
    return plan
