"""Which of Spark's pushed filters the ``lance`` reader evaluates itself, and how (pyarrow.compute).

A filter the reader accepts is no longer evaluated by Spark, so it must give exactly Spark's
answer. Accepted: ``EqualTo``, ``EqualNullSafe``, ``GreaterThan(OrEqual)``, ``LessThan(OrEqual)``,
``In``, ``IsNull``, ``IsNotNull``, ``StringStartsWith``, ``StringEndsWith``, ``StringContains`` and
``Not`` of any of these, on a top-level column of type boolean, byte/short/int/long, string
(default UTF8_BINARY collation: byte order, as Arrow compares) or date, with a literal of the
matching Python type (``bool``, ``int``, ``str``, ``datetime.date``). Everything else - floats and
doubles (Spark orders NaN above all and equal to itself; Arrow does not), timestamps, decimals,
binary, nested paths, odd literal types - stays with Spark.

Evaluation follows SQL's three-valued logic: each filter gives true / false / null per row
(null compares to null; ``x IN (1, NULL)`` is null unless x = 1; ``NOT null`` is null) and a row
is kept only when every filter is true.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

_COMPARE = {"EqualTo": pc.equal, "GreaterThan": pc.greater, "GreaterThanOrEqual": pc.greater_equal,
            "LessThan": pc.less, "LessThanOrEqual": pc.less_equal}
_STRING = {"StringStartsWith": "starts_with", "StringEndsWith": "ends_with", "StringContains": "contains"}
_UNARY = ("IsNull", "IsNotNull")


def _literal_kind(spark_type: Any) -> type | None:
    """The Python literal type a filter on a column of ``spark_type`` must carry (None: not pushed)."""
    from pyspark.sql import types as T

    if isinstance(spark_type, T.BooleanType):
        return bool
    if isinstance(spark_type, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
        return int
    if isinstance(spark_type, T.StringType):
        collation = getattr(spark_type, "collation", "UTF8_BINARY")
        return str if collation in (None, "UTF8_BINARY") else None
    if isinstance(spark_type, T.DateType):
        return dt.date
    return None


def _matches(value: Any, kind: type) -> bool:
    return type(value) is kind  # exact: bool is not an int here, datetime is not a date


def accepts(f: Any, types: dict[str, Any]) -> bool:
    """Whether filter ``f`` is evaluated by the reader (``types``: column name -> Spark type)."""
    name = type(f).__name__
    if name == "Not":
        return accepts(f.child, types)
    path = getattr(f, "attribute", None)
    if not isinstance(path, tuple) or len(path) != 1 or path[0] not in types:
        return False
    kind = _literal_kind(types[path[0]])
    if kind is None:
        return False
    if name in _UNARY:
        return True
    if name in _STRING:
        return kind is str and _matches(f.value, str)
    if name == "EqualNullSafe":
        return f.value is None or _matches(f.value, kind)
    if name == "In":
        return isinstance(f.value, (tuple, list)) and all(v is None or _matches(v, kind) for v in f.value)
    return name in _COMPARE and _matches(f.value, kind)


def split_filters(filters: Sequence[Any], types: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """``(accepted, rejected)``; rejected ones are the input objects themselves (Spark checks)."""
    accepted = [f for f in filters if accepts(f, types)]
    rejected = [f for f in filters if not accepts(f, types)]
    return accepted, rejected


def _scalar(value: Any, typ: pa.DataType) -> pa.Scalar:
    return pa.scalar(value, typ)


def evaluate(f: Any, batch: pa.RecordBatch) -> pa.Array:
    """Three-valued boolean result of an accepted filter over ``batch`` (Spark's Arrow form)."""
    name = type(f).__name__
    if name == "Not":
        return pc.invert(evaluate(f.child, batch))
    col = batch.column(batch.schema.get_field_index(f.attribute[0]))
    if pa.types.is_integer(col.type):
        col = col.cast(pa.int64())  # compare as Spark does, with no overflow of a narrow literal
    if name == "IsNull":
        return col.is_null()
    if name == "IsNotNull":
        return col.is_valid()
    if name in _STRING:
        fn = getattr(pc, _STRING[name]) if name != "StringContains" else pc.match_substring
        return fn(col, pattern=f.value)
    if name == "EqualNullSafe":
        if f.value is None:
            return col.is_null()
        return pc.fill_null(pc.equal(col, _scalar(f.value, col.type)), False)
    if name == "In":
        values = [v for v in f.value if v is not None]
        hit = pc.is_in(col, value_set=pa.array(values, col.type), skip_nulls=True)
        unknown = pc.or_(col.is_null(), pa.scalar(len(values) < len(f.value)))
        # true where hit; null where not hit and (col null or the list holds a null); else false
        return pc.if_else(hit, True, pc.if_else(unknown, pa.scalar(None, pa.bool_()), False))
    return _COMPARE[name](col, _scalar(f.value, col.type))


def apply(filters: Iterable[Any], batch: pa.RecordBatch) -> pa.RecordBatch:
    """Rows of ``batch`` for which every filter is true."""
    keep: pa.Array | None = None
    for f in filters:
        result = pc.fill_null(evaluate(f, batch), False)
        keep = result if keep is None else pc.and_(keep, result)
    if keep is None or batch.num_rows == 0:
        return batch
    return batch if pc.all(keep).as_py() else batch.filter(keep)
