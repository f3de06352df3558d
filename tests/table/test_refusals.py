"""Anything we do not understand is refused with UnsupportedError before any row is returned.

Each kind of refusal is tested on a dataset pylance 14 wrote, then altered (when pylance has
no way to write the case) by editing its latest manifest protobuf in place.
"""

from __future__ import annotations

import glob
import struct
from collections.abc import Callable

import lance
import pyarrow as pa
import pytest

from lance_spark_ops._pb import table_pb2
from lance_spark_ops.errors import UnsupportedError
from lance_spark_ops.table.dataset import Dataset


def _table(n: int = 20) -> pa.Table:
    return pa.table({"a": pa.array(range(n), pa.int64()), "s": [f"v{i}" for i in range(n)]})


def _latest_manifest(uri: str) -> str:
    return sorted(glob.glob(f"{uri}/_versions/*.manifest"))[0]  # V2 names: newest sorts first


def edit_manifest(uri: str, fn: Callable[[table_pb2.Manifest], None]) -> None:
    """Apply ``fn`` to the latest manifest protobuf and write the file back (sections kept)."""
    path = _latest_manifest(uri)
    data = open(path, "rb").read()
    (pos,) = struct.unpack_from("<q", data, len(data) - 16)
    (n,) = struct.unpack_from("<I", data, pos)
    pb = table_pb2.Manifest()
    pb.ParseFromString(data[pos + 4:pos + 4 + n])
    fn(pb)
    body = pb.SerializeToString()
    with open(path, "wb") as f:
        f.write(data[:pos] + struct.pack("<I", len(body)) + body + data[-16:])


def _unknown_field(number: int) -> bytes:
    """Varint field ``number`` = 1, serialized."""
    tag, out = number << 3, bytearray()
    while tag >= 0x80:
        out.append(tag & 0x7F | 0x80)
        tag >>= 7
    return bytes(out) + bytes([tag, 1])


@pytest.fixture
def plain(tmp_path) -> str:
    uri = str(tmp_path / "ds")
    lance.write_dataset(_table(), uri)
    return uri


def _refused(uri: str, *words: str) -> None:
    with pytest.raises(UnsupportedError) as e:
        Dataset.open(uri).to_table()
    for w in words:
        assert w in str(e.value), str(e.value)


def test_control_plain_dataset_reads(plain):
    assert Dataset.open(plain).to_table().equals(lance.dataset(plain).to_table())


def test_unknown_manifest_field_refused(plain):
    edit_manifest(plain, lambda pb: pb.MergeFromString(_unknown_field(40)))
    _refused(plain, "manifest", "[40]")


def test_unknown_fragment_field_refused(plain):
    # pylance 14 data overlays are DataFragment field 11; without its feature flag we still refuse
    edit_manifest(plain, lambda pb: pb.fragments[0].MergeFromString(_unknown_field(11)))
    _refused(plain, "fragment 0", "[11]", "overlays")


def test_unknown_data_file_field_refused(plain):
    edit_manifest(plain, lambda pb: pb.fragments[0].files[0].MergeFromString(_unknown_field(30)))
    _refused(plain, "data file", "[30]")


def test_unknown_schema_field_field_refused(plain):
    edit_manifest(plain, lambda pb: pb.fields[1].MergeFromString(_unknown_field(31)))
    _refused(plain, "schema field 's'", "[31]")


def test_unknown_deletion_file_field_refused(tmp_path):
    uri = str(tmp_path / "ds")
    lance.write_dataset(_table(), uri).delete("a < 3")
    edit_manifest(uri, lambda pb: pb.fragments[0].deletion_file.MergeFromString(_unknown_field(20)))
    _refused(uri, "deletion file", "[20]")


def test_unknown_data_file_version_refused(plain):
    def bump(pb: table_pb2.Manifest) -> None:
        pb.fragments[0].files[0].file_minor_version = 9

    edit_manifest(plain, bump)
    _refused(plain, "data file version 2.9")


def test_unknown_storage_format_refused(plain):
    def other(pb: table_pb2.Manifest) -> None:
        pb.data_format.file_format = "parquet"

    edit_manifest(plain, other)
    _refused(plain, "parquet")


def test_next_format_refused(tmp_path):
    """pylance 14's "next" (2.3) writes an unstable layout we do not decode."""
    uri = str(tmp_path / "ds")
    lance.write_dataset(_table(), uri, data_storage_version="next")
    assert lance.dataset(uri).data_storage_version == "2.3"
    _refused(uri, "2.3")
    from lance_spark_ops.file.reader import LanceFileReader

    (path,) = glob.glob(f"{uri}/data/*.lance")
    with pytest.raises(UnsupportedError, match="2.3"):
        LanceFileReader(path)


def test_data_overlays_refused(tmp_path):
    """A pylance 14 data overlay (reader flag 64) is refused: its values would be missing."""
    from lance import LanceOperation
    from lance.fragment import write_fragments

    uri = str(tmp_path / "ds")
    ds = lance.write_dataset(_table(), uri)
    frag = write_fragments(pa.table({"a": pa.array([1000], pa.int64())}), uri)[0]
    op = LanceOperation.DataOverlay([LanceOperation.DataOverlayGroup(
        0, [LanceOperation.DataOverlayFile(frag.files[0], [3])])])
    committed = lance.LanceDataset.commit(uri, op, read_version=ds.version)
    assert committed.to_table()["a"][3].as_py() == 1000
    _refused(uri, "feature flags")
    # the same manifest with the flag cleared is still refused, by the fragment's field 11

    def clear(pb: table_pb2.Manifest) -> None:
        pb.reader_feature_flags &= ~64
        pb.writer_feature_flags &= ~64

    edit_manifest(uri, clear)
    _refused(uri, "fragment 0", "[11]")



def test_unknown_logical_type_refused(plain):
    def other(pb: table_pb2.Manifest) -> None:
        pb.fields[0].logical_type = "int128"

    edit_manifest(plain, other)
    _refused(plain, "int128")
