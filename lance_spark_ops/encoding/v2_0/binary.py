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

Writing (pylance 14's 2.0 choices, mirrored by ``encode_binary`` / ``encode_string_dictionary``
/ ``encode_arrow_dictionary``):

- An all-null page stores ends 0 and no bytes (``null_adjustment`` 1); an empty one
  ``null_adjustment`` 0. Bytes under null slots are kept (ends count them).
- ``lance-encoding:compression`` = zstd / lz4 / none compresses the bytes buffer as a whole
  and records ``Compression{scheme, level}`` (``level`` only when the field sets
  ``lance-encoding:compression-level`` to an integer); other values are ignored (``fsst``
  is written as plain ``Binary``: no FSST encoder here).
- A ``utf8`` page of at least 100 rows with fewer than 100 distinct values is dictionary
  encoded (``use_string_dictionary``; pylance estimates the count with HyperLogLog, exact
  for so few values): u8 indices, 0 = null, items in first-appearance order as plain
  ``Binary`` (a lone null item when every row is null). Compression does not apply.
- An Arrow dictionary keeps its keys' width and its dictionary; null keys are pointed at the
  first null item (one is appended if there is none) so indices have no nulls.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_spark_ops._pb import encodings_v2_0_pb2 as pb
from lance_spark_ops.encoding.v2_0.arrays import valid_mask, variable_array, variable_parts
from lance_spark_ops.encoding.v2_0.buffers import PageBuffers, PageContext, compress
from lance_spark_ops.encoding.v2_0.flat import (
    decode_ints,
    encode_basic,
    encode_flat,
    encode_uints,
    flat_bytes,
)
from lance_spark_ops.errors import CorruptFileError, UnsupportedError

# decode_array(enc, ctx, dt, lo, hi) of ``physical.py``, passed in by it.
DecodeArray = Callable[[pb.ArrayEncoding, PageContext, pa.DataType, int, int], pa.Array]
COMPRESSION_KEY = b"lance-encoding:compression"
COMPRESSION_LEVEL_KEY = b"lance-encoding:compression-level"
DICT_THRESHOLD = 100  # pylance's LANCE_DICT_ENCODING_THRESHOLD default
_DICT_PROBE = 4096  # rows looked at before counting a whole page's distinct values
_I32 = re.compile(rb"[+-]?[0-9]+")

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


def decode_dictionary(msg: pb.Dictionary, ctx: PageContext, dt: pa.DataType, lo: int, hi: int,
                      decode_items: DecodeArray) -> pa.Array:
    """Rows ``[lo, hi)`` of a ``Dictionary`` page (either a dictionary-typed field or a
    string field the writer chose to dictionary-encode); ``decode_items`` is the caller's
    ``decode_array`` (the items are any 2.0 array encoding)."""
    num_items = msg.num_dictionary_items
    value_type = dt.value_type if pa.types.is_dictionary(dt) else dt
    items = decode_items(msg.items, ctx, value_type, 0, num_items)
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


# -- encoding ------------------------------------------------------------------------------
def field_compression(metadata: dict[bytes, bytes] | None) -> pb.Compression | None:
    """The ``Compression`` a field's metadata asks for (``None``: no or unknown scheme,
    and for ``fsst``, which this writer stores uncompressed)."""
    meta = metadata or {}
    scheme = meta.get(COMPRESSION_KEY)
    if scheme not in (b"zstd", b"lz4", b"none"):
        return None
    out = pb.Compression(scheme=scheme.decode())
    level = meta.get(COMPRESSION_LEVEL_KEY)
    if level is not None and _I32.fullmatch(level) and -(2**31) <= int(level) < 2**31:
        out.level = int(level)
    return out


def encode_binary(arr: pa.Array, pages: PageBuffers,
                  compression: pb.Compression | None = None) -> pb.ArrayEncoding:
    """``Binary``: u64 end offsets (nulls shifted by ``null_adjustment``) + the bytes."""
    n = len(arr)
    enc = pb.ArrayEncoding()
    if n and arr.null_count == n:
        ends, data = np.zeros(n, np.uint64), np.zeros(0, np.uint8)
    else:
        offsets, data = variable_parts(arr)
        ends = offsets[1:].astype(np.uint64)
    adjustment = int(ends[-1]) + 1 if n else 0
    if arr.null_count:
        ends[~valid_mask(arr)] += np.uint64(adjustment)
    enc.binary.indices.CopyFrom(encode_uints(ends, pages))
    if compression is not None:
        level = compression.level if compression.HasField("level") else None
        data = compress(compression.scheme, data, level)
    enc.binary.bytes.CopyFrom(encode_flat(data, 8, pages, compression))
    enc.binary.null_adjustment = adjustment
    return enc


def use_string_dictionary(arr: pa.Array) -> bool:
    """pylance's 2.0 rule: ``utf8`` pages of >= 100 rows with < 100 distinct values."""
    if arr.type != pa.string() or len(arr) < DICT_THRESHOLD:
        return False
    head = arr.slice(0, _DICT_PROBE)
    if pc.count_distinct(head, mode="only_valid").as_py() >= DICT_THRESHOLD:
        return False
    if len(head) == len(arr):
        return True
    return pc.count_distinct(arr, mode="only_valid").as_py() < DICT_THRESHOLD


def encode_string_dictionary(arr: pa.Array, pages: PageBuffers) -> pb.ArrayEncoding:
    """``Dictionary`` of a low-cardinality ``utf8`` page: u8 indices shifted by one."""
    encoded = pc.dictionary_encode(arr)
    keys = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False)
    items = encoded.dictionary
    if len(items) == 0:
        items = pa.nulls(1, pa.string())
    enc = pb.ArrayEncoding()
    enc.dictionary.indices.CopyFrom(encode_uints((keys + 1).astype(np.uint8), pages))
    enc.dictionary.items.CopyFrom(encode_binary(items, pages))
    enc.dictionary.num_dictionary_items = len(items)
    return enc


def encode_arrow_dictionary(arr: pa.DictionaryArray, pages: PageBuffers) -> pb.ArrayEncoding:
    """``Dictionary`` of an Arrow dictionary page: its keys (null keys pointed at a null
    item) and its dictionary."""
    dt = arr.type
    key_dtype = np.dtype(dt.index_type.to_pandas_dtype())
    n = len(arr)
    items = arr.dictionary
    if arr.null_count == n:  # pylance's all-null (or empty) page: one null item
        keys = np.zeros(n, key_dtype)
        items = pa.nulls(1, dt.value_type)
    else:
        keys = arr.indices.fill_null(0).to_numpy(zero_copy_only=False).astype(key_dtype, copy=False)
        if arr.null_count:
            null_items = np.flatnonzero(~valid_mask(items)) if items.null_count else []
            if len(null_items):
                null_index = int(null_items[0])
            else:
                null_index = len(items)
                if null_index > np.iinfo(key_dtype).max:
                    raise UnsupportedError(f"dictionary of {null_index} values with null keys: no "
                                           f"{dt.index_type} key is left for the null item")
                items = pa.concat_arrays([items, pa.nulls(1, dt.value_type)])
            keys = np.where(valid_mask(arr), keys, key_dtype.type(null_index))
    enc = pb.ArrayEncoding()
    enc.dictionary.indices.CopyFrom(encode_uints(np.ascontiguousarray(keys), pages))
    if is_variable_width(dt.value_type):
        enc.dictionary.items.CopyFrom(encode_binary(items, pages))
    else:
        enc.dictionary.items.CopyFrom(encode_basic(items, pages))
    enc.dictionary.num_dictionary_items = len(items)
    return enc


def encode_variable(arr: pa.Array, metadata: dict[bytes, bytes] | None,
                    pages: PageBuffers) -> pb.ArrayEncoding:
    """A string/binary page the way pylance's 2.0 strategy picks: dictionary, else binary."""
    if use_string_dictionary(arr):
        return encode_string_dictionary(arr, pages)
    return encode_binary(arr, pages, field_compression(metadata))
