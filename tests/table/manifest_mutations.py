"""Semantic mutations of a dataset's latest manifest (test helper).

Each mutation edits the manifest protobuf of the newest version in place: the protobuf is
the last section of a manifest file, so the index section and inline transaction before it
keep their offsets. Mutations are the inconsistency classes of issue #34 (duplicate fragment
entries, shared data files, fragments without files, wrong counts, sizes and file versions,
overlapping row ids, index coverage of fragments that never existed, ``max_fragment_id``
below an id, a mixture of file versions).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path

from pyroaring import BitMap

from lance_spark_ops._pb import table_pb2

FOOTER = struct.Struct("<qHH4s")


def latest_manifest(root: str | Path) -> Path:
    """The newest version's manifest file (either naming scheme)."""
    d = Path(root) / "_versions"
    best = None
    for name in os.listdir(d):
        if not name.endswith(".manifest"):
            continue
        stem = int(name.split(".")[0])
        version = (1 << 64) - 1 - stem if len(name.split(".")[0]) == 20 else stem
        if best is None or version > best[0]:
            best = (version, d / name)
    assert best is not None, f"no manifest under {d}"
    return best[1]


def edit_manifest(root: str | Path, edit: Callable[[table_pb2.Manifest, table_pb2.IndexSection | None], None]
                  ) -> None:
    """Apply ``edit(manifest_pb, index_section_pb)`` to the latest manifest and write it back."""
    path = latest_manifest(root)
    data = path.read_bytes()
    pos, major, minor, magic = FOOTER.unpack_from(data, len(data) - FOOTER.size)
    (n,) = struct.unpack_from("<I", data, pos)
    pb = table_pb2.Manifest()
    pb.ParseFromString(data[pos + 4:pos + 4 + n])
    section = None
    if pb.HasField("index_section"):
        (m,) = struct.unpack_from("<I", data, pb.index_section)
        section = table_pb2.IndexSection()
        section.ParseFromString(data[pb.index_section + 4:pb.index_section + 4 + m])
    before = section.SerializeToString() if section is not None else None
    edit(pb, section)
    head = bytearray(data[:pos])
    if section is not None and section.SerializeToString() != before:
        # a new index section goes right before the manifest; the old bytes stay unreferenced
        body = section.SerializeToString()
        pb.index_section = len(head)
        head += struct.pack("<I", len(body)) + body
    pos = len(head)
    body = pb.SerializeToString()
    out = bytes(head) + struct.pack("<I", len(body)) + body + FOOTER.pack(pos, major, minor, magic)
    path.write_bytes(out)


# -- the mutations (each takes the manifest pb and the index section, edits in place) ----------
def duplicate_entry(pb: table_pb2.Manifest, _s: object, k: int = 0) -> None:
    """Fragment ``k`` appears twice (same id, same files)."""
    f = table_pb2.DataFragment()
    f.CopyFrom(pb.fragments[k])
    pb.fragments.insert(k + 1, f)


def duplicate_id(pb: table_pb2.Manifest, _s: object, k: int = 1) -> None:
    """Fragment ``k`` takes the id of fragment ``k - 1`` (different files; its deletion file,
    named by the id, is dropped)."""
    pb.fragments[k].id = pb.fragments[k - 1].id
    pb.fragments[k].ClearField("deletion_file")


def shared_file(pb: table_pb2.Manifest, _s: object, k: int = 1) -> None:
    """Fragment ``k`` names fragment ``k - 1``'s data file (counts follow the file)."""
    a, b = pb.fragments[k - 1], pb.fragments[k]
    del b.files[:]
    b.files.extend(a.files)
    b.physical_rows = a.physical_rows
    b.ClearField("deletion_file")


def no_files(pb: table_pb2.Manifest, _s: object, k: int = 0) -> None:
    del pb.fragments[k].files[:]


def wrong_physical_rows(pb: table_pb2.Manifest, _s: object, k: int = 0, delta: int = -3) -> None:
    pb.fragments[k].physical_rows = max(1, pb.fragments[k].physical_rows + delta)


def wrong_deleted_rows(pb: table_pb2.Manifest, _s: object, delta: int = 2) -> None:
    for f in pb.fragments:
        if f.HasField("deletion_file") and f.deletion_file.num_deleted_rows:
            f.deletion_file.num_deleted_rows += delta
            return
    raise LookupError("no fragment with a deletion file")


def wrong_file_size(pb: table_pb2.Manifest, _s: object, k: int = 0, delta: int = 7) -> None:
    pb.fragments[k].files[0].file_size_bytes += delta


def wrong_file_version(pb: table_pb2.Manifest, _s: object, k: int = 0) -> None:
    d = pb.fragments[k].files[0]
    d.file_minor_version = 0 if d.file_minor_version else 1


def overlapping_row_ids(pb: table_pb2.Manifest, _s: object, k: int = 1) -> None:
    """Fragment ``k`` gets fragment ``k - 1``'s row-id sequence (stable row ids)."""
    a, b = pb.fragments[k - 1], pb.fragments[k]
    if not a.HasField("inline_row_ids") or a.physical_rows != b.physical_rows:
        raise LookupError("needs inline row ids of equal-size fragments")
    b.inline_row_ids = a.inline_row_ids


def index_ghost_fragment(_pb: table_pb2.Manifest, section: table_pb2.IndexSection | None) -> None:
    """Every index segment covers a fragment id that never existed."""
    if section is None or not section.indices:
        raise LookupError("no index")
    for idx in section.indices:
        bm = BitMap.deserialize(idx.fragment_bitmap) if idx.fragment_bitmap else BitMap()
        bm.add(10_000)
        idx.fragment_bitmap = bm.serialize()


def max_fragment_id_low(pb: table_pb2.Manifest, _s: object) -> None:
    pb.max_fragment_id = max(0, max(f.id for f in pb.fragments) - 1)


MUTATIONS: dict[str, Callable] = {
    "duplicate_entry": duplicate_entry,
    "duplicate_id": duplicate_id,
    "shared_file": shared_file,
    "no_files": no_files,
    "wrong_physical_rows": wrong_physical_rows,
    "wrong_deleted_rows": wrong_deleted_rows,
    "wrong_file_size": wrong_file_size,
    "wrong_file_version": wrong_file_version,
    "overlapping_row_ids": overlapping_row_ids,
    "index_ghost_fragment": index_ghost_fragment,
    "max_fragment_id_low": max_fragment_id_low,
}


def apply(root: str | Path, names: list[str]) -> None:
    """Apply the named mutations, in order, to the latest manifest."""
    def edit(pb: table_pb2.Manifest, section: table_pb2.IndexSection | None) -> None:
        for name in names:
            MUTATIONS[name](pb, section)
    edit_manifest(root, edit)
