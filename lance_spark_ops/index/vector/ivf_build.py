"""The files of a new IVF_* segment as pylance 14 writes them (no I/O): schemas, schema
metadata, global buffers and the manifest entry's details.

``auxiliary.idx`` (the storage, see ``ivf``): ``_rowid`` uint64 and the storage column
(``flat``: the vectors, normalised for cosine; ``__pq_code`` / ``__sq_code``: uint8 codes),
rows grouped by partition; metadata ``lance:ivf`` = "1" (the IVF protobuf, offsets and lengths
only, in global buffer 1), ``storage_metadata`` (a JSON list of one JSON string: FLAT
``{"dim"}``, SQ ``{"dim","num_bits","bounds":{"start","end"}}``, PQ
``{"codebook_position":2,"nbits","num_sub_vectors","dimension","codebook_tensor":[],
"transposed":true}`` with the codebook ``Tensor`` in global buffer 2 and each partition's
codes sub-vector major) and ``distance_type``. IVF_RQ: ``_rabit_codes`` (each partition's
packed, ``rabitq_storage.pack_codes``), the factor columns and with ex codes ``__blocked_ex_codes``;
``storage_metadata`` the RaBitQ model with ``"packed":true``.

``index.idx``: IVF_FLAT / IVF_PQ / IVF_SQ: no rows, one column ``__flat_marker`` (uint64 not
null), metadata ``lance:flat`` (one "" per partition); IVF_HNSW_*: the graphs
(``hnsw_file``). Both: ``lance:index`` = ``{"type","distance_type"}``, ``lance:ivf`` = "1",
the IVF protobuf with the centroids (``centroids_tensor``, FLOAT32 [k, dim]), the k-means
``loss``, and (HNSW) the graph rows' offsets and lengths; IVF_FLAT/PQ/SQ zeros.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from lance_spark_ops._pb import index_pb2
from lance_spark_ops.errors import CorruptFileError, UnsupportedError
from lance_spark_ops.index.kinds import VectorKind, is_hnsw
from lance_spark_ops.index.serde_float import format_float
from lance_spark_ops.index.vector import rabitq_storage
from lance_spark_ops.index.vector.hnsw_file import HNSW_KEY
from lance_spark_ops.index.vector.ivf import IVF_KEY
from lance_spark_ops.index.vector.vector_params import VectorParams
from lance_spark_ops.pb_wire import encode_varint

DETAILS_TYPE_URL = "/lance.index.pb.VectorIndexDetails"
METRIC_CODES = {"l2": index_pb2.L2, "cosine": index_pb2.Cosine, "dot": index_pb2.Dot}
GRAPH_FIELDS = (
    pa.field("__vector_id", pa.uint32()),
    pa.field("__neighbors", pa.list_(pa.uint32())),
    pa.field("_distance", pa.list_(pa.float32())),
)


def quantizer_of(kind: str) -> str:
    """FLAT, PQ, SQ or RQ."""
    return VectorKind.parse(kind).quantizer


def ivf_message(
    lengths: Sequence[int], centroids: np.ndarray | None = None, loss: float | None = None
) -> index_pb2.IVF:
    """The partition table (offsets from ``lengths``) with the centroids when given."""
    out = index_pb2.IVF()
    lens = np.asarray(lengths, dtype=np.int64)
    out.offsets.extend(
        np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.uint64).tolist() if lens.size else []
    )
    out.lengths.extend(lens.tolist())
    if centroids is not None:
        out.centroids_tensor.CopyFrom(tensor(centroids))
    if loss is not None:
        out.loss = float(loss)
    return out


def tensor(x: np.ndarray) -> index_pb2.Tensor:
    arr = np.ascontiguousarray(x, dtype=np.float32)
    return index_pb2.Tensor(data_type=index_pb2.Tensor.FLOAT32, shape=list(arr.shape), data=arr.tobytes())


def from_tensor(t: index_pb2.Tensor, what: str) -> np.ndarray:
    dtypes = {
        index_pb2.Tensor.FLOAT16: np.float16,
        index_pb2.Tensor.FLOAT32: np.float32,
        index_pb2.Tensor.FLOAT64: np.float64,
    }
    if t.data_type not in dtypes:
        raise UnsupportedError(f"{what}: tensor type {t.data_type} is not supported")
    arr = np.frombuffer(t.data, dtype=dtypes[t.data_type]).astype(np.float32)
    shape = list(t.shape)
    if int(np.prod(shape)) != arr.size:
        raise CorruptFileError(f"{what}: tensor of shape {shape} holds {arr.size} values")
    return arr.reshape(shape)


def storage_column(kind: str, dim: int, m: int = 0, nbits: int = 8) -> pa.Field:
    q = quantizer_of(kind)
    if q == "FLAT":
        return pa.field("flat", pa.list_(pa.float32(), dim), nullable=False)
    if q == "PQ":
        return pa.field("__pq_code", pa.list_(pa.uint8(), m * nbits // 8))
    return pa.field("__sq_code", pa.list_(pa.uint8(), dim))


def storage_schema(kind: str, metric: str, dim: int, model: Mapping[str, Any]) -> pa.Schema:
    """``auxiliary.idx``'s schema with its metadata (``model``: ``m``, ``nbits``, ``bounds``)."""
    q = quantizer_of(kind)
    if q == "RQ":
        rb = model["rabit"]
        return pa.schema(
            [pa.field("_rowid", pa.uint64()), *rabitq_storage.storage_fields(rb)],
            metadata={
                IVF_KEY: b"1",
                b"storage_metadata": json.dumps([rb.to_json(packed=True)]).encode(),
                b"distance_type": metric.encode(),
            },
        )
    if q == "FLAT":
        meta: str = json.dumps({"dim": dim}, separators=(",", ":"))
    elif q == "SQ":
        lo, hi = model["bounds"]
        meta = (
            f'{{"dim":{dim},"num_bits":8,"bounds":{{"start":{format_float(lo)},"end":{format_float(hi)}}}}}'
        )
    else:
        meta = json.dumps(
            {
                "codebook_position": 2,
                "nbits": model["nbits"],
                "num_sub_vectors": model["m"],
                "dimension": dim,
                "codebook_tensor": [],
                "transposed": True,
            },
            separators=(",", ":"),
        )
    fields = [
        pa.field("_rowid", pa.uint64()),
        storage_column(kind, dim, model.get("m", 0), model.get("nbits", 8)),
    ]
    return pa.schema(
        fields,
        metadata={
            IVF_KEY: b"1",
            b"storage_metadata": json.dumps([meta]).encode(),
            b"distance_type": metric.encode(),
        },
    )


def storage_buffers(lengths: Sequence[int], model: Mapping[str, Any]) -> list[bytes]:
    """Global buffers 1.. of ``auxiliary.idx``."""
    out = [ivf_message(lengths).SerializeToString()]
    rb = model.get("rabit")
    if rb is not None and rb.rotation == "matrix":  # rotate_mat_position 2
        out.append(tensor(rb.matrix).SerializeToString())
    if model.get("codebook") is not None:
        book = np.asarray(model["codebook"], dtype=np.float32)
        k = 1 << int(model["nbits"])
        out.append(tensor(book.reshape(k, -1)).SerializeToString())
    return out


def index_schema(
    kind: str, metric: str, partitions: int, hnsw_entries: Sequence[str] | None = None
) -> pa.Schema:
    meta = {
        IVF_KEY: b"1",
        b"lance:index": json.dumps({"type": kind, "distance_type": metric}, separators=(",", ":")).encode(),
    }
    if is_hnsw(kind):
        meta[HNSW_KEY] = json.dumps(list(hnsw_entries or []), separators=(",", ":")).encode()
        return pa.schema(list(GRAPH_FIELDS), metadata=meta)
    meta[b"lance:flat"] = json.dumps([""] * partitions, separators=(",", ":")).encode()
    return pa.schema([pa.field("__flat_marker", pa.uint64(), nullable=False)], metadata=meta)


def details(kind: str, metric: str, params: VectorParams) -> bytes:
    """The entry's ``index_details`` (a serialized ``google.protobuf.Any``)."""
    from google.protobuf import any_pb2

    msg = index_pb2.VectorIndexDetails(metric_type=METRIC_CODES[metric])
    if params.target_partition_size:  # as pylance 14: recorded only when given
        msg.target_partition_size = int(params.target_partition_size)
    q = quantizer_of(kind)
    hints = {
        "lance.ivf.max_iters": str(params.max_iterations),
        "lance.ivf.sample_rate": str(params.sample_rate),
    }
    if q == "PQ":
        msg.pq.num_bits = int(params.num_bits)
        msg.pq.num_sub_vectors = int(params.num_sub_vectors)
        hints.update(
            {
                "lance.pq.max_iters": str(params.max_iterations),
                "lance.pq.sample_rate": str(params.sample_rate),
                "lance.pq.kmeans_redos": "1",
            }
        )
    elif q == "SQ":
        msg.sq.num_bits = 8
        hints["lance.sq.sample_rate"] = str(params.sample_rate)
    elif q == "RQ":
        # field 6 (RabitQuantization {num_bits = 1}; fast rotation, column layout: defaults),
        # newer than our protos: written between the scalar fields and the hints, as pylance
        head = msg.SerializeToString()
        inner = b"\x08" + encode_varint(int(params.num_bits))
        tail = index_pb2.VectorIndexDetails()
        tail.runtime_hints.update(hints)
        value = head + b"\x32" + encode_varint(len(inner)) + inner + tail.SerializeToString()
        return any_pb2.Any(type_url=DETAILS_TYPE_URL, value=value).SerializeToString()
    else:
        msg.flat.SetInParent()
    if is_hnsw(kind):
        cfg = msg.hnsw_index_config
        cfg.max_connections, cfg.construction_ef = int(params.m), int(params.ef_construction)
        cfg.max_level = int(params.max_level)
        hints["lance.hnsw.prefetch_distance"] = "2"
    msg.runtime_hints.update(hints)
    return any_pb2.Any(type_url=DETAILS_TYPE_URL, value=msg.SerializeToString()).SerializeToString()


def rq_num_bits(raw: bytes) -> int | None:
    """The RaBitQ width in a ``VectorIndexDetails`` (field 6, unknown to our protos), or None."""
    from google.protobuf.unknown_fields import UnknownFieldSet

    msg = index_pb2.VectorIndexDetails.FromString(bytes(raw))
    for u in UnknownFieldSet(msg):
        if u.field_number == 6 and u.wire_type == 2:
            inner = index_pb2.VectorIndexDetails.ScalarQuantization.FromString(bytes(u.data))
            return int(inner.num_bits)  # same field 1 (num_bits) as SQ's message
    return None


def read_details(raw: bytes) -> index_pb2.VectorIndexDetails:
    return index_pb2.VectorIndexDetails.FromString(bytes(raw))


def transpose_codes(codes: np.ndarray, lengths: Sequence[int]) -> np.ndarray:
    """Per partition, row-major (n x w) codes -> sub-vector major (w blocks of n), flat."""
    w = codes.shape[1] if codes.ndim == 2 else 0
    out = np.empty(codes.size, dtype=np.uint8)
    pos = 0
    for n in lengths:
        out[pos * w : (pos + n) * w] = codes[pos : pos + n].T.reshape(-1)
        pos += n
    return out
