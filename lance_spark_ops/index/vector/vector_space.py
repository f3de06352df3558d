"""The vectors an HNSW graph is built on, decoded from an IVF storage file (no I/O).

``auxiliary.idx`` of IVF_HNSW_* holds per partition ``_rowid`` and one storage column:
``flat`` (the vectors), ``__sq_code`` (uint8 codes; ``storage_metadata`` gives the ``bounds``)
or ``__pq_code`` (uint8 codes, sub-vector major per partition when ``transposed``; the codebook
is a ``Tensor`` protobuf in global buffer ``codebook_position``, laid out sub-vector, centroid,
sub-dimension; 4-bit codes pack two sub-vectors per byte, low nibble first). Lance's HNSW
builder measures distances on what the storage holds (``dist_between``): pylance 14's
``_distance`` values (compared edge by edge) are those of the SQ codes dequantised
(``start + code * range / 255``) and of the PQ reconstructions. The schema metadata
``distance_type`` names the metric; SQ and PQ compute cosine as squared L2 (their vectors were
normalised before quantisation).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from lance_spark_ops._pb import index_pb2
from lance_spark_ops.errors import CorruptFileError, UnsupportedError
from lance_spark_ops.index.serde_float import reserialize
from lance_spark_ops.index.vector.hnsw import Space
from lance_spark_ops.index.vector.ivf import AUX_FILE

_TENSOR_DTYPES = {index_pb2.Tensor.FLOAT16: np.float16, index_pb2.Tensor.FLOAT32: np.float32,
                  index_pb2.Tensor.FLOAT64: np.float64}


def _storage_metadata(schema: pa.Schema) -> dict:
    raw = (schema.metadata or {}).get(b"storage_metadata")
    try:
        items = json.loads(raw) if raw is not None else []
        return json.loads(items[0]) if items else {}
    except (ValueError, TypeError, IndexError) as e:
        raise CorruptFileError(f"{AUX_FILE}: storage_metadata does not parse ({e})") from e


def distance_type(schema: pa.Schema) -> str:
    return (schema.metadata or {}).get(b"distance_type", b"l2").decode().lower()


def partition_spaces(table: pa.Table, lengths: np.ndarray, schema: pa.Schema, extra: list[bytes],
                     transposed: bool) -> Callable[[int], Space]:
    """``space(p)``: the ``Space`` of partition p of the storage ``table`` (rows grouped by
    partition, ``lengths`` rows each), decoded when asked for."""
    metric = distance_type(schema)
    col = table.column(1).combine_chunks()
    name = table.schema.field(1).name
    meta = _storage_metadata(schema)
    width = col.type.list_size
    flat = col.values.to_numpy(zero_copy_only=False).reshape(-1, width) if len(col) else \
        np.zeros((0, width), np.float32)
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    if name == "__sq_code":
        bounds = meta.get("bounds") or {}
        lo = float(bounds.get("start", 0.0))
        step = (float(bounds.get("end", 1.0)) - lo) / 255.0
        sq_metric = "l2" if metric == "cosine" else metric
        return lambda p: Space(lo + flat[starts[p]:starts[p + 1]] * step, sq_metric)
    if name == "__pq_code":
        codebook = _codebook(meta, extra)
        nbits, m, dim = int(meta.get("nbits", 8)), int(meta["num_sub_vectors"]), int(meta["dimension"])
        pq_metric = "l2" if metric == "cosine" else metric

        def pq(p: int) -> Space:
            block = flat[starts[p]:starts[p + 1]]
            if transposed:
                n = block.shape[0]
                block = block.reshape(-1).reshape(width, n).T
            return Space(_reconstruct(block, codebook, nbits, m, dim), pq_metric)
        return pq
    if pa.types.is_floating(col.type.value_type):
        return lambda p: Space(flat[starts[p]:starts[p + 1]], metric)
    raise UnsupportedError(f"{AUX_FILE}: HNSW storage column {name!r} of type {col.type} is not supported")


def _codebook(meta: dict, extra: list[bytes]) -> np.ndarray:
    pos = int(meta.get("codebook_position", 0))
    if pos < 1 or pos - 1 >= len(extra):
        raise CorruptFileError(f"{AUX_FILE}: PQ codebook_position {pos} names no global buffer")
    t = index_pb2.Tensor.FromString(extra[pos - 1])
    if t.data_type not in _TENSOR_DTYPES:
        raise UnsupportedError(f"{AUX_FILE}: PQ codebook of tensor type {t.data_type} is not supported")
    return np.frombuffer(t.data, dtype=_TENSOR_DTYPES[t.data_type]).astype(np.float32)


def _reconstruct(codes: np.ndarray, codebook: np.ndarray, nbits: int, m: int, dim: int) -> np.ndarray:
    """PQ codes (n, bytes) -> vectors (n, dim) of the codebook's centroids."""
    if nbits == 4:
        codes = np.stack([codes & 0x0F, codes >> 4], axis=2).reshape(codes.shape[0], -1)[:, :m]
    elif nbits != 8:
        raise UnsupportedError(f"{AUX_FILE}: PQ with {nbits} bits is not supported")
    k = 1 << nbits
    sub = dim // m
    book = codebook.reshape(m, k, sub)
    out = book[np.arange(m)[None, :], codes.astype(np.int64)]  # (n, m, sub)
    return out.reshape(codes.shape[0], dim)


_BOUND = re.compile(r'("(?:start|end)":)(-?[0-9][0-9.eE+-]*)')


def rebuilt_storage_schema(schema: pa.Schema) -> pa.Schema:
    """The storage schema as pylance 14 writes it when it rebuilds an HNSW index: the JSON of
    ``storage_metadata`` re-serialised by serde_json, which moves SQ ``bounds`` read one ulp off
    (``serde_float``); the other fields print as they were."""
    meta = dict(schema.metadata or {})
    raw = meta.get(b"storage_metadata")
    if raw is None:
        return schema
    try:
        items = json.loads(raw)
    except ValueError as e:
        raise CorruptFileError(f"{AUX_FILE}: storage_metadata does not parse ({e})") from e
    items = [_BOUND.sub(lambda m: m.group(1) + reserialize(m.group(2)), s) for s in items]
    meta[b"storage_metadata"] = json.dumps(items, separators=(",", ":")).encode()
    return schema.with_metadata(meta)
