"""BLOOMFILTER index file (``bloomfilter.lance``, no I/O).

Columns ``fragment_id`` / ``zone_start`` / ``zone_length`` (uint64, the zones of ``zoned`` with
``number_of_items`` live rows each), ``has_null`` (bool) and ``bloom_filter_data`` (binary: a
split-block bloom filter as Parquet specifies it, 32-byte blocks of eight little-endian u32
words, the block chosen by the hash's high 32 bits, one bit per word by the low 32 bits times
the Parquet salts); schema metadata ``bloomfilter_item``, ``bloomfilter_probability`` and
``null_bitmap``. A value's hash is XXH64 (seed 0) of its little-endian native bytes (integers,
floats, dates, times, timestamps) or of its bytes (strings, binary). The filter's size is
the smallest power of two (32 B .. 128 MiB) whose false positive probability for
``number_of_items`` distinct values is at most ``probability`` (Putze et al., as Lance does).
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_spark_ops.errors import InvalidInputError
from lance_spark_ops.index.scalar.zoned import NULL_BITMAP_KEY

BLOOMFILTER_FILE = "bloomfilter.lance"
TYPE_URL = "/lance.index.pb.BloomFilterIndexDetails"
DEFAULT_ITEMS = 8192
DEFAULT_PROBABILITY = 0.00057

_P1 = np.uint64(11400714785074694791)
_P2 = np.uint64(14029467366897019727)
_P3 = np.uint64(1609587929392839161)
_P4 = np.uint64(9650029242287828579)
_P5 = np.uint64(2870177450012600261)
_SALT = np.array([0x47B6137B, 0x44974D91, 0x8824AD5B, 0xA2B7289D, 0x705495C7, 0x2DF1424B, 0x9EFC4947,
                  0x5C6BFB31], dtype=np.uint32)


def schema(number_of_items: int, probability: float) -> pa.Schema:
    fields = [pa.field("fragment_id", pa.uint64(), False), pa.field("zone_start", pa.uint64(), False),
              pa.field("zone_length", pa.uint64(), False), pa.field("has_null", pa.bool_(), False),
              pa.field("bloom_filter_data", pa.binary(), False)]
    meta = {"bloomfilter_item": str(number_of_items), "bloomfilter_probability": float_text(probability),
            NULL_BITMAP_KEY: "1"}
    return pa.schema(fields, metadata=meta)


def float_text(x: float) -> str:
    """An f64 as Rust's ``Display`` writes it (no exponent: 1e-05 -> 0.00001)."""
    text = repr(float(x))
    if "e" in text or "E" in text:
        text = np.format_float_positional(float(x), trim="-")
    return text[:-2] if text.endswith(".0") else text


def supported(t: pa.DataType) -> bool:
    return (pa.types.is_integer(t) or pa.types.is_floating(t) and not pa.types.is_float16(t)
            or pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t) or pa.types.is_date(t) or pa.types.is_time(t)
            or pa.types.is_timestamp(t))


# -- sizing ---------------------------------------------------------------------------------------

def _false_positive_probability(ndv: int, log_space_bytes: int) -> float:
    bits = float(1 << log_space_bytes) * 8.0
    if ndv == 0:
        return 0.0
    if ndv / bits > 2.0:
        return 1.0
    lam = 8.0 * 32.0 / (bits / ndv)
    loglam = math.log(lam)
    result = 0.0
    for i in range(749, -1, -1):  # 750 terms, smallest first, as Lance sums them
        logp = i * loglam - lam - math.lgamma(i + 1)
        logfinner = 8.0 * math.log(1.0 - (1.0 - 1.0 / 32.0) ** i) if i else -math.inf
        result += math.exp(logp + logfinner)
    return min(result, 1.0)


def num_bytes(ndv: int, fpp: float) -> int:
    if not 0.0 <= fpp < 1.0:
        raise InvalidInputError(f"bloom filter probability must be in [0, 1), got {fpp}")
    low, high = 0, 64
    while high > low + 1:
        mid = (high + low) // 2
        if _false_positive_probability(ndv, mid) <= fpp:
            high = mid
        else:
            low = mid
    return 1 << min(max(high, 5), 27)


# -- hashing ---------------------------------------------------------------------------------------

def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def _round(acc: np.ndarray, lane: np.ndarray) -> np.ndarray:
    return _rotl(acc + lane * _P2, 31) * _P1


def _read(data: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    out = np.zeros(pos.size, np.uint64)
    for k in range(width):
        out |= data[pos + k].astype(np.uint64) << np.uint64(8 * k)
    return out


def xxh64(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, seed: int = 0) -> np.ndarray:
    """XXH64 (``seed``; bloom filters use 0) of the byte strings
    ``data[starts[i]:starts[i] + lengths[i]]``, all at once: each step of the algorithm is one
    vector operation over the strings it concerns."""
    data = np.concatenate([np.asarray(data, np.uint8), np.zeros(8, np.uint8)])
    starts = np.asarray(starts, np.int64)
    lengths = np.asarray(lengths, np.int64)
    n = starts.size
    with np.errstate(over="ignore"):
        s = np.uint64(seed & 0xFFFFFFFFFFFFFFFF)
        h = np.full(n, s + _P5, np.uint64)
        pos = starts.copy()
        stripes = lengths // 32
        long = np.flatnonzero(stripes > 0)
        if long.size:
            v = [np.full(long.size, s + _P1 + _P2, np.uint64), np.full(long.size, s + _P2, np.uint64),
                 np.full(long.size, s, np.uint64), np.full(long.size, s - _P1, np.uint64)]
            for s in range(int(stripes[long].max())):
                live = np.flatnonzero(stripes[long] > s)
                p = pos[long[live]] + 32 * s
                for j in range(4):
                    v[j][live] = _round(v[j][live], _read(data, p + 8 * j, 8))
            acc = _rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)
            for j in range(4):
                acc = (acc ^ _round(np.zeros(long.size, np.uint64), v[j])) * _P1 + _P4
            h[long] = acc
            pos[long] += 32 * stripes[long]
        h += lengths.astype(np.uint64)
        rem = lengths & 31
        for j in range(3):  # 8-byte lanes
            sel = np.flatnonzero(rem >= 8 * (j + 1))
            if sel.size:
                k1 = _round(np.zeros(sel.size, np.uint64), _read(data, pos[sel] + 8 * j, 8))
                h[sel] = _rotl(h[sel] ^ k1, 27) * _P1 + _P4
        pos += (rem // 8) * 8
        rem &= 7
        sel = np.flatnonzero(rem >= 4)
        if sel.size:
            h[sel] = _rotl(h[sel] ^ (_read(data, pos[sel], 4) * _P1), 23) * _P2 + _P3
            pos[sel] += 4
            rem[sel] -= 4
        for j in range(3):  # single bytes
            sel = np.flatnonzero(rem > j)
            if sel.size:
                h[sel] = _rotl(h[sel] ^ (data[pos[sel] + j].astype(np.uint64) * _P5), 11) * _P1
        h ^= h >> np.uint64(33)
        h *= _P2
        h ^= h >> np.uint64(29)
        h *= _P3
        h ^= h >> np.uint64(32)
    return h


def value_hashes(values: pa.Array) -> np.ndarray:
    """Hashes of the non-null values, in order."""
    values = values.filter(pc.is_valid(values)) if values.null_count else values
    t = values.type
    if any(f(t) for f in (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary,
                          pa.types.is_large_binary)):
        wide = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
        bufs = values.buffers()
        offsets = np.frombuffer(bufs[1], np.int64 if wide else np.int32, len(values) + 1,
                                values.offset * (8 if wide else 4)).astype(np.int64)
        data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
        return xxh64(data, offsets[:-1], np.diff(offsets))
    width = t.bit_width // 8
    raw = np.frombuffer(values.buffers()[1], np.uint8, len(values) * width, values.offset * width)
    return xxh64(raw, np.arange(len(values), dtype=np.int64) * width, np.full(len(values), width, np.int64))


def filters(hashes: np.ndarray, zone_of: np.ndarray, zones: int, size: int) -> list[bytes]:
    """One filter of ``size`` bytes per zone holding the hashes ``zone_of`` assigns to it."""
    blocks = size // 32
    words = np.zeros((zones * blocks, 8), np.uint32)
    if hashes.size:
        with np.errstate(over="ignore"):
            block = ((hashes >> np.uint64(32)) * np.uint64(blocks)) >> np.uint64(32)
            row = zone_of.astype(np.int64) * blocks + block.astype(np.int64)
            low = hashes.astype(np.uint32)
            for i in range(8):
                bit = (low * _SALT[i]) >> np.uint32(27)
                np.bitwise_or.at(words[:, i], row, np.uint32(1) << bit)
    raw = words.astype("<u4").tobytes()
    return [raw[z * size:(z + 1) * size] for z in range(zones)]


def table(rows: list[tuple], number_of_items: int, probability: float) -> pa.Table:
    """The file's rows from (fragment_id, start, length, has_null, filter bytes)."""
    s = schema(number_of_items, probability)
    cols = list(zip(*rows, strict=True)) if rows else [[] for _ in range(5)]
    arrays = [pa.array(np.asarray(c, dtype=np.uint64), pa.uint64()) for c in cols[:3]]
    arrays += [pa.array(list(cols[3]), pa.bool_()), pa.array(list(cols[4]), pa.binary())]
    return pa.Table.from_arrays(arrays, schema=s)
