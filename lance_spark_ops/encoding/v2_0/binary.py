"""2.0 ``Binary`` and ``Dictionary`` array encodings (strings, binary, dictionary arrays).

``Binary{indices, bytes, null_adjustment}``
    ``indices`` (u64, normally ``Nullable.no_nulls(Flat 64)``) holds one *end* offset per
    row, relative to the page (no leading 0). A null row stores ``end + null_adjustment``
    (``null_adjustment`` = total bytes + 1, so any value ``>= null_adjustment`` is a null).
    ``bytes`` is ``Flat(8)``, possibly compressed as a whole (zstd / lz4). Reading rows
    ``[lo, hi)`` needs indices ``[lo - 1, hi)`` (``[0, hi)`` when lo is 0) and the bytes
    between the first and the last normalised end.

``Dictionary{indices, items, num_dictionary_items}``
    ``items`` is the dictionary (any encoding, ``num_dictionary_items`` rows, decoded whole).
    For a *string* field (the 2.0 writer dictionary-encodes ``utf8`` columns with fewer than
    100 distinct values) indices are u8 and shifted by one: 0 = null, k = ``items[k - 1]``.
    For an Arrow *dictionary* field indices have the key's width and point straight into
    ``items``; the writer moves nulls into the dictionary (a null item), and such rows read
    back as null indices.

Worked example (strings ``["ab", null, "", "cde"]``)::

    binary { indices { nullable { no_nulls { values { flat { bits_per_value: 64 } } } } }
             bytes { flat { bits_per_value: 8 buffer { buffer_index: 1 } } }
             null_adjustment: 6 }
    buffer 0 (u64) = [2, 8, 2, 5]      # 8 = 2 + 6: row 1 is null
    buffer 1       = b"abcde"

Rows 1..4: indices [2, 8, 2, 5] -> ends [2, 2, 2, 5], validity [F, T, T] -> offsets
[0, 0, 0, 3] over bytes 2..5 (``b"cde"``) -> ``[null, "", "cde"]``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lance_spark_ops._pb import encodings_v2_0_pb2 as pb
from lance_spark_ops.encoding.v2_0.arrays import variable_array
from lance_spark_ops.encoding.v2_0.buffers import PageContext
from lance_spark_ops.encoding.v2_0.physical import decode_array, decode_ints, flat_bytes
from lance_spark_ops.errors import CorruptFileError

_VARIABLE = (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary, pa.types.is_large_binary)


def is_variable_width(dt: pa.DataType) -> bool:
    return any(check(dt) for check in _VARIABLE)


def decode_binary(msg: pb.Binary, ctx: PageContext, dt: pa.DataType, lo: int, hi: int) -> pa.Array:
    """Rows ``[lo, hi)`` of a ``Binary`` page as a string/binary array of type ``dt``."""
    if not is_variable_width(dt):
        raise CorruptFileError(f"{ctx.where}: binary encoding found for a field of type {dt}")
    n = hi - lo
    first = lo - 1 if lo > 0 else 0
    raw, raw_valid = decode_ints(msg.indices, ctx, first, hi)
    if raw_valid is not None and not raw_valid.all():
        raise CorruptFileError(f"{ctx.where}: binary offsets contain nulls")
    raw = raw.astype(np.uint64, copy=False)
    adj = np.uint64(msg.null_adjustment)
    if n and msg.null_adjustment == 0:
        raise CorruptFileError(f"{ctx.where}: binary page with rows has null_adjustment 0")
    is_null = raw >= adj
    ends = np.where(is_null, raw - adj, raw)
    if lo > 0:
        base = int(ends[0])
        ends, is_null = ends[1:], is_null[1:]
    else:
        base = 0
    if n == 0:
        return pa.array([], type=dt)
    ends = ends.astype(np.int64)
    offsets = np.empty(n + 1, dtype=np.int64)
    offsets[0] = base
    offsets[1:] = ends
    if (np.diff(offsets) < 0).any() or base < 0 or int(ends.max()) >= int(adj):
        raise CorruptFileError(f"{ctx.where}: binary offsets are not increasing or exceed the "
                               f"null adjustment {int(adj)}")
    data = flat_bytes(msg.bytes, ctx, base, int(offsets[-1]))
    return variable_array(dt, offsets - base, data, ~is_null)


def decode_dictionary(msg: pb.Dictionary, ctx: PageContext, dt: pa.DataType, lo: int, hi: int) -> pa.Array:
    """Rows ``[lo, hi)`` of a ``Dictionary`` page (either a dictionary-typed field or a
    string field the writer chose to dictionary-encode)."""
    num_items = msg.num_dictionary_items
    value_type = dt.value_type if pa.types.is_dictionary(dt) else dt
    items = decode_array(msg.items, ctx, value_type, 0, num_items)
    if len(items) != num_items:
        raise CorruptFileError(f"{ctx.where}: dictionary decoded {len(items)} items, expected {num_items}")
    idx, idx_valid = decode_ints(msg.indices, ctx, lo, hi)
    idx = idx.astype(np.int64)
    valid = np.ones(hi - lo, bool) if idx_valid is None else idx_valid
    if pa.types.is_dictionary(dt):
        if (idx[valid] >= num_items).any():
            raise CorruptFileError(f"{ctx.where}: dictionary index out of range ({num_items} items)")
        idx = np.where(valid, idx, 0)
        if items.null_count and num_items:
            valid = valid & items.is_valid().to_numpy(zero_copy_only=False)[idx]
        key = dt.index_type.to_pandas_dtype()
        if num_items and int(idx.max(initial=0)) > np.iinfo(key).max:
            raise CorruptFileError(f"{ctx.where}: dictionary index does not fit {dt.index_type}")
        indices = pa.array(idx.astype(key), type=dt.index_type, mask=~valid)
        return pa.DictionaryArray.from_arrays(indices, items, ordered=dt.ordered)
    if (idx > num_items).any():
        raise CorruptFileError(f"{ctx.where}: dictionary index out of range ({num_items} items, "
                               "indices shifted by one)")
    null = (idx == 0) | ~valid
    take = pa.array(np.where(null, 0, idx - 1), type=pa.int64(), mask=null)
    return items.take(take)
