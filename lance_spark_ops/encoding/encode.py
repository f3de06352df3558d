"""Encode one page's worth of a top-level field into 2.1 / 2.2 pages, one per leaf column.

Pipeline per leaf: ``repdef.levels_from_arrow`` shreds the field into leaves (values +
rep/def levels + layer kinds), ``plan.plan_page`` picks the layout and every codec
(``compression.strategy``), ``codecs`` runs the codecs and the layout encoders
(``layout/miniblock``, ``fullzip``, ``constant``, ``blob``) assemble the page buffers and
its ``PageLayout``. Nothing here touches storage; ``file.writer`` batches rows and calls
``encode_field`` with one page's worth (possibly a slice). A leaf whose null / empty
lists would overflow a mini-block chunk's level count is split into several pages by rows
(``page_split``); ``encode_field_pages`` returns them with their first rows. The pages of
one split leaf get their level codecs chosen (``strategy.level_codecs``) and their levels
compressed (``page_levels_many``) in one pass over the leaf's levels, not page by page:
same bytes, without dozens of numpy calls per page.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lance_spark_ops.encoding.codecs import compress_block, compress_miniblock, compress_per_value
from lance_spark_ops.encoding.compression.encoded import MiniBlockCompressed
from lance_spark_ops.encoding.compression.strategy import level_codec, level_codecs
from lance_spark_ops.encoding.layout.blob import encode_blob_page
from lance_spark_ops.encoding.layout.constant import encode_constant_page
from lance_spark_ops.encoding.layout.fullzip_encode import encode_fullzip_page
from lance_spark_ops.encoding.layout.miniblock_encode import (
    LevelPage,
    PageLevels,
    encode_miniblock_page,
    page_levels_many,
)
from lance_spark_ops.encoding.leaves import field_leaf_count, leaf_fields
from lance_spark_ops.encoding.page import EncodedPage
from lance_spark_ops.encoding.page_split import split_pages
from lance_spark_ops.encoding.plan import PagePlan, plan_page
from lance_spark_ops.encoding.repdef import LeafLevels, levels_from_arrow
from lance_spark_ops.errors import InvalidInputError, LanceError, UnsupportedError

__all__ = ["encode_field", "encode_field_pages", "encode_plan", "plan_field", "plan_field_pages"]


def _leaves(field: pa.Field, array: pa.Array | pa.ChunkedArray,
            version: str) -> list[tuple[pa.Field, LeafLevels]]:
    if version not in ("2.1", "2.2"):
        raise InvalidInputError(f"encode_field writes file versions 2.1 / 2.2, got {version!r}")
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    leaves = leaf_fields(field)
    levels = levels_from_arrow(array, field)
    if len(levels) != len(leaves) or len(leaves) != field_leaf_count(field):
        raise LanceError(f"field {field.name!r}: shredding gave {len(levels)} leaves, the schema has "
                         f"{field_leaf_count(field)}")
    return list(zip(leaves, levels, strict=True))


def _plan(leaf: pa.Field, root: pa.Field, lv: LeafLevels, version: str, over: bool = False,
          defer: bool = False) -> PagePlan:
    try:
        return plan_page(leaf, root, lv, version, over, defer)
    except LanceError as e:
        raise type(e)(f"leaf {leaf.name!r}: {e}") from e


def _set_level_codecs(plans: list[PagePlan], version: str) -> None:
    """Choose the deferred level codecs of a leaf's pages (consecutive, covering its
    levels) for all pages at once."""
    for p in plans:  # only mini-block plans take level codecs from here
        p.defer_level_codecs = p.defer_level_codecs and p.layout == "mini_block"
    for attr, codec_attr in (("rep", "rep_codec"), ("def_", "def_codec")):
        todo = [p for p in plans if p.defer_level_codecs and getattr(p, attr) is not None]
        if not todo:
            continue
        if any(getattr(p, attr) is None for p in plans):
            for p in todo:
                setattr(p, codec_attr, level_codec(getattr(p, attr), version))
            continue
        levels = [getattr(p, attr) for p in plans]
        bounds = np.concatenate(([0], np.cumsum([len(x) for x in levels])))
        codecs = level_codecs(np.concatenate(levels), bounds, version)
        for p, codec in zip(plans, codecs, strict=True):
            if p.defer_level_codecs:
                setattr(p, codec_attr, codec)
    for p in plans:
        p.defer_level_codecs = False


def plan_field_pages(field: pa.Field, array: pa.Array | pa.ChunkedArray,
                     version: str) -> list[list[tuple[int, PagePlan]]]:
    """Per leaf column, its pages as (first row within ``array``, plan): usually one page,
    more when null / empty lists would overflow a mini-block chunk (``page_split``)."""
    out = []
    for leaf, lv in _leaves(field, array, version):
        pages, over = split_pages(lv)
        defer = len(pages) > 1
        planned = [(lo, _plan(leaf, field, page, version, over, defer)) for lo, page in pages]
        if defer:
            _set_level_codecs([plan for _, plan in planned], version)
        out.append(planned)
    return out


def plan_field(field: pa.Field, array: pa.Array | pa.ChunkedArray, version: str) -> list[PagePlan]:
    """One ``PagePlan`` per leaf column of ``field`` for the rows of ``array`` (no splitting)."""
    return [_plan(leaf, field, lv, version) for leaf, lv in _leaves(field, array, version)]


def encode_field_pages(field: pa.Field, array: pa.Array | pa.ChunkedArray,
                       version: str) -> list[list[tuple[int, EncodedPage]]]:
    """Per leaf column (in leaf order) its pages as (first row within ``array``, page)."""
    return [_encode_pages(pages) for pages in plan_field_pages(field, array, version)]


def _encode_pages(pages: list[tuple[int, PagePlan]]) -> list[tuple[int, EncodedPage]]:
    """Encode the pages of one leaf; the levels of its mini-block pages are compressed
    together (``page_levels_many``): a list leaf's flush splits into dozens of pages."""
    mini = [i for i, (_, plan) in enumerate(pages) if plan.layout == "mini_block"]
    if len(mini) < 2:
        return [(row, encode_plan(plan)) for row, plan in pages]
    values = {i: compress_miniblock(pages[i][1].values, pages[i][1].block, pages[i][1].params) for i in mini}
    levels = dict(zip(mini, page_levels_many([
        LevelPage(values[i], p.rep, p.def_, p.layers, p.rep_codec, p.def_codec, p.invisible)
        for i in mini for p in [pages[i][1]]]), strict=True))
    return [(row, _miniblock_page(plan, values[i], levels[i]) if i in values else encode_plan(plan))
            for i, (row, plan) in enumerate(pages)]


def encode_field(field: pa.Field, array: pa.Array | pa.ChunkedArray, version: str) -> list[EncodedPage]:
    """Pages (one per 2.1+ column of ``field``, in leaf order) holding the rows of ``array``.

    Raises ``UnsupportedError`` when a column must be split into several pages (many
    null / empty lists); use ``encode_field_pages`` for that.
    """
    pages = encode_field_pages(field, array, version)
    for leaf, col in zip(leaf_fields(field), pages, strict=True):
        if len(col) != 1:
            raise UnsupportedError(f"leaf {leaf.name!r} needs {len(col)} pages (rep/def level budget); "
                                   "write it with encode_field_pages")
    return [col[0][1] for col in pages]


def encode_plan(plan: PagePlan) -> EncodedPage:
    """Run a page plan: compress every buffer and lay the page out."""
    if plan.layout == "all_null":
        return _constant_page(plan, None, False)
    if plan.layout == "constant":
        return _constant_page(plan, plan.constant, plan.constant_variable)
    if plan.layout == "mini_block":
        return _miniblock_page(plan)
    if plan.layout == "full_zip":
        return _fullzip_page(plan)
    if plan.layout == "blob":
        return _blob_page(plan)
    raise LanceError(f"unknown page layout {plan.layout!r}")


def _constant_page(plan: PagePlan, value: bytes | None, variable: bool) -> EncodedPage:
    t = plan.arrow_type
    large = t is not None and (pa.types.is_large_string(t) or pa.types.is_large_binary(t))
    return encode_constant_page(plan.num_rows, value, variable, plan.rep, plan.def_, plan.layers,
                                plan.version, offset_bits=64 if large else 32,
                                rep_codec=plan.rep_codec, def_codec=plan.def_codec)


def _miniblock_page(plan: PagePlan, values: MiniBlockCompressed | None = None,
                    levels: PageLevels | None = None) -> EncodedPage:
    assert plan.block is not None and plan.values is not None
    if values is None:
        values = compress_miniblock(plan.values, plan.block, plan.params)
    dictionary = None
    if plan.dictionary is not None:
        assert plan.dictionary_codec is not None and plan.dictionary_params is not None
        buf, enc = compress_block(plan.dictionary_codec, plan.dictionary, plan.dictionary_params)
        dictionary = (buf, enc, int(plan.dictionary.num_values))
    return encode_miniblock_page(plan.num_rows, values, plan.rep, plan.def_, plan.layers, plan.version,
                                 dictionary=dictionary, num_items=plan.num_items,
                                 rep_codec=plan.rep_codec, def_codec=plan.def_codec, levels=levels,
                                 row_starts=plan.row_starts)


def _fullzip_page(plan: PagePlan) -> EncodedPage:
    assert plan.block is not None and plan.values is not None
    values, encoding = compress_per_value(plan.values, plan.block, plan.params)
    return encode_fullzip_page(plan.num_rows, values, encoding, plan.rep, plan.def_, plan.layers,
                               plan.num_items, plan.num_visible_items, plan.version)


def _blob_page(plan: PagePlan) -> EncodedPage:
    return encode_blob_page(plan.num_rows, plan.values_array, plan.rep, plan.def_, plan.layers, plan.version)
