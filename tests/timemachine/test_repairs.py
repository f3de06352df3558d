"""What old writers left behind, pinned on datasets pylance 14 writes and edits as old releases
did: data file version 0.0, the default / a blob ``storage_class`` on schema fields, missing
``physical_rows`` / ``num_deleted_rows`` (repaired on commit), index bitmaps an old writer
version makes untrustworthy (commit refused), and, on the 0.10.5 time-machine dataset,
duplicate field ids (read as pylance 14 reads them, repaired on commit as pylance 14 repairs
them)."""

from __future__ import annotations

import shutil
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from lance_spark_ops.errors import UnsupportedError
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.format.transaction import Delete
from tests.table.test_refusals import edit_manifest
from tests.timemachine import make_envs


def _string_field(number: int, value: str) -> bytes:
    raw = value.encode()
    return bytes([number << 3 | 2, len(raw)]) + raw


def _same(uri: str) -> None:
    theirs = lance.dataset(uri).to_table(with_row_id=True, with_row_address=True)
    assert Dataset.open(uri).to_table(with_row_id=True, with_row_address=True).equals(theirs)


def _legacy(tmp_path: Path) -> str:
    uri = str(tmp_path / "ds")
    t = pa.table({"id": pa.array(range(40), pa.int64()), "s": [f"v{i}" for i in range(40)]})
    lance.write_dataset(t, uri, data_storage_version="legacy", max_rows_per_file=10)
    lance.dataset(uri).delete("id % 4 = 1")
    return uri


def _noop_commit(uri: str) -> Dataset:
    ds = Dataset.open(uri)
    return ds.commit(Delete([], [], "false"))


def test_file_version_0_0_reads_as_v1(tmp_path):
    uri = _legacy(tmp_path)

    def to_0_0(pb):
        for f in pb.fragments:
            for d in f.files:
                d.file_major_version = d.file_minor_version = 0
    edit_manifest(uri, to_0_0)
    _same(uri)


def test_default_storage_class_is_accepted(tmp_path):
    uri = _legacy(tmp_path)
    edit_manifest(uri, lambda pb: [f.MergeFromString(_string_field(11, "default")) for f in pb.fields])
    _same(uri)
    _noop_commit(uri)  # written again without field 11; pylance reads it the same
    _same(uri)


def test_blob_storage_class_is_refused(tmp_path):
    uri = _legacy(tmp_path)
    edit_manifest(uri, lambda pb: pb.fields[1].MergeFromString(_string_field(11, "blob")))
    with pytest.raises(UnsupportedError, match="storage class 'blob'"):
        Dataset.open(uri)


def test_missing_counts_are_read_and_written_on_commit(tmp_path):
    uri = _legacy(tmp_path)
    want = lance.dataset(uri).to_table(with_row_id=True)

    def drop_counts(pb):
        for f in pb.fragments:
            f.physical_rows = 0
            if f.HasField("deletion_file"):
                f.deletion_file.num_deleted_rows = 0
    edit_manifest(uri, drop_counts)
    _same(uri)
    ds = _noop_commit(uri)
    counts = [(f.physical_rows, f.deletion_file.num_deleted_rows if f.deletion_file else None)
              for f in ds.fragments]
    assert counts == [(10, 3), (10, 2), (10, 3), (10, 2)]
    frags = lance.dataset(uri).get_fragments()
    assert [(f.metadata.physical_rows, f.metadata.deletion_file.num_deleted_rows) for f in frags] == \
        [(10, 3), (10, 2), (10, 3), (10, 2)]
    assert lance.dataset(uri).to_table(with_row_id=True).equals(want)


def test_index_bitmaps_of_an_old_writer_refuse_the_commit(tmp_path):
    uri = _legacy(tmp_path)
    lance.dataset(uri).create_scalar_index("id", "BTREE")

    def old_writer(pb):
        pb.writer_version.library, pb.writer_version.version = "lance", "0.8.14"
    edit_manifest(uri, old_writer)
    with pytest.raises(UnsupportedError, match=r"fragment bitmaps of index\(es\) \['id_idx'\]"):
        _noop_commit(uri)


def test_duplicate_field_ids_of_0_10_5(tmp_path):
    """pylance 0.10.5's add / drop columns (the sequence of Lance's test_data/v0.10.5): read
    as pylance 14 reads it (the first file holding an id), and after a commit of ours the
    schema and files are pylance 14's after its own commit."""
    try:
        root, manifest = make_envs.ensure("0.10.5")
    except make_envs.ReleaseUnavailable as e:
        pytest.skip(f"pylance 0.10.5 cannot be installed here: {e}")
    assert "quirk-schema" in manifest["datasets"], manifest["skipped"]
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    shutil.copytree(root / "quirk-schema", ours)
    shutil.copytree(root / "quirk-schema", theirs)
    _same(ours)
    assert Dataset.open(ours).to_table()["b"].to_pylist() == [0, 3, 6, 9]  # z's values, as pylance 14
    _noop_commit(ours)
    lance.dataset(theirs).delete("false")
    _same(ours)
    assert lance.dataset(ours).to_table().equals(lance.dataset(theirs).to_table())
    assert lance.dataset(ours).to_table()["b"].to_pylist() == [0, 4, 8, 12]
    mine, pylance = Dataset.open(ours), Dataset.open(theirs)
    assert [(n.name, n.id) for n in mine.lance_schema.walk()] == \
        [(n.name, n.id) for n in pylance.lance_schema.walk()]
    assert [[d.fields for d in f.files] for f in mine.fragments] == \
        [[d.fields for d in f.files] for f in pylance.fragments]

