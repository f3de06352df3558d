"""Each operation committed by us on pylance-made datasets; pylance reads every result."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops.errors import CommitConflict, InvalidInputError
from lance_spark_ops.file.schema import LanceField, LanceSchema
from lance_spark_ops.table.commit.indices import fragment_bitmap
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.format.fragment import DataFile
from lance_spark_ops.table.format.transaction import (
    Append,
    DataReplacement,
    DataReplacementGroup,
    Merge,
    Restore,
    Rewrite,
    RewriteGroup,
)
from lance_spark_ops.table.rowids import encode_row_ids, encode_versions
from lance_spark_ops.table.write import delete_rows
from tests.table.commit_helpers import (
    VERSIONS,
    assert_every_version,
    assert_same_as_pylance,
    ids,
    pylance_fragment,
    table,
)


def _pylance_ds(tmp_path: Path, version: str, n: int = 3000, per_file: int = 1000, **kw) -> str:
    import lance

    uri = str(tmp_path / f"ds_{version}")
    lance.write_dataset(table(n), uri, data_storage_version=version, max_rows_per_file=per_file, **kw)
    return uri


@pytest.mark.parametrize("version", VERSIONS)
def test_delete_rows_arrow_bitmap_whole(tmp_path: Path, version: str) -> None:
    uri = _pylance_ds(tmp_path, version, n=13000, per_file=6000)
    ds = Dataset.open(uri)
    ds = delete_rows(ds, {0: [1, 5, 9], 1: np.arange(0, 5500), 2: np.arange(1000)}, predicate="test")
    m = ds.manifest
    assert [f.id for f in m.fragments] == [0, 1]  # fragment 2 (1000 rows) removed whole
    kinds = [f.deletion_file.file_type.suffix for f in m.fragments]
    assert kinds == ["arrow", "bin"]
    assert (m.reader_feature_flags, m.writer_feature_flags) == (1, 1)
    names = sorted(os.listdir(Path(uri) / "_deletions"))
    assert names[0].startswith("0-1-") and names[0].endswith(".arrow") and names[1].startswith("1-1-")
    txn = ds.transaction.operation
    assert txn.deleted_fragment_ids == [2] and txn.predicate == "test"
    got = assert_same_as_pylance(uri)
    assert got.num_rows == 13000 - 3 - 5500 - 1000
    ds = delete_rows(ds, {0: [2, 5]})  # grows the Arrow file
    assert ds.fragments[0].deletion_file.num_deleted_rows == 4
    assert_every_version(uri)


@pytest.mark.parametrize("version", VERSIONS)
def test_append_keeps_index(tmp_path: Path, version: str) -> None:
    import lance

    uri = _pylance_ds(tmp_path, version)
    lance.dataset(uri).create_scalar_index("id", "BTREE")
    before = Dataset.open(uri)
    ds = before.commit(Append([pylance_fragment(uri, table(10, 5000), version)]))
    assert ds.manifest_file.index_section == before.manifest_file.index_section
    assert_same_as_pylance(uri)
    pl = lance.dataset(uri)
    assert pl.to_table(filter="id = 5003").column("id").to_pylist() == [5003]
    assert pl.to_table(filter="id = 17").column("id").to_pylist() == [17]
    assert pl.stats.index_stats("id_idx")["num_indexed_fragments"] == 3


def test_overwrite_pylance_dataset_drops_indices(tmp_path: Path) -> None:
    import lance

    from lance_spark_ops.table.write import write_dataset

    uri = _pylance_ds(tmp_path, "2.1", enable_stable_row_ids=True)
    lance.dataset(uri).delete("id < 10")
    lance.dataset(uri).create_scalar_index("id", "BTREE")
    ds = write_dataset(table(20, 7000), uri, mode="overwrite")
    assert ds.manifest_file.index_section is None and ds.data_storage_version == "2.1"
    assert ds.fragments[0].id == 3 and ds.next_row_id == 3020 and ds.reader_feature_flags == 2
    assert ids(assert_same_as_pylance(uri)) == list(range(7000, 7020))
    assert lance.dataset(uri).describe_indices() == []
    assert_every_version(uri)


def _rewrite(ds: Dataset, old_ids: list[int], version: str) -> Rewrite:
    """Compact ``old_ids`` into one new fragment (data written by pylance), row ids carried."""
    olds = [f for f in ds.fragments if f.id in old_ids]
    live = ds.to_table(columns=["id", "s", "f"], fragment_ids=old_ids, with_row_id=True)
    new = pylance_fragment(ds.uri, live.select(["id", "s", "f"]), version)
    if ds.uses_stable_row_ids:
        new.row_id_meta = encode_row_ids(live.column("_rowid").to_numpy()).to_bytes()
        created = []
        for f in olds:
            keep = ds._keep(f, f.physical_rows)
            created.append(ds.created_at_versions(f)[keep])
        meta = encode_versions(np.concatenate(created)).to_bytes()
        new.created_at_version_meta = new.last_updated_at_version_meta = meta
    return Rewrite([RewriteGroup(olds, [new])])


@pytest.mark.parametrize("stable", [False, True])
@pytest.mark.parametrize("version", VERSIONS)
def test_rewrite(tmp_path: Path, version: str, stable: bool) -> None:
    import lance

    uri = _pylance_ds(tmp_path, version, enable_stable_row_ids=stable)
    lance.dataset(uri).delete("id % 10 = 3")
    lance.dataset(uri).create_scalar_index("id", "BTREE")
    ds = Dataset.open(uri)
    before = {r["id"]: r["_rowid"] for r in ds.to_table(with_row_id=True).to_pylist()}
    ds = ds.commit(_rewrite(ds, [0, 1], version))
    assert [f.id for f in ds.fragments] == [2, 3] and ds.max_fragment_id == 3
    assert ds.fragments[1].deletion_file is None
    got = assert_same_as_pylance(uri)
    assert ids(got) == sorted(before)
    if stable:
        assert {r["id"]: r["_rowid"] for r in got.to_pylist()} == before
    # The index data was not rewritten: its bitmap keeps naming the removed fragments, so the
    # moved rows are scanned instead of looked up (pylance 14 loses them if the bitmap moves).
    assert set(fragment_bitmap(ds.manifest_file.index_section.indices[0])) == {0, 1, 2}
    pl = lance.dataset(uri)
    for x in (5, 1500, 2999, 13):
        assert pl.to_table(filter=f"id = {x}").column("id").to_pylist() == ([] if x % 10 == 3 else [x])


def test_rewrite_validation(tmp_path: Path) -> None:
    uri = _pylance_ds(tmp_path, "2.1", enable_stable_row_ids=True)
    ds = Dataset.open(uri)
    op = _rewrite(ds, [0], "2.1")
    op.groups[0].new_fragments[0].row_id_meta = None
    with pytest.raises(InvalidInputError, match="carry no row ids"):
        ds.commit(op)
    gone = Rewrite([RewriteGroup([ds.fragments[0]], [])])
    ds = ds.commit(gone)  # a rewrite may drop a fragment whose rows are all deleted
    with pytest.raises(CommitConflict, match="no longer holds"):
        ds.commit(gone)


@pytest.mark.parametrize("version", VERSIONS)
def test_merge_new_column(tmp_path: Path, version: str) -> None:
    import lance
    from lance.file import LanceFileWriter

    uri = _pylance_ds(tmp_path, version, n=1500)
    ds = Dataset.open(uri)
    new_id = ds.manifest.max_field_id() + 1
    schema = LanceSchema([*ds.lance_schema.fields, LanceField(new_id, "c", "int32", True, {})],
                         ds.lance_schema.metadata)
    major, minor = (int(x) for x in version.split("."))
    frags = []
    for f in ds.fragments:
        name = f"c_{f.id}.lance"
        vals = pa.table({"c": pa.array(np.arange(f.physical_rows, dtype=np.int32) + f.id * 1000)})
        with LanceFileWriter(f"{uri}/data/{name}", vals.schema, version=version) as w:
            w.write_batch(vals)
        size = os.path.getsize(f"{uri}/data/{name}")
        frags.append(type(f)(f.id, [*f.files, DataFile(name, [new_id], [0], major, minor, size)],
                             physical_rows=f.physical_rows))
    ds = ds.commit(Merge(frags, schema))
    got = assert_same_as_pylance(uri)
    assert got.column("c").to_pylist()[:3] == [0, 1, 2] and got.column("c").to_pylist()[1000] == 1000
    with pytest.raises(InvalidInputError, match="drops fragment"):
        ds.commit(Merge(frags[:1], schema))
    assert lance.dataset(uri).schema.names == ["id", "s", "f", "c"]


@pytest.mark.parametrize("version", VERSIONS)
def test_data_replacement_and_restore(tmp_path: Path, version: str) -> None:
    from lance.file import LanceFileWriter

    uri = _pylance_ds(tmp_path, version, n=500, per_file=300)
    ds = Dataset.open(uri)
    vals = pa.table({"f": pa.array(np.arange(300) * 100.0)})
    with LanceFileWriter(f"{uri}/data/new_f.lance", vals.schema, version=version) as w:
        w.write_batch(vals)
    major, minor = (int(x) for x in version.split("."))
    new_file = DataFile("new_f.lance", [2], [0], major, minor, os.path.getsize(f"{uri}/data/new_f.lance"))
    ds = ds.commit(DataReplacement([DataReplacementGroup(0, new_file)]))
    got = assert_same_as_pylance(uri)
    assert got.column("f").to_pylist()[:3] == [0.0, 100.0, 200.0]
    assert got.column("f").to_pylist()[300] == table(500).column("f")[300].as_py()
    ds = ds.commit(Restore(1))
    assert ds.version == 3
    assert assert_same_as_pylance(uri).equals(assert_same_as_pylance(uri, 1))


def test_commit_on_pylance_scenarios(pylance_dataset, tmp_path: Path) -> None:
    """Appends on top of every read-side scenario (deletions, stable ids, evolution, nesting)."""
    from tests.table.datasets import SCENARIOS

    for name in SCENARIOS:
        uri = str(tmp_path / name)
        shutil.copytree(pylance_dataset(name, "2.1"), uri)
        ds = Dataset.open(uri)
        rows = ds.to_table().slice(0, 5)
        frag = pylance_fragment(uri, rows, "2.1", schema=ds.schema)
        ds = ds.commit(Append([frag]))
        assert_same_as_pylance(uri)
        if ds.uses_stable_row_ids:
            assert ds.manifest.next_row_id == Dataset.open(uri, ds.version - 1).next_row_id + 5
