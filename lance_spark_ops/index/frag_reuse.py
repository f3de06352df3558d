"""The fragment reuse index (``__lance_frag_reuse``): details, versions, bitmaps, address maps.

Pure functions over protobufs and numpy arrays; the one file it may need
(``_indices/<uuid>/details.binpb`` when the details exceed ``INLINE_LIMIT`` bytes) is read and
written by the caller. Layout and rules as pylance 14 writes and reads them (see the package
docstring): one Version per compaction, one Group per rewrite group, ``changed_row_addrs`` the
portable RoaringTreemap of the group's surviving old row addresses.
"""

from __future__ import annotations

import time
import uuid as uuidlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from pyroaring import BitMap, BitMap64

from lance_spark_ops._pb import table_pb2
from lance_spark_ops.errors import CorruptFileError, InvalidInputError
from lance_spark_ops.index.address_map import RowAddressMap, new_addresses
from lance_spark_ops.index.kinds import FRAG_REUSE_INDEX_NAME, uuid_str

Details = table_pb2.FragmentReuseIndexDetails
DETAILS_FILE = "details.binpb"
INLINE_LIMIT = 204800  # pylance: larger InlineContent goes to an external file
TYPE_URL = "/lance.table.FragmentReuseIndexDetails"


@dataclass(frozen=True)
class FragDigest:
    id: int
    physical_rows: int
    num_deleted_rows: int = 0


def make_group(old: Sequence[FragDigest], survivors: np.ndarray, new: Sequence[FragDigest]) -> Details.Group:
    """One rewrite group: ``survivors`` = old row addresses read (uint64, in write order)."""
    bm = BitMap64(survivors.astype(np.uint64))
    if len(bm) != survivors.size:
        raise InvalidInputError("surviving row addresses repeat")
    if survivors.size != sum(f.physical_rows for f in new):
        raise InvalidInputError(f"{survivors.size} surviving rows but the new fragments hold "
                                f"{sum(f.physical_rows for f in new)}")
    g = Details.Group(changed_row_addrs=bytes(bm.serialize()))
    g.old_fragments.extend(Details.FragmentDigest(id=f.id, physical_rows=f.physical_rows,
                                                  num_deleted_rows=f.num_deleted_rows) for f in old)
    g.new_fragments.extend(Details.FragmentDigest(id=f.id, physical_rows=f.physical_rows,
                                                  num_deleted_rows=f.num_deleted_rows) for f in new)
    return g


def load_versions(index: table_pb2.IndexMetadata, read_file: Callable[[str], bytes]) -> list[Details.Version]:
    """The FRI's versions, oldest first; ``read_file(rel)`` reads a path under the dataset."""
    det = Details()
    if not index.HasField("index_details") or not index.index_details.Unpack(det):
        raise CorruptFileError(f"index {index.name!r}: details are not FragmentReuseIndexDetails")
    kind = det.WhichOneof("content")
    if kind == "inline":
        content = det.inline
    elif kind == "external":
        ext = det.external
        rel = f"_indices/{uuid_str(index.uuid.uuid)}/{ext.path}"
        data = read_file(rel)[ext.offset:ext.offset + ext.size]
        content = Details.InlineContent()
        try:
            content.ParseFromString(bytes(data))
        except Exception as e:  # noqa: BLE001 - protobuf's DecodeError and friends
            raise CorruptFileError(f"fragment reuse details do not parse: {e}", path=rel) from e
    else:
        raise CorruptFileError(f"index {index.name!r}: fragment reuse details hold no content")
    return sorted(content.versions, key=lambda v: v.dataset_version)


def build_index(versions: Sequence[Details.Version], dataset_version: int, fragment_bitmap: BitMap,
                index_version: int = 0,
                inline_limit: int = INLINE_LIMIT) -> tuple[table_pb2.IndexMetadata, bytes | None]:
    """A new FRI entry (new uuid) holding ``versions``; second item: the bytes to write to
    ``_indices/<uuid>/details.binpb`` when they do not fit inline (over ``inline_limit``
    bytes), else None."""
    content = Details.InlineContent(versions=sorted(versions, key=lambda v: v.dataset_version))
    body = content.SerializeToString()
    meta = table_pb2.IndexMetadata(name=FRAG_REUSE_INDEX_NAME, dataset_version=dataset_version,
                                   index_version=index_version, created_at=int(time.time() * 1000))
    meta.uuid.uuid = uuidlib.uuid4().bytes
    meta.fragment_bitmap = bytes(BitMap(fragment_bitmap).serialize())
    det = Details()
    external = None
    if len(body) > inline_limit:
        det.external.path, det.external.offset, det.external.size = DETAILS_FILE, 0, len(body)
        external = body
    else:
        det.inline.CopyFrom(content)
    meta.index_details.Pack(det, type_url_prefix="/")
    meta.index_details.type_url = TYPE_URL
    return meta, external


def details_path(index: table_pb2.IndexMetadata) -> str:
    return f"_indices/{uuid_str(index.uuid.uuid)}/{DETAILS_FILE}"


def remap_fragment_bitmap(bitmap: BitMap, versions: Sequence[Details.Version], name: str = "") -> BitMap:
    """pylance's ``remap_fragment_bitmap``: each group wholly in the bitmap becomes its new
    fragments; a group partly in it is an error."""
    out = BitMap(bitmap)
    for v in versions:
        for g in v.groups:
            old = [f.id for f in g.old_fragments]
            hit = sum(1 for i in old if i in out)
            if hit and hit != len(old):
                raise InvalidInputError(f"index {name!r}: fragment reuse group {old} is only partly indexed")
            if hit:
                out -= BitMap(old)
                out |= BitMap(f.id for f in g.new_fragments)
    return out


def version_map(version: Details.Version) -> RowAddressMap:
    """The old -> new row-address map one FRI version records: as pylance's
    ``transpose_row_ids_from_digest``, the surviving old addresses in ascending order map to
    the new fragments' rows in order (so a group's old fragments must ascend by id)."""
    maps = []
    for g in version.groups:
        old = np.array(BitMap64.deserialize(g.changed_row_addrs).to_array(), dtype=np.uint64) \
            if g.changed_row_addrs else np.zeros(0, np.uint64)
        new = new_addresses([(f.id, f.physical_rows) for f in g.new_fragments])
        maps.append(RowAddressMap.from_pairs(old, new[:old.size], [f.id for f in g.old_fragments]))
    return RowAddressMap.concat(maps)


def index_behind(bitmap: BitMap | None, versions: Sequence[Details.Version]) -> bool:
    """Whether an index's stored bitmap still names old fragments of some FRI version (its
    data then hold pre-compaction addresses that pylance remaps when it opens it)."""
    if bitmap is None:
        return False
    return any(f.id in bitmap for v in versions for g in v.groups for f in g.old_fragments)


def caught_up(version: Details.Version, index: table_pb2.IndexMetadata) -> bool:
    """pylance's ``is_index_remap_caught_up``: the index was made at or after the version and
    covers none of its old fragments (an index without a bitmap counts as caught up)."""
    if index.name.startswith("__lance_"):
        return True
    if index.dataset_version < version.dataset_version:
        return False
    if not index.fragment_bitmap:
        return True
    bm = BitMap.deserialize(index.fragment_bitmap)
    return not any(f.id in bm for g in version.groups for f in g.old_fragments)


def new_fragment_bitmap(versions: Sequence[Details.Version]) -> BitMap:
    return BitMap(f.id for v in versions for g in v.groups for f in g.new_fragments)
