"""import_delta from and to S3 (moto): deltalake writes the Delta table there with the same
pylance-style options; pylance reads the Lance result."""

from __future__ import annotations

import pytest

from lance_spark_ops.spark.files.compaction import compact
from lance_spark_ops.spark.files.delta_import import import_delta
from lance_spark_ops.table.commit.dynamodb import create_manifest_table
from tests.delta.deltas import rows
from tests.s3.conftest import S3

pytest.importorskip("deltalake")


def test_delta_on_s3_into_lance_on_s3_ddb(s3: S3) -> None:
    import lance
    from deltalake import DeltaTable, write_deltalake

    delta_so = {**s3.options, "aws_s3_allow_unsafe_rename": "true"}  # one writer: no lock needed
    delta_uri = s3.uri("delta")
    write_deltalake(delta_uri, rows(0, 200), partition_by=["k"], storage_options=delta_so)
    write_deltalake(delta_uri, rows(200, 100), mode="append", storage_options=delta_so)
    DeltaTable(delta_uri, storage_options=delta_so).delete("id % 4 = 0")
    expected = DeltaTable(delta_uri, storage_options=delta_so).to_pyarrow_table()

    table_name = f"T{s3.bucket}"
    create_manifest_table(table_name, s3.ddb_options)
    lance_uri = f"s3+ddb://{s3.bucket}/imported.lance?ddbTableName={table_name}"
    m = import_delta(None, delta_uri, lance_uri, storage_options=s3.ddb_options,
                     delta_storage_options=delta_so, max_rows_per_file=60)
    assert m.rows == expected.num_rows == 225 and m.lance_files > 3
    got = lance.dataset(lance_uri, storage_options=s3.ddb_options).to_table()
    assert got.sort_by("id").equals(expected.sort_by("id"))
    # our compaction commits through DynamoDB too; pylance sees it through its s3+ddb handler
    c = compact(None, lance_uri, storage_options=s3.ddb_options, target_rows_per_fragment=1000)
    ds = lance.dataset(lance_uri, storage_options=s3.ddb_options)
    assert c.new_version == ds.version > 1 and len(ds.get_fragments()) == 1
    assert ds.to_table().sort_by("id").equals(expected.sort_by("id"))
