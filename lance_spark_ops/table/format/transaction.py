"""Typed views of the ``Transaction`` protobuf (``transaction.proto``).

A transaction records what one commit did; it is stored as a raw protobuf both in
``_transactions/{read_version}-{uuid}.txn`` and inline in the manifest file (pylance 14 writes
the same bytes to both). Readers use it for conflict checks and to rebuild a manifest on retry.

Each operation is a small dataclass with fragments as ``DataFragment`` and schemas as
``LanceSchema``; parts this library does not interpret (index metadata, config-update maps,
clone / base-path details) stay protobuf messages, and fields newer than our protos are kept as
raw bytes (``unknown_fields``), so that ``to_bytes(from_bytes(x)) == x``. An
operation this library does not know is kept as ``UnknownOperation`` (the commit protocol
treats it as a conflict).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import DecodeError

from lance_spark_ops._pb import transaction_pb2
from lance_spark_ops.errors import CorruptFileError, SchemaError
from lance_spark_ops.file.schema import LanceSchema, schema_from_pb, schema_to_pb
from lance_spark_ops.table.format._unknown import restore_unknown, unknown_of
from lance_spark_ops.table.format.fragment import DataFile, DataFragment, source_bytes_of
from lance_spark_ops.table.format.fragment_columns import encode_varint
from lance_spark_ops.table.format.fragment_run import RunFragments

PbTransaction = transaction_pb2.Transaction


def _frags(pbs: Any) -> list[DataFragment]:
    return [DataFragment.from_pb(f) for f in pbs]


def _frags_pb(frags: list[DataFragment]) -> list[Any]:
    return [f.to_pb() for f in frags]


def _frags_wire(field_number: int, frags: list[DataFragment]) -> bytes:
    """A ``repeated DataFragment`` field as wire bytes: a fragment still undecoded from the
    manifest as its kept bytes, others serialized. Merged into the message it is parsed once in
    C - not a protobuf message built per fragment (a Rewrite of 100 000 fragments)."""
    if isinstance(frags, RunFragments):
        return frags.run.wire(field_number)  # the manifest's own bytes, tags changed
    tag = encode_varint((field_number << 3) | 2)
    parts: list[bytes] = []
    add = parts.append
    prefixes: dict[int, bytes] = {}  # tag and length, by length: many fragments share a length
    for f, body in zip(frags, source_bytes_of(frags), strict=True):
        if body is None:
            body = f.to_pb().SerializeToString()
        n = len(body)
        prefix = prefixes.get(n)
        if prefix is None:
            prefix = prefixes[n] = tag + encode_varint(n)
        add(prefix)
        add(body)
    return b"".join(parts)


def _schema(fields: Any, metadata: Any) -> LanceSchema | None:
    if not len(fields):
        return None
    return schema_from_pb(list(fields), dict(metadata))


def _schema_into(msg: Any, schema: LanceSchema | None, with_metadata: bool = True) -> None:
    if schema is None:
        return
    msg.schema.extend(schema_to_pb(schema))
    if with_metadata:
        for k, v in schema.metadata.items():
            msg.schema_metadata[k.decode()] = v


@dataclass
class _Op:
    """Base of the operations: keeps the operation message's unknown fields."""

    unknown_fields: bytes = field(default=b"", repr=False, compare=False, kw_only=True)


@dataclass
class Append(_Op):
    fragments: list[DataFragment]


@dataclass
class Delete(_Op):
    updated_fragments: list[DataFragment]
    deleted_fragment_ids: list[int]
    predicate: str = ""


@dataclass
class Overwrite(_Op):
    fragments: list[DataFragment]
    schema: LanceSchema | None
    config_upsert_values: dict[str, str] = field(default_factory=dict)
    initial_bases: list[Any] = field(default_factory=list)  # table_pb2.BasePath


@dataclass
class CreateIndex(_Op):
    new_indices: list[Any]  # table_pb2.IndexMetadata
    removed_indices: list[Any]


@dataclass
class RewriteGroup:
    old_fragments: list[DataFragment]
    new_fragments: list[DataFragment]


@dataclass
class Rewrite(_Op):
    """Compaction: each group replaces ``old_fragments`` by ``new_fragments``.

    Old writers put one group's worth in the top-level ``old_fragments`` / ``new_fragments``;
    those are kept in ``legacy_group``.
    """

    groups: list[RewriteGroup]
    rewritten_indices: list[Any] = field(default_factory=list)  # Transaction.Rewrite.RewrittenIndex
    legacy_group: RewriteGroup | None = None
    # Not serialized (pylance 14 records neither in the transaction): the fragment reuse index
    # entry this commit installs (replacing the one whose uuid is ``frag_reuse_replaces``, None
    # = there was none), and uuids of indices that stop covering the rewritten fragments.
    frag_reuse_index: Any = field(default=None, compare=False)  # table_pb2.IndexMetadata
    frag_reuse_replaces: bytes | None = field(default=None, compare=False)
    uncovered_indices: list[bytes] = field(default_factory=list, compare=False)
    # old uuid -> serialized fragment bitmap a rewritten index covered before this rewrite (as
    # pylance sees it through the fragment reuse index); default: its stored bitmap
    rewritten_bitmaps: dict[bytes, bytes] = field(default_factory=dict, compare=False)

    def all_groups(self) -> list[RewriteGroup]:
        return ([self.legacy_group] if self.legacy_group else []) + self.groups


@dataclass
class Merge(_Op):
    fragments: list[DataFragment]
    schema: LanceSchema | None


@dataclass
class Project(_Op):
    schema: LanceSchema | None


@dataclass
class Restore(_Op):
    version: int


@dataclass
class ReserveFragments(_Op):
    num_fragments: int


@dataclass
class Update(_Op):
    removed_fragment_ids: list[int]
    updated_fragments: list[DataFragment]
    new_fragments: list[DataFragment]
    fields_modified: list[int] = field(default_factory=list)
    fields_for_preserving_frag_bitmap: list[int] = field(default_factory=list)
    update_mode: int = 0  # Transaction.UpdateMode: REWRITE_ROWS = 0, REWRITE_COLUMNS = 1


@dataclass
class DataReplacementGroup:
    fragment_id: int
    new_file: DataFile


@dataclass
class DataReplacement(_Op):
    replacements: list[DataReplacementGroup]


@dataclass
class UpdateConfig(_Op):
    pb: Any  # Transaction.UpdateConfig, kept as is


@dataclass
class Clone(_Op):
    pb: Any  # Transaction.Clone


@dataclass
class UpdateBases(_Op):
    pb: Any  # Transaction.UpdateBases


@dataclass
class UnknownOperation:
    """An operation missing from our protos (or none at all); ``raw`` is the whole message."""

    raw: bytes


Operation = (Append | Delete | Overwrite | CreateIndex | Rewrite | Merge | Project | Restore
             | ReserveFragments | Update | DataReplacement | UpdateConfig | Clone | UpdateBases
             | UnknownOperation)


_KIND = {Append: "append", Delete: "delete", Overwrite: "overwrite", CreateIndex: "create_index",
         Rewrite: "rewrite", Merge: "merge", Project: "project", Restore: "restore",
         ReserveFragments: "reserve_fragments", Update: "update", DataReplacement: "data_replacement",
         UpdateConfig: "update_config", Clone: "clone", UpdateBases: "update_bases"}


def _op_from_pb(pb: PbTransaction) -> Operation:
    op = _typed_op(pb)
    if isinstance(op, _Op):
        op.unknown_fields = unknown_of(getattr(pb, _KIND[type(op)]))
    return op


def _typed_op(pb: PbTransaction) -> Operation:
    kind = pb.WhichOneof("operation")
    op = getattr(pb, kind) if kind else None
    if kind == "append":
        return Append(_frags(op.fragments))
    if kind == "delete":
        return Delete(_frags(op.updated_fragments), list(op.deleted_fragment_ids), op.predicate)
    if kind == "overwrite":
        return Overwrite(_frags(op.fragments), _schema(op.schema, op.schema_metadata),
                         dict(op.config_upsert_values), list(op.initial_bases))
    if kind == "create_index":
        return CreateIndex(list(op.new_indices), list(op.removed_indices))
    if kind == "rewrite":
        legacy = (RewriteGroup(_frags(op.old_fragments), _frags(op.new_fragments))
                  if len(op.old_fragments) or len(op.new_fragments) else None)
        groups = [RewriteGroup(_frags(g.old_fragments), _frags(g.new_fragments)) for g in op.groups]
        return Rewrite(groups, list(op.rewritten_indices), legacy)
    if kind == "merge":
        return Merge(_frags(op.fragments), _schema(op.schema, op.schema_metadata))
    if kind == "project":
        return Project(_schema(op.schema, {}))
    if kind == "restore":
        return Restore(op.version)
    if kind == "reserve_fragments":
        return ReserveFragments(op.num_fragments)
    if kind == "update":
        return Update(list(op.removed_fragment_ids), _frags(op.updated_fragments), _frags(op.new_fragments),
                      list(op.fields_modified), list(op.fields_for_preserving_frag_bitmap), op.update_mode)
    if kind == "data_replacement":
        return DataReplacement([DataReplacementGroup(g.fragment_id, DataFile.from_pb(g.new_file))
                                for g in op.replacements])
    if kind == "update_config":
        return UpdateConfig(op)
    if kind == "clone":
        return Clone(op)
    if kind == "update_bases":
        return UpdateBases(op)
    return UnknownOperation(pb.SerializeToString())


def _op_into(pb: PbTransaction, op: Operation) -> None:
    if isinstance(op, Append):
        pb.append.fragments.extend(_frags_pb(op.fragments))
        pb.append.SetInParent()
    elif isinstance(op, Delete):
        pb.delete.SetInParent()
        pb.delete.updated_fragments.extend(_frags_pb(op.updated_fragments))
        pb.delete.deleted_fragment_ids.extend(op.deleted_fragment_ids)
        pb.delete.predicate = op.predicate
    elif isinstance(op, Overwrite):
        pb.overwrite.SetInParent()
        pb.overwrite.fragments.extend(_frags_pb(op.fragments))
        _schema_into(pb.overwrite, op.schema)
        pb.overwrite.config_upsert_values.update(op.config_upsert_values)
        pb.overwrite.initial_bases.extend(op.initial_bases)
    elif isinstance(op, CreateIndex):
        pb.create_index.SetInParent()
        pb.create_index.new_indices.extend(op.new_indices)
        pb.create_index.removed_indices.extend(op.removed_indices)
    elif isinstance(op, Rewrite):
        pb.rewrite.SetInParent()
        if op.legacy_group is not None:
            pb.rewrite.old_fragments.extend(_frags_pb(op.legacy_group.old_fragments))
            pb.rewrite.new_fragments.extend(_frags_pb(op.legacy_group.new_fragments))
        for g in op.groups:
            wire = _frags_wire(1, g.old_fragments) + _frags_wire(2, g.new_fragments)
            pb.rewrite.groups.add().MergeFromString(wire)
        pb.rewrite.rewritten_indices.extend(op.rewritten_indices)
    elif isinstance(op, Merge):
        pb.merge.SetInParent()
        pb.merge.fragments.extend(_frags_pb(op.fragments))
        _schema_into(pb.merge, op.schema)
    elif isinstance(op, Project):
        pb.project.SetInParent()
        _schema_into(pb.project, op.schema, with_metadata=False)
    elif isinstance(op, Restore):
        pb.restore.version = op.version
        pb.restore.SetInParent()
    elif isinstance(op, ReserveFragments):
        pb.reserve_fragments.num_fragments = op.num_fragments
        pb.reserve_fragments.SetInParent()
    elif isinstance(op, Update):
        u = pb.update
        u.SetInParent()
        u.removed_fragment_ids.extend(op.removed_fragment_ids)
        u.updated_fragments.extend(_frags_pb(op.updated_fragments))
        u.new_fragments.extend(_frags_pb(op.new_fragments))
        u.fields_modified.extend(op.fields_modified)
        u.fields_for_preserving_frag_bitmap.extend(op.fields_for_preserving_frag_bitmap)
        u.update_mode = op.update_mode
    elif isinstance(op, DataReplacement):
        pb.data_replacement.SetInParent()
        for g in op.replacements:
            pb.data_replacement.replacements.add(fragment_id=g.fragment_id, new_file=g.new_file.to_pb())
    elif isinstance(op, UpdateConfig):
        pb.update_config.CopyFrom(op.pb)
    elif isinstance(op, Clone):
        pb.clone.CopyFrom(op.pb)
    elif isinstance(op, UpdateBases):
        pb.update_bases.CopyFrom(op.pb)
    else:
        raise TypeError(f"cannot serialize operation {op!r}")
    restore_unknown(getattr(pb, _KIND[type(op)]), op.unknown_fields)


@dataclass
class Transaction:
    """One commit's intent: the version it read, a uuid, and the operation."""

    read_version: int
    uuid: str
    operation: Operation
    tag: str = ""
    transaction_properties: dict[str, str] = field(default_factory=dict)
    unknown_fields: bytes = field(default=b"", repr=False, compare=False)

    @property
    def file_name(self) -> str:
        """Name under ``_transactions/``."""
        return f"{self.read_version}-{self.uuid}.txn"

    @property
    def operation_name(self) -> str:
        return type(self.operation).__name__

    @classmethod
    def from_pb(cls, pb: PbTransaction) -> Transaction:
        return cls(pb.read_version, pb.uuid, _op_from_pb(pb), pb.tag, dict(pb.transaction_properties),
                   unknown_of(pb))

    def to_pb(self) -> PbTransaction:
        if isinstance(self.operation, UnknownOperation):
            return PbTransaction.FromString(self.operation.raw)
        pb = PbTransaction(read_version=self.read_version, uuid=self.uuid, tag=self.tag)
        pb.transaction_properties.update(self.transaction_properties)
        _op_into(pb, self.operation)
        return restore_unknown(pb, self.unknown_fields)

    @classmethod
    def from_bytes(cls, data: bytes, path: str | None = None) -> Transaction:
        pb = PbTransaction()
        try:
            pb.ParseFromString(bytes(data))
            return cls.from_pb(pb)
        except DecodeError as e:
            raise CorruptFileError(f"transaction does not parse: {e}", path=path) from e
        except (CorruptFileError, SchemaError) as e:
            raise CorruptFileError(f"transaction: {e}", path=path) from e

    def to_bytes(self) -> bytes:
        if isinstance(self.operation, Rewrite):
            return self._rewrite_bytes(self.operation)
        return self.to_pb().SerializeToString()

    def _rewrite_bytes(self, op: Rewrite) -> bytes:
        """``to_pb().SerializeToString()`` of a Rewrite with its groups' fragments spliced in as
        wire bytes (``_frags_wire``), never parsed into messages: the same bytes (fields in number
        order, unknown fields last, as the protobuf encoder writes them)."""
        head = PbTransaction(read_version=self.read_version, uuid=self.uuid, tag=self.tag)
        head.transaction_properties.update(self.transaction_properties)
        legacy = PbTransaction.Rewrite()
        if op.legacy_group is not None:
            legacy.old_fragments.extend(_frags_pb(op.legacy_group.old_fragments))
            legacy.new_fragments.extend(_frags_pb(op.legacy_group.new_fragments))
        parts = [legacy.SerializeToString()]
        group_tag = encode_varint((3 << 3) | 2)  # Rewrite.groups
        for g in op.groups:
            wire = _frags_wire(1, g.old_fragments) + _frags_wire(2, g.new_fragments)
            parts += (group_tag, encode_varint(len(wire)), wire)
        parts += (PbTransaction.Rewrite(rewritten_indices=op.rewritten_indices).SerializeToString(),
                  op.unknown_fields)
        body = b"".join(parts)
        rewrite_tag = encode_varint((PbTransaction.REWRITE_FIELD_NUMBER << 3) | 2)
        return b"".join((head.SerializeToString(), rewrite_tag, encode_varint(len(body)), body,
                         self.unknown_fields))
