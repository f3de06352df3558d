"""Which segment builder builds which index type, and the index type names pylance takes.

Builders are imported when first asked for, so planning an index of one family does not load
another family's code (or its dependencies) on the driver.
"""

from __future__ import annotations

import importlib
from typing import Any

from lance_spark_ops.errors import InvalidInputError, UnsupportedError
from lance_spark_ops.index.kinds import VECTOR_KINDS

SCALAR_KINDS = ("BTREE", "BITMAP", "LABEL_LIST", "ZONEMAP", "BLOOMFILTER", "NGRAM", "RTREE", "MINHASHLSH")
FTS_KINDS = ("INVERTED",)
# types pylance 14 can build that this library refuses (typed) rather than build wrongly
REFUSED_KINDS: dict[str, str] = {}
ALIASES = {"FTS": "INVERTED", "IVF_HNSW": "IVF_HNSW_FLAT"}
SCALAR_TYPES = frozenset((*SCALAR_KINDS, *FTS_KINDS))

_MODULES = {
    **{k: ("lance_spark_ops.spark.indices.scalar_index", "SCALAR_BUILDER") for k in SCALAR_KINDS},
    **{k: ("lance_spark_ops.spark.indices.fts_index", "FTS_BUILDER") for k in FTS_KINDS},
    **{k: ("lance_spark_ops.spark.indices.vector_index", "VECTOR_BUILDER") for k in VECTOR_KINDS},
}
# tests register builders of their own here (kind -> builder object)
_OVERRIDES: dict[str, Any] = {}


def type_names() -> str:
    """The types this library builds and their aliases, for help texts (``BTREE, ..., INVERTED
    (alias FTS), ...``): what ``index_type_name`` accepts, in any case."""
    aliases: dict[str, list[str]] = {}
    for alias, kind in ALIASES.items():
        aliases.setdefault(kind, []).append(alias)
    return ", ".join(k + (f" (alias {', '.join(aliases[k])})" if k in aliases else "") for k in _MODULES)


def index_type_name(index_type: Any) -> str:
    """pylance's spelling of an index type, upper-cased with aliases resolved (``"fts"`` ->
    ``INVERTED``); an unknown name is an ``InvalidInputError``, a known one this library does
    not build an ``UnsupportedError``."""
    if not isinstance(index_type, str) or not index_type.strip():
        raise InvalidInputError(f"index_type must be a type name such as 'BTREE', got {index_type!r}")
    kind = index_type.strip().upper()
    kind = ALIASES.get(kind, kind)
    if kind in REFUSED_KINDS:
        raise UnsupportedError(REFUSED_KINDS[kind])
    if kind not in _MODULES:
        known = ", ".join(sorted({*_MODULES, *ALIASES}))
        raise InvalidInputError(f"unknown index type {index_type!r}; known: {known}")
    return kind


def builder_for(kind: str) -> Any:
    """The ``SegmentBuilder`` of ``kind`` (a name from ``index_type_name``)."""
    if kind in _OVERRIDES:
        return _OVERRIDES[kind]
    if kind not in _MODULES:
        raise UnsupportedError(f"building or optimizing {kind} indices is not supported")
    module, attr = _MODULES[kind]
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name != module:
            raise
        raise UnsupportedError(f"building or optimizing {kind} indices is not supported by this "
                               "version of lance-spark-ops") from e
    builder = getattr(mod, attr)
    if kind not in builder.kinds:
        raise UnsupportedError(f"building or optimizing {kind} indices is not supported yet")
    return builder
