"""Which file columns (2.1+) a field occupies: its leaves, depth-first as Lance does.

* struct -> its children in order (an empty struct is one leaf of its own);
* list / large_list -> its item; map -> list<struct<key, value>>: key leaf, then value leaf;
* fixed_size_list, dictionary, packed structs (metadata ``lance-encoding:packed`` /
  ``packed`` = "true"), blobs (``lance-encoding:blob``) and primitives are single leaves.

Shared by the reader (``structural``) and the writer (``repdef``, ``encode``).
"""

from __future__ import annotations

import pyarrow as pa

PACKED_KEYS = (b"lance-encoding:packed", b"packed")
BLOB_KEY = b"lance-encoding:blob"


def is_packed_struct(field: pa.Field) -> bool:
    """Struct stored row-major in one column (metadata value "true", any case, as Lance)."""
    meta = field.metadata or {}
    return pa.types.is_struct(field.type) and any(meta.get(k, b"").lower() == b"true" for k in PACKED_KEYS)


def is_blob(field: pa.Field) -> bool:
    """Field marked as a blob (metadata key present, any value, as Lance)."""
    return BLOB_KEY in (field.metadata or {})


def storage_type(t: pa.DataType) -> pa.DataType:
    """The storage type of an extension type (the type itself otherwise)."""
    return t.storage_type if isinstance(t, pa.BaseExtensionType) else t


def is_single_leaf(field: pa.Field) -> bool:
    """Whether the field is stored as exactly one column with no nested rep/def layers."""
    dt = storage_type(field.type)
    if pa.types.is_struct(dt):
        return dt.num_fields == 0 or is_packed_struct(field) or is_blob(field)
    return not (pa.types.is_list(dt) or pa.types.is_large_list(dt) or pa.types.is_map(dt))


def map_entries(dt: pa.MapType) -> pa.Field:
    """The struct<key, value> entries field a map is stored as (a list of it)."""
    return pa.field("entries", pa.struct([dt.key_field, dt.item_field]), nullable=False)


def children_of(field: pa.Field) -> list[pa.Field]:
    """The fields one level down that hold leaves (a map's entries struct, a list's item)."""
    dt = storage_type(field.type)
    if pa.types.is_map(dt):
        return [map_entries(dt)]
    if pa.types.is_list(dt) or pa.types.is_large_list(dt):
        return [dt.value_field]
    return [dt.field(i) for i in range(dt.num_fields)]


def leaf_fields(field: pa.Field) -> list[pa.Field]:
    """The field's leaf columns in file order (depth-first)."""
    if is_single_leaf(field):
        return [field]
    out: list[pa.Field] = []
    for child in children_of(field):
        out.extend(leaf_fields(child))
    return out


def field_leaf_count(field: pa.Field) -> int:
    """Number of file columns (2.1+) the field occupies."""
    return len(leaf_fields(field))


def leaf_paths(field: pa.Field) -> list[list[pa.Field]]:
    """For each leaf, the fields from ``field`` (outermost) down to the leaf: one per layer."""
    if is_single_leaf(field):
        return [[field]]
    return [[field, *p] for child in children_of(field) for p in leaf_paths(child)]
