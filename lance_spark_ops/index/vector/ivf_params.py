"""The parameters of an IVF_* build as pylance 14's ``create_index`` takes them (no I/O): checked
and defaulted (``check_params``), read back from a segment's details (``params_of``), and what
they imply: the target rows per partition, the partition count, the HNSW parameters."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from lance_spark_ops._pb import index_pb2
from lance_spark_ops.errors import InvalidInputError, UnsupportedError
from lance_spark_ops.index.kinds import VECTOR_KINDS, is_hnsw
from lance_spark_ops.index.vector import rabitq
from lance_spark_ops.index.vector.hnsw import Params
from lance_spark_ops.index.vector.ivf_build import quantizer_of, read_details, rq_num_bits
from lance_spark_ops.index.vector.vector_params import VectorParams

# pylance 14's target rows per partition when num_partitions is not given (IndexType)
TARGET_PARTITION_SIZE = {
    "IVF_FLAT": 4096,
    "IVF_PQ": 8192,
    "IVF_SQ": 8192,
    "IVF_RQ": 4096,
    "IVF_HNSW_FLAT": 1 << 20,
    "IVF_HNSW_PQ": 1 << 20,
    "IVF_HNSW_SQ": 1 << 20,
}
MAX_PARTITIONS = 4096  # recommended_num_partitions' cap
DEFAULTS = VectorParams().as_dict()
ALIASES = {"max_iters": "max_iterations", "metric_type": "metric"}
# pylance parameters about its own machinery (shuffle buffers, caches): accepted, no effect here
IGNORED = frozenset({"shuffle_partition_batches", "shuffle_partition_concurrency", "index_cache_size"})
_INT_KEYS = (
    "num_partitions",
    "num_sub_vectors",
    "target_partition_size",
    "max_iterations",
    "sample_rate",
    "m",
    "ef_construction",
    "max_level",
)


def _int(params: Mapping[str, Any], key: str, lo: int = 1) -> int | None:
    v = params.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or int(v) < lo:
        raise InvalidInputError(f"index parameter {key}={v!r}: expected an integer >= {lo}")
    return int(v)


def _matrix(v: Any, key: str) -> np.ndarray:
    if isinstance(v, (pa.FixedSizeListArray, pa.ChunkedArray)):
        v = v.combine_chunks() if isinstance(v, pa.ChunkedArray) else v
        v = np.asarray(v.values.to_numpy(zero_copy_only=False)).reshape(len(v), v.type.list_size)
    try:
        arr = np.asarray(v, dtype=np.float32)
    except (TypeError, ValueError) as e:
        raise InvalidInputError(f"index parameter {key}: not a float array ({e})") from e
    return arr


def check_params(kind: str, field: pa.Field, params: Mapping[str, Any]) -> VectorParams:
    """``params`` (pylance's names) of a ``kind`` build on ``field`` parsed once: typed errors
    naming the parameter, aliases resolved, defaults filled in, the given centroids / codebook
    as float32 arrays."""
    if kind not in VECTOR_KINDS:
        raise UnsupportedError(f"index type {kind!r} is not a vector index type this library builds")
    t = field.type
    if not pa.types.is_fixed_size_list(t) or not pa.types.is_floating(t.value_type):
        raise InvalidInputError(
            f"column {field.name!r} is {t}: a vector index needs a fixed_size_list of floats"
        )
    if not pa.types.is_float32(t.value_type):
        raise UnsupportedError(
            f"column {field.name!r}: vectors of {t.value_type} are not supported yet (float32 only)"
        )
    dim = t.list_size
    p = {ALIASES.get(k, k): v for k, v in params.items() if k not in IGNORED}
    unknown = sorted(set(p) - set(DEFAULTS))
    if unknown:
        raise InvalidInputError(f"unknown {kind} index parameter(s) {unknown}; known: {sorted(DEFAULTS)}")
    out = {**DEFAULTS, **p}
    metric = str(out["metric"]).lower()
    metric = "l2" if metric == "euclidean" else metric
    if metric == "hamming":
        raise UnsupportedError("metric hamming (uint8 vectors) is not supported")
    if metric not in ("l2", "cosine", "dot"):
        raise InvalidInputError(f"index parameter metric={out['metric']!r}: expected l2, cosine or dot")
    out["metric"] = metric
    for key in _INT_KEYS:
        out[key] = _int(out, key)
    if out["ivf_centroids"] is not None:
        c = _matrix(out["ivf_centroids"], "ivf_centroids")
        if c.ndim != 2 or c.shape[1] != dim or c.shape[0] == 0:
            raise InvalidInputError(f"ivf_centroids of shape {c.shape}: expected (partitions, {dim})")
        if out["num_partitions"] is not None and out["num_partitions"] != c.shape[0]:
            raise InvalidInputError(
                f"ivf_centroids has {c.shape[0]} clusters, but num_partitions={out['num_partitions']}"
            )
        out["ivf_centroids"], out["num_partitions"] = c, c.shape[0]
    q = quantizer_of(kind)
    if q == "RQ":
        _check_rq(out, p, dim)
    elif out["rabitq_model"] is not None:
        raise InvalidInputError(f"rabitq_model is given but {kind} is not IVF_RQ")
    if q == "PQ":
        _check_pq(out, dim)
    elif out["pq_codebook"] is not None:
        raise InvalidInputError(f"pq_codebook is given but {kind} has no PQ")
    elif q == "SQ" and out["num_bits"] != 8:
        raise UnsupportedError(f"SQ with num_bits={out['num_bits']}: only 8 is supported (as pylance)")
    return VectorParams(**out)


def _check_rq(out: dict[str, Any], given: Mapping[str, Any], dim: int) -> None:
    """num_bits 1..9 (pylance's default 5); a given ``rabitq_model`` (its JSON) must match the
    dimension and width, as pylance checks it."""
    nbits = _int(out, "num_bits") if "num_bits" in given else 5
    rabitq.validate(dim, nbits)
    out["num_bits"] = nbits
    raw = out["rabitq_model"]
    if raw is not None:
        model = raw if isinstance(raw, rabitq.RabitModel) else rabitq.from_metadata(raw)
        if model.num_bits != nbits:
            raise InvalidInputError(
                f"rabitq_model num_bits={model.num_bits} does not match requested num_bits={nbits}"
            )
        if model.dim != dim:
            raise InvalidInputError(
                f"rabitq_model dimension={model.dim} does not match vector dimension={dim}"
            )
        out["rabitq_model"] = model


def _check_pq(out: dict[str, Any], dim: int) -> None:
    m = out["num_sub_vectors"]
    if m is None:
        raise InvalidInputError("num_sub_vectors is required for a PQ index (as pylance)")
    if dim % m:
        raise InvalidInputError(f"dimension ({dim}) must be divisible by num_sub_vectors ({m})")
    nbits = _int(out, "num_bits")
    if nbits not in (4, 8):
        raise InvalidInputError(f"num_bits={nbits}: PQ supports 4 or 8")
    if nbits == 4 and m % 2:
        raise InvalidInputError(f"num_sub_vectors ({m}) must be even for num_bits=4")
    out["num_bits"] = nbits
    if out["pq_codebook"] is not None:
        if out["ivf_centroids"] is None:
            raise InvalidInputError("ivf_centroids must be specified when pq_codebook is provided")
        book = _matrix(out["pq_codebook"], "pq_codebook")
        if book.size != (1 << nbits) * dim:
            raise InvalidInputError(
                f"pq_codebook has {book.size} values, expected {m} x {1 << nbits} x {dim // m}"
            )
        out["pq_codebook"] = book.reshape(m, 1 << nbits, dim // m)


def params_of(index: Any) -> VectorParams:
    """The build parameters an existing segment (``IndexMetadata``) records in its details."""
    d = read_details(index.index_details.value)
    metric = {index_pb2.L2: "l2", index_pb2.Cosine: "cosine", index_pb2.Dot: "dot"}.get(d.metric_type)
    if metric is None:
        raise UnsupportedError(f"index {index.name!r}: metric type {d.metric_type} is not supported")
    out = {**DEFAULTS, "metric": metric}
    hints = dict(d.runtime_hints)
    for key, hint in (("max_iterations", "lance.ivf.max_iters"), ("sample_rate", "lance.ivf.sample_rate")):
        if hints.get(hint, "").isdigit():
            out[key] = int(hints[hint])
    if d.target_partition_size:
        out["target_partition_size"] = int(d.target_partition_size)
    if d.HasField("pq"):
        out["num_bits"], out["num_sub_vectors"] = int(d.pq.num_bits), int(d.pq.num_sub_vectors)
    rq_bits = rq_num_bits(index.index_details.value)
    if rq_bits is not None:  # IVF_RQ (field 6)
        out["num_bits"] = rq_bits
    if d.HasField("hnsw_index_config"):
        h = d.hnsw_index_config
        out["m"], out["ef_construction"], out["max_level"] = (
            int(h.max_connections),
            int(h.construction_ef),
            int(h.max_level),
        )
    return VectorParams(**out)


def target_size(kind: str, params: VectorParams) -> int:
    """Target rows per partition: the given ``target_partition_size`` or pylance's default."""
    return int(params.target_partition_size or TARGET_PARTITION_SIZE[kind])


def recommended_partitions(rows: int, target: int) -> int:
    """pylance 14's partition count for ``rows`` at ``target`` rows each (1 .. ``MAX_PARTITIONS``)."""
    return max(1, min(rows // max(target, 1), MAX_PARTITIONS))


def hnsw_params(kind: str, params: VectorParams) -> Params | None:
    """The graph parameters of an IVF_HNSW_* build, None for the other kinds."""
    return Params(params.max_level, params.m, params.ef_construction) if is_hnsw(kind) else None
