"""Arrow (as Lance stores it) <-> Spark SQL types, and the batch conversion between them.

Lance -> Spark (``spark_schema``; ``to_spark_batch`` converts each batch on the executor,
because ``mapInArrow`` accepts only the exact Arrow type Spark derives from its own type):

==============================  ==========================  ==================================
Arrow (Lance)                   Spark                       note
==============================  ==========================  ==================================
bool, int8/16/32/64             boolean, byte/short/int/long
uint8 / uint16 / uint32         short / int / long          widened, lossless
uint64                          decimal(20,0)               lossless; ``_rowid`` / ``_rowaddr``
                                                            are the exception, see below
float16 / float32 / float64     float / float / double
decimal128(p,s), decimal256     decimal(p,s)                decimal256 only when p <= 38
string, large_string            string
binary, large_binary,           binary
fixed_size_binary
date32, date64                  date                        date64 keeps the day
timestamp(unit, tz)             timestamp                   microseconds (ns truncated)
timestamp(unit)                 timestamp_ntz               microseconds (ns truncated)
time32 / time64                 time                        nanoseconds
duration(unit)                  interval day to second      microseconds (ns truncated)
list, large_list,               array                       element nullability kept
fixed_size_list
struct                          struct
map                             map
dictionary<_, T>                T's Spark type              decoded
extension types                 their storage type
null                            void
==============================  ==========================  ==================================

``_rowid`` and ``_rowaddr`` are ``uint64`` in Lance but become Spark ``long`` with the same 64
bits (``uint64 -> int64`` reinterpretation): they are keys to join and sort on, and in every
real dataset they stay below ``2**63`` (row ids count rows; an address is ``fragment id << 32 |
offset`` with fragment ids far below ``2**31``). Anything Spark cannot hold (unions, month-day-
nano intervals, decimal256 beyond 38 digits, ...) raises ``UnsupportedError`` naming the column.

Spark -> Arrow for values computed by Spark that are then stored in Lance (``lance_arrow_type``):
Spark's own Arrow form with large types made regular, timestamps pinned to ``UTC`` (Spark
timestamps are instants) and list items named ``item`` as Lance and pylance name them.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lance_spark_ops.errors import UnsupportedError

ROW_KEY_COLUMNS = ("_rowid", "_rowaddr")

_INTS = {pa.int8(): "byte", pa.int16(): "short", pa.int32(): "integer", pa.int64(): "long"}
_WIDER = {pa.uint8(): pa.int16(), pa.uint16(): pa.int32(), pa.uint32(): pa.int64()}


def _spark_types() -> Any:
    from pyspark.sql import types as T

    return T


def spark_arrow_type(dt: pa.DataType, where: str) -> pa.DataType:
    """The Arrow type Spark accepts for a Lance column of type ``dt`` (see the module table)."""
    if isinstance(dt, pa.ExtensionType):
        return spark_arrow_type(dt.storage_type, where)
    if pa.types.is_dictionary(dt):
        return spark_arrow_type(dt.value_type, where)
    if pa.types.is_null(dt) or pa.types.is_boolean(dt) or dt in _INTS:
        return dt
    if dt in _WIDER:
        return _WIDER[dt]
    if pa.types.is_uint64(dt):
        return pa.decimal128(20, 0)
    if pa.types.is_float16(dt) or pa.types.is_float32(dt):
        return pa.float32()
    if pa.types.is_float64(dt):
        return dt
    if pa.types.is_decimal(dt):
        if dt.precision > 38:
            raise UnsupportedError(f"{where}: {dt} has more than the 38 digits a Spark decimal holds")
        return pa.decimal128(dt.precision, dt.scale)
    if pa.types.is_string(dt) or pa.types.is_large_string(dt) or pa.types.is_string_view(dt):
        return pa.string()
    if (pa.types.is_binary(dt) or pa.types.is_large_binary(dt) or pa.types.is_fixed_size_binary(dt)
            or pa.types.is_binary_view(dt)):
        return pa.binary()
    if pa.types.is_date(dt):
        return pa.date32()
    if pa.types.is_timestamp(dt):
        return pa.timestamp("us", dt.tz)
    if pa.types.is_time(dt):
        return pa.time64("ns")
    if pa.types.is_duration(dt):
        return pa.duration("us")
    if (pa.types.is_list(dt) or pa.types.is_large_list(dt) or pa.types.is_fixed_size_list(dt)
            or pa.types.is_list_view(dt) or pa.types.is_large_list_view(dt)):
        item = dt.value_field
        return pa.list_(pa.field("element", spark_arrow_type(item.type, f"{where}[]"), item.nullable))
    if pa.types.is_map(dt):
        key = spark_arrow_type(dt.key_type, f"{where}.key")
        value = pa.field("value", spark_arrow_type(dt.item_type, f"{where}.value"), dt.item_field.nullable)
        return pa.map_(key, value)
    if pa.types.is_struct(dt):
        return pa.struct([pa.field(f.name, spark_arrow_type(f.type, f"{where}.{f.name}"), f.nullable)
                          for f in dt])
    raise UnsupportedError(f"{where}: Arrow type {dt} has no Spark equivalent")


def _spark_type(dt: pa.DataType) -> Any:
    """Spark type of an Arrow type already in Spark's Arrow form."""
    T = _spark_types()
    if pa.types.is_null(dt):
        return T.NullType()
    if pa.types.is_boolean(dt):
        return T.BooleanType()
    if dt in _INTS:
        kinds = {"byte": T.ByteType, "short": T.ShortType, "integer": T.IntegerType, "long": T.LongType}
        return kinds[_INTS[dt]]()
    if pa.types.is_float32(dt):
        return T.FloatType()
    if pa.types.is_float64(dt):
        return T.DoubleType()
    if pa.types.is_decimal(dt):
        return T.DecimalType(dt.precision, dt.scale)
    if pa.types.is_string(dt):
        return T.StringType()
    if pa.types.is_binary(dt):
        return T.BinaryType()
    if pa.types.is_date32(dt):
        return T.DateType()
    if pa.types.is_timestamp(dt):
        return T.TimestampType() if dt.tz else T.TimestampNTZType()
    if pa.types.is_time64(dt):
        return T.TimeType(6)
    if pa.types.is_duration(dt):
        return T.DayTimeIntervalType(0, 3)
    if pa.types.is_list(dt):
        return T.ArrayType(_spark_type(dt.value_type), dt.value_field.nullable)
    if pa.types.is_map(dt):
        return T.MapType(_spark_type(dt.key_type), _spark_type(dt.item_type), dt.item_field.nullable)
    if pa.types.is_struct(dt):
        return T.StructType([T.StructField(f.name, _spark_type(f.type), f.nullable) for f in dt])
    raise UnsupportedError(f"internal: {dt} is not in Spark's Arrow form")  # pragma: no cover


def spark_target_schema(schema: pa.Schema) -> pa.Schema:
    """The Arrow schema batches are converted to before they are handed to Spark."""
    fields = []
    for f in schema:
        if f.name in ROW_KEY_COLUMNS and pa.types.is_uint64(f.type):
            fields.append(pa.field(f.name, pa.int64(), f.nullable))
        else:
            fields.append(pa.field(f.name, spark_arrow_type(f.type, f"column {f.name!r}"), f.nullable))
    return pa.schema(fields)


def spark_schema(schema: pa.Schema) -> Any:
    """Spark ``StructType`` for a Lance scan's Arrow schema (see the module table)."""
    T = _spark_types()
    target = spark_target_schema(schema)
    return T.StructType([T.StructField(f.name, _spark_type(f.type), f.nullable) for f in target])


def _convert(arr: pa.Array, target: pa.DataType) -> pa.Array:
    dt = arr.type
    if dt == target:
        return arr
    if isinstance(dt, pa.ExtensionType):
        return _convert(arr.storage, target)
    if pa.types.is_dictionary(dt):
        return _convert(arr.dictionary_decode(), target)
    if pa.types.is_struct(dt):
        children = [_convert(arr.field(i), target.field(i).type) for i in range(dt.num_fields)]
        mask = pc.invert(arr.is_valid()) if arr.null_count else None
        return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)
    if pa.types.is_fixed_size_list(dt) or pa.types.is_large_list(dt) or pa.types.is_list(dt):
        if pa.types.is_fixed_size_list(dt):
            arr = arr.cast(pa.list_(dt.value_field))
        elif pa.types.is_large_list(dt):
            arr = arr.cast(pa.list_(dt.value_field))
        values = _convert(arr.values, target.value_type)
        mask = pc.invert(arr.is_valid()) if arr.null_count else None
        return pa.ListArray.from_arrays(arr.offsets, values, type=target, mask=mask)
    if pa.types.is_map(dt):
        keys = _convert(arr.keys, target.key_type)
        items = _convert(arr.items, target.item_type)
        mask = pc.invert(arr.is_valid()) if arr.null_count else None
        return pa.MapArray.from_arrays(arr.offsets, keys, items, type=target, mask=mask)
    if pa.types.is_fixed_size_binary(dt):
        return arr.cast(pa.binary())
    lossy = pa.types.is_timestamp(dt) or pa.types.is_duration(dt)
    return arr.cast(target, safe=not lossy)


def to_spark_batch(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """Convert a scan batch to ``target`` (from ``spark_target_schema``) for ``mapInArrow``."""
    arrays = []
    for i, f in enumerate(target):
        col = batch.column(i)
        if f.name in ROW_KEY_COLUMNS and pa.types.is_uint64(col.type):
            arrays.append(col.view(pa.int64()))
        else:
            arrays.append(_convert(col, f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=target)


# -- Spark -> Lance --------------------------------------------------------------------------
def lance_arrow_type(dt: pa.DataType) -> pa.DataType:
    """Normalise an Arrow type produced by Spark into the type stored in Lance."""
    if pa.types.is_large_string(dt) or pa.types.is_string_view(dt):
        return pa.string()
    if pa.types.is_large_binary(dt) or pa.types.is_binary_view(dt):
        return pa.binary()
    if pa.types.is_timestamp(dt):
        return pa.timestamp(dt.unit, "UTC" if dt.tz else None)
    if pa.types.is_list(dt) or pa.types.is_large_list(dt):
        item = dt.value_field
        return pa.list_(pa.field("item", lance_arrow_type(item.type), item.nullable))
    if pa.types.is_map(dt):
        return pa.map_(lance_arrow_type(dt.key_type),
                       pa.field("value", lance_arrow_type(dt.item_type), dt.item_field.nullable))
    if pa.types.is_struct(dt):
        return pa.struct([pa.field(f.name, lance_arrow_type(f.type), f.nullable) for f in dt])
    return dt


def lance_schema_of_spark(struct: Any) -> pa.Schema:
    """Arrow schema (every column nullable) to store Spark columns of ``struct`` in Lance."""
    from pyspark.sql.pandas.types import to_arrow_type

    fields = []
    for f in struct.fields:
        try:
            at = to_arrow_type(f.dataType, timezone="UTC")
        except Exception as e:  # pyspark raises its own error classes
            raise UnsupportedError(f"column {f.name!r}: Spark type {f.dataType.simpleString()} cannot be "
                                   f"stored in Lance ({e})") from e
        fields.append(pa.field(f.name, lance_arrow_type(at), True))
    return pa.schema(fields)

