"""Refuse what this library does not understand before any row is read.

A reader that meets a manifest field, fragment field or data file it does not fully understand
must fail with ``UnsupportedError`` rather than read around it: reading around it is how a
dataset ends up scanned as nulls (a legacy v1 data file lists no column indices, so its fields
seemed to be in no file) or without the values a newer feature layers over the base data
(pylance 14's data overlays live in ``DataFragment`` field 11).

``check_manifest`` runs when a version is opened: unknown protobuf fields in the manifest, its
fields, base paths, fragments, data files and deletion files, and an unknown data storage
format. ``check_data_file`` runs for every data file of a fragment before it is scanned.
"""

from __future__ import annotations

from google.protobuf import empty_pb2
from google.protobuf.unknown_fields import UnknownFieldSet

from lance_spark_ops.errors import UnsupportedError
from lance_spark_ops.table.format._unknown import unknown_of
from lance_spark_ops.table.format.fragment import DataFile

# Data storage versions whose files this library reads ("0.1" is the legacy v1 format).
READABLE_VERSIONS = ("0.1", "2.0", "2.1", "2.2")
# The v1 container records its version as 0.1 or 0.2 in DataFile; 2.0 as 0.3 or 2.0. Manifests
# written before DataFile had a version (pylance <= 0.10) leave it 0.0: a v1 file, as Lance reads it.
_READABLE_FILE_VERSIONS = {(0, 0), (0, 1), (0, 2), (0, 3), (2, 0), (2, 1), (2, 2)}
# ``Field.storage_class`` (string; reserved in Lance's file.proto since it was dropped): pylance
# 0.15-0.39 wrote "default" for every field; "blob" kept a column's values in a separate blob
# dataset (Manifest field 17) that pylance 14 no longer reads.
STORAGE_CLASS_FIELD = 11
_DEFAULT_STORAGE_CLASSES = ("", "default")


def unknown_field_numbers(data: bytes) -> list[int]:
    """Field numbers present in serialized unknown protobuf fields (sorted, unique)."""
    if not data:
        return []
    msg = empty_pb2.Empty()
    msg.MergeFromString(data)
    return sorted({f.field_number for f in UnknownFieldSet(msg)})


def _refuse_unknown(data: bytes, what: str, path: str | None) -> None:
    numbers = unknown_field_numbers(data)
    if numbers:
        hint = " (data overlays, pylance 14)" if what.startswith("fragment") and 11 in numbers else ""
        raise UnsupportedError(f"{what} has protobuf field(s) {numbers} this library does not know{hint}; "
                               "reading around them could return wrong rows", path=path)


def check_storage_class(field_pb: object, path: str | None) -> None:
    """UnsupportedError unless the schema field's old ``storage_class`` (an unknown field 11 of
    ``field_pb``, a ``file_pb2.Field``) is the default class, which changes nothing."""
    values = [f.data for f in UnknownFieldSet(field_pb) if f.field_number == STORAGE_CLASS_FIELD]
    for value in values:
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else repr(value)
        if not isinstance(value, bytes) or text not in _DEFAULT_STORAGE_CLASSES:
            name, fid = getattr(field_pb, "name", "?"), getattr(field_pb, "id", "?")
            raise UnsupportedError(f"schema field {name!r} (id {fid}) has storage class {text!r}: its values "
                                   "live in a separate blob dataset that this library (and pylance 14) "
                                   "does not read", path=path)


def check_manifest(manifest: object, path: str | None = None) -> None:
    """UnsupportedError for anything in ``manifest`` (a ``Manifest``) that we would read around."""
    _refuse_unknown(manifest.unknown_fields, "manifest", path)  # type: ignore[attr-defined]
    fmt = manifest.data_storage_format  # type: ignore[attr-defined]
    if fmt.file_format != "lance":
        raise UnsupportedError(f"data file format {fmt.file_format!r} is not supported (only 'lance')",
                               path=path)
    if fmt.version not in READABLE_VERSIONS:
        raise UnsupportedError(f"data storage version {fmt.version!r} is not supported (readable: "
                               f"{', '.join(READABLE_VERSIONS)})", path=path)
    for bp in manifest.base_paths:  # type: ignore[attr-defined]
        _refuse_unknown(unknown_of(bp), f"base path {bp.id}", path)
    if manifest.known_clean:  # type: ignore[attr-defined]
        return  # parsed from a file with no unknown field anywhere
    for frag in manifest.fragments:  # type: ignore[attr-defined]
        _refuse_unknown(frag.unknown_fields, f"fragment {frag.id}", path)
        for df in frag.files:
            _refuse_unknown(df.unknown_fields, f"fragment {frag.id} data file {df.path!r}", path)
        if frag.deletion_file is not None:
            _refuse_unknown(frag.deletion_file.unknown_fields, f"fragment {frag.id} deletion file", path)


def check_data_file(df: DataFile, where: str, *, legacy_ok: bool) -> None:
    """UnsupportedError for a data file whose version we cannot read (``legacy_ok``: v1 files
    are handled by the caller)."""
    key = (df.file_major_version, df.file_minor_version)
    if key not in _READABLE_FILE_VERSIONS:
        raise UnsupportedError(f"data file version {df.file_version} is not supported", path=where)
    if df.is_legacy and not legacy_ok:
        raise UnsupportedError(f"legacy (v1, file version {df.file_version}) data files are not supported "
                               "here", path=where)
