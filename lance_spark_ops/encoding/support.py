"""What each file version can hold; the writer refuses the rest up front, as pylance does.

| data                                   | 2.0     | 2.1     | 2.2 |
| -------------------------------------- | ------- | ------- | --- |
| struct with null rows                  | refused | yes     | yes |
| map                                    | refused | refused | yes |
| packed struct with a variable child    | refused | refused | yes |

Whether Lance can store an Arrow type at all is the schema's question (``file.schema``);
the writer passes that check in as ``type_check`` so this layer never imports ``file/``.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from lance_spark_ops.encoding.leaves import is_packed_struct
from lance_spark_ops.encoding.v2_0.encoder import check_field_2_0
from lance_spark_ops.errors import SchemaError


def _is_fixed_width(dt: pa.DataType) -> bool:
    if pa.types.is_fixed_size_list(dt):
        return _is_fixed_width(dt.value_type)
    if pa.types.is_struct(dt):
        return all(_is_fixed_width(dt.field(i).type) for i in range(dt.num_fields))
    try:
        return dt.bit_width > 0
    except ValueError:
        return False


def check_field_supported(field: pa.Field, version: str, path: str = "",
                          type_check: Callable[[pa.DataType], object] | None = None) -> None:
    """Raise SchemaError when ``field`` cannot be written in file ``version``.

    ``type_check`` (the writer passes ``file.schema.arrow_to_logical_type``) raises
    SchemaError for a type Lance cannot store at all; it runs on every nested field."""
    name = f"{path}.{field.name}" if path else field.name
    dt = field.type
    if version == "2.0" and not path:
        check_field_2_0(field)
    if type_check is not None:
        type_check(dt)
    if pa.types.is_map(dt) and version in ("2.0", "2.1"):
        raise SchemaError(f"field {name!r}: map types need file version 2.2 (asked for {version})")
    if is_packed_struct(field) and not _is_fixed_width(dt) and version in ("2.0", "2.1"):
        raise SchemaError(f"field {name!r}: a packed struct with variable-width children needs file "
                          f"version 2.2 (asked for {version})")
    children: list[pa.Field] = []
    if pa.types.is_struct(dt):
        children = [dt.field(i) for i in range(dt.num_fields)]
    elif pa.types.is_list(dt) or pa.types.is_large_list(dt) or pa.types.is_fixed_size_list(dt):
        children = [dt.value_field]
    elif pa.types.is_map(dt):
        children = [dt.key_field, dt.item_field]
    for child in children:
        check_field_supported(child, version, name, type_check)


def check_array_supported(field: pa.Field, array: pa.Array, version: str) -> None:
    """Data-dependent refusals: 2.0 cannot store struct validity."""
    if version != "2.0":
        return
    _check_struct_nulls_2_0(field.name, array)


def _check_struct_nulls_2_0(name: str, array: pa.Array) -> None:
    dt = array.type
    if pa.types.is_struct(dt):
        if array.null_count:
            raise SchemaError(f"struct field {name!r} contains {array.null_count} null value(s), but file "
                              "version 2.0 does not encode struct validity; use 2.1 or later")
        for i in range(dt.num_fields):
            _check_struct_nulls_2_0(f"{name}.{dt.field(i).name}", array.field(i))
    elif pa.types.is_list(dt) or pa.types.is_large_list(dt) or pa.types.is_fixed_size_list(dt):
        _check_struct_nulls_2_0(name, array.flatten())
