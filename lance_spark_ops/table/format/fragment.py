"""Fragment spec objects: ``DataFragment``, ``DataFile``, ``DeletionFile``, ``ExternalFile``.

A fragment is a set of rows (``physical_rows`` of them, deleted ones included) whose columns
live in one or more data files under ``data/``. Each ``DataFile`` lists the dataset field ids
it stores (``fields``) and, per field, the column of the file that holds it
(``column_indices``; ``-1`` = the field has no column of its own, e.g. a struct in file
version 2.1+). A field id of ``-2`` is a tombstone: the column was dropped or replaced and must
be skipped. Fields stored in no data file read as nulls.

The optional deletion file names the deleted row offsets
(``_deletions/{fragment_id}-{read_version}-{id}.{arrow|bin}``). Under stable row ids the
fragment carries a serialized ``RowIdSequence`` (inline bytes or an ``ExternalFile`` slice
relative to the dataset root) and per-row created-at / last-updated-at version sequences.

Plain dataclasses with exact ``from_pb`` / ``to_pb`` so that commits can copy fragments from
one manifest to the next unchanged. No I/O here.

A manifest of 100 000 fragments must open and plan in well under a second, so a parsed
manifest holds *lazy* fragments (``DataFragment.lazy_bytes``, built only when first wanted:
planning reads ``FragmentColumns`` instead): just the id and two flags (deletion file, row
ids) are known up front; the first read or write of any other attribute parses and decodes
the fragment's kept bytes. A fragment nobody touched is written back as exactly those bytes,
so a commit that carries 99 998 fragments over unchanged never parses them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import IntEnum

import numpy as np
from google.protobuf.message import DecodeError

from lance_spark_ops._gc import gc_paused
from lance_spark_ops._pb import table_pb2
from lance_spark_ops.errors import CorruptFileError
from lance_spark_ops.table.format._unknown import restore_unknown, unknown_of
from lance_spark_ops.table.format.fragment_columns import FragmentColumns, IrregularWire
from lance_spark_ops.table.format.fragment_columns import data_file_paths as _paths_of_bodies
from lance_spark_ops.table.format.fragment_columns import fragment_columns as _columns_of_bodies

TOMBSTONE_FIELD_ID = -2


class DeletionFileType(IntEnum):
    """``DeletionFile.file_type``; the value is the protobuf enum number."""

    ARROW_ARRAY = 0
    BITMAP = 1

    @property
    def suffix(self) -> str:
        return "arrow" if self is DeletionFileType.ARROW_ARRAY else "bin"


@dataclass(frozen=True)
class ExternalFile:
    """``size`` bytes at ``offset`` of ``path`` (relative to the dataset root)."""

    path: str
    offset: int
    size: int

    @classmethod
    def from_pb(cls, pb: table_pb2.ExternalFile) -> ExternalFile:
        return cls(pb.path, pb.offset, pb.size)

    def to_pb(self) -> table_pb2.ExternalFile:
        return table_pb2.ExternalFile(path=self.path, offset=self.offset, size=self.size)


# Inline serialized protobuf bytes, a slice of an external file, or absent.
SequenceMeta = bytes | ExternalFile | None


@dataclass
class DataFile:
    """One data file of a fragment. ``path`` is relative to ``data/``."""

    path: str
    fields: list[int]
    column_indices: list[int] = field(default_factory=list)
    file_major_version: int = 2
    file_minor_version: int = 2
    file_size_bytes: int | None = None
    base_id: int | None = None
    unknown_fields: bytes = field(default=b"", repr=False, compare=False)

    @property
    def file_version(self) -> str:
        """``"2.0"``, ``"2.1"``, ``"2.2"`` ...; legacy v1 files (0.1 / 0.2) are ``"0.x"``."""
        if self.file_major_version == 0 and self.file_minor_version == 3:
            return "2.0"  # 2.0 files record their version as 0.3
        return f"{self.file_major_version}.{self.file_minor_version}"

    @property
    def is_legacy(self) -> bool:
        """A pre-2.0 (v1) Lance file."""
        return self.file_major_version == 0 and self.file_minor_version < 3

    def field_columns(self) -> dict[int, int]:
        """Live field id -> column index (tombstones and ``-1`` entries left out)."""
        return {f: c for f, c in zip(self.fields, self.column_indices, strict=False)
                if f != TOMBSTONE_FIELD_ID and c >= 0}

    def stored_field_ids(self) -> set[int]:
        """Dataset field ids stored in this file (legacy v1 files list no column indices:
        every listed field is in the file, under its own id)."""
        if self.is_legacy:
            return {f for f in self.fields if f != TOMBSTONE_FIELD_ID}
        return set(self.field_columns())

    def validate(self, where: str) -> None:
        if not self.is_legacy and len(self.fields) != len(self.column_indices):
            raise CorruptFileError(f"data file lists {len(self.fields)} fields but "
                                   f"{len(self.column_indices)} column indices", path=where)

    @classmethod
    def from_pb(cls, pb: table_pb2.DataFile, known_clean: bool = False) -> DataFile:
        return cls(
            path=pb.path,
            fields=pb.fields[:],
            column_indices=pb.column_indices[:],
            file_major_version=pb.file_major_version,
            file_minor_version=pb.file_minor_version,
            file_size_bytes=pb.file_size_bytes or None,
            base_id=pb.base_id if pb.HasField("base_id") else None,
            unknown_fields=b"" if known_clean else unknown_of(pb),
        )

    def to_pb(self) -> table_pb2.DataFile:
        pb = table_pb2.DataFile(
            path=self.path,
            fields=self.fields,
            column_indices=self.column_indices,
            file_major_version=self.file_major_version,
            file_minor_version=self.file_minor_version,
            file_size_bytes=self.file_size_bytes or 0,
        )
        if self.base_id is not None:
            pb.base_id = self.base_id
        return restore_unknown(pb, self.unknown_fields)


@dataclass
class DeletionFile:
    """Deleted row offsets of one fragment; ``num_deleted_rows`` None = unknown (stored 0)."""

    file_type: DeletionFileType
    read_version: int
    id: int
    num_deleted_rows: int | None = None
    base_id: int | None = None
    unknown_fields: bytes = field(default=b"", repr=False, compare=False)

    @classmethod
    def from_pb(cls, pb: table_pb2.DeletionFile, known_clean: bool = False) -> DeletionFile:
        try:
            kind = DeletionFileType(pb.file_type)
        except ValueError:
            raise CorruptFileError(f"unknown deletion file type {pb.file_type}") from None
        return cls(kind, pb.read_version, pb.id, pb.num_deleted_rows or None,
                   pb.base_id if pb.HasField("base_id") else None, b"" if known_clean else unknown_of(pb))

    def to_pb(self) -> table_pb2.DeletionFile:
        pb = table_pb2.DeletionFile(file_type=int(self.file_type), read_version=self.read_version,
                                    id=self.id, num_deleted_rows=self.num_deleted_rows or 0)
        if self.base_id is not None:
            pb.base_id = self.base_id
        return restore_unknown(pb, self.unknown_fields)


def _seq_from_pb(pb: table_pb2.DataFragment, oneof: str) -> SequenceMeta:
    which = pb.WhichOneof(oneof)
    if which is None:
        return None
    value = getattr(pb, which)
    return bytes(value) if which.startswith("inline") else ExternalFile.from_pb(value)


def _seq_to_pb(pb: table_pb2.DataFragment, meta: SequenceMeta, inline: str, external: str) -> None:
    if isinstance(meta, ExternalFile):
        getattr(pb, external).CopyFrom(meta.to_pb())
    elif meta is not None:
        setattr(pb, inline, meta)


@dataclass
class DataFragment:
    """A fragment of a dataset version."""

    id: int
    files: list[DataFile] = field(default_factory=list)
    deletion_file: DeletionFile | None = None
    physical_rows: int | None = None
    row_id_meta: SequenceMeta = None
    last_updated_at_version_meta: SequenceMeta = None
    created_at_version_meta: SequenceMeta = None
    unknown_fields: bytes = field(default=b"", repr=False, compare=False)

    @property
    def num_deleted_rows(self) -> int | None:
        if self.deletion_file is None:
            return 0
        return self.deletion_file.num_deleted_rows

    @property
    def num_rows(self) -> int | None:
        """Live rows, when both the physical and the deleted counts are known."""
        deleted = self.num_deleted_rows
        if self.physical_rows is None or deleted is None:
            return None
        return self.physical_rows - deleted

    # -- laziness ------------------------------------------------------------------------------
    @classmethod
    def lazy(cls, pb: table_pb2.DataFragment, known_clean: bool = False) -> DataFragment:
        """A fragment that decodes ``pb`` on first use of any attribute but ``id``.
        ``known_clean``: the caller knows ``pb`` holds no unknown protobuf fields anywhere."""
        obj = cls.__new__(cls)
        obj.__dict__.update(id=pb.id, _pb=pb, _clean=known_clean)
        return obj

    @classmethod
    def lazy_bytes(cls, ids: list[int], bodies: list[bytes], has_deletion: list[bool],
                   has_row_ids: list[bool]) -> list[DataFragment]:
        """As ``lazy``, one fragment per serialized protobuf in ``bodies`` (the caller checked
        that none holds an unknown field): parsed on first use of anything but ``id``; an
        untouched fragment is written back as exactly these bytes. The flags (from
        ``FragmentColumns``) answer ``has_deletion_file`` / ``has_row_id_meta`` unparsed."""
        new, set_dict = object.__new__, object.__setattr__  # no __setattr__ hook per fragment
        flags = [(False, False), (True, False), (False, True), (True, True)]
        out = []
        add = out.append
        with gc_paused():
            for i, body, d, r in zip(ids, bodies, has_deletion, has_row_ids, strict=True):
                obj = new(cls)
                set_dict(obj, "__dict__", {"id": i, "_pb": body, "_flags": flags[d + 2 * r]})
                add(obj)
        return out

    @property
    def is_decoded(self) -> bool:
        """False while the fragment is still only its protobuf (nothing but ``id`` was used)."""
        return "_pb" not in self.__dict__

    @property
    def source_pb(self) -> table_pb2.DataFragment | None:
        """The protobuf of a not yet decoded fragment (do not modify it), else None."""
        d = self.__dict__
        pb = d.get("_pb")
        if isinstance(pb, bytes):  # read from bytes: parse once, keep the message and the bytes
            raw, pb = pb, _parse_fragment(pb, d["id"])
            if d.get("_pb") is raw:
                d["_raw"] = raw
                d["_pb"] = pb
        return pb

    @property
    def source_bytes(self) -> bytes | None:
        """The serialized protobuf of a not yet decoded fragment read from bytes, else None
        (decoding drops ``_raw`` with ``_pb``)."""
        d = self.__dict__
        pb = d.get("_pb")
        return pb if pb.__class__ is bytes else d.get("_raw")

    def _decode(self) -> None:
        # values first, ``_pb`` dropped last: another thread reading meanwhile either decodes
        # too (setdefault keeps the first) or finds the values
        d = self.__dict__
        if "_pb" not in d:
            return
        pb = self.source_pb
        if pb is None:
            return
        for k, v in _decoded_fields(pb, d.get("_clean", True)).items():  # from bytes: clean
            d.setdefault(k, v)
        d.pop("_pb", None)
        d.pop("_raw", None)
        d.pop("_flags", None)
        d.pop("_clean", None)

    def __setattr__(self, name: str, value: object) -> None:
        d = self.__dict__
        if "_pb" in d:
            self._decode()
        d[name] = value

    def __getstate__(self) -> dict:
        self._decode()
        return dict(self.__dict__)

    @classmethod
    def from_pb(cls, pb: table_pb2.DataFragment) -> DataFragment:
        obj = cls.__new__(cls)
        obj.__dict__.update(_decoded_fields(pb, False))
        return obj

    def to_pb(self) -> table_pb2.DataFragment:
        """The protobuf (for an undecoded fragment the kept one itself: copy it before changing it)."""
        pb = self.source_pb
        if pb is not None:
            return pb
        pb = table_pb2.DataFragment(id=self.id, files=[f.to_pb() for f in self.files],
                                    physical_rows=self.physical_rows or 0)
        if self.deletion_file is not None:
            pb.deletion_file.CopyFrom(self.deletion_file.to_pb())
        _seq_to_pb(pb, self.row_id_meta, "inline_row_ids", "external_row_ids")
        _seq_to_pb(pb, self.last_updated_at_version_meta, "inline_last_updated_at_versions",
                   "external_last_updated_at_versions")
        _seq_to_pb(pb, self.created_at_version_meta, "inline_created_at_versions",
                   "external_created_at_versions")
        return restore_unknown(pb, self.unknown_fields)


def _parse_fragment(body: bytes, fragment_id: int) -> table_pb2.DataFragment:
    pb = table_pb2.DataFragment()
    try:
        pb.ParseFromString(body)
    except DecodeError as e:
        raise CorruptFileError(f"fragment {fragment_id} does not parse: {e}") from e
    return pb


def _decoded_fields(pb: table_pb2.DataFragment, clean: bool) -> dict[str, object]:
    """Every attribute of a ``DataFragment`` from its protobuf."""
    where = f"fragment {pb.id}"
    try:
        deletion = DeletionFile.from_pb(pb.deletion_file, clean) if pb.HasField("deletion_file") else None
    except CorruptFileError as e:
        raise CorruptFileError(f"{where}: {e}") from e
    return {
        "id": pb.id,
        "files": [DataFile.from_pb(f, clean) for f in pb.files],
        "deletion_file": deletion,
        "physical_rows": pb.physical_rows or None,
        "row_id_meta": _seq_from_pb(pb, "row_id_sequence"),
        "last_updated_at_version_meta": _seq_from_pb(pb, "last_updated_at_version_sequence"),
        "created_at_version_meta": _seq_from_pb(pb, "created_at_version_sequence"),
        "unknown_fields": b"" if clean else unknown_of(pb),
    }


class _Lazy:
    """Non-data descriptor standing in for a field of a lazy ``DataFragment``: decodes the
    fragment on first read; once decoded (or for an eagerly built fragment) the instance
    dictionary holds the value and this is never consulted again."""

    def __init__(self, name: str, default: object) -> None:
        self.name, self.default = name, default

    def __get__(self, obj: DataFragment | None, owner: type) -> object:
        if obj is None:
            return self.default
        d = obj.__dict__
        if "_pb" not in d:
            raise AttributeError(self.name)
        obj._decode()
        return d[self.name]


for _f in ("files", "deletion_file", "physical_rows", "row_id_meta", "last_updated_at_version_meta",
           "created_at_version_meta", "unknown_fields"):
    setattr(DataFragment, _f, _Lazy(_f, DataFragment.__dataclass_fields__[_f].default))
del _f


# -- reads that leave a lazy fragment undecoded (planning and commits touch every fragment) ------
def _lazy_flags(f: DataFragment) -> tuple[bool, bool] | None:
    return f.__dict__.get("_flags")  # dropped with ``_pb`` when the fragment is decoded


def any_deletion_file(fragments: list[DataFragment]) -> bool:
    """``any(has_deletion_file(f) for f in fragments)``, a commit's pass over every fragment."""
    for f in fragments:
        flags = f.__dict__.get("_flags")
        if flags[0] if flags is not None else has_deletion_file(f):
            return True
    return False


def has_deletion_file(f: DataFragment) -> bool:
    flags = _lazy_flags(f)
    if flags is not None:
        return flags[0]
    pb = f.source_pb
    return f.deletion_file is not None if pb is None else pb.HasField("deletion_file")


def has_row_id_meta(f: DataFragment) -> bool:
    flags = _lazy_flags(f)
    if flags is not None:
        return flags[1]
    pb = f.source_pb
    return f.row_id_meta is not None if pb is None else pb.WhichOneof("row_id_sequence") is not None


def data_file_paths(f: DataFragment) -> list[str]:
    """Paths (relative to ``data/``) of the fragment's data files."""
    pb = f.source_pb
    return [d.path for d in (f.files if pb is None else pb.files)]


def all_data_file_paths(fragments: list[DataFragment]) -> set[str]:
    """Paths (relative to ``data/``) of every data file of ``fragments``; fragments still in
    their parsed bytes are read in one pass over those bytes (none is parsed alone)."""
    out: set[str] = set()
    raw = []
    for f in fragments:
        if f.source_bytes is None:
            out.update(data_file_paths(f))
        else:
            raw.append(f)
    if raw:
        try:
            out |= _paths_of_bodies([f.source_bytes for f in raw])
        except (IrregularWire, UnicodeDecodeError):  # one by one: the parser names the fault
            for f in raw:
                out.update(data_file_paths(f))
    return out


def row_counts(f: DataFragment) -> tuple[int, int, int]:
    """(physical rows, deleted rows, data bytes) with 0 for unknown counts, as planning uses them."""
    pb = f.source_pb
    if pb is None:
        return (f.physical_rows or 0, f.num_deleted_rows or 0,
                sum(d.file_size_bytes or 0 for d in f.files))
    deleted = pb.deletion_file.num_deleted_rows if pb.HasField("deletion_file") else 0
    files = pb.files
    size = files[0].file_size_bytes if len(files) == 1 else sum(d.file_size_bytes for d in files)
    return pb.physical_rows, deleted, size


def source_bytes_of(fragments: list[DataFragment]) -> list[bytes | None]:
    """``f.source_bytes`` of each fragment, in one pass (a commit asks it of 100 000 at once)."""
    return [b if (b := f.__dict__.get("_pb")).__class__ is bytes else f.__dict__.get("_raw")
            for f in fragments]


def fragment_columns_of(fragments: list[DataFragment]) -> FragmentColumns:
    """``FragmentColumns`` of fragment objects (lazy ones stay undecoded; those still in their
    parsed bytes are read in one pass over those bytes, like a freshly parsed manifest's)."""
    bodies = source_bytes_of(fragments)
    raw = [i for i, b in enumerate(bodies) if b is not None]
    try:
        bulk = _columns_of_bodies([bodies[i] for i in raw]) if raw else None
    except IrregularWire:  # not for bytes a whole parse accepted; then one by one
        bulk, raw = None, []
    skip = set(raw)
    rows = []
    for i, f in enumerate(fragments):
        if i not in skip:
            pb = f.source_pb
            files = len(f.files) if pb is None else len(pb.files)
            rows.append((f.id, *row_counts(f), has_deletion_file(f), files, has_row_id_meta(f)))
    if bulk is None:
        return FragmentColumns.from_counts(rows)
    if not rows:
        return replace(bulk, id=np.fromiter((f.id for f in fragments), np.int64, len(fragments)))
    other = FragmentColumns.from_counts(rows)
    at = np.array(raw, dtype=np.intp)
    rest = np.setdiff1d(np.arange(len(fragments)), at)
    out = {}
    for name in ("physical_rows", "deleted_rows", "has_deletion", "data_bytes", "num_files", "has_row_ids"):
        column = np.empty(len(fragments), getattr(bulk, name).dtype)
        column[at], column[rest] = getattr(bulk, name), getattr(other, name)
        out[name] = column
    return FragmentColumns(id=np.fromiter((f.id for f in fragments), np.int64, len(fragments)), **out)
