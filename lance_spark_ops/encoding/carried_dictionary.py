"""Dictionary-typed values of a plain string / binary leaf ("carried" dictionaries).

A re-encode reads dictionary-encoded string pages as Arrow dictionary arrays instead of
decoding them (``structural.build_array_keeping``) and hands them to the
writer, whose schema still says ``string``. The writer must produce the bytes it would for
the decoded strings; Lance's dictionary decision and encoding (``plan.dictionary_candidate``
and ``stats.dictionary_encode``: items in order of first appearance, 32-bit indices) are
computed here from the indices and the (small) source dictionary, so the n values are
neither materialised nor hashed. Only the source dictionary is hashed (to merge repeated
items, as hashing the values would).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from lance_spark_ops.encoding.blocks import FixedWidthBlock, VariableWidthBlock
from lance_spark_ops.encoding.compression.stats import _sample_indices
from lance_spark_ops.encoding.leaves import storage_type

_PLAIN = (pa.types.is_string, pa.types.is_binary, pa.types.is_large_string, pa.types.is_large_binary)


def is_plain_variable(t: pa.DataType) -> bool:
    """string / binary / large_string / large_binary."""
    return any(f(t) for f in _PLAIN)


def value_lengths(arr: pa.Array) -> np.ndarray:
    """Byte length of each value of a string / binary array (int64)."""
    t = arr.type
    large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
    width = np.int64 if large else np.int32
    offs = np.frombuffer(arr.buffers()[1], width)[arr.offset:arr.offset + len(arr) + 1]
    return np.diff(offs).astype(np.int64, copy=False)


def is_carried(values: pa.Array, leaf: pa.Field) -> bool:
    """``values`` is a dictionary array standing for the leaf's plain variable-width type."""
    t = storage_type(leaf.type)
    return (pa.types.is_dictionary(values.type) and not pa.types.is_dictionary(t)
            and values.type.value_type == t)


def decode_carried(values: pa.DictionaryArray) -> pa.Array:
    """The plain values (what a decoding read would have produced)."""
    return values.dictionary_decode()


@dataclass
class CarriedDictionary:
    """Statistics of a carried dictionary array, as Lance measures the decoded values.

    ``card``: distinct values present; ``value_bytes``: bytes of all n values;
    ``sample_distinct``: distinct values in ``stats._sample_indices`` (None: no sample)."""

    indices: np.ndarray  # source-dictionary index per value (integers)
    unique_of: np.ndarray  # source item -> id of its distinct value
    items: pa.Array  # distinct source items (plain type), ids index it
    present: np.ndarray  # bool per distinct id: occurs among the values
    card: int
    value_bytes: int
    sample_distinct: int | None
    offset_width: int

    @property
    def num_values(self) -> int:
        return len(self.indices)

    def constant_value(self) -> bytes | None:
        """The single value when every value is the same (``plan.constant_value``)."""
        if self.card != 1:
            return None
        return self.items[int(np.flatnonzero(self.present)[0])].as_py()  # bytes: items are binary

    def encode(self) -> tuple[FixedWidthBlock, VariableWidthBlock]:
        """(32-bit indices, items in order of first appearance): ``stats.dictionary_encode``'s
        result for the decoded values."""
        order = self._first_appearance()
        rank = np.zeros(len(self.items), np.int32)
        rank[order] = np.arange(len(order), dtype=np.int32)
        rank_of_source = rank[self.unique_of]
        if (self.indices.dtype == np.int32 and len(rank_of_source) == len(order)
                and np.array_equal(rank_of_source, np.arange(len(order)))):
            idx = self.indices  # the source dictionary is already in order: the indices are Lance's
        else:
            idx = rank_of_source[self.indices]  # one pass over the n values
        indices = FixedWidthBlock(idx.view(np.uint8), 32, len(idx))
        ordered = self.items.take(pa.array(order))
        width = np.dtype(np.int64 if self.offset_width == 8 else np.int32)
        offs = np.frombuffer(ordered.buffers()[1], width)[ordered.offset:ordered.offset + len(order) + 1]
        base = int(offs[0])
        data = np.frombuffer(ordered.buffers()[2], np.uint8)[base:int(offs[-1])]
        return indices, VariableWidthBlock((offs - base).astype(width), data, len(order))

    def _first_appearance(self) -> np.ndarray:
        """Distinct ids in order of first appearance among the values. A growing prefix is
        searched until every present id is seen (usually the first few thousand values)."""
        n, m = self.num_values, 128
        while True:
            head = self.unique_of[self.indices[:m]]
            ids, first = np.unique(head, return_index=True)
            if len(ids) == self.card or m >= n:
                return ids[np.argsort(first, kind="stable")]
            m *= 8


_LAST_SOURCE: list = []  # (source dictionary, its binary view, unique_of, items) of the last call


def _dedupe(source: pa.Array, large: bool) -> tuple[pa.Array, np.ndarray, pa.Array]:
    """(binary view of ``source``, distinct id of each item, the distinct items). The pages
    of one flush share their dictionary: the last answer is kept."""
    last = _LAST_SOURCE[0] if _LAST_SOURCE else None
    if last is not None and last[0].equals(source):
        return last[1], last[2], last[3]
    # hash the items as bytes (binary), as the writer hashes the values' bytes
    raw = source.cast(pa.large_binary() if large else pa.binary())
    enc = raw.dictionary_encode()
    unique_of = np.asarray(enc.indices.to_numpy(zero_copy_only=False), np.int64)
    _LAST_SOURCE[:] = [(source, raw, unique_of, enc.dictionary)]
    return raw, unique_of, enc.dictionary


def carried_stats(values: pa.DictionaryArray) -> CarriedDictionary | None:
    """Statistics for ``values`` (None when it holds nulls: the caller decodes)."""
    source = values.dictionary
    if values.null_count or source.null_count:
        return None
    vt = source.type
    large = pa.types.is_large_string(vt) or pa.types.is_large_binary(vt)
    raw, unique_of, items = _dedupe(source, large)
    idx = values.indices.to_numpy(zero_copy_only=False)
    if idx.dtype.kind == "u" and idx.dtype.itemsize == 8:
        idx = idx.astype(np.int64)
    n = len(idx)
    k_src = len(source)
    counts = np.bincount(idx, minlength=k_src) if n else np.zeros(k_src, np.int64)
    width = 8 if large else 4
    value_bytes = int(np.dot(counts, value_lengths(raw))) if k_src else 0
    present = np.zeros(len(items), bool)
    present[unique_of[counts > 0]] = True
    sample = _sample_indices(n, 4096)
    sample_distinct = None if sample is None else int(np.unique(unique_of[idx[sample]]).size)
    return CarriedDictionary(idx, unique_of, items, present, int(present.sum()), value_bytes,
                             sample_distinct, width)


def plain_type(t: pa.DataType) -> pa.DataType:
    """``t`` with every dictionary of a plain variable-width type replaced by that type
    (through lists, large lists and structs): the type a carried array stands for."""
    if pa.types.is_dictionary(t):
        return t.value_type if is_plain_variable(t.value_type) else t
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        f = t.value_field
        inner = plain_type(f.type)
        if inner is f.type or inner == f.type:
            return t
        make = pa.large_list if pa.types.is_large_list(t) else pa.list_
        return make(f.with_type(inner))
    if pa.types.is_struct(t):
        fields = [t.field(i) for i in range(t.num_fields)]
        plain = [f.with_type(plain_type(f.type)) for f in fields]
        if all(p.type == f.type for p, f in zip(plain, fields, strict=True)):
            return t
        return pa.struct(plain)
    return t


def carries_dictionary(t: pa.DataType) -> bool:
    """``t`` holds a carried dictionary (``plain_type`` changes it)."""
    return plain_type(t) != t


def decoded_nbytes(arr: pa.Array, bitmap: bool, data: int | None = None) -> tuple[int, int]:
    """(``arr.nbytes`` of the decoded twin of ``arr``, bytes of its carried values):
    what the writer would have counted for the plain values, so pages are cut where they
    would have been (``arr.nbytes`` and 0 when it carries no dictionary). ``bitmap``: the
    twin's carried leaf has a validity bitmap (all valid), as Arrow's ``take`` / ``filter``
    give one and ``concat_arrays`` drops it. ``data``: the carried values' bytes when known
    (a concatenation: the sum over its parts), saving a pass over the indices; only for
    arrays with one carried leaf, as ``structural.build_array_keeping`` makes them."""
    if not carries_dictionary(arr.type):
        return arr.nbytes, 0
    delta, data = _twin_delta(arr, bitmap, data)
    return arr.nbytes + delta, data


def _twin_delta(arr: pa.Array, bitmap: bool, data: int | None) -> tuple[int, int]:
    t = arr.type
    if pa.types.is_dictionary(t):
        if not is_plain_variable(t.value_type):
            return 0, 0
        n, o = len(arr), arr.offset
        large = pa.types.is_large_string(t.value_type) or pa.types.is_large_binary(t.value_type)
        if data is None:
            lengths = value_lengths(arr.dictionary)
            idx = arr.indices.to_numpy(zero_copy_only=False)
            data = int(np.dot(np.bincount(idx, minlength=len(lengths)), lengths)) if n else 0
        bits = ((o + n + 7) // 8 - o // 8) if bitmap and n else 0
        return bits + (8 if large else 4) * n + data - arr.nbytes, data
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        if len(arr) == 0:
            return 0, 0
        offs = arr.offsets
        lo, hi = offs[0].as_py(), offs[-1].as_py()
        return _twin_delta(arr.values.slice(lo, hi - lo), bitmap, data)
    if pa.types.is_struct(t):
        parts = [_twin_delta(arr.field(i), bitmap, data) for i in range(t.num_fields)]
        return sum(d for d, _ in parts), sum(b for _, b in parts)
    return 0, 0


# Field metadata of a batch column holding a carried dictionary: b"1" when the decoded twin's
# carried leaf has a validity bitmap (``decoded_nbytes``), b"0" when not.
TWIN_BITMAP = b"lance-spark-ops:carried-bitmap"


def mark_field(field: pa.Field, array: pa.Array, bitmap: bool) -> pa.Field:
    """``field`` typed as ``array`` and marked with the twin's bitmap (``TWIN_BITMAP``)."""
    meta = dict(field.metadata or {})
    meta[TWIN_BITMAP] = b"1" if bitmap else b"0"
    return field.with_type(array.type).with_metadata(meta)


def twin_bitmap(field: pa.Field) -> bool:
    """The mark of ``mark_field`` (True when absent: a take or filter output)."""
    return (field.metadata or {}).get(TWIN_BITMAP, b"1") == b"1"
