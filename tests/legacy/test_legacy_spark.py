"""One Spark run for issue #16: a legacy (0.1) dataset compacted by executors into legacy
files; pylance reads the result identically (clones and blobs are compacted locally in
tests/table)."""

from __future__ import annotations

import lance

from lance_spark_ops.spark.files.compaction import compact
from lance_spark_ops.table.dataset import Dataset
from tests.legacy.cases import legacy_table


def _same(uri: str) -> None:
    theirs = lance.dataset(uri).to_table(with_row_id=True, with_row_address=True)
    assert Dataset.open(uri).to_table(with_row_id=True, with_row_address=True).equals(theirs)


def test_spark_compacts_legacy_dataset(spark, tmp_path):
    uri = str(tmp_path / "legacy")
    lance.write_dataset(legacy_table(4), uri, data_storage_version="legacy", max_rows_per_file=9)
    lance.dataset(uri).delete("id % 3 = 0")
    before = lance.dataset(uri).to_table()
    metrics = compact(spark, uri, target_rows_per_fragment=100)
    assert metrics.new_version == lance.dataset(uri).version
    assert lance.dataset(uri).data_storage_version == "0.1" and len(lance.dataset(uri).get_fragments()) == 1
    assert lance.dataset(uri).to_table().equals(before)
    _same(uri)

