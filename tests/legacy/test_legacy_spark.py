"""One Spark run over the kinds of datasets issue #16 is about: a legacy (0.1) dataset and a
shallow clone, compacted by executors; pylance reads both results identically."""

from __future__ import annotations

import lance
import pyarrow as pa

from lance_spark_ops.spark.compact import compact
from lance_spark_ops.table.dataset import Dataset
from tests.legacy.cases import legacy_table


def _same(uri: str) -> None:
    theirs = lance.dataset(uri).to_table(with_row_id=True, with_row_address=True)
    assert Dataset.open(uri).to_table(with_row_id=True, with_row_address=True).equals(theirs)


def test_spark_compacts_legacy_dataset_and_clone(spark, tmp_path):
    uri = str(tmp_path / "legacy")
    lance.write_dataset(legacy_table(4), uri, data_storage_version="legacy", max_rows_per_file=9)
    lance.dataset(uri).delete("id % 3 = 0")
    before = lance.dataset(uri).to_table()
    metrics = compact(spark, uri, target_rows_per_fragment=100)
    assert metrics.new_version == lance.dataset(uri).version
    assert lance.dataset(uri).data_storage_version == "0.1" and len(lance.dataset(uri).get_fragments()) == 1
    assert lance.dataset(uri).to_table().equals(before)
    _same(uri)

    src, dst = str(tmp_path / "src"), str(tmp_path / "clone")
    ds = lance.write_dataset(pa.table({"a": pa.array(range(30), pa.int64())}), src, max_rows_per_file=10)
    ds.tags.create("t", ds.version)
    ds.shallow_clone(dst, "t")
    compact(spark, dst, target_rows_per_fragment=100)
    assert lance.dataset(dst).to_table()["a"].to_pylist() == list(range(30))
    _same(dst)
