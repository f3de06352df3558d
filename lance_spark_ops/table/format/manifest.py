"""The ``Manifest`` of one dataset version and the bytes of a manifest file.

Manifest file layout (``_versions/*.manifest``), as pylance 14 writes it::

    [u32 len][IndexSection protobuf]      optional; Manifest.index_section = its offset
    [u32 len][Transaction protobuf]       optional; Manifest field 23 = its offset
    [u32 len][Manifest protobuf]
    i64 manifest offset, u16 0, u16 2, b"LANC"          (16-byte footer)

All integers little-endian; every section starts with its u32 length and nothing sits between
the manifest and the footer (readers check ``len == file size - 16 - offset - 4``). Older
writers recorded the transaction offset in field 21 (``transaction_section``); both are read,
field 23 is written. Example: a dataset written once with no index is
``[u32 211][txn][u32 558][manifest][i64 215][0][2]LANC``.

``Manifest`` is a plain dataclass with exact ``from_pb`` / ``to_pb`` so that a commit can take
the previous version's manifest, change fragments / schema / counters with
``dataclasses.replace`` and serialize it again. No I/O here.

Parsing keeps the fragments as bytes (``fragment_columns.split_fragments_at``: one protobuf parse
of the rest, a numpy walk of the fragments for their counts and unknown fields); the fragment
objects are built on first use of ``Manifest.fragments``. Anything that walk does not handle
is parsed whole by the protobuf library, with the same result.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pyarrow as pa
from google.protobuf.message import DecodeError

from lance_spark_ops._gc import gc_paused
from lance_spark_ops._pb import file_pb2, table_pb2
from lance_spark_ops.errors import CorruptFileError, SchemaError, UnsupportedError
from lance_spark_ops.file.schema import LanceSchema, schema_from_pb, schema_to_pb
from lance_spark_ops.table.format._unknown import restore_unknown, unknown_of
from lance_spark_ops.table.format.feature_flags import FLAG_STABLE_ROW_IDS
from lance_spark_ops.table.format.fragment import DataFragment, fragment_columns_of, source_bytes_of
from lance_spark_ops.table.format.fragment_columns import (
    FragmentColumns,
    IrregularWire,
    fragment_columns,
    parse_entries,
    split_fragments_at,
)
from lance_spark_ops.table.format.fragment_run import FragmentRun
from lance_spark_ops.table.format.support import (
    STORAGE_CLASS_FIELD,
    check_storage_class,
    unknown_field_numbers,
)
from lance_spark_ops.table.format.transaction import Transaction

MAGIC = b"LANC"
FOOTER = struct.Struct("<qHH4s")
FOOTER_SIZE = FOOTER.size  # 16
FOOTER_MAJOR, FOOTER_MINOR = 0, 2
_U32 = struct.Struct("<I")


@dataclass(frozen=True)
class WriterVersion:
    library: str
    version: str
    prerelease: str | None = None
    build_metadata: str | None = None


@dataclass(frozen=True)
class DataStorageFormat:
    file_format: str = "lance"
    version: str = "2.2"


@dataclass
class Manifest:
    """Everything a dataset version is: schema, fragments, counters, flags, config."""

    schema: LanceSchema
    fragments: list[DataFragment]
    version: int
    timestamp_nanos: int = 0
    reader_feature_flags: int = 0
    writer_feature_flags: int = 0
    max_fragment_id: int | None = None
    next_row_id: int = 0
    data_storage_format: DataStorageFormat = field(default_factory=DataStorageFormat)
    config: dict[str, str] = field(default_factory=dict)
    table_metadata: dict[str, str] = field(default_factory=dict)
    writer_version: WriterVersion | None = None
    transaction_file: str | None = None  # name under _transactions/
    index_section: int | None = None  # file offset of the IndexSection
    transaction_offset: int | None = None  # field 23: file offset of the inline transaction
    transaction_section: int | None = None  # field 21, older writers
    version_aux_data: int = 0
    tag: str = ""
    branch: str | None = None
    base_paths: list[Any] = field(default_factory=list)  # table_pb2.BasePath
    unknown_fields: bytes = field(default=b"", repr=False, compare=False)
    # parsed from a file with no unknown protobuf field anywhere (``check_manifest`` skips
    # the per-fragment scan)
    known_clean: bool = field(default=False, repr=False, compare=False)

    # -- fragments read from bytes -----------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        # only reached when ``fragments`` is not built yet (a manifest parsed from bytes): build
        # the lazy fragment objects now (opening and planning never need them)
        if name == "fragments":
            src = self.__dict__.get("_fragment_source")
            if src is not None:
                # setdefault: threads building at once all get the list stored first
                return self.__dict__.setdefault("fragments", src.build())
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def fragments_with_ids(self, ids: Iterable[int]) -> dict[int, DataFragment]:
        """The fragments with these ids (absent ones left out). While the fragment objects are
        not built (a manifest parsed from bytes), only these are (separate objects, for readers
        that want a few fragments: an executor's task)."""
        wanted = set(ids)
        d = self.__dict__
        src = d.get("_fragment_source")
        if src is not None and "fragments" not in d:
            return {f.id: f for f in src.build(wanted)}
        return {f.id: f for f in self.fragments if f.id in wanted}

    def fragment_run(self) -> FragmentRun | None:
        """The fragments as wire bytes while no fragment object was built (else None: objects
        may have been changed since)."""
        d = self.__dict__
        src = d.get("_fragment_source")
        return src if isinstance(src, FragmentRun) and "fragments" not in d else None

    def set_fragment_run(self, run: FragmentRun) -> None:
        """Make ``run`` the fragments (their objects built on first use of ``fragments``)."""
        self.__dict__.pop("fragments", None)
        self.__dict__["_fragment_source"] = run

    def fragments_in_chunks(self, ids: Sequence[int], size: int) -> Iterator[list[DataFragment]]:
        """The fragments with these ids, in this order, ``size`` at a time; absent ids are
        left out. While the fragment objects are not built (a manifest parsed from bytes) each
        chunk's are built when it is reached, separate objects that live as long as the caller
        holds them: a task walking many fragments holds one chunk's, not all of them."""
        want = np.asarray(ids, dtype=np.int64)
        d = self.__dict__
        src = d.get("_fragment_source")
        if src is None or "fragments" in d:
            wanted = set(want.tolist())
            by_id = {f.id: f for f in self.fragments if f.id in wanted}
            for i in range(0, len(want), size):
                yield [by_id[j] for j in want[i:i + size].tolist() if j in by_id]
            return
        pos = src.positions(want)
        pos = pos[pos >= 0]  # absent ids left out
        for i in range(0, len(pos), size):
            yield src.build_at(pos[i:i + size])

    def fragment_slice(self, ids: Sequence[int], size: int, path: str,
                       inline: int = 0) -> ManifestSlice | None:
        """Where the fragments with these ids lie in this manifest's file ``path`` (relative to
        the dataset root), in this order, in chunks of at most ``size`` neighbours: a task then
        reads its own fragments and the manifest's few other fields, not every fragment
        (``parse_manifest_head``, ``fragments_from_entries``). With those ranges' bytes
        (``ManifestSlice.inline``) when they come to at most ``inline`` bytes and the head was
        kept. None when the manifest was not parsed from a file whose fragments are one plain
        run, or an id is absent."""
        src = self.__dict__.get("_fragment_source")
        layout = getattr(src, "layout", None)
        if layout is None:
            return None
        pos = src.positions(np.asarray(ids, dtype=np.int64))
        if (pos < 0).any():
            return None
        ends = src.entry_ends()
        base = layout.at + layout.start
        chunks = []
        cuts = [0, *(np.flatnonzero(np.diff(pos) != 1) + 1).tolist(), len(pos)]  # runs of neighbours
        for a, b in zip(cuts[:-1], cuts[1:], strict=True):
            for i in range(a, b, size):
                first, last = int(pos[i]), int(pos[min(i + size, b) - 1])
                start = base + (int(ends[first - 1]) if first else 0)
                chunks.append((start, base + int(ends[last]) - start, last - first + 1))
        head = layout.head_ranges()
        carried = None
        if layout.head is not None and \
                sum(map(len, layout.head)) + sum(n for _, n, _ in chunks) <= inline:
            run = src.run  # the file's bytes from ``base`` on
            carried = (*layout.head, *(bytes(run[o - base:o - base + n]) for o, n, _ in chunks))
        return ManifestSlice(path, layout.file_size, head, tuple(chunks), carried)

    def fragment_columns(self) -> FragmentColumns:
        """Per-fragment counts as arrays: straight from the parsed bytes while the fragment
        objects were never built, else gathered from them."""
        d = self.__dict__
        src = d.get("_fragment_source")
        if src is not None and "fragments" not in d:
            return src.columns
        return fragment_columns_of(self.fragments)

    # -- derived -----------------------------------------------------------
    @property
    def uses_stable_row_ids(self) -> bool:
        return bool(self.reader_feature_flags & FLAG_STABLE_ROW_IDS)

    @property
    def timestamp(self) -> datetime:
        return datetime.fromtimestamp(self.timestamp_nanos / 1e9, tz=timezone.utc)

    @property
    def data_storage_version(self) -> str:
        return self.data_storage_format.version

    @property
    def inline_transaction_offset(self) -> int | None:
        return self.transaction_offset if self.transaction_offset is not None else self.transaction_section

    def max_field_id(self) -> int:
        return max((f.id for f in self.schema.walk()), default=-1)

    def fragment_max_id(self) -> int | None:
        """The largest fragment id ever given: ``max_fragment_id``, or the largest fragment id
        when that is larger or not recorded (a ``max_fragment_id`` below an id would hand out
        an id in use: ids are allocated above both)."""
        d = self.__dict__
        if d.get("_fragment_source") is not None and "fragments" not in d:
            ids = self.fragment_columns().id  # from the bytes, no object built
            top = int(ids.max()) if len(ids) else None
        else:
            top = max((f.id for f in self.fragments), default=None)
        if self.max_fragment_id is None or top is None:
            return self.max_fragment_id if top is None else top
        return max(self.max_fragment_id, top)

    def fragment(self, fragment_id: int) -> DataFragment:
        for f in self.fragments:
            if f.id == fragment_id:
                return f
        raise KeyError(fragment_id)

    # -- protobuf ------------------------------------------------------------
    @classmethod
    def from_pb(cls, pb: table_pb2.Manifest, path: str | None = None, known_clean: bool = False,
                fragments_from: FragmentRun | None = None) -> Manifest:
        """``known_clean``: the caller checked that ``pb`` holds no unknown field anywhere.
        Fragments are lazy (``DataFragment.lazy``): decoded when first used. ``fragments_from``:
        the fragments as bytes (``pb`` then has none); their objects are built on first use."""
        for f in pb.fields:  # a schema field we would re-serialize without them
            numbers = unknown_field_numbers(unknown_of(f))
            if numbers == [STORAGE_CLASS_FIELD]:
                check_storage_class(f, path)  # the default class: nothing to keep
                continue
            if numbers:
                raise UnsupportedError(f"schema field {f.name!r} (id {f.id}) has protobuf field(s) {numbers} "
                                       "this library does not know", path=path)
        try:
            schema = schema_from_pb(list(pb.fields), dict(pb.schema_metadata))
        except SchemaError as e:
            kind = UnsupportedError if "unsupported logical type" in str(e) else CorruptFileError
            raise kind(f"manifest schema: {e}", path=path) from e
        lazy = DataFragment.lazy
        fragments: list[DataFragment] | None = None
        if fragments_from is None:
            with gc_paused():
                fragments = [lazy(f, known_clean) for f in pb.fragments]
        elif not pb.HasField("data_format"):
            fragments = fragments_from.build()
        wv = None
        if pb.HasField("writer_version"):
            w = pb.writer_version
            wv = WriterVersion(w.library, w.version, w.prerelease if w.HasField("prerelease") else None,
                               w.build_metadata if w.HasField("build_metadata") else None)
        fmt = DataStorageFormat(pb.data_format.file_format, pb.data_format.version) \
            if pb.HasField("data_format") else _infer_format(fragments)
        ts = pb.timestamp.seconds * 1_000_000_000 + pb.timestamp.nanos if pb.HasField("timestamp") else 0

        def opt(name: str) -> int | None:
            return getattr(pb, name) if pb.HasField(name) else None

        out = cls(
            schema=schema,
            fragments=fragments if fragments is not None else [],
            version=pb.version,
            timestamp_nanos=ts,
            reader_feature_flags=pb.reader_feature_flags,
            writer_feature_flags=pb.writer_feature_flags,
            max_fragment_id=opt("max_fragment_id"),
            next_row_id=pb.next_row_id,
            data_storage_format=fmt,
            config=dict(pb.config),
            table_metadata=dict(pb.table_metadata),
            writer_version=wv,
            transaction_file=pb.transaction_file or None,
            index_section=opt("index_section"),
            transaction_offset=opt("transaction_offset"),
            transaction_section=opt("transaction_section"),
            version_aux_data=pb.version_aux_data,
            tag=pb.tag,
            branch=pb.branch if pb.HasField("branch") else None,
            base_paths=list(pb.base_paths),
            unknown_fields=b"" if known_clean else unknown_of(pb),
            known_clean=known_clean,
        )
        if fragments_from is not None:
            out.__dict__["_fragment_source"] = fragments_from
            if fragments is None:
                del out.__dict__["fragments"]  # built by __getattr__ when first wanted
        return out

    def to_pb(self, with_fragments: bool = True) -> table_pb2.Manifest:
        """The protobuf; ``with_fragments=False`` leaves the fragments out (``serialize_manifest_file``
        appends them as bytes, which is much faster for many fragments)."""
        pb = table_pb2.Manifest(
            fields=schema_to_pb(self.schema),
            fragments=[f.to_pb() for f in self.fragments] if with_fragments else [],
            version=self.version,
            version_aux_data=self.version_aux_data,
            tag=self.tag,
            reader_feature_flags=self.reader_feature_flags,
            writer_feature_flags=self.writer_feature_flags,
            transaction_file=self.transaction_file or "",
            next_row_id=self.next_row_id,
            base_paths=self.base_paths,
        )
        for k, v in self.schema.metadata.items():
            pb.schema_metadata[k.decode()] = v
        if self.timestamp_nanos:
            pb.timestamp.seconds, pb.timestamp.nanos = divmod(self.timestamp_nanos, 1_000_000_000)
        if self.writer_version is not None:
            w = self.writer_version
            pb.writer_version.library, pb.writer_version.version = w.library, w.version
            if w.prerelease is not None:
                pb.writer_version.prerelease = w.prerelease
            if w.build_metadata is not None:
                pb.writer_version.build_metadata = w.build_metadata
        pb.data_format.file_format = self.data_storage_format.file_format
        pb.data_format.version = self.data_storage_format.version
        pb.config.update(self.config)
        pb.table_metadata.update(self.table_metadata)
        for name in ("max_fragment_id", "index_section", "transaction_offset", "transaction_section",
                     "branch"):
            value = getattr(self, name)
            if value is not None:
                setattr(pb, name, value)
        return restore_unknown(pb, self.unknown_fields)


def _infer_format(fragments: list[DataFragment]) -> DataStorageFormat:
    """Old manifests without ``data_format``: the data files' version (legacy if none)."""
    for frag in fragments:
        for f in frag.files:
            return DataStorageFormat("lance", "0.1" if f.is_legacy else f.file_version)
    return DataStorageFormat("lance", "0.1")


@dataclass(frozen=True)
class _Layout:
    """Where a manifest's fragments lie: file size, offset of the manifest message in the
    file (``at``), and the run of fragment entries in it (``start``..``end``); ``head``, the
    bytes of ``ManifestSlice.head``'s two ranges when at most ``HEAD_KEPT`` (a slice can then
    carry them: ``Manifest.fragment_slice``)."""

    file_size: int
    at: int
    start: int
    end: int
    head: tuple[bytes, bytes] | None = field(default=None, repr=False, compare=False)

    def head_ranges(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """(offset, length) of the manifest but its fragments: from the message's length prefix
        to the start of its fragments, and from their end through the footer."""
        tail = self.at + self.end
        return (self.at - 4, 4 + self.start), (tail, self.file_size - tail)


# the manifest but its fragments (schema, config, ...) kept from a parsed file up to this size:
# a few KB in practice, so a driver keeps them to ship in its tasks' slices
HEAD_KEPT = 64 * 1024


@dataclass(frozen=True)
class ManifestSlice:
    """Byte ranges of one manifest file (``path``, relative to the dataset root, ``size``
    bytes) holding a task's share of it: ``head``, the manifest but its fragments (from the
    message's length prefix to its start of fragments, and from their end through the footer),
    and ``chunks``, runs of fragment entries as (offset, length, fragments). A few numbers per
    thousand fragments (``Manifest.fragment_slice``). ``inline``: the bytes of those ranges
    (the head's two, then each chunk's), when the driver shipped them with the task: the task
    then reads nothing of the manifest file (one round trip fewer on an object store)."""

    path: str
    size: int
    head: tuple[tuple[int, int], tuple[int, int]]
    chunks: tuple[tuple[int, int, int], ...]
    inline: tuple[bytes, ...] | None = field(default=None, repr=False, compare=False)

    def inline_bytes(self) -> int:
        """Bytes the slice carries (0 when it names ranges only)."""
        return sum(map(len, self.inline or ()))


class _TaskFragments:
    """Stands for the fragments of a manifest read by ``parse_manifest_head``: it holds none
    (a task reads its own with ``fragments_from_entries``), and says so to anything asking."""

    __slots__ = ("path",)

    def __init__(self, path: str | None) -> None:
        self.path = path

    def _refuse(self) -> UnsupportedError:
        return UnsupportedError("this view of the manifest holds no fragments (a task's: read them from its "
                                "slice)", path=self.path)

    @property
    def columns(self) -> FragmentColumns:
        raise self._refuse()

    def build(self, ids: set[int] | None = None) -> list[DataFragment]:
        raise self._refuse()

    def build_at(self, at: np.ndarray) -> list[DataFragment]:
        raise self._refuse()

    def positions(self, ids: np.ndarray) -> np.ndarray:
        raise self._refuse()


def _has_dictionaries(pb: table_pb2.Manifest) -> bool:
    """Whether a schema field keeps dictionary values elsewhere in the file (legacy 0.1)."""
    return any(f.encoding == file_pb2.DICTIONARY and f.HasField("dictionary") and f.dictionary.length > 0
               for f in pb.fields)


def parse_manifest_head(first: bytes, last: bytes, slc: ManifestSlice, path: str | None = None
                        ) -> ManifestFile | None:
    """The manifest of ``slc.head``'s two ranges (``first``, ``last`` as read) without its
    fragments (asking for them raises UnsupportedError); no inline transaction or index
    section. None when the bytes are not what ``Manifest.fragment_slice`` described (then
    open the whole file)."""
    (a, la), (b, lb) = slc.head
    if len(first) != la or len(last) != lb or lb < FOOTER_SIZE or b + lb != slc.size:
        return None
    pos, _major, _minor, magic = FOOTER.unpack_from(last, lb - FOOTER_SIZE)
    if magic != MAGIC or pos != a or _U32.unpack_from(first, 0)[0] != slc.size - FOOTER_SIZE - a - 4:
        return None
    head = bytes(first[4:]) + bytes(last[:lb - FOOTER_SIZE])
    try:
        pb = table_pb2.Manifest.FromString(head)
    except DecodeError:
        return None
    if len(pb.fragments) or not pb.HasField("data_format") or _has_dictionaries(pb):
        return None
    pb.DiscardUnknownFields()
    if pb.ByteSize() != len(head):
        return None
    manifest = Manifest.from_pb(pb, path, known_clean=True, fragments_from=_TaskFragments(path))  # type: ignore[arg-type]
    return ManifestFile(manifest, None, None, path)


def fragments_from_entries(data: bytes, ids: Sequence[int], path: str | None = None) -> list[DataFragment]:
    """The fragments of one chunk of a ``ManifestSlice`` (``data``, as read), lazy as a parsed
    manifest's; CorruptFileError unless they are exactly the fragments ``ids``, in order."""
    bodies = parse_entries(data)
    if bodies is not None and len(bodies) == len(ids):
        try:
            cols = fragment_columns(bodies)
        except IrregularWire:
            cols = None
        if cols is not None and cols.clean and cols.id.tolist() == list(ids):
            return DataFragment.lazy_bytes(list(ids), bodies, cols.has_deletion.tolist(),
                                           cols.has_row_ids.tolist())
    raise CorruptFileError(f"the manifest's bytes for fragments {list(ids[:3])}... are not those fragments "
                           "(the file changed since the job read it?)", path=path)


@dataclass
class ManifestFile:
    """A parsed manifest file: the manifest plus the raw sections stored before it."""

    manifest: Manifest
    transaction_bytes: bytes | None = None
    index_section_bytes: bytes | None = None
    path: str | None = None

    @property
    def transaction(self) -> Transaction | None:
        """The inline transaction, parsed (None when the file has none)."""
        if self.transaction_bytes is None:
            return None
        return Transaction.from_bytes(self.transaction_bytes, self.path)

    @property
    def index_section(self) -> table_pb2.IndexSection | None:
        if self.index_section_bytes is None:
            return None
        return _parse_pb(table_pb2.IndexSection, self.index_section_bytes, "index section", self.path)


def _parse_pb(cls: Any, data: bytes, what: str, path: str | None) -> Any:
    msg = cls()
    try:
        msg.ParseFromString(data)
    except DecodeError as e:
        raise CorruptFileError(f"{what} does not parse: {e}", path=path) from e
    return msg


def _section(data: bytes, offset: int, what: str, path: str | None, limit: int) -> bytes:
    """The length-prefixed message at ``offset``; it must end at or before ``limit``."""
    if offset < 0 or offset + 4 > limit:
        raise CorruptFileError(f"{what} offset {offset} lies outside the first {limit} bytes of the file",
                               path=path)
    (n,) = _U32.unpack_from(data, offset)
    if offset + 4 + n > limit:
        raise CorruptFileError(f"{what} at {offset} claims {n} bytes, past byte {limit}", path=path)
    return bytes(data[offset + 4 : offset + 4 + n])


def parse_manifest_file(data: bytes | memoryview, path: str | None = None,
                        check_bytes: int | None = None) -> ManifestFile:
    """Parse a whole manifest file; any inconsistency raises CorruptFileError with ``path``.
    ``check_bytes``: fragment entries checked at a time (None: ``CHECK_BYTES``)."""
    size = len(data)
    if size < FOOTER_SIZE + 4:
        raise CorruptFileError(f"manifest file is {size} bytes, expected at least {FOOTER_SIZE + 4}",
                               path=path)
    pos, _major, _minor, magic = FOOTER.unpack_from(data, size - FOOTER_SIZE)
    if magic != MAGIC:
        raise CorruptFileError(f"manifest footer magic is {magic!r}, expected {MAGIC!r}", path=path)
    end = size - FOOTER_SIZE
    if not 0 <= pos <= end - 4:
        raise CorruptFileError(f"manifest offset {pos} lies outside the file ({size} bytes)", path=path)
    (n,) = _U32.unpack_from(data, pos)
    if n != end - pos - 4:
        raise CorruptFileError(f"manifest at {pos} records {n} bytes but {end - pos - 4} precede the footer",
                               path=path)
    # a view, not a copy: the manifest of a million fragments is 65-80 MB
    raw = memoryview(data)[pos + 4 : end]
    fast = _parse_split(raw, path, CHECK_BYTES if check_bytes is None else check_bytes)
    if fast is not None:
        pb, source, start = fast
        if not _has_dictionaries(pb):  # legacy dictionaries live elsewhere in the file: no slices
            layout = _Layout(size, pos + 4, start, start + len(source.run))
            ranges = layout.head_ranges()
            if sum(n for _, n in ranges) <= HEAD_KEPT:  # kept for the tasks' slices
                layout = replace(layout, head=tuple(bytes(data[o:o + n]) for o, n in ranges))
            source.layout = layout
        manifest = Manifest.from_pb(pb, path, known_clean=True, fragments_from=source)
    else:
        pb = _parse_pb(table_pb2.Manifest, raw, "manifest", path)
        # No unknown field anywhere iff dropping them leaves the size unchanged (the known part
        # re-encodes to no more bytes than it had); else parse again, keeping them.
        pb.DiscardUnknownFields()
        clean = pb.ByteSize() == len(raw)
        if not clean:
            pb = _parse_pb(table_pb2.Manifest, raw, "manifest", path)
        manifest = Manifest.from_pb(pb, path, known_clean=clean)
    _load_dictionaries(pb, manifest, data, path)
    txn = idx = None
    if manifest.inline_transaction_offset is not None:
        txn = _section(data, manifest.inline_transaction_offset, "inline transaction", path, pos)
    if manifest.index_section is not None:
        idx = _section(data, manifest.index_section, "index section", path, pos)
    return ManifestFile(manifest, txn, idx, path)


def parse_manifest_bodies(data: bytes | memoryview, path: str | None = None
                          ) -> tuple[ManifestFile, list[bytes]] | None:
    """For readers of what fragments reference (a vacuum reading every version): the manifest
    file with no fragments and its fragments' wire bytes, without the fragment columns' walk
    or checks (the caller decodes each distinct fragment, which checks it). None when the
    fragments are not one clean run or the manifest holds legacy dictionaries: use
    ``parse_manifest_file``."""
    size = len(data)
    if size < FOOTER_SIZE + 4:
        return None
    pos, _major, _minor, magic = FOOTER.unpack_from(data, size - FOOTER_SIZE)
    end = size - FOOTER_SIZE
    if magic != MAGIC or not 0 <= pos <= end - 4 or _U32.unpack_from(data, pos)[0] != end - pos - 4:
        return None  # parse_manifest_file names the problem
    raw = memoryview(data)[pos + 4 : end]
    try:
        split = split_fragments_at(raw)
        if split is None:
            return None
        start, bodies, ends = split
        head = bytes(raw[:start]) + bytes(raw[start + int(ends[-1]):])
        pb = table_pb2.Manifest.FromString(head)
    except DecodeError:
        return None
    if len(pb.fragments) or _has_dictionaries(pb):
        return None
    pb.DiscardUnknownFields()
    if pb.ByteSize() != len(head):
        return None
    manifest = Manifest.from_pb(pb, path, known_clean=True)
    txn = idx = None
    if manifest.inline_transaction_offset is not None:
        txn = _section(data, manifest.inline_transaction_offset, "inline transaction", path, pos)
    if manifest.index_section is not None:
        idx = _section(data, manifest.index_section, "index section", path, pos)
    return ManifestFile(manifest, txn, idx, path), bodies


def _parse_split(raw: bytes | memoryview, path: str | None, check_bytes: int
                 ) -> tuple[table_pb2.Manifest, FragmentRun, int] | None:
    """The manifest without its fragments, parsed, the fragments as bytes and columns
    (``fragment_columns``: no message object per fragment), and where their run starts in
    ``raw``. None (parse it whole) unless the fragments are one contiguous run and nothing
    anywhere holds an unknown field."""
    try:
        split = split_fragments_at(raw)
        if split is None:
            return None
        start, bodies, ends = split
        end = start + int(ends[-1])
        head = bytes(raw[:start]) + bytes(raw[end:])
        pb = table_pb2.Manifest.FromString(head)
        _check_fragments(raw, start + np.concatenate([[0], ends]), check_bytes)
    except DecodeError:
        return None  # the whole-message parse reports it
    if len(pb.fragments):
        return None  # not one run: the cut took something else
    pb.DiscardUnknownFields()
    if pb.ByteSize() != len(head):
        return None
    try:
        columns = fragment_columns(bodies)
    except IrregularWire:
        return None
    if not columns.clean:
        return None
    offsets = np.zeros(len(bodies) + 1, np.int64)
    offsets[1:] = ends
    return pb, FragmentRun(bodies, columns, bytes(raw[start:end]), offsets), start


# Fragment entries the protobuf library checks at a time (``_check_fragments``)
CHECK_BYTES = 4 * 1024 * 1024


def _check_fragments(raw: bytes | memoryview, bounds: np.ndarray, check_bytes: int = CHECK_BYTES) -> None:
    """The protobuf library's checks of every fragment (strings are UTF-8, packed fields whole,
    ...), so a manifest that fails to parse fails when it is opened, not when a fragment is
    first used; ~0.2 us per fragment, no Python object built. The entries (fragment i's tag,
    length and bytes are ``raw[bounds[i]:bounds[i + 1]]``) are parsed a run of about
    ``check_bytes`` at a time, as a ``Manifest`` holding only those fragments - each parses
    as it does inside the whole - so the parsed messages of a million fragments (~350 bytes
    each) never exist at once. Raises DecodeError."""
    starts = np.searchsorted(bounds, np.arange(bounds[0], bounds[-1], check_bytes), side="right") - 1
    cuts = bounds[np.union1d(starts, [len(bounds) - 1])].tolist()
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        table_pb2.Manifest.FromString(raw[a:b])


def _load_dictionaries(pb: table_pb2.Manifest, manifest: Manifest, data: bytes | memoryview,
                       path: str | None) -> None:
    """Legacy (0.1) datasets keep each dictionary field's values in the manifest file, at the
    field's ``dictionary`` (offset, length); read them so a later commit can write them again."""
    from lance_spark_ops.encoding.v0_1.decode import dictionary_values

    for f in pb.fields:
        if f.encoding != file_pb2.DICTIONARY or not f.HasField("dictionary") or f.dictionary.length <= 0:
            continue
        node = manifest.schema.field_by_id(f.id)
        dt = node.arrow_type()
        try:
            node.dictionary = dictionary_values(dt.value_type, data, int(f.dictionary.offset),
                                                int(f.dictionary.length))
        except (CorruptFileError, ValueError, pa.ArrowException) as e:
            raise CorruptFileError(f"dictionary of field {f.name!r}: {e}", path=path) from e


def _write_dictionaries(manifest: Manifest, out: bytearray) -> dict[int, tuple[int, int]]:
    """Write every kept dictionary into ``out``; field id -> (offset, length) to record."""
    from lance_spark_ops.encoding.v0_1.encode import dictionary_values_page, place

    placed = {}
    for node in manifest.schema.walk():
        if node.dictionary is not None:
            data, position = place(dictionary_values_page(node.id, node.dictionary), len(out))
            out += data
            placed[node.id] = (position, len(node.dictionary))
    return placed


_FRAGMENTS_TAG = bytes([(2 << 3) | 2])  # Manifest.fragments: field 2, length-delimited
_HEADERS: dict[int, bytes] = {}  # body length -> tag + length varint


def _header(n: int) -> bytes:
    out = bytearray(_FRAGMENTS_TAG)
    v = n
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    header = bytes(out)
    if len(_HEADERS) < 1 << 16:
        _HEADERS[n] = header
    return header


def _fragments_bytes(manifest: Manifest) -> bytes:
    """``Manifest.fragments`` encoded: the run itself while the fragments are one
    (``Manifest.fragment_run``), else each fragment's bytes (``_fragment_entries``)."""
    run = manifest.fragment_run()
    return run.run if run is not None else _fragment_entries(manifest.fragments)


def _fragment_entries(fragments: list[DataFragment]) -> bytes:
    """``Manifest.fragments`` encoded (protobuf lets a repeated field follow the other fields):
    a fragment still in the bytes it was read from is those bytes, another one its protobuf
    serialized; no Python object per field."""
    parts: list[bytes] = []
    add = parts.append
    headers = _HEADERS
    with gc_paused():
        for f, body in zip(fragments, source_bytes_of(fragments), strict=True):
            if body is None:
                body = f.to_pb().SerializeToString()
            n = len(body)
            add(headers.get(n) or _header(n))
            add(body)
    return b"".join(parts)


def serialize_manifest_file(manifest: Manifest, transaction: Transaction | bytes | None = None,
                            index_section: table_pb2.IndexSection | None = None) -> bytes:
    """Bytes of a manifest file: [index section] [transaction] manifest footer.

    The section offsets are written into ``manifest`` (``index_section``, field 23; field 21
    cleared) before it is serialized, as Lance's ``write_manifest`` does.
    """
    out = bytearray()
    placed = _write_dictionaries(manifest, out)
    manifest.index_section = None
    manifest.transaction_offset = None
    manifest.transaction_section = None
    if index_section is not None:
        manifest.index_section = len(out)
        body = index_section.SerializeToString()
        out += _U32.pack(len(body)) + body
    if transaction is not None:
        manifest.transaction_offset = len(out)
        body = transaction if isinstance(transaction, bytes) else transaction.to_bytes()
        out += _U32.pack(len(body)) + body
    pos = len(out)
    pb = manifest.to_pb(with_fragments=False)
    for f in pb.fields:
        if f.id in placed:
            f.dictionary.offset, f.dictionary.length = placed[f.id]
    # field 1 (schema), field 2 (fragments), the rest: the order a whole-message encoder
    # writes, so a manifest read and written again is byte-identical
    head = table_pb2.Manifest(fields=pb.fields).SerializeToString()
    del pb.fields[:]
    body = head + _fragments_bytes(manifest) + pb.SerializeToString()
    out += _U32.pack(len(body)) + body
    out += FOOTER.pack(pos, FOOTER_MAJOR, FOOTER_MINOR, MAGIC)
    return bytes(out)
