"""Legacy (0.1) datasets keep their format through our jobs: compaction and deletion
materialization write legacy files pylance reads identically; commits keep the dictionary
values legacy manifests carry; appends write legacy files."""

from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops.spark.files.compaction import compact, materialize_deletions
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.write import delete_rows, write_dataset
from tests.legacy.cases import legacy_table


def _make(uri: str, stable: bool = False) -> pa.Table:
    t = legacy_table(n_repeat=4)
    lance.write_dataset(t, uri, data_storage_version="legacy", max_rows_per_file=9, max_rows_per_group=4,
                        enable_stable_row_ids=stable)
    ds = lance.dataset(uri)
    ds.delete("id % 5 = 2")
    return ds.to_table(with_row_id=False)


def _same(uri: str) -> None:
    theirs = lance.dataset(uri).to_table(with_row_id=True, with_row_address=True)
    ours = Dataset.open(uri).to_table(with_row_id=True, with_row_address=True)
    assert ours.equals(theirs)


@pytest.mark.parametrize("stable", [False, True])
def test_compaction_keeps_legacy_format(tmp_path, stable):
    uri = str(tmp_path / "ds")
    before = _make(uri, stable)
    metrics = compact(None, uri, target_rows_per_fragment=25)
    ds = lance.dataset(uri)
    assert metrics.new_version == ds.version and ds.data_storage_version == "0.1"
    assert all(f.file_major_version == 0 for fr in ds.get_fragments() for f in fr.metadata.files)
    assert len(ds.get_fragments()) < 5
    assert ds.to_table().equals(before)  # pylance reads our legacy files identically
    _same(uri)


def test_materialize_deletions_on_legacy(tmp_path):
    uri = str(tmp_path / "ds")
    before = _make(uri)
    materialize_deletions(None, uri, threshold=0.0)
    ds = lance.dataset(uri)
    assert all(fr.metadata.deletion_file is None for fr in ds.get_fragments())
    assert ds.to_table().equals(before)
    _same(uri)


def test_commit_keeps_legacy_dictionaries(tmp_path):
    """Legacy manifests hold dictionary values; a commit of ours must write them again."""
    uri = str(tmp_path / "ds")
    t = pa.table({"a": pa.array(range(6)), "d": pa.array(["x", "y", "z"] * 2).dictionary_encode()})
    lance.write_dataset(t, uri, data_storage_version="legacy")
    delete_rows(Dataset.open(uri), {0: [1]})
    assert lance.dataset(uri).to_table()["d"].to_pylist() == ["x", "z", "x", "y", "z"]
    _same(uri)


def test_append_to_legacy_dataset(tmp_path):
    uri = str(tmp_path / "ds")
    t = legacy_table()
    lance.write_dataset(t, uri, data_storage_version="legacy")
    write_dataset(t.slice(2, 5), uri, mode="append")
    ds = lance.dataset(uri)
    assert ds.count_rows() == t.num_rows + 5
    assert ds.get_fragments()[-1].metadata.files[0].file_major_version == 0
    _same(uri)


@pytest.mark.parametrize("version", ["legacy", "0.1"])
def test_create_legacy_dataset(tmp_path, version):
    uri = str(tmp_path / "ds")
    t = legacy_table()
    write_dataset(t, uri, data_storage_version=version)
    assert lance.dataset(uri).data_storage_version == "0.1"
    assert lance.dataset(uri).to_table().equals(Dataset.open(uri).to_table())


@pytest.mark.parametrize("target", ["2.0", "2.2"])
def test_compaction_moves_legacy_to_2x(tmp_path, target):
    uri = str(tmp_path / "ds")
    before = _make(uri)
    n_frags = len(lance.dataset(uri).get_fragments())
    compact(None, uri, target_rows_per_fragment=15, data_storage_version=target, migrate_legacy=True,
            commit_every=1)
    ds = lance.dataset(uri)
    assert ds.data_storage_version == target and len(ds.get_fragments()) < n_frags
    files = [f for fr in ds.get_fragments() for f in fr.metadata.files]
    assert all(f.file_major_version == 2 for f in files)
    assert ds.to_table().equals(before.cast(ds.schema))
    _same(uri)
    assert lance.dataset(uri, version=ds.version - 2).data_storage_version == "0.1"  # history intact


def test_moving_legacy_needs_the_option(tmp_path):
    from lance_spark_ops.errors import UnsupportedError

    uri = str(tmp_path / "ds")
    _make(uri)
    with pytest.raises(UnsupportedError, match="mixes file versions"):
        compact(None, uri, data_storage_version="2.2")


def _derived(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Columns of three kinds v1 stores differently (numbers keep no validity, strings do)."""
    a = batch.column("a").to_numpy()
    # v1 writes a null number's slot as the buffer holds it (pylance: whatever the UDF left
    # there); zeros under the nulls make that defined
    half = pa.array(np.where(a % 3 == 0, 0.0, a / 2.0), mask=(a % 3 == 0))
    text = pa.array([str(v) for v in a.tolist()], pa.string(), mask=(a % 4 == 0))
    return pa.record_batch([pa.array(a * 2), half, text], names=["b", "h", "t"])


def test_add_columns_on_legacy_writes_v1_files_as_pylance(tmp_path):
    """pylance 14 adds columns to a legacy dataset in v1 files; so does add_columns: same
    fields and file versions recorded, pylance reads both the same (deleted rows included)."""
    import shutil

    from lance_spark_ops.spark.files.columns import ColumnFunction, add_columns

    uri, twin = str(tmp_path / "ds"), str(tmp_path / "twin")
    lance.write_dataset(pa.table({"a": pa.array(range(30), pa.int64())}), uri, data_storage_version="legacy",
                        max_rows_per_file=8)
    lance.dataset(uri).delete("a % 5 = 1")
    shutil.copytree(uri, twin)
    lance.dataset(twin).add_columns(_derived, read_columns=["a"])
    schema = pa.schema([("b", pa.int64()), ("h", pa.float64()), ("t", pa.string())])
    add_columns(None, uri, ColumnFunction(_derived, schema, ("a",)))
    ours, theirs = lance.dataset(uri), lance.dataset(twin)
    assert ours.data_storage_version == "0.1"
    assert ours.to_table(with_row_id=True).equals(theirs.to_table(with_row_id=True))
    layout = [[(d.fields, d.file_major_version, d.file_minor_version) for d in f.data_files()]
              for f in ours.get_fragments()]
    assert layout == [[(d.fields, d.file_major_version, d.file_minor_version) for d in f.data_files()]
                      for f in theirs.get_fragments()]
    assert Dataset.open(uri).to_table(with_row_id=True).equals(ours.to_table(with_row_id=True))
