"""Appends that leave out nullable columns, as pylance 14 accepts and writes them."""

from __future__ import annotations

import lance
import pyarrow as pa
import pytest

from lance_spark_ops.errors import SchemaError
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.write import write_dataset


def _base() -> pa.Table:
    return pa.table({"a": pa.array([1, 2], pa.int64()), "s": ["x", "y"],
                     "st": pa.array([{"x": 1, "y": "a"}] * 2)})


def _same(uri: str) -> None:
    theirs = lance.dataset(uri).to_table(with_row_id=True, with_row_address=True)
    ours = Dataset.open(uri).to_table(with_row_id=True, with_row_address=True)
    assert ours.equals(theirs), (ours.to_pylist(), theirs.to_pylist())


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_append_leaving_out_nullable_columns(tmp_path, version):
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    for uri in (ours, theirs):
        lance.write_dataset(_base(), uri, data_storage_version=version)
    parts = [pa.table({"s": ["z"]}), pa.table({"a": pa.array([5], pa.int64()), "st": pa.array([{"y": "q"}])})]
    for t in parts:
        write_dataset(t, ours, mode="append")
        lance.write_dataset(t, theirs, mode="append")
    # the same fields in the new data files as pylance writes, and the same rows read back
    mine = [sorted(f.fields) for fr in lance.dataset(ours).get_fragments() for f in fr.metadata.files]
    their = [sorted(f.fields) for fr in lance.dataset(theirs).get_fragments() for f in fr.metadata.files]
    assert mine == their
    assert lance.dataset(ours).to_table().equals(lance.dataset(theirs).to_table())
    _same(ours)


def test_append_refuses_what_pylance_refuses(tmp_path):
    uri = str(tmp_path / "ds")
    schema = pa.schema([pa.field("a", pa.int64(), False), pa.field("s", pa.string())])
    lance.write_dataset(pa.table({"a": [1], "s": ["x"]}, schema=schema), uri)
    with pytest.raises(SchemaError, match="non-nullable"):
        write_dataset(pa.table({"s": ["z"]}), uri, mode="append")
    with pytest.raises(SchemaError, match="does not have"):
        write_dataset(pa.table({"a": pa.array([1], pa.int64()), "n": [1]}), uri, mode="append")
    with pytest.raises(SchemaError):
        write_dataset(pa.table({"a": pa.array([1], pa.int32())}), uri, mode="append")
    assert lance.dataset(uri).version == 1
