"""Fragments read from a manifest's bytes (``FragmentColumns``, ``split_fragments_at``): the
per-fragment counts equal pylance's fragment metadata and the protobuf library's reading of the
same bytes; a manifest the bulk reader does not handle (fragments not in one run, a
non-minimal length, an unknown field) is parsed whole with the same result."""

from __future__ import annotations

import copy
import pickle
import random
import struct
from dataclasses import replace

import lance
import numpy as np
import pytest

from lance_spark_ops._pb import table_pb2
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.format.fragment import DataFragment, all_data_file_paths, data_file_paths
from lance_spark_ops.table.format.fragment_columns import IrregularWire, fragment_columns
from lance_spark_ops.table.format.manifest import FOOTER, parse_manifest_file

SCENARIOS = ["deletions", "stable_row_ids", "schema_evolution", "data_replacement", "v1_names"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_columns_match_pylance(pylance_dataset, scenario: str) -> None:
    uri = pylance_dataset(scenario, "2.2")
    manifest = Dataset.open(uri).manifest
    assert "_fragment_source" in manifest.__dict__  # read from bytes, no fragment object built
    cols = manifest.fragment_columns()
    assert "fragments" not in manifest.__dict__
    metas = [f.metadata for f in lance.dataset(uri).get_fragments()]
    assert cols.id.tolist() == [m.id for m in metas]
    assert cols.physical_rows.tolist() == [m.physical_rows for m in metas]
    assert cols.deleted_rows.tolist() == [m.deletion_file.num_deleted_rows if m.deletion_file else 0
                                          for m in metas]
    assert cols.has_deletion.tolist() == [m.deletion_file is not None for m in metas]
    assert cols.num_files.tolist() == [len(m.files) for m in metas]
    assert cols.data_bytes.tolist() == [sum(d.file_size_bytes or 0 for d in m.files) for m in metas]
    assert cols.has_row_ids.tolist() == [m.row_id_meta is not None for m in metas]
    assert all_data_file_paths(manifest.fragments) == {d.path for m in metas for d in m.files}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_fragments_from_bytes_equal_a_whole_parse(pylance_dataset, scenario: str) -> None:
    ds = Dataset.open(pylance_dataset(scenario, "2.2"))
    data = ds.store.read(ds.manifest_path)
    pos = struct.unpack_from("<q", data, len(data) - 16)[0]
    whole = table_pb2.Manifest.FromString(data[pos + 4 : len(data) - 16])
    frags = ds.manifest.fragments
    assert [f.is_decoded for f in frags] == [False] * len(frags)
    assert frags == [DataFragment.from_pb(f) for f in whole.fragments]
    # built fragments: the columns now come from them (bytes read in bulk, decoded ones one by
    # one), same values
    fresh = Dataset.open(ds.uri).manifest.fragment_columns()
    built = Dataset.open(ds.uri).manifest
    for decoded in (0, 1, len(frags)):
        for f in built.fragments[:decoded]:
            f.physical_rows  # noqa: B018 - decodes the fragment
        assert sum(f.is_decoded for f in built.fragments) == decoded
        again = built.fragment_columns()
        for name in ("id", "physical_rows", "deleted_rows", "has_deletion", "data_bytes", "num_files",
                     "has_row_ids"):
            assert getattr(again, name).tolist() == getattr(fresh, name).tolist(), (name, decoded)


def _manifest_file(body: bytes) -> bytes:
    return struct.pack("<I", len(body)) + body + FOOTER.pack(0, 0, 2, b"LANC")


def _plain(pylance_dataset) -> tuple[table_pb2.Manifest, list[table_pb2.DataFragment]]:
    ds = Dataset.open(pylance_dataset("deletions", "2.2"))
    data = ds.store.read(ds.manifest_path)
    pos = struct.unpack_from("<q", data, len(data) - 16)[0]
    pb = table_pb2.Manifest.FromString(data[pos + 4 : len(data) - 16])
    for name in ("transaction_offset", "transaction_section", "index_section"):
        pb.ClearField(name)
    frags = list(pb.fragments)
    assert len(frags) >= 2
    return pb, frags


@pytest.mark.parametrize("layout", ["split_run", "long_length"])
def test_irregular_manifests_parse_whole(pylance_dataset, layout: str) -> None:
    pb, frags = _plain(pylance_dataset)
    rest = table_pb2.Manifest()
    rest.CopyFrom(pb)
    del rest.fragments[:]
    if layout == "split_run":  # another field between two fragments: not one run
        body = (rest.SerializeToString() + table_pb2.Manifest(fragments=frags[:1]).SerializeToString()
                + table_pb2.Manifest(version=pb.version).SerializeToString()
                + table_pb2.Manifest(fragments=frags[1:]).SerializeToString())
    else:  # a fragment's length in two bytes where one would do
        first = frags[0].SerializeToString()
        assert len(first) < 128
        body = (rest.SerializeToString() + bytes([0x12, len(first) | 0x80, 0]) + first
                + table_pb2.Manifest(fragments=frags[1:]).SerializeToString())
    assert table_pb2.Manifest.FromString(body) == pb  # the same message to a protobuf parser
    manifest = parse_manifest_file(_manifest_file(body)).manifest
    assert "_fragment_source" not in manifest.__dict__
    assert manifest.fragments == [DataFragment.from_pb(f) for f in pb.fragments]
    assert manifest.fragment_columns().id.tolist() == [f.id for f in pb.fragments]


def test_unknown_fragment_field_is_refused(pylance_dataset) -> None:
    pb, frags = _plain(pylance_dataset)
    body = frags[0].SerializeToString() + b"\x58\x01"  # field 11 (varint): unknown here
    assert not fragment_columns([body]).clean
    rest = table_pb2.Manifest()
    rest.CopyFrom(pb)
    del rest.fragments[:]
    raw = rest.SerializeToString() + bytes([0x12, len(body)]) + body
    manifest = parse_manifest_file(_manifest_file(raw)).manifest
    assert not manifest.known_clean and "_fragment_source" not in manifest.__dict__


def test_irregular_fragment_bytes() -> None:
    good = table_pb2.DataFragment(id=3, physical_rows=5).SerializeToString()
    with pytest.raises(IrregularWire):
        fragment_columns([good + b"\x22\x01\x00"])  # physical_rows (4) length-delimited
    with pytest.raises(IrregularWire):
        fragment_columns([good + b"\x08"])  # truncated id
    with pytest.raises(IrregularWire):
        fragment_columns([b"\x12\x05\x0a\x01"])  # a data file running past its fragment


def _random_fragment(rng: random.Random) -> table_pb2.DataFragment:
    f = table_pb2.DataFragment(id=rng.choice([0, 1, 127, 128, 2**20, 2**40]),
                               physical_rows=rng.choice([0, 1, 300, 2**33]))
    for _ in range(rng.choice([0, 1, 1, 3])):
        f.files.add(path=f"{rng.random()}.lance", fields=[0, 1, -2], column_indices=[0, 1, -1],
                    file_major_version=2, file_minor_version=rng.choice([0, 1, 2]),
                    file_size_bytes=rng.choice([0, 10, 2**35]))
        if rng.random() < 0.3:
            f.files[-1].base_id = 1
    if rng.random() < 0.5:
        f.deletion_file.file_type = rng.choice([0, 1])
        f.deletion_file.read_version = 4
        f.deletion_file.num_deleted_rows = rng.choice([0, 1, 150, 2**21])
    if rng.random() < 0.3:
        f.inline_row_ids = b"\x01\x02"
    elif rng.random() < 0.3:
        f.external_row_ids.path = "x"
        f.external_row_ids.size = 9
    if rng.random() < 0.3:
        f.inline_created_at_versions = b"\x00"
    return f


def test_columns_match_protobuf_on_random_fragments() -> None:
    rng = random.Random(7)
    pbs = [_random_fragment(rng) for _ in range(500)]
    cols = fragment_columns([f.SerializeToString() for f in pbs])
    assert cols.clean
    assert cols.id.tolist() == [f.id for f in pbs]
    assert cols.physical_rows.tolist() == [f.physical_rows for f in pbs]
    assert cols.has_deletion.tolist() == [f.HasField("deletion_file") for f in pbs]
    assert cols.deleted_rows.tolist() == [f.deletion_file.num_deleted_rows for f in pbs]
    assert cols.num_files.tolist() == [len(f.files) for f in pbs]
    assert cols.data_bytes.tolist() == [sum(d.file_size_bytes for d in f.files) for f in pbs]
    assert cols.has_row_ids.tolist() == [f.WhichOneof("row_id_sequence") is not None for f in pbs]


def test_unbuilt_fragments_pickle_copy_and_replace(pylance_dataset) -> None:
    ds = Dataset.open(pylance_dataset("deletions", "2.2"))
    m = ds.manifest
    assert "fragments" not in m.__dict__
    for other in (pickle.loads(pickle.dumps(m)), copy.deepcopy(m), copy.copy(m), replace(m)):
        assert [f.id for f in other.fragments] == [f.id for f in ds.fragments]
        assert other.fragments == ds.fragments
    assert m.fragments is ds.fragments  # built once, kept
    picked = Dataset.open(ds.uri).fragments_with_ids([1, 99])
    assert list(picked) == [1] and picked[1] == ds.manifest.fragment(1)
    assert data_file_paths(picked[1]) == [d.path for d in ds.manifest.fragment(1).files]
    assert np.array_equal(Dataset.open(ds.uri).manifest.fragment_columns().id, [f.id for f in ds.fragments])
