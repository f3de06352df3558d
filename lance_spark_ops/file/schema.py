"""Lance schema <-> Arrow schema (spec "Fields"; no I/O here).

Lance flattens the schema tree depth-first into ``Field`` messages that point at their
parent by ``parent_id`` (-1 for top-level fields). The Arrow type of a field comes from its
``logical_type`` string: primitives by name (``int32``, ``halffloat``, ``date32:day``),
parameterised types with colons (``timestamp:us:UTC``, ``decimal:128:20:2``,
``fixed_size_list:float:128``, ``dict:string:int32:false``), and nested types from the
children (``struct``, ``list``, ``large_list``, ``list.struct``, ``map``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from lance_spark_ops._pb import file_pb2
from lance_spark_ops.errors import SchemaError

_PRIMITIVES: dict[str, pa.DataType] = {
    "null": pa.null(),
    "bool": pa.bool_(),
    "int8": pa.int8(),
    "uint8": pa.uint8(),
    "int16": pa.int16(),
    "uint16": pa.uint16(),
    "int32": pa.int32(),
    "uint32": pa.uint32(),
    "int64": pa.int64(),
    "uint64": pa.uint64(),
    "halffloat": pa.float16(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "large_string": pa.large_string(),
    "large_binary": pa.large_binary(),
    "json": pa.large_binary(),
    "date32:day": pa.date32(),
    "date64:ms": pa.date64(),
    "time32:s": pa.time32("s"),
    "time32:ms": pa.time32("ms"),
    "time64:us": pa.time64("us"),
    "time64:ns": pa.time64("ns"),
    "duration:s": pa.duration("s"),
    "duration:ms": pa.duration("ms"),
    "duration:us": pa.duration("us"),
    "duration:ns": pa.duration("ns"),
}
_NAMES: dict[pa.DataType, str] = {v: k for k, v in _PRIMITIVES.items() if k != "json"}
_UNITS = ("s", "ms", "us", "ns")
EXTENSION_NAME_KEY = "ARROW:extension:name"


def logical_type_to_arrow(lt: str, where: str = "") -> pa.DataType:
    """Arrow type of a non-nested logical type string."""
    if lt in _PRIMITIVES:
        return _PRIMITIVES[lt]
    parts = lt.split(":")
    try:
        head = parts[0]
        if head == "timestamp" and len(parts) >= 3 and parts[1] in _UNITS:
            tz = ":".join(parts[2:])
            return pa.timestamp(parts[1], None if tz == "-" else tz)
        if head == "decimal" and len(parts) == 4:
            bits, precision, scale = int(parts[1]), int(parts[2]), int(parts[3])
            if bits == 128:
                return pa.decimal128(precision, scale)
            if bits == 256:
                return pa.decimal256(precision, scale)
        if head == "fixed_size_binary" and len(parts) == 2:
            return pa.binary(int(parts[1]))
        if head == "fixed_size_list" and len(parts) >= 3:
            inner = ":".join(parts[1:-1])
            size = int(parts[-1])
            if inner == "lance.bfloat16":
                item = pa.field("item", pa.binary(2), True, {EXTENSION_NAME_KEY: "lance.bfloat16"})
                return pa.list_(item, size)
            return pa.list_(pa.field("item", logical_type_to_arrow(inner, where), True), size)
        if head == "dict" and len(parts) == 4:
            return pa.dictionary(
                logical_type_to_arrow(parts[2], where), logical_type_to_arrow(parts[1], where)
            )
    except (ValueError, TypeError) as e:
        raise SchemaError(f"{where}bad logical type {lt!r}: {e}") from e
    raise SchemaError(f"{where}unsupported logical type {lt!r}")


def arrow_to_logical_type(dt: pa.DataType) -> str:
    """Logical type string Lance stores for an Arrow type."""
    if dt in _NAMES:
        return _NAMES[dt]
    if pa.types.is_timestamp(dt):
        return f"timestamp:{dt.unit}:{dt.tz or '-'}"
    if pa.types.is_decimal128(dt):
        return f"decimal:128:{dt.precision}:{dt.scale}"
    if pa.types.is_decimal256(dt):
        return f"decimal:256:{dt.precision}:{dt.scale}"
    if pa.types.is_fixed_size_binary(dt):
        return f"fixed_size_binary:{dt.byte_width}"
    if pa.types.is_fixed_size_list(dt):
        vf = dt.value_field
        if (vf.metadata or {}).get(EXTENSION_NAME_KEY.encode()) == b"lance.bfloat16":
            return f"fixed_size_list:lance.bfloat16:{dt.list_size}"
        return f"fixed_size_list:{arrow_to_logical_type(dt.value_type)}:{dt.list_size}"
    if pa.types.is_dictionary(dt):
        return f"dict:{arrow_to_logical_type(dt.value_type)}:{arrow_to_logical_type(dt.index_type)}:false"
    if pa.types.is_map(dt):
        return "map"
    if pa.types.is_struct(dt):
        return "struct"
    if pa.types.is_large_list(dt):
        return "large_list.struct" if pa.types.is_struct(dt.value_type) else "large_list"
    if pa.types.is_list(dt):
        return "list.struct" if pa.types.is_struct(dt.value_type) else "list"
    raise SchemaError(f"Arrow type {dt} cannot be stored in Lance")


@dataclass
class LanceField:
    """One node of the Lance schema tree with its Arrow field."""

    id: int
    name: str
    logical_type: str
    nullable: bool
    metadata: dict[bytes, bytes]
    children: list[LanceField] = field(default_factory=list)
    encoding: int = 0
    extension_name: str = ""
    unenforced_primary_key: bool = False
    # legacy (0.1) dictionary fields: the values, stored in the manifest file / data file
    dictionary: pa.Array | None = field(default=None, compare=False, repr=False)

    def arrow_type(self) -> pa.DataType:
        lt = self.logical_type
        where = f"field {self.name!r} (id {self.id}): "
        if lt == "struct":
            return pa.struct([c.to_arrow() for c in self.children])
        if lt in ("list", "list.struct", "large_list", "large_list.struct"):
            if len(self.children) != 1:
                raise SchemaError(f"{where}{lt} needs exactly one child, has {len(self.children)}")
            item = self.children[0].to_arrow()
            return pa.large_list(item) if lt.startswith("large") else pa.list_(item)
        if lt == "map":
            if len(self.children) != 1 or len(self.children[0].children) != 2:
                raise SchemaError(f"{where}map needs one entries struct with key and value")
            key, value = (c.to_arrow() for c in self.children[0].children)
            return pa.map_(key, value)
        return logical_type_to_arrow(lt, where)

    def to_arrow(self) -> pa.Field:
        meta = dict(self.metadata)
        if self.extension_name:
            meta[EXTENSION_NAME_KEY.encode()] = self.extension_name.encode()
        return pa.field(self.name, self.arrow_type(), self.nullable, meta or None)

    def walk(self) -> Iterable[LanceField]:
        """This field then its descendants, depth first (Lance field order)."""
        yield self
        for c in self.children:
            yield from c.walk()


@dataclass
class LanceSchema:
    fields: list[LanceField]
    metadata: dict[bytes, bytes]

    def to_arrow(self) -> pa.Schema:
        return pa.schema([f.to_arrow() for f in self.fields], metadata=self.metadata or None)

    def walk(self) -> Iterable[LanceField]:
        for f in self.fields:
            yield from f.walk()

    def field_by_id(self, field_id: int) -> LanceField:
        for f in self.walk():
            if f.id == field_id:
                return f
        raise SchemaError(f"no field with id {field_id}")


def schema_from_pb(
    pb_fields: Sequence[file_pb2.Field], metadata: dict[str, bytes] | None = None
) -> LanceSchema:
    """Rebuild the tree from the flattened, depth-first field list."""
    nodes: dict[int, LanceField] = {}
    roots: list[LanceField] = []
    blob_v2: LanceField | None = None  # a blob v2 descriptor struct whose children follow
    for f in pb_fields:
        node = LanceField(
            id=f.id,
            name=f.name,
            logical_type=f.logical_type,
            nullable=f.nullable,
            metadata={k.encode(): bytes(v) for k, v in f.metadata.items()},
            encoding=f.encoding,
            extension_name=f.extension_name,
            unenforced_primary_key=f.unenforced_primary_key,
        )
        if f.id == -1 and f.parent_id == -1 and blob_v2 is not None:
            # pylance 14 writes the children of a blob v2 descriptor struct in data files with
            # id -1 and parent -1, right after the struct; they belong to it
            blob_v2.children.append(node)
            continue
        blob_v2 = node if f.logical_type == "struct" and _is_blob(node) else None
        if f.id in nodes:
            raise SchemaError(f"duplicate field id {f.id} ({f.name!r})")
        nodes[f.id] = node
        if f.parent_id < 0:
            roots.append(node)
        elif f.parent_id in nodes:
            nodes[f.parent_id].children.append(node)
        else:
            raise SchemaError(f"field {f.name!r} (id {f.id}) names unknown parent id {f.parent_id}")
    meta = {k.encode(): bytes(v) for k, v in (metadata or {}).items()}
    schema = LanceSchema(roots, meta)
    schema.to_arrow()  # validate every logical type now, not at first read
    return schema


def _is_blob(node: LanceField) -> bool:
    return node.metadata.get(b"lance-encoding:blob", b"").lower() == b"true"


def schema_to_pb(schema: LanceSchema) -> list[file_pb2.Field]:
    """Flatten a schema tree to Lance's depth-first ``Field`` messages."""
    out: list[file_pb2.Field] = []

    def visit(node: LanceField, parent: int) -> None:
        pbf = file_pb2.Field(
            type=file_pb2.Field.PARENT,
            name=node.name,
            id=node.id,
            parent_id=parent,
            logical_type=node.logical_type,
            nullable=node.nullable,
            encoding=node.encoding,
            extension_name=node.extension_name,
            unenforced_primary_key=node.unenforced_primary_key,
        )
        for k, v in node.metadata.items():
            pbf.metadata[k.decode()] = v
        out.append(pbf)
        for c in node.children:
            # pylance 14 writes a blob v2 descriptor's children as id -1 / parent -1
            visit(c, -1 if c.id == -1 and _is_blob(node) else node.id)

    for f in schema.fields:
        visit(f, -1)
    return out


def schema_from_arrow(schema: pa.Schema, first_id: int = 0) -> LanceSchema:
    """Assign depth-first field ids starting at ``first_id`` (as Lance does for new data)."""
    counter = [first_id]

    def build(f: pa.Field) -> LanceField:
        node = LanceField(
            id=counter[0],
            name=f.name,
            logical_type=arrow_to_logical_type(f.type),
            nullable=f.nullable,
            metadata={k: v for k, v in (f.metadata or {}).items() if k != EXTENSION_NAME_KEY.encode()},
            encoding=_encoding_of(f.type),
            extension_name=(f.metadata or {}).get(EXTENSION_NAME_KEY.encode(), b"").decode(),
        )
        counter[0] += 1
        dt = f.type
        if pa.types.is_struct(dt):
            node.children = [build(dt.field(i)) for i in range(dt.num_fields)]
        elif pa.types.is_map(dt):
            entries = pa.field("entries", pa.struct([dt.key_field, dt.item_field]), False)
            node.children = [build(entries)]
        elif pa.types.is_list(dt) or pa.types.is_large_list(dt):
            node.children = [build(dt.value_field)]
        return node

    return LanceSchema([build(f) for f in schema], dict(schema.metadata or {}))


def _encoding_of(dt: pa.DataType) -> int:
    if pa.types.is_dictionary(dt):
        return file_pb2.DICTIONARY
    if pa.types.is_struct(dt) or pa.types.is_null(dt):
        return file_pb2.NONE
    if (
        pa.types.is_string(dt)
        or pa.types.is_binary(dt)
        or pa.types.is_large_string(dt)
        or pa.types.is_large_binary(dt)
    ):
        return file_pb2.VAR_BINARY
    return file_pb2.PLAIN
