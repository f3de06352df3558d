"""Legacy (file format 0.1) reads: every type pylance 14 writes, file- and dataset-level,
compared with pylance's own ``to_table`` (v1 files keep no validity for most types, so the
expected values are pylance's reading, not the input)."""

from __future__ import annotations

import glob

import lance
import pyarrow as pa
import pytest

from lance_spark_ops.errors import CorruptFileError
from lance_spark_ops.file.legacy import LegacyFileReader
from lance_spark_ops.file.reader import LanceFileReader
from lance_spark_ops.table.dataset import Dataset
from tests.legacy.cases import legacy_columns, legacy_table


@pytest.fixture(scope="module")
def one_file(tmp_path_factory) -> tuple[str, pa.Table]:
    """One legacy data file holding every column, in batches of 3 rows (several pages each)."""
    uri = str(tmp_path_factory.mktemp("legacy") / "all")
    lance.write_dataset(legacy_table(), uri, data_storage_version="legacy", max_rows_per_group=3)
    (path,) = glob.glob(f"{uri}/data/*.lance")
    return path, lance.dataset(uri).to_table()


@pytest.mark.parametrize("column", list(legacy_columns()))
def test_reader_matrix(one_file, column):
    path, expected = one_file
    r = LanceFileReader(path)
    assert isinstance(r, LegacyFileReader) and r.version == "0.1" and r.num_rows == expected.num_rows
    exp = expected.select([column])
    got = r.read([column])
    assert got.schema.equals(exp.schema)
    assert got.equals(exp), (got[column].to_pylist(), exp[column].to_pylist())
    assert pa.Table.from_batches(list(r.iter_batches([column], batch_rows=4))).equals(exp)
    idx = [9, 0, 4, 4, 3, 8]
    assert r.take(idx, [column]).equals(exp.take(idx))


def test_reader_whole_file(one_file):
    path, expected = one_file
    assert LanceFileReader(path).read().equals(expected)


def test_damaged_legacy_file_is_typed(tmp_path, one_file):
    path, _ = one_file
    data = bytearray(open(path, "rb").read())
    bad = tmp_path / "bad.lance"
    data[-16:-8] = (len(data) * 2).to_bytes(8, "little")  # metadata position past the end
    bad.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError):
        LanceFileReader(str(bad))


def _assert_same(uri: str) -> None:
    theirs = lance.dataset(uri).to_table(with_row_id=True, with_row_address=True)
    ours = Dataset.open(uri).to_table(with_row_id=True, with_row_address=True)
    assert ours.schema.equals(theirs.schema), (ours.schema, theirs.schema)
    assert ours.equals(theirs)


def test_dataset_with_deletions_and_appends(tmp_path):
    uri = str(tmp_path / "ds")
    t = legacy_table(n_repeat=3)
    lance.write_dataset(t, uri, data_storage_version="legacy", max_rows_per_file=10, max_rows_per_group=4)
    ds = lance.write_dataset(t.slice(0, 7), uri, mode="append", max_rows_per_group=4)
    ds.delete("id % 4 = 1 or id = 20")
    assert len(ds.get_fragments()) == 4 and ds.data_storage_version == "0.1"
    _assert_same(uri)
    ours = Dataset.open(uri)
    assert ours.count_rows() == ds.count_rows()
    # per fragment with deleted rows included: physical rows and addresses line up
    frag = ours.fragments[1]
    rows = pa.Table.from_batches(list(ours.scan_fragment(frag, ["id"], with_row_address=True,
                                                         include_deleted=True)))
    assert rows.num_rows == frag.physical_rows
    assert rows["_rowaddr"].to_pylist() == [(frag.id << 32) | i for i in range(frag.physical_rows)]


def test_dataset_with_added_and_dropped_columns(tmp_path):
    uri = str(tmp_path / "ds")
    t = pa.table({"a": pa.array(range(30), pa.int64()), "s": [str(i) for i in range(30)]})
    ds = lance.write_dataset(t, uri, data_storage_version="legacy", max_rows_per_file=10)
    ds.add_columns({"c": "a * 2"})
    ds.drop_columns(["s"])
    ds.delete("a = 3")
    assert len(lance.dataset(uri).get_fragments()[0].metadata.files) == 2
    _assert_same(uri)


def test_dataset_with_stable_row_ids(tmp_path):
    uri = str(tmp_path / "ds")
    ds = lance.write_dataset(pa.table({"a": pa.array(range(30), pa.int64())}), uri,
                             data_storage_version="legacy", max_rows_per_file=10, enable_stable_row_ids=True)
    ds.delete("a < 4")
    _assert_same(uri)


def test_inspect_legacy_file(one_file):
    from lance_spark_ops.file.inspect import summarize

    path, expected = one_file
    text = summarize(LanceFileReader(path).metadata)
    assert "legacy Lance file" in text and f"{expected.num_rows} rows" in text
