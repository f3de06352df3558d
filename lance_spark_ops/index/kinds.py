"""What an index entry is, from its ``index_details`` type and ``index_version`` (no I/O)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lance_spark_ops.errors import InvalidInputError

FRAG_REUSE_INDEX_NAME = "__lance_frag_reuse"
MEM_WAL_INDEX_NAME = "__lance_mem_wal"

_BY_DETAILS = {
    "BTreeIndexDetails": "BTREE",
    "BitmapIndexDetails": "BITMAP",
    "LabelListIndexDetails": "LABEL_LIST",
    "InvertedIndexDetails": "INVERTED",
    "NGramIndexDetails": "NGRAM",
    "ZoneMapIndexDetails": "ZONEMAP",
    "BloomFilterIndexDetails": "BLOOMFILTER",
    "RTreeIndexDetails": "RTREE",
    "MinHashLshIndexDetails": "MINHASHLSH",
    "VectorIndexDetails": "VECTOR",
    "FragmentReuseIndexDetails": "FRAG_REUSE",
    "MemWalIndexDetails": "MEM_WAL",
}

# Indices whose data are per-fragment summaries of row addresses that pylance does not remap:
# a compaction takes the rewritten fragments out of their bitmaps.
SUMMARY_KINDS = frozenset({"ZONEMAP", "BLOOMFILTER"})
# The vector index types this library builds (one IVF partitioning, a quantizer, HNSW graphs or not)
VECTOR_KINDS = ("IVF_FLAT", "IVF_PQ", "IVF_SQ", "IVF_RQ", "IVF_HNSW_FLAT", "IVF_HNSW_SQ", "IVF_HNSW_PQ")
QUANTIZERS = ("FLAT", "PQ", "SQ", "RQ")


@dataclass(frozen=True)
class VectorKind:
    """A vector index type, parsed once from its name: ``IVF_[HNSW_]<quantizer>``. The one place
    a kind's name is taken apart; everything else asks this."""

    name: str
    quantizer: str  # FLAT, PQ, SQ or RQ
    hnsw: bool      # each IVF partition holds an HNSW graph

    @classmethod
    def parse(cls, name: str) -> VectorKind:
        """``IVF_HNSW_SQ`` -> (quantizer SQ, hnsw); ``InvalidInputError`` for a name that is not a
        vector index type."""
        if name not in VECTOR_KINDS:
            raise InvalidInputError(f"{name!r} is not a vector index type (one of {', '.join(VECTOR_KINDS)})")
        hnsw = name.startswith("IVF_HNSW_")
        return cls(name, name[len("IVF_HNSW_" if hnsw else "IVF_"):], hnsw)


def is_hnsw(kind: str) -> bool:
    """Whether an index type (any, vector or not) is an IVF_HNSW_* one."""
    return kind in VECTOR_KINDS and VectorKind.parse(kind).hnsw


def index_kind(index: Any) -> str:
    """BTREE, BITMAP, ..., IVF_PQ / IVF_FLAT / IVF_SQ / IVF_RQ / IVF_HNSW_{PQ,SQ,FLAT} (VECTOR when the
    details do not say), FRAG_REUSE, or UNKNOWN (details missing or new)."""
    if index.name == FRAG_REUSE_INDEX_NAME:
        return "FRAG_REUSE"
    if index.name == MEM_WAL_INDEX_NAME:
        return "MEM_WAL"
    if not index.HasField("index_details"):
        return "UNKNOWN"
    name = index.index_details.type_url.rsplit("/", 1)[-1].rsplit(".", 1)[-1]
    kind = _BY_DETAILS.get(name, "UNKNOWN")
    return _vector_kind(index.index_details.value) if kind == "VECTOR" else kind


def _vector_kind(details: bytes) -> str:
    """pylance 14's VectorIndexDetails (newer than our protos) name the sub-index and
    quantizer by which field is set: 3 HNSW, 4 PQ, 5 SQ, 6 RQ (RaBitQ), 8 FLAT."""
    from google.protobuf import empty_pb2
    from google.protobuf.message import DecodeError
    from google.protobuf.unknown_fields import UnknownFieldSet

    msg = empty_pb2.Empty()
    try:
        msg.ParseFromString(bytes(details))
    except DecodeError:
        return "VECTOR"
    present = {u.field_number for u in UnknownFieldSet(msg)}
    quantizer = ("PQ" if 4 in present else "SQ" if 5 in present else "RQ" if 6 in present
                 else "FLAT" if 8 in present else None)
    if quantizer is None:
        return "VECTOR"
    return f"IVF_HNSW_{quantizer}" if 3 in present else f"IVF_{quantizer}"


def stores_row_addresses(index: Any, stable_row_ids: bool) -> bool:
    """Whether the index's data name rows by address (so moving rows invalidates them).

    Without stable row ids every index does. With them, only BTREE at index_version 1 (seen
    in pylance 14: its ``ids`` are row addresses) and the per-fragment summaries do.
    """
    kind = index_kind(index)
    if not stable_row_ids:
        return kind not in ("FRAG_REUSE", "MEM_WAL")
    return kind in SUMMARY_KINDS or (kind == "BTREE" and index.index_version == 1)


def uuid_str(raw: bytes) -> str:
    """A 16-byte uuid as the directory name under ``_indices/``."""
    h = bytes(raw).hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
