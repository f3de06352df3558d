"""What an index entry is, from its ``index_details`` type and ``index_version`` (no I/O)."""

from __future__ import annotations

from typing import Any

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
    "VectorIndexDetails": "VECTOR",
    "FragmentReuseIndexDetails": "FRAG_REUSE",
    "MemWalIndexDetails": "MEM_WAL",
}

# Indices whose data are per-fragment summaries of row addresses that pylance does not remap:
# a compaction takes the rewritten fragments out of their bitmaps.
SUMMARY_KINDS = frozenset({"ZONEMAP", "BLOOMFILTER"})


def index_kind(index: Any) -> str:
    """BTREE, BITMAP, ..., VECTOR, FRAG_REUSE, or UNKNOWN (details missing or new)."""
    if index.name == FRAG_REUSE_INDEX_NAME:
        return "FRAG_REUSE"
    if index.name == MEM_WAL_INDEX_NAME:
        return "MEM_WAL"
    if not index.HasField("index_details"):
        return "UNKNOWN"
    name = index.index_details.type_url.rsplit("/", 1)[-1].rsplit(".", 1)[-1]
    return _BY_DETAILS.get(name, "UNKNOWN")


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
