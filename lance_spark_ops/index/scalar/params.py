"""The typed parameters of the scalar index kinds (no I/O), parsed once from pylance's keyword
arguments (``parse``): BTREE ``zone_size`` (rows per page), ZONEMAP ``rows_per_zone``,
BLOOMFILTER ``number_of_items`` and ``probability``, RTREE ``page_size``; BITMAP, LABEL_LIST
and NGRAM take none; MINHASHLSH's are ``minhash.MinHashParams``. An unknown name is refused
(pylance ignores it silently)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lance_spark_ops.errors import InvalidInputError
from lance_spark_ops.index.params import IndexParams, NoParams
from lance_spark_ops.index.scalar import bloomfilter as bf
from lance_spark_ops.index.scalar import btree as bt
from lance_spark_ops.index.scalar import minhash as mh
from lance_spark_ops.index.scalar import rtree as rt
from lance_spark_ops.index.scalar import zonemap as zm


@dataclass(frozen=True, eq=False)
class BTreeParams(IndexParams):
    zone_size: int = bt.DEFAULT_BATCH_SIZE  # rows per page of the page lookup


@dataclass(frozen=True, eq=False)
class ZoneMapParams(IndexParams):
    rows_per_zone: int = zm.DEFAULT_ROWS_PER_ZONE


@dataclass(frozen=True, eq=False)
class BloomFilterParams(IndexParams):
    number_of_items: int = bf.DEFAULT_ITEMS
    probability: float = bf.DEFAULT_PROBABILITY


@dataclass(frozen=True, eq=False)
class RTreeParams(IndexParams):
    page_size: int = rt.DEFAULT_PAGE_SIZE


PARAM_TYPES: dict[str, type[IndexParams]] = {
    "BTREE": BTreeParams,
    "BITMAP": NoParams,
    "LABEL_LIST": NoParams,
    "NGRAM": NoParams,
    "ZONEMAP": ZoneMapParams,
    "BLOOMFILTER": BloomFilterParams,
    "RTREE": RTreeParams,
    "MINHASHLSH": mh.MinHashParams,
}


def parse(kind: str, params: Mapping[str, Any]) -> IndexParams:
    """``params`` of a ``kind`` build checked and defaulted; ``InvalidInputError`` names a bad one."""
    if kind == "MINHASHLSH":
        out = mh.check_params(params)
        mh.analyzer_params(out)  # the tokenizer must be one this library reproduces
        return out
    cls = PARAM_TYPES[kind]
    known = cls.names()
    unknown = sorted(set(params) - set(known))
    if unknown:
        allowed = ", ".join(sorted(known)) or "none"
        raise InvalidInputError(f"{kind} index: unknown parameter(s) {unknown} (accepted: {allowed})")
    out = {**cls().as_dict(), **params}
    if kind == "BTREE":
        out["zone_size"] = _positive_int(out["zone_size"], "zone_size")
    if kind == "ZONEMAP":
        out["rows_per_zone"] = _positive_int(out["rows_per_zone"], "rows_per_zone")
    if kind == "RTREE":
        out["page_size"] = _positive_int(out["page_size"], "page_size")
        if out["page_size"] < 2:
            raise InvalidInputError("RTREE index: parameter page_size must be at least 2, got "
                                    f"{out['page_size']}")
    if kind == "BLOOMFILTER":
        out["number_of_items"] = _positive_int(out["number_of_items"], "number_of_items")
        p = out["probability"]
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 < float(p) < 1.0:
            raise InvalidInputError("BLOOMFILTER index: parameter probability must be a number in "
                                    f"(0, 1), got {p!r}")
        out["probability"] = float(p)
    return cls(**out)


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        try:
            v = int(value)
        except (TypeError, ValueError):
            v = 0
        if v <= 0 or isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise InvalidInputError(f"parameter {name} must be a positive integer, got {value!r}")
        return v
    return value
