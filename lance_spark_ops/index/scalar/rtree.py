"""RTREE index files as pylance 14.0.2 writes them (no I/O): bounding boxes of GeoArrow
geometries, the Hilbert order, the pages of the tree.

A segment holds ``page_data.lance`` - columns ``bbox`` (``geoarrow.box``: struct of
xmin / ymin / xmax / ymax doubles) and ``id`` (uint64) - and ``nulls.lance`` (one binary row:
the ``RowIdTreeMap`` of the null rows). ``page_data`` starts with the leaf items (each
indexed row's box and id: its row address, or stable row id on stable-row-id datasets), sorted
by the Hilbert value of the box centre on a 65536 x 65536 grid over the segment's total box,
cut into pages of ``page_size`` rows; then, level by level until one page holds a level, one
row per page of the level below (its box and page number). Schema metadata: ``page_size``,
``num_pages``, ``num_items``, ``bbox`` (serde_json of the total box, ``null`` when empty).
Null geometries go to ``nulls``; empty ones are in neither. ``index_version`` 0, details an
empty ``RTreeIndexDetails``. pylance's update keeps every old item (of deleted rows and
removed fragments too), adds the new rows' and sorts them all again over the union of the old
``bbox`` and the new rows' box.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_spark_ops.errors import CorruptFileError, InvalidInputError, UnsupportedError
from lance_spark_ops.index.serde_float import format_float

PAGE_DATA = "page_data.lance"
NULLS = "nulls.lance"
FILES = (PAGE_DATA, NULLS)
TYPE_URL = "/lance.index.pb.RTreeIndexDetails"
INDEX_VERSION = 0
DEFAULT_PAGE_SIZE = 4096
EXT_KEY = b"ARROW:extension:name"
# GeoArrow geometry types -> list nesting above the coordinates
NESTING = {"geoarrow.point": 0, "geoarrow.linestring": 1, "geoarrow.multipoint": 1,
           "geoarrow.polygon": 2, "geoarrow.multilinestring": 2, "geoarrow.multipolygon": 3}
BOX = "geoarrow.box"
GEO_TYPES = frozenset((*NESTING, BOX))

BOX_TYPE = pa.struct([pa.field(n, pa.float64(), nullable=False) for n in ("xmin", "ymin", "xmax", "ymax")])
PAGE_SCHEMA = pa.schema([pa.field("bbox", BOX_TYPE, nullable=False, metadata={EXT_KEY: BOX.encode()}),
                         pa.field("id", pa.uint64(), nullable=False)])
NULLS_SCHEMA = pa.schema([pa.field("nulls", pa.binary(), nullable=False)])
# a part task's boxes (parts are merged, sorted and paged by the merge task)
PART_SCHEMA = pa.schema([pa.field(n, pa.float64(), nullable=False) for n in ("xmin", "ymin", "xmax", "ymax")]
                        + [pa.field("id", pa.uint64(), nullable=False)])


def geo_type(field: pa.Field) -> str | None:
    """The field's GeoArrow extension name, or None."""
    meta = field.metadata or {}
    name = meta.get(EXT_KEY)
    if name is None and isinstance(field.type, pa.ExtensionType):
        return getattr(field.type, "extension_name", None)
    return name.decode() if name is not None else None


def check_field(field: pa.Field) -> str:
    """The GeoArrow type of an RTREE column; ``InvalidInputError`` / ``UnsupportedError``
    naming the column when it is none this library reads."""
    name = geo_type(field)
    if name is None or not name.startswith("geoarrow."):
        raise InvalidInputError(f"RTREE index column {field.name!r} must be a GeoArrow geometry column "
                                f"(ARROW:extension:name geoarrow.*), not {field.type}")
    if name not in GEO_TYPES:
        raise UnsupportedError(f"RTREE index column {field.name!r}: {name} columns are not read by this "
                               f"library (native {', '.join(sorted(GEO_TYPES))} are)")
    t = field.type.storage_type if isinstance(field.type, pa.ExtensionType) else field.type
    for _ in range(NESTING.get(name, 0)):
        if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
            raise InvalidInputError(f"RTREE index column {field.name!r}: {name} must be nested lists of "
                                    f"points, not {field.type}")
        t = t.value_type
    if name == BOX:
        names = [t.field(i).name for i in range(t.num_fields)] if pa.types.is_struct(t) else []
        if names != ["xmin", "ymin", "xmax", "ymax"]:
            raise UnsupportedError(f"RTREE index column {field.name!r}: only 2-D boxes are read, not {t}")
    elif not _xy_points(t):
        raise UnsupportedError(f"RTREE index column {field.name!r}: only 2-D (xy) coordinates are read, "
                               f"not {t}")
    return name


def _xy_points(t: pa.DataType) -> bool:
    if pa.types.is_struct(t):
        return [t.field(i).name for i in range(t.num_fields)] == ["x", "y"]
    # interleaved: pylance 14 reads the child only when named "xy" (a Lance round trip names it
    # "item", which pylance then refuses too)
    return (pa.types.is_fixed_size_list(t) and t.list_size == 2 and pa.types.is_floating(t.value_type)
            and t.value_field.name == "xy")


def _coords(points: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    if pa.types.is_struct(points.type):
        x, y = points.field("x"), points.field("y")
        return (np.asarray(x.to_numpy(zero_copy_only=False), np.float64),
                np.asarray(y.to_numpy(zero_copy_only=False), np.float64))
    flat = np.asarray(points.flatten().to_numpy(zero_copy_only=False), np.float64)
    return flat[0::2], flat[1::2]


def bounding_boxes(values: pa.Array, geo: str) -> tuple[np.ndarray, np.ndarray]:
    """(boxes float64 [n, 4] as xmin, ymin, xmax, ymax; valid bool [n]) of a geometry column.
    An empty geometry gets (inf, inf, -inf, -inf)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.ExtensionArray):
        values = values.storage
    n = len(values)
    valid = np.asarray(values.is_valid().to_numpy(zero_copy_only=False), bool)
    out = np.empty((n, 4), np.float64)
    if geo == BOX:
        for i, name in enumerate(("xmin", "ymin", "xmax", "ymax")):
            out[:, i] = np.asarray(values.field(name).to_numpy(zero_copy_only=False), np.float64)
        return out, valid
    depth = NESTING[geo]
    if depth == 0:
        x, y = _coords(values)
        out[:, 0] = out[:, 2] = x
        out[:, 1] = out[:, 3] = y
        return out, valid
    rows = None
    level = values
    for _ in range(depth):
        parents = np.asarray(pc.list_parent_indices(level).to_numpy(zero_copy_only=False), np.int64)
        rows = parents if rows is None else rows[parents]
        level = pc.list_flatten(level)
    x, y = _coords(level)
    out[:, 0:2] = np.inf
    out[:, 2:4] = -np.inf
    if rows is not None and rows.size:
        starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
        owners = rows[starts]
        out[owners, 0] = np.minimum.reduceat(x, starts)
        out[owners, 1] = np.minimum.reduceat(y, starts)
        out[owners, 2] = np.maximum.reduceat(x, starts)
        out[owners, 3] = np.maximum.reduceat(y, starts)
    return out, valid


def split_items(boxes: np.ndarray, valid: np.ndarray, ids: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(item boxes, item ids, null ids): nulls apart, empty boxes (min > max) dropped."""
    keep = valid & ~((boxes[:, 0] > boxes[:, 2]) | (boxes[:, 1] > boxes[:, 3]))
    return boxes[keep], ids[keep], ids[~valid]


def total_box(boxes: np.ndarray) -> np.ndarray:
    """[minx, miny, maxx, maxy] over the boxes ((inf, inf, -inf, -inf) for none)."""
    if not len(boxes):
        return np.array([np.inf, np.inf, -np.inf, -np.inf])
    return np.array([boxes[:, 0].min(), boxes[:, 1].min(), boxes[:, 2].max(), boxes[:, 3].max()])


def union_box(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.array([min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3])])


def _spread_table() -> np.ndarray:
    """Each byte's bits spread to the even bits of a u16 (``0b1011`` -> ``0b1000101``)."""
    v = np.arange(256, dtype=np.uint32)
    out = np.zeros(256, np.uint32)
    for bit in range(8):
        out |= ((v >> np.uint32(bit)) & np.uint32(1)) << np.uint32(2 * bit)
    return out


_SPREAD = _spread_table()


def _spread(v: np.ndarray) -> np.ndarray:
    """The 16 bits of ``v`` (uint16) on the even bits of a uint32."""
    lo = _SPREAD[v & np.uint16(0xFF)]
    lo |= _SPREAD[v >> np.uint16(8)] << np.uint32(16)
    return lo


def hilbert_curve(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The position of (x, y) (uint32 < 65536 each) on the Hilbert curve (the branch-free
    algorithm pylance uses; every intermediate fits 16 bits, so it runs on uint16 and spreads
    the bits with a table)."""
    x = np.asarray(x).astype(np.uint16)
    y = np.asarray(y).astype(np.uint16)
    a = x ^ y
    b = ~a
    c = ~(x | y)
    d = x & ~y
    A = a | (b >> 1)
    B = (a >> 1) ^ a
    C = ((c >> 1) ^ (b & (d >> 1))) ^ c
    D = ((a & (c >> 1)) ^ (d >> 1)) ^ d
    for s in (2, 4):
        a, b, c, d = A, B, C, D
        A = (a & (a >> s)) ^ (b & (b >> s))
        B = (a & (b >> s)) ^ (b & ((a ^ b) >> s))
        C = C ^ ((a & (c >> s)) ^ (b & (d >> s)))
        D = D ^ ((b & (c >> s)) ^ ((a ^ b) & (d >> s)))
    a, b, c, d = A, B, C, D
    C = C ^ ((a & (c >> 8)) ^ (b & (d >> 8)))
    D = D ^ ((b & (c >> 8)) ^ ((a ^ b) & (d >> 8)))
    a = C ^ (C >> 1)
    b = D ^ (D >> 1)
    i0 = x ^ y
    i1 = b | ~(i0 | a)
    out = _spread(i1) << np.uint32(1)
    out |= _spread(i0)
    return out


def _grid(v: np.ndarray) -> np.ndarray:
    """Rust's saturating ``f64 as u32`` of the floored values (NaN -> 0)."""
    v = np.floor(v)
    v = np.where(np.isnan(v), 0.0, np.clip(v, 0.0, 4294967295.0))
    return v.astype(np.uint64).astype(np.uint32)


def hilbert_order(boxes: np.ndarray, total: np.ndarray) -> np.ndarray:
    """A stable argsort of the boxes by the Hilbert value of their centres over ``total``."""
    hmax = float((1 << 16) - 1)
    width = total[2] - total[0]
    width = 1.0 if width == 0.0 else width
    height = total[3] - total[1]
    height = 1.0 if height == 0.0 else height
    with np.errstate(invalid="ignore", over="ignore"):
        cx = (boxes[:, 0] + boxes[:, 2]) / 2.0
        cy = (boxes[:, 1] + boxes[:, 3]) / 2.0
        x = _grid(hmax * (cx - total[0]) / width)
        y = _grid(hmax * (cy - total[1]) / height)
    h = hilbert_curve(x, y)
    n = h.size
    if n >= 1 << 32:
        return np.argsort(h, kind="stable")
    # (value, position) in one u64: a plain sort of distinct keys is the stable order, and
    # numpy's (SIMD) sort of values is several times faster than its stable argsort
    key = h.astype(np.uint64) << np.uint64(32)
    key |= np.arange(n, dtype=np.uint64)
    key.sort()
    return (key & np.uint64(0xFFFFFFFF)).astype(np.intp)


def level_sizes(n: int, page_size: int) -> list[int]:
    """Rows of each level of ``page_data``: the items, then a row per page of the level below
    until one page holds a level."""
    if page_size < 2:
        raise InvalidInputError(f"RTREE page_size must be at least 2, got {page_size}")
    sizes = [n] if n else []
    while sizes and sizes[-1] > page_size:
        sizes.append(-(-sizes[-1] // page_size))
    return sizes


def page_levels(boxes: np.ndarray, ids: np.ndarray, page_size: int) -> tuple[np.ndarray, np.ndarray, int]:
    """All rows of ``page_data`` (boxes, ids) from the sorted leaf items, and the page count."""
    cols, row_ids, pages = _levels([boxes[:, i] for i in range(4)], ids, np.arange(len(ids)), page_size)
    return np.column_stack(cols) if len(row_ids) else np.zeros((0, 4)), row_ids, pages


def _levels(columns: list[np.ndarray], ids: np.ndarray, order: np.ndarray, page_size: int
            ) -> tuple[list[np.ndarray], np.ndarray, int]:
    """``page_data``'s columns (xmin, ymin, xmax, ymax; id) with the items taken in ``order``
    straight into place, the pages above them reduced level by level; and the page count."""
    sizes = level_sizes(len(order), page_size)
    rows = sum(sizes)
    cols = [np.empty(rows, np.float64) for _ in range(4)]
    row_ids = np.empty(rows, np.uint64)
    n = len(order)
    for src, dst in zip(columns, cols, strict=True):
        np.take(src, order, out=dst[:n])
    np.take(np.asarray(ids, np.uint64), order, out=row_ids[:n])
    at, pages = 0, 0
    for below, size in zip(sizes, sizes[1:], strict=False):
        starts = np.arange(at, at + below, page_size)
        for i, dst in enumerate(cols):
            red = np.minimum if i < 2 else np.maximum
            dst[at + below:at + below + size] = red.reduceat(dst[at:at + below], starts - at)
        row_ids[at + below:at + below + size] = np.arange(pages, pages + size, dtype=np.uint64)
        pages += size
        at += below
    return cols, row_ids, pages + (1 if n else 0)  # + the root


def metadata(page_size: int, num_pages: int, num_items: int, total: np.ndarray) -> dict[str, str]:
    return {"page_size": str(page_size), "num_pages": str(num_pages), "num_items": str(num_items),
            "bbox": box_json(total)}


def box_json(total: np.ndarray) -> str:
    """serde_json of Lance's BoundingBox (non-finite values are ``null``)."""
    def f(v: float) -> str:
        return format_float(float(v)) if np.isfinite(v) else "null"
    minx, miny, maxx, maxy = (f(v) for v in total)
    return f'{{"minx":{minx},"miny":{miny},"maxx":{maxx},"maxy":{maxy}}}'


def parse_box(text: str | bytes | None) -> np.ndarray:
    """A stored ``bbox`` as pylance reads it back (exactly: seen on an update, unlike the
    one-ulp-off parse ``serde_float`` mimics elsewhere; null or missing: empty)."""
    empty = np.array([np.inf, np.inf, -np.inf, -np.inf])
    if not text:
        return empty
    try:
        raw = json.loads(text, parse_float=str, parse_int=str)
    except ValueError as e:
        raise CorruptFileError(f"{PAGE_DATA}: bbox metadata {text!r} is not JSON") from e
    if not isinstance(raw, dict):
        raise CorruptFileError(f"{PAGE_DATA}: bbox metadata {text!r} is not an object")
    vals = [raw.get(k) for k in ("minx", "miny", "maxx", "maxy")]
    if any(v is None for v in vals):
        return empty
    return np.array([float(v) for v in vals])


def build(boxes: np.ndarray, ids: np.ndarray, total: np.ndarray, page_size: int) -> pa.Table:
    """``page_data``'s table (schema metadata included) from unsorted leaf items."""
    order = hilbert_order(boxes, total) if len(ids) else np.zeros(0, np.intp)
    cols, row_ids, pages = _levels([boxes[:, i] for i in range(4)], ids, order, page_size)
    bbox = pa.StructArray.from_arrays([pa.array(c, pa.float64()) for c in cols], fields=list(BOX_TYPE))
    table = pa.Table.from_arrays([bbox, pa.array(row_ids, pa.uint64())], schema=PAGE_SCHEMA)
    return table.replace_schema_metadata(metadata(page_size, pages, len(ids), total))


def read_meta(schema: pa.Schema, path: str = PAGE_DATA) -> dict[str, Any]:
    """page_size, num_pages, num_items and the total box of a ``page_data`` file."""
    meta = {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}
    try:
        return {"page_size": int(meta.get("page_size", DEFAULT_PAGE_SIZE)),
                "num_pages": int(meta.get("num_pages", 0)), "num_items": int(meta.get("num_items", 0)),
                "bbox": parse_box(meta.get("bbox"))}
    except ValueError as e:
        raise CorruptFileError(f"RTREE metadata {meta} does not parse", path=path) from e


def leaf_rows(table: pa.Table, num_items: int) -> tuple[np.ndarray, np.ndarray]:
    """(boxes, ids) of the leaf items of a ``page_data`` table."""
    if table.num_rows < num_items:
        raise CorruptFileError(f"{PAGE_DATA}: {table.num_rows} rows, {num_items} items")
    leaves = table.slice(0, num_items)
    bbox = leaves.column("bbox").combine_chunks()
    boxes = np.column_stack([np.asarray(bbox.field(n).to_numpy(zero_copy_only=False), np.float64)
                             for n in ("xmin", "ymin", "xmax", "ymax")]) if num_items else np.zeros((0, 4))
    ids = np.asarray(leaves.column("id").to_numpy(), np.uint64)
    return boxes, ids
