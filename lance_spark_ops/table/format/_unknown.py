"""Carry protobuf fields our protos do not know through a parse -> dataclass -> serialize trip.

pylance 14 already writes fields newer than our protos (``Transaction.Merge`` field 4,
``Transaction.Project`` field 2, both varint 1). A commit that copies fragments or a transaction
must not drop such fields silently, so each spec object keeps the unknown part of its message as
raw bytes (``unknown_fields``) and appends it again when serializing.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.unknown_fields import UnknownFieldSet


def unknown_of(msg: Any) -> bytes:
    """Serialized unknown fields of ``msg`` (b"" when there are none)."""
    if not len(UnknownFieldSet(msg)):
        return b""
    only = type(msg)()
    only.CopyFrom(msg)
    for fd in only.DESCRIPTOR.fields:
        only.ClearField(fd.name)
    return only.SerializeToString()


def restore_unknown(msg: Any, data: bytes) -> Any:
    """Append previously kept unknown fields to ``msg``; returns ``msg``."""
    if data:
        msg.MergeFromString(data)
    return msg
