"""Leaf columns (pages of values + rep/def levels) -> one nested Arrow array (2.1+ files).

In file versions 2.1+ a top-level field is stored as one column per *leaf*; structs and
lists own no column: their validity and offsets travel in every leaf's rep/def levels
(one ``RepDefLayer`` per nesting level, innermost first). Leaves are enumerated
depth-first as Lance does (rust/lance-core/src/datatypes/field.rs, encoder.rs):

* struct -> its children in order (an empty struct is one leaf of its own);
* list / large_list -> its item; map -> list<struct<key, value>>: key leaf, then value leaf;
* fixed_size_list, dictionary, packed structs (metadata ``lance-encoding:packed`` /
  ``packed`` = "true"), blobs (``lance-encoding:blob``) and primitives are single leaves.

``build_array`` unravels each leaf's pages (``repdef.unravel``), turns the values into the
leaf Arrow array (``arrow.block_to_arrow``), then wraps structs and lists around them,
taking each struct's / list's validity and offsets from the first leaf beneath it (all
leaves under a node carry the same information for it, as in Lance's struct decoder).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from lance_spark_ops.encoding.arrow import (
    block_num_values,
    block_to_arrow,
    carried_dictionary_array,
    validity_buffer,
)
from lance_spark_ops.encoding.carried_dictionary import is_plain_variable
from lance_spark_ops.encoding.compression._arrays import alloc_empty
from lance_spark_ops.encoding.layers import ALL_VALID_ITEM, ALL_VALID_LIST, is_list_layer, layer_name
from lance_spark_ops.encoding.leaves import (
    children_of,
    field_leaf_count,
    is_blob,
    is_packed_struct,
    is_single_leaf,
    leaf_fields,
    leaf_paths,
    storage_type,
)
from lance_spark_ops.encoding.page import PageData
from lance_spark_ops.encoding.repdef import LayerInfo, concat_unraveled, unravel
from lance_spark_ops.errors import CorruptFileError

# field_leaf_count, is_blob, is_packed_struct, leaf_fields live in ``leaves``; kept importable here.
__all__ = ["build_array", "field_leaf_count", "is_blob", "is_packed_struct", "leaf_fields"]
_I32_MAX = 2**31 - 1


@dataclass
class _Leaf:
    layers: list[LayerInfo]  # innermost first, concatenated over pages
    values: pa.Array
    carried_bitmap: bool | None = None  # a carried dictionary: its decoded twin has a validity bitmap


def _is_list_field(f: pa.Field) -> bool:
    dt = storage_type(f.type)
    return pa.types.is_list(dt) or pa.types.is_large_list(dt) or pa.types.is_map(dt)


def _page_layers(page: PageData, path: list[pa.Field], where: str) -> list[int]:
    layers = [int(k) for k in page.layers]
    want_list = [_is_list_field(f) for f in reversed(path)]  # innermost first
    if not layers:
        if any(want_list) or page.rep is not None or page.def_ is not None:
            raise CorruptFileError(f"{where}: page has rep/def levels or lists but no layer descriptions")
        return [ALL_VALID_ITEM] * len(path)
    if len(layers) != len(path):
        raise CorruptFileError(
            f"{where}: page has {len(layers)} rep/def layers, the field nests {len(path)} levels deep")
    for k, (kind, is_list) in enumerate(zip(layers, want_list, strict=True)):
        if is_list_layer(kind) != is_list:
            raise CorruptFileError(
                f"{where}: layer {k} is {layer_name(kind)} but the field has a "
                f"{'list' if is_list else 'struct/item'} there")
    return layers


def _empty_layers(path: list[pa.Field]) -> list[LayerInfo]:
    out = []
    for f in reversed(path):
        if _is_list_field(f):
            out.append(LayerInfo(ALL_VALID_LIST, 0, None, np.zeros(1, np.int64)))
        else:
            out.append(LayerInfo(ALL_VALID_ITEM, 0, None, None))
    return out


def _leaf_array(page: PageData, leaf: pa.Field, n: int, validity: np.ndarray | None, where: str) -> pa.Array:
    dt = leaf.type
    storage = storage_type(dt)
    if pa.types.is_struct(storage) and storage.num_fields == 0:
        # Lance reads empty structs back as all-valid rows whatever the levels say.
        arr = pa.Array.from_buffers(storage, n, [None], children=[])
    elif pa.types.is_null(storage) or page.values is None:
        arr = pa.nulls(n, storage)
    else:
        have = block_num_values(page.values)
        if have != n:
            raise CorruptFileError(f"{where}: levels describe {n} values but the page decoded {have}")
        arr = block_to_arrow(page.values, storage, validity, page.dictionary)
    if storage is not dt:
        arr = pa.ExtensionArray.from_storage(dt, arr)
    return arr


def _can_carry(path: list[pa.Field], pages: list[PageData]) -> bool:
    """Keep this leaf's dictionary: a plain string / binary leaf under lists and structs
    only, every page dictionary-encoded (``encoding.carried_dictionary``)."""
    if not pages or not is_plain_variable(path[-1].type):
        return False
    for f in path[:-1]:
        t = f.type
        if not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_struct(t)):
            return False
    return all(p.dictionary is not None and p.values is not None for p in pages)


def _decode_leaf(path: list[pa.Field], pages: list[PageData], col: int, keep_dictionaries: bool = False
                 ) -> _Leaf:
    leaf = path[-1]
    if not pages:
        return _Leaf(_empty_layers(path), pa.array([], leaf.type))
    carry = keep_dictionaries and _can_carry(path, pages)
    parts, units, where_of = [], [], []
    for i, page in enumerate(pages):
        where = f"leaf {col} ({leaf.name!r}) page {i}"
        layers = _page_layers(page, path, where)
        try:
            u = unravel(page.rep, page.def_, layers, int(page.num_rows))
        except CorruptFileError as e:
            raise CorruptFileError(f"{where}: {e}") from e
        parts.append(u)
        units.append(u)
        where_of.append(where)
        validity = u.layers[0].validity
        if carry and validity is not None and not np.all(validity):
            carry = False  # nulls: decoded as usual
    arrays = []
    for page, u, where in zip(pages, units, where_of, strict=True):
        if carry:
            have = block_num_values(page.values)
            if have != u.num_values:
                raise CorruptFileError(f"{where}: levels describe {u.num_values} values but the page "
                                       f"decoded {have}")
            arrays.append(carried_dictionary_array(page.values, leaf.type, page.dictionary))
        else:
            arrays.append(_leaf_array(page, leaf, u.num_values, u.layers[0].validity, where))
    values = arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)
    # the decoded twin: one page's take has a validity bitmap, a concatenation of pages none
    return _Leaf(concat_unraveled(parts), values, (len(arrays) == 1) if carry else None)


def _layer_at(leaf: _Leaf, depth: int) -> LayerInfo:
    return leaf.layers[len(leaf.layers) - 1 - depth]


def _assemble(field: pa.Field, depth: int, leaves: Iterator[_Leaf]) -> tuple[pa.Array, _Leaf]:
    """Array for ``field`` at nesting ``depth`` and the first leaf beneath it."""
    if is_single_leaf(field):
        leaf = next(leaves)
        return leaf.values, leaf
    dt = field.type
    storage = storage_type(dt)
    kids = [_assemble(c, depth + 1, leaves) for c in children_of(field)]
    first = kids[0][1]
    info = _layer_at(first, depth)
    n = info.num_elements
    vbuf = validity_buffer(info.validity)
    if pa.types.is_struct(storage):
        for (arr, _), c in zip(kids, children_of(field), strict=True):
            if len(arr) != n:
                raise CorruptFileError(f"struct {field.name!r}: child {c.name!r} has {len(arr)} values, "
                                       f"the struct has {n} (leaf columns disagree)")
        if any(a.type != storage.field(i).type for i, (a, _) in enumerate(kids)):  # carried dictionaries
            storage = dt = pa.struct([storage.field(i).with_type(a.type) for i, (a, _) in enumerate(kids)])
        arr = pa.Array.from_buffers(storage, n, [vbuf], children=[a for a, _ in kids])
    else:
        child = kids[0][0]
        offsets = info.offsets
        if offsets is None or len(offsets) != n + 1:
            raise CorruptFileError(f"list {field.name!r}: no offsets for {n} lists")
        if int(offsets[-1]) != len(child):
            raise CorruptFileError(f"list {field.name!r}: offsets end at {int(offsets[-1])}, "
                                   f"items hold {len(child)} values")
        if not pa.types.is_map(storage) and child.type != storage.value_type:  # a carried dictionary
            make = pa.large_list if pa.types.is_large_list(storage) else pa.list_
            storage = dt = make(storage.value_field.with_type(child.type))
        if pa.types.is_large_list(storage):
            obuf = pa.py_buffer(offsets)
        else:
            if int(offsets[-1]) > _I32_MAX:
                raise CorruptFileError(
                    f"list {field.name!r}: {int(offsets[-1])} items overflow 32-bit offsets")
            off32 = alloc_empty(len(offsets), np.int32)
            np.copyto(off32, offsets, casting="unsafe")  # values checked to fit above
            obuf = pa.py_buffer(off32)
        if pa.types.is_map(storage):
            # Arrow requires non-null map entries; the entries layer is all-valid in Lance.
            if child.null_count:
                child = pa.Array.from_buffers(child.type, len(child), [None],
                                              children=[child.field(i) for i in range(child.type.num_fields)])
        arr = pa.Array.from_buffers(storage, n, [vbuf, obuf], children=[child])
    if storage is not dt:
        arr = pa.ExtensionArray.from_storage(dt, arr)
    return arr, first


def build_array(field: pa.Field, leaves: list[list[PageData]]) -> pa.Array:
    """Assemble the Arrow array of one top-level ``field`` from its leaf columns.

    ``leaves[i]`` holds leaf ``i``'s pages in row order (leaf order as ``leaf_fields``).
    All leaves must describe the same rows; any disagreement between levels, layers,
    value counts and the field's shape raises ``CorruptFileError``.
    """
    return build_array_keeping(field, leaves, False)[0]


def build_array_keeping(field: pa.Field, leaves: list[list[PageData]], keep_dictionaries: bool = True
                        ) -> tuple[pa.Array, bool | None]:
    """``build_array``, but the first string / binary leaf (under lists and structs only)
    whose pages are all dictionary encoded without nulls stays a dictionary array
    (``encoding.carried_dictionary``): the array's type is then one whose ``plain_type`` is
    the field's. Also returns whether the decoded twin of that leaf would have a validity
    bitmap (``carried_dictionary.decoded_nbytes``), None when no leaf was kept."""
    paths = leaf_paths(field)
    if len(leaves) != len(paths):
        raise CorruptFileError(f"field {field.name!r} has {len(paths)} leaf columns, got {len(leaves)}")
    decoded = []
    for i, (path, pages) in enumerate(zip(paths, leaves, strict=True)):
        decoded.append(_decode_leaf(path, pages, i, keep_dictionaries))
        keep_dictionaries = keep_dictionaries and decoded[-1].carried_bitmap is None  # one per field
    rows = {_layer_at(leaf, 0).num_elements for leaf in decoded}
    if len(rows) > 1:
        raise CorruptFileError(f"field {field.name!r}: leaf columns hold different row counts {sorted(rows)}")
    it = iter(decoded)
    arr, _ = _assemble(field, 0, it)
    return arr, next((d.carried_bitmap for d in decoded if d.carried_bitmap is not None), None)
