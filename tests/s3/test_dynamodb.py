"""The DynamoDB manifest store on its own (moto): pylance's table layout, conditional puts,
typed errors; ``s3+ddb://`` URIs."""

from __future__ import annotations

import pickle

import pytest

from lance_spark_ops.errors import (
    CommitConflict,
    CorruptFileError,
    InvalidInputError,
    LanceError,
    NotFoundError,
)
from lance_spark_ops.table.commit.dynamodb import DynamoDBManifestStore, create_manifest_table
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.write import write_dataset
from tests.s3.conftest import S3
from tests.table.commit_helpers import table


def test_store_protocol_and_item_layout(s3: S3) -> None:
    name = f"kv{s3.bucket}"
    create_manifest_table(name, s3.ddb_options)
    kv = pickle.loads(pickle.dumps(DynamoDBManifestStore(name, s3.ddb_options)))
    base = f"s3://{s3.bucket}/a/ds.lance"
    assert kv.get_latest(base) is None and kv.get(base, 1) is None
    kv.put_if_not_exists(base, 1, "_versions/1.manifest-x", 10)
    with pytest.raises(CommitConflict):
        kv.put_if_not_exists(base, 1, "_versions/1.manifest-y", 11)
    kv.put_if_exists(base, 1, "_versions/1.manifest", 10)
    with pytest.raises(NotFoundError):
        kv.put_if_exists(base, 2, "_versions/2.manifest", 10)
    kv.put_if_not_exists(base, 2, "_versions/2.manifest-z", 12)
    assert kv.get_latest(base) == (2, "_versions/2.manifest-z") and kv.get(base, 1) == "_versions/1.manifest"
    item = s3.client("dynamodb").get_item(TableName=name, Key={"base_uri": {"S": "a/ds.lance"},
                                                                "version": {"N": "1"}})["Item"]
    assert item == {"base_uri": {"S": "a/ds.lance"}, "version": {"N": "1"},
                    "path": {"S": "a/ds.lance/_versions/1.manifest"}, "committer": {"S": "lance-spark-ops"},
                    "size": {"N": "10"}}
    stray = {"base_uri": {"S": "a/ds.lance"}, "version": {"N": "3"},
             "path": {"S": "elsewhere/_versions/3.manifest"}}
    s3.client("dynamodb").put_item(TableName=name, Item=stray)
    with pytest.raises(CorruptFileError, match="outside the dataset"):
        kv.get_latest(base)
    kv.delete(base)
    assert kv.get_latest(base) is None


def test_table_checks(s3: S3) -> None:
    with pytest.raises(NotFoundError):
        DynamoDBManifestStore(f"missing{s3.bucket}", s3.ddb_options).get_latest("s3://b/x")
    bad = f"bad{s3.bucket}"
    s3.client("dynamodb").create_table(
        TableName=bad, BillingMode="PAY_PER_REQUEST", KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}])
    with pytest.raises(InvalidInputError, match="base_uri"):
        DynamoDBManifestStore(bad, s3.ddb_options).get_latest("s3://b/x")
    with pytest.raises(LanceError, match="DynamoDB") as e:  # a request DynamoDB rejects: typed, no secrets
        kv = DynamoDBManifestStore(f"kv{s3.bucket}", s3.ddb_options)
        create_manifest_table(kv.table_name, s3.ddb_options)
        kv.put_if_not_exists("s3://b", 1, "_versions/1.manifest", 1)  # bucket root: empty key
    assert "testing-secret" not in str(e.value)


def test_s3_ddb_uri_written_by_us_read_by_pylance(s3: S3) -> None:
    import lance

    name = f"uri{s3.bucket}"
    create_manifest_table(name, s3.ddb_options)
    uri = f"s3+ddb://{s3.bucket}/ours.lance?ddbTableName={name}"
    write_dataset(table(10), uri, storage_options=s3.ddb_options)
    write_dataset(table(5, 10), uri, mode="append", storage_options=s3.ddb_options)
    ds = lance.dataset(uri, storage_options=s3.ddb_options)
    assert ds.version == 2 and sorted(ds.to_table().column("id").to_pylist()) == list(range(15))
    assert Dataset.open(uri, storage_options=s3.ddb_options).version == 2
    with pytest.raises(InvalidInputError, match="ddbTableName"):
        Dataset.open(f"s3+ddb://{s3.bucket}/ours.lance?table={name}", storage_options=s3.ddb_options)


def test_open_and_commit_ask_the_store_not_the_listing(slow_s3) -> None:  # type: ignore[no-untyped-def]
    """Through DynamoDB the latest version is the store's record (one query, as pylance
    resolves it): opening a table of 12 versions pylance wrote lists nothing of ``_versions/``
    and reads one manifest; a version asked for by number and an append (which looks up the
    versions after the one it read, and finalises its staged manifest with one copy) list
    nothing either. pylance reads every result."""
    import lance

    s3 = slow_s3.direct
    name = f"recent{s3.bucket}"
    create_manifest_table(name, s3.ddb_options)
    uri = f"s3+ddb://{s3.bucket}/many.lance?ddbTableName={name}"
    for i in range(12):
        lance.write_dataset(table(5, 5 * i), uri, mode="append" if i else "create",
                            storage_options=s3.ddb_options)
    via = {**slow_s3.options, "dynamodb_endpoint": s3.endpoint}  # S3 requests through the proxy
    slow_s3.proxy.reset()
    ds = Dataset.open(uri, storage_options=via)
    ops = slow_s3.proxy.stats()["ops"]
    assert ds.version == 12 and ops == {"GET": 1}, ops
    assert ds.to_table().sort_by("id").equals(lance.dataset(uri, storage_options=s3.ddb_options)
                                              .to_table().sort_by("id"))
    slow_s3.proxy.reset()
    assert Dataset.open(uri, version=7, storage_options=via).count_rows() == 35
    assert "LIST" not in slow_s3.proxy.stats()["ops"]
    slow_s3.proxy.reset()
    assert write_dataset(table(5, 100), uri, mode="append", storage_options=via).version == 13
    # the staged manifest finalised: its size (s3fs's copy asks), the copy, the delete
    ops = slow_s3.proxy.stats()["ops"]
    assert "LIST" not in ops and ops["HEAD"] == ops["COPY"] == ops["DELETE"] == 1, ops
    assert ops["GET"] == 1, ops  # the open's manifest, which the commit does not read again
    theirs = lance.dataset(uri, storage_options=s3.ddb_options)
    assert theirs.version == 13 and theirs.count_rows() == 65
