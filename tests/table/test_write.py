"""write_dataset: every version we commit opens in pylance with the same rows (and _rowid)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pyarrow as pa
import pytest

from lance_spark_ops import write_dataset
from lance_spark_ops.errors import IncompatibleTransaction, InvalidInputError, SchemaError
from lance_spark_ops.table.commit import commit_transaction
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.format.transaction import Append, Overwrite
from tests.table.commit_helpers import (
    VERSIONS,
    assert_every_version,
    assert_same_as_pylance,
    ids,
    pylance_fragment,
    table,
)

NESTED = pa.table({
    "a": pa.array(range(6), pa.int64()),
    "st": pa.array([{"x": i, "y": f"y{i}"} for i in range(6)],
                   pa.struct([("x", pa.int32()), ("y", pa.string())])),
    "l": pa.array([[i, i + 1] for i in range(6)], pa.list_(pa.int32())),
})


@pytest.mark.parametrize("version", VERSIONS)
def test_create_append_overwrite(tmp_path: Path, version: str) -> None:
    uri = str(tmp_path / "ds")
    ds = write_dataset(table(250), uri, data_storage_version=version, max_rows_per_file=100)
    assert [f.physical_rows for f in ds.fragments] == [100, 100, 50]
    assert [f.id for f in ds.fragments] == [0, 1, 2]
    assert ds.data_storage_version == version
    file = ds.fragments[0].files[0]
    assert re.fullmatch(r"[01]{24}[0-9a-f]{26}\.lance", file.path)
    assert (file.file_major_version, file.file_minor_version) == tuple(int(x) for x in version.split("."))
    ds = write_dataset(table(30, 250), uri, mode="append")
    assert [f.id for f in ds.fragments] == [0, 1, 2, 3] and ds.version == 2
    ds = write_dataset(table(10, 1000), uri, mode="overwrite")
    assert [f.id for f in ds.fragments] == [4] and ds.max_fragment_id == 4  # ids continue, as pylance 14
    assert_every_version(uri)
    assert ids(assert_same_as_pylance(uri, 2)) == list(range(280))
    hint = json.loads((tmp_path / "ds" / "_versions" / "latest_version_hint.json").read_text())
    assert hint == {"version": 3}
    assert sorted(os.listdir(tmp_path / "ds" / "_transactions")) == sorted(
        Dataset.open(uri, v).manifest.transaction_file for v in (1, 2, 3))


@pytest.mark.parametrize("version", VERSIONS)
def test_data_file_fields_match_pylance(tmp_path: Path, version: str) -> None:
    """2.0 records every field, 2.1+ only leaves, with the column indices pylance gives."""
    import lance

    lance.write_dataset(NESTED, str(tmp_path / "theirs"), data_storage_version=version)
    ours = write_dataset(NESTED, str(tmp_path / "ours"), data_storage_version=version)
    theirs = Dataset.open(str(tmp_path / "theirs"))
    for a, b in zip(ours.fragments[0].files, theirs.fragments[0].files, strict=True):
        assert (a.fields, a.column_indices) == (b.fields, b.column_indices)
        assert (a.file_major_version, a.file_minor_version) == (b.file_major_version, b.file_minor_version)
    assert ours.manifest.schema == theirs.manifest.schema
    assert (ours.reader_feature_flags, ours.writer_feature_flags) == (0, 0)
    assert_same_as_pylance(str(tmp_path / "ours"))


@pytest.mark.parametrize("version", VERSIONS)
def test_stable_row_ids(tmp_path: Path, version: str) -> None:
    uri = str(tmp_path / "ds")
    write_dataset(table(25), uri, data_storage_version=version, max_rows_per_file=10,
                  enable_stable_row_ids=True)
    ds = write_dataset(table(5, 25), uri, mode="append")
    m = ds.manifest
    assert m.next_row_id == 30 and ds.uses_stable_row_ids
    assert (m.reader_feature_flags, m.writer_feature_flags) == (2, 2)
    assert ds.created_at_versions(ds.fragments[-1]).tolist() == [2] * 5
    ds = write_dataset(table(4, 100), uri, mode="overwrite")
    assert ds.manifest.next_row_id == 34
    assert_every_version(uri)
    assert assert_same_as_pylance(uri).column("_rowid").to_pylist() == [30, 31, 32, 33]


def test_v1_naming_and_inputs(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    t = table(20)
    write_dataset(t.to_reader(max_chunksize=7), uri, data_storage_version="2.0",
                  enable_v2_manifest_paths=False)
    write_dataset(iter(table(5, 20).to_batches()), uri, mode="append")
    write_dataset(table(5, 25).select(["f", "id", "s"]), uri, mode="append")  # any column order
    names = sorted(n for n in os.listdir(tmp_path / "ds" / "_versions") if n.endswith(".manifest"))
    assert names == ["1.manifest", "2.manifest", "3.manifest"]
    assert_every_version(uri)
    assert ids(assert_same_as_pylance(uri)) == list(range(30))


def test_append_to_pylance_dataset_and_modes(pylance_dataset, tmp_path: Path) -> None:
    import shutil

    uri = str(tmp_path / "basic")
    shutil.copytree(pylance_dataset("basic", "2.0"), uri)
    n = Dataset.open(uri).count_rows()
    batch = pa.table({"a": pa.array([7, 8], pa.int64()), "s": ["x", "y"], "f": pa.array([1.0, None])})
    ds = write_dataset(batch, uri, mode="append")
    assert ds.count_rows() == n + 2
    assert_same_as_pylance(uri)
    with pytest.raises(InvalidInputError, match="already exists"):
        write_dataset(batch, uri)
    with pytest.raises(SchemaError, match="does not have"):  # leaving out nullable "s" is allowed
        write_dataset(batch.append_column("zz", pa.array([1, 2])), uri, mode="append")
    with pytest.raises(SchemaError, match="stores double"):
        write_dataset(batch.set_column(2, "f", pa.array([1, 2], pa.int32())), uri, mode="append")
    with pytest.raises(InvalidInputError, match="mode"):
        write_dataset(batch, uri, mode="upsert")
    assert Dataset.open(uri).version == ds.version
    assert len(os.listdir(Path(uri) / "data")) == len({f.files[0].path for f in ds.fragments})


@pytest.mark.parametrize("version", VERSIONS)
def test_commit_pylance_written_files(tmp_path: Path, version: str) -> None:
    """Our commits (create, append) over data files pylance wrote, for every file version."""
    uri = str(tmp_path / "ds")
    os.makedirs(uri)
    frag = pylance_fragment(uri, table(40), version)
    ds = Dataset.from_commit(commit_transaction(uri, Overwrite([frag], _schema_of(table(40))), 0,
                                                data_storage_version=version))
    assert ds.version == 1 and ds.data_storage_version == version
    ds = ds.commit(Append([pylance_fragment(uri, table(10, 40), version)]))
    assert [f.id for f in ds.fragments] == [0, 1]
    assert_every_version(uri)
    with pytest.raises(IncompatibleTransaction, match="already exists"):
        commit_transaction(uri, Overwrite([], _schema_of(table(1))), 0, must_create=True)


def _schema_of(t: pa.Table):
    from lance_spark_ops.file.schema import schema_from_arrow

    return schema_from_arrow(t.schema)
