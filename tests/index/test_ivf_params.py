"""A vector build's parameters (``index.vector.ivf_params``), without Spark: pylance 14's names,
aliases and defaults, typed errors naming the parameter, and the values a segment's details
give back."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops.errors import InvalidInputError, UnsupportedError
from lance_spark_ops.index.kinds import VECTOR_KINDS
from lance_spark_ops.index.vector import ivf_params
from lance_spark_ops.index.vector.hnsw import Params
from lance_spark_ops.index.vector.ivf_build import details
from lance_spark_ops.index.vector.vector_params import VectorParams

VEC = pa.field("vec", pa.list_(pa.float32(), 8))


def test_defaults_and_aliases() -> None:
    p = ivf_params.check_params("IVF_FLAT", VEC, {"metric_type": "Euclidean", "max_iters": 7,
                                                  "shuffle_partition_batches": 3})
    assert p["metric"] == "l2" and p["max_iterations"] == 7 and p["sample_rate"] == 256
    assert "shuffle_partition_batches" not in p and "max_iters" not in p
    c = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(16, dtype=np.float32)), 8)
    p = ivf_params.check_params("IVF_PQ", VEC, {"ivf_centroids": c, "num_sub_vectors": 2, "num_bits": 4,
                                                "pq_codebook": np.zeros(16 * 8, np.float32)})
    assert p["num_partitions"] == 2 and p["ivf_centroids"].shape == (2, 8)
    assert p["pq_codebook"].shape == (2, 16, 4)


@pytest.mark.parametrize("kind,field,params,error,match", [
    ("IVF_RQ", VEC, {"num_bits": 10}, InvalidInputError, "num_bits must be in 1..=9"),
    ("IVF_RQ", pa.field("v", pa.list_(pa.float32(), 12)), {}, InvalidInputError, "divisible by 8"),
    ("IVF_FLAT", VEC, {"rabitq_model": "{}"}, InvalidInputError, "is not IVF_RQ"),
    ("IVF_FLAT", pa.field("v", pa.list_(pa.int8(), 8)), {}, InvalidInputError, "fixed_size_list of floats"),
    ("IVF_FLAT", pa.field("v", pa.list_(pa.float16(), 8)), {}, UnsupportedError, "float32 only"),
    ("IVF_FLAT", VEC, {"nprobes": 3}, InvalidInputError, r"unknown IVF_FLAT index parameter\(s\) \['nprob"),
    ("IVF_FLAT", VEC, {"metric": "hamming"}, UnsupportedError, "hamming"),
    ("IVF_FLAT", VEC, {"metric": "manhattan"}, InvalidInputError, "metric='manhattan'"),
    ("IVF_FLAT", VEC, {"num_partitions": 0}, InvalidInputError, "num_partitions=0"),
    ("IVF_FLAT", VEC, {"sample_rate": True}, InvalidInputError, "sample_rate=True"),
    ("IVF_FLAT", VEC, {"ivf_centroids": np.zeros((3, 4))}, InvalidInputError, r"shape \(3, 4\)"),
    ("IVF_FLAT", VEC, {"ivf_centroids": np.zeros((3, 8)), "num_partitions": 2}, InvalidInputError,
     "3 clusters, but num_partitions=2"),
    ("IVF_PQ", VEC, {}, InvalidInputError, "num_sub_vectors is required"),
    ("IVF_PQ", VEC, {"num_sub_vectors": 3}, InvalidInputError, "divisible"),
    ("IVF_PQ", VEC, {"num_sub_vectors": 2, "num_bits": 6}, InvalidInputError, "4 or 8"),
    ("IVF_PQ", VEC, {"num_sub_vectors": 1, "num_bits": 4}, InvalidInputError, "even"),
    ("IVF_PQ", VEC, {"num_sub_vectors": 2, "pq_codebook": np.zeros(8)}, InvalidInputError,
     "ivf_centroids must be specified"),
    ("IVF_PQ", VEC, {"num_sub_vectors": 2, "ivf_centroids": np.zeros((1, 8)), "pq_codebook": np.zeros(8)},
     InvalidInputError, "pq_codebook has 8 values, expected 2 x 256 x 4"),
    ("IVF_SQ", VEC, {"pq_codebook": np.zeros(8)}, InvalidInputError, "has no PQ"),
    ("IVF_HNSW_SQ", VEC, {"num_bits": 4}, UnsupportedError, "only 8"),
])
def test_refused(kind: str, field: pa.Field, params: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        ivf_params.check_params(kind, field, params)


class _Entry:
    """What ``params_of`` reads of a manifest entry."""

    def __init__(self, raw: bytes) -> None:
        from google.protobuf import any_pb2

        self.name = "vec_idx"
        self.index_details = any_pb2.Any.FromString(raw)


@pytest.mark.parametrize("kind", VECTOR_KINDS)
def test_params_round_trip_through_details(kind: str) -> None:
    """What a segment's details record (the fields pylance reads back) comes back as given."""
    given = ivf_params.check_params(kind, VEC, {
        "metric": "cosine", "max_iterations": 9, "sample_rate": 33, "target_partition_size": 77,
        **({"num_sub_vectors": 4, "num_bits": 4} if kind.endswith("PQ") else {}),
        **({"m": 5, "ef_construction": 60, "max_level": 3} if "HNSW" in kind else {}),
    })
    back = ivf_params.params_of(_Entry(details(kind, "cosine", given)))
    keys = ["metric", "max_iterations", "sample_rate", "target_partition_size", "num_sub_vectors", "num_bits",
            "m", "ef_construction", "max_level"]
    assert {k: back[k] for k in keys} == {k: given[k] for k in keys}


def test_targets_and_graphs() -> None:
    p0 = VectorParams()
    assert ivf_params.target_size("IVF_PQ", p0) == 8192 and ivf_params.target_size("IVF_FLAT", p0) == 4096
    assert ivf_params.target_size("IVF_HNSW_SQ", VectorParams(target_partition_size=None)) == 1 << 20
    assert ivf_params.target_size("IVF_PQ", VectorParams(target_partition_size=100)) == 100
    assert ivf_params.recommended_partitions(100_000, 8192) == 12
    assert ivf_params.recommended_partitions(10, 8192) == 1
    assert ivf_params.recommended_partitions(1 << 40, 4096) == 4096
    p = ivf_params.check_params("IVF_HNSW_PQ", VEC, {"num_sub_vectors": 2})
    assert ivf_params.hnsw_params("IVF_HNSW_PQ", p) == Params(7, 20, 150)  # pylance's defaults
    assert ivf_params.hnsw_params("IVF_PQ", p) is None
