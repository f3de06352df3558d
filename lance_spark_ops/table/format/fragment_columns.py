"""``FragmentColumns``: per-fragment counts of a manifest as numpy arrays, read straight from the
fragments' protobuf bytes without a Python object per fragment.

Planning a compaction of 100 000 fragments needs only id, physical rows, deleted rows, data
bytes and whether a deletion file exists. Reading those through protobuf message objects costs
~1 us per fragment; here the wire format of all fragments is walked at once: every step decodes
the next field of every fragment still unfinished (numpy over all of them), so the Python work
is per *field position*, not per fragment. The same walk notes any field number the schema does
not know (``clean``), which the open path needs anyway.

Anything irregular (a truncated varint, a length past its message, a known field with an
unexpected wire type, a singular sub-message repeated) raises ``IrregularWire``: the caller
then uses the ordinary protobuf parser, which reports the precise error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from lance_spark_ops.pb_wire import encode_varint  # noqa: F401 - the inverse of _varint_at

# wire types
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
_PAD = 16  # zero bytes after the buffer: a varint read near the end never indexes past it

# known fields of DataFragment, DataFile, DeletionFile, ExternalFile (table.proto) and the
# wire types each may come in (repeated ints: packed or not). A known field number in another
# wire type is an unknown field to a protobuf parser: irregular here.
_V, _L = (_VARINT,), (_LEN,)
_FRAGMENT_FIELDS = {1: _V, 2: _L, 3: _L, 4: _V, **{f: _L for f in range(5, 11)}}
_DATA_FILE_FIELDS = {1: _L, 2: (_LEN, _VARINT), 3: (_LEN, _VARINT), 4: _V, 5: _V, 6: _V, 7: _V}
_DELETION_FIELDS = {1: _V, 2: _V, 3: _V, 4: _V, 7: _V}
_EXTERNAL_FIELDS = {1: _L, 2: _V, 3: _V}
_EXTERNAL_SEQUENCES = (6, 8, 10)  # DataFragment.external_* (ExternalFile messages)


_COLUMNS = ("id", "physical_rows", "deleted_rows", "has_deletion", "data_bytes", "num_files", "has_row_ids")


class IrregularWire(ValueError):
    """The bytes are not the plain encoding this reader handles; use the protobuf parser."""


@dataclass(frozen=True)
class FragmentColumns:
    """One entry per fragment, in manifest order; unknown counts are 0 (as planning uses them)."""

    id: np.ndarray  # int64
    physical_rows: np.ndarray  # int64
    deleted_rows: np.ndarray  # int64; num_deleted_rows of the deletion file (0: none or unknown)
    has_deletion: np.ndarray  # bool: a deletion file is recorded
    data_bytes: np.ndarray  # int64: sum of the data files' file_size_bytes
    num_files: np.ndarray  # int64
    has_row_ids: np.ndarray  # bool: a row id sequence (inline or external) is recorded
    clean: bool = True  # no unknown protobuf field in any fragment, data file or deletion file

    def __len__(self) -> int:
        return len(self.id)

    def take(self, positions: np.ndarray) -> FragmentColumns:
        """The entries at ``positions``, in that order."""
        return FragmentColumns(*(getattr(self, n)[positions] for n in _COLUMNS), clean=self.clean)

    def concat(self, other: FragmentColumns) -> FragmentColumns:
        return FragmentColumns(*(np.concatenate([getattr(self, n), getattr(other, n)]) for n in _COLUMNS),
                               clean=self.clean and other.clean)

    @classmethod
    def from_counts(cls, rows: Sequence[tuple[int, int, int, int, bool, int, bool]]) -> FragmentColumns:
        """From (id, physical, deleted, bytes, has_deletion, files, has_row_ids) tuples."""
        a = np.array(rows, dtype=np.int64).reshape(len(rows), 7)
        return cls(a[:, 0].copy(), a[:, 1].copy(), a[:, 2].copy(), a[:, 4].astype(bool),
                   a[:, 3].copy(), a[:, 5].copy(), a[:, 6].astype(bool))


def _varints(buf: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The varints starting at positions ``p``: (values as uint64, positions after them)."""
    b = buf[p]
    val = (b & 0x7F).astype(np.uint64)
    q = p + 1
    more = np.flatnonzero(b & 0x80)
    shift = 7
    while more.size:
        if shift > 63:
            raise IrregularWire("varint longer than 10 bytes")
        pos = q[more]
        bb = buf[pos]
        val[more] |= (bb & 0x7F).astype(np.uint64) << np.uint64(shift)
        q[more] = pos + 1
        more = more[(bb & 0x80) != 0]
        shift += 7
    return val, q


@dataclass
class _Walk:
    """Result of walking messages: per extracted varint field (values, present), per extracted
    length-delimited field (owner, start, length) of each occurrence, and unknown fields seen."""

    varints: dict[int, tuple[np.ndarray, np.ndarray]]
    spans: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]
    unknown: bool


def _walk(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, known: dict[int, tuple[int, ...]],
          varint_fields: Sequence[int], len_fields: Sequence[int]) -> _Walk:
    """Walk the messages ``buf[starts[i]:ends[i]]`` field by field, all messages per step."""
    n = len(starts)
    values = {f: (np.zeros(n, np.uint64), np.zeros(n, bool)) for f in varint_fields}
    found: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {f: [] for f in len_fields}
    lut = np.zeros(64, bool)  # known field numbers
    wire = np.ones((64, 8), bool)  # (field, wire type) allowed; unknown fields: any
    for f, types in known.items():
        lut[f] = True
        wire[f] = False
        wire[f, list(types)] = True
    unknown = False
    live = starts < ends
    if bool((starts > ends).any()):
        raise IrregularWire("message ends before it starts")
    owner = np.flatnonzero(live)
    p, e = starts[owner], ends[owner]
    while p.size:
        tag, p = _varints(buf, p)
        fno = tag >> np.uint64(3)
        wt = (tag & np.uint64(7)).astype(np.int8)
        if bool((fno == 0).any()):
            raise IrregularWire("field number 0")
        big = fno >= 64
        small = np.minimum(fno, 63).astype(np.intp)
        if bool(big.any()) or not bool(lut[small].all()):
            unknown = True
        if not bool(wire[small, wt].all()):
            raise IrregularWire("a known field in an unexpected wire type")
        is_len = wt == _LEN
        nxt = p.copy()
        vary = (wt == _VARINT) | is_len
        if bool(vary.all()):
            val, q = _varints(buf, p)
        else:
            if bool(((wt != _I64) & (wt != _I32) & ~vary).any()):
                raise IrregularWire("group or unknown wire type")
            val = np.zeros(len(p), np.uint64)
            q = p.copy()
            sel = np.flatnonzero(vary)
            val[sel], q[sel] = _varints(buf, p[sel])
            nxt[wt == _I64] += 8
            nxt[wt == _I32] += 4
        nxt[vary] = q[vary]
        if bool(is_len.any()):
            if bool((val[is_len] > np.uint64(1 << 40)).any()):
                raise IrregularWire("length out of range")
            nxt[is_len] += val[is_len].astype(np.int64)
        if bool((nxt > e).any()):
            raise IrregularWire("field runs past the end of its message")
        for f in varint_fields:
            hit = fno == f
            if bool(hit.any()):
                if bool((wt[hit] != _VARINT).any()):
                    raise IrregularWire(f"field {f} is not a varint")
                vals, present = values[f]
                vals[owner[hit]] = val[hit]  # the last occurrence wins, as protobuf says
                present[owner[hit]] = True
        for f in len_fields:
            hit = fno == f
            if bool(hit.any()):
                if bool((wt[hit] != _LEN).any()):
                    raise IrregularWire(f"field {f} is not length-delimited")
                found[f].append((owner[hit], q[hit], val[hit].astype(np.int64)))
        keep = nxt < e
        if not bool(keep.all()):
            owner, nxt, e = owner[keep], nxt[keep], e[keep]
        p = nxt
    spans = {}
    for f, parts in found.items():
        if parts:
            spans[f] = tuple(np.concatenate(c) for c in zip(*parts, strict=True))  # type: ignore[assignment]
        else:
            empty = np.zeros(0, np.int64)
            spans[f] = (empty, empty, empty)
    return _Walk(values, spans, unknown)


def _joined(bodies: Sequence[bytes]) -> np.ndarray:
    """``bodies`` one after the other and ``_PAD`` zero bytes, in one copy (the fragments of a
    manifest of a million fragments are 65-80 MB)."""
    return np.frombuffer(b"".join([*bodies, bytes(_PAD)]), np.uint8)


def fragment_columns(bodies: Sequence[bytes]) -> FragmentColumns:
    """Columns of the serialized ``DataFragment`` messages ``bodies`` (IrregularWire: see module)."""
    n = len(bodies)
    lengths = np.fromiter(map(len, bodies), np.int64, n)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    buf = _joined(bodies)
    frag = _walk(buf, starts, ends, _FRAGMENT_FIELDS, (1, 4), (2, 3, 5, *_EXTERNAL_SEQUENCES))
    unknown = frag.unknown

    f_owner, f_start, f_len = frag.spans[2]
    files = _walk(buf, f_start, f_start + f_len, _DATA_FILE_FIELDS, (6,), ())
    unknown |= files.unknown
    size, _ = files.varints[6]
    num_files = np.bincount(f_owner, minlength=n).astype(np.int64)
    data_bytes = np.zeros(n, np.int64)
    np.add.at(data_bytes, f_owner, size.astype(np.int64))

    d_owner, d_start, d_len = frag.spans[3]
    has_deletion = np.zeros(n, bool)
    has_deletion[d_owner] = True
    if len(d_owner) != int(has_deletion.sum()):
        raise IrregularWire("a fragment records its deletion file twice")
    dels = _walk(buf, d_start, d_start + d_len, _DELETION_FIELDS, (4,), ())
    unknown |= dels.unknown
    deleted = np.zeros(n, np.int64)
    deleted[d_owner] = dels.varints[4][0].astype(np.int64)

    for f in _EXTERNAL_SEQUENCES:
        _, e_start, e_len = frag.spans[f]
        if len(e_start):
            unknown |= _walk(buf, e_start, e_start + e_len, _EXTERNAL_FIELDS, (), ()).unknown

    has_row_ids = np.zeros(n, bool)
    has_row_ids[frag.spans[5][0]] = True
    has_row_ids[frag.spans[6][0]] = True
    ids, _ = frag.varints[1]
    physical, _ = frag.varints[4]
    return FragmentColumns(ids.astype(np.int64), physical.astype(np.int64), deleted, has_deletion,
                           data_bytes, num_files, has_row_ids, clean=not unknown)


def data_file_paths(bodies: Sequence[bytes]) -> set[str]:
    """The data file paths named by the serialized ``DataFragment`` messages ``bodies``
    (IrregularWire: see module; UnicodeDecodeError for a path that is not UTF-8)."""
    lengths = np.fromiter(map(len, bodies), np.int64, len(bodies))
    ends = np.cumsum(lengths)
    buf = _joined(bodies)
    joined = buf.data
    frag = _walk(buf, ends - lengths, ends, _FRAGMENT_FIELDS, (), (2,))
    _, f_start, f_len = frag.spans[2]
    files = _walk(buf, f_start, f_start + f_len, _DATA_FILE_FIELDS, (), (1,))
    _, p_start, p_len = files.spans[1]
    if len(p_start) != len(f_start):
        raise IrregularWire("a data file without exactly one path")
    names = {bytes(joined[a:b]) for a, b in zip(p_start.tolist(), (p_start + p_len).tolist(), strict=True)}
    return {n.decode() for n in names}


# -- a manifest's fragments as bytes -------------------------------------------------------------
def _fragments_view() -> type:
    """A message type reading field 2 (``Manifest.fragments``) as ``repeated bytes``: parsing a
    manifest with it yields each fragment's serialized bytes without building fragment messages."""
    fdp = descriptor_pb2.FileDescriptorProto(name="lance_spark_ops/manifest_fragments_view.proto",
                                             package="lance_spark_ops.view", syntax="proto3")
    msg = fdp.message_type.add(name="ManifestFragments")
    msg.field.add(name="fragments", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_BYTES,
                  label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    name = "lance_spark_ops.view.ManifestFragments"
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


_ManifestFragments = _fragments_view()
_FRAGMENT_TAG = 0x12  # Manifest field 2, length-delimited


def _first_fragment(raw: bytes) -> int | None:
    """Offset of the first ``Manifest.fragments`` entry: the top-level fields before it (the
    schema fields, field 1, in every writer seen) are stepped over one by one."""
    pos, end = 0, len(raw)
    while pos < end:
        tag, p = _varint_at(raw, pos)
        if tag == _FRAGMENT_TAG:
            return pos
        wt = tag & 7
        if wt == _VARINT:
            _, p = _varint_at(raw, p)
        elif wt == _LEN:
            n, p = _varint_at(raw, p)
            p += n
        elif wt == _I64:
            p += 8
        elif wt == _I32:
            p += 4
        else:
            return None
        pos = p
    return None


def _varint_at(raw: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(raw) or shift > 63:
            raise IrregularWire("truncated varint")
        b = raw[pos]
        value |= (b & 0x7F) << shift
        pos += 1
        if b < 0x80:
            return value, pos
        shift += 7


def split_fragments_at(raw: bytes | memoryview) -> tuple[int, list[bytes], np.ndarray] | None:
    """A serialized ``Manifest``'s run of fragment entries as (where it starts, each fragment's
    bytes, where each entry ends from the run's start - ``entry_ends``), or None when it has no
    fragments or they are not one contiguous run (then parse it whole). Raises DecodeError when
    the top level does not parse."""
    try:
        start = _first_fragment(raw)
    except IrregularWire:
        return None
    if start is None:
        return None
    view = _ManifestFragments.FromString(raw)
    if view.ByteSize() != len(raw):
        return None  # a fragment's tag or length is not minimally encoded: the cut below would miss
    bodies = list(view.fragments)
    return start, bodies, entry_ends(bodies)


def entry_ends(bodies: list[bytes]) -> np.ndarray:
    """Where each fragment entry (tag, length, body) of a run of them ends, from the run's start."""
    lengths = np.fromiter(map(len, bodies), np.int64, len(bodies))
    return np.cumsum(lengths + entry_header_sizes(lengths))


def entry_header_sizes(lengths: np.ndarray) -> np.ndarray:
    """Bytes before each body in a run of length-delimited entries of a field numbered below
    16: one tag byte and the length's varint."""
    header = np.full(len(lengths), 2, np.int64)
    for bits in range(7, 64, 7):
        header += lengths >= (1 << bits)
    return header


def parse_entries(data: bytes) -> list[bytes] | None:
    """The fragment bodies of ``data``, a run of ``Manifest.fragments`` entries cut from a
    manifest (``entry_ends``); None when it is not exactly such a run."""
    try:
        view = _ManifestFragments.FromString(data)
    except DecodeError:
        return None
    if view.ByteSize() != len(data):
        return None
    return list(view.fragments)
