"""``DynamoDBManifestStore``: the external manifest store pylance uses for ``s3+ddb://`` URIs.

Same table and protocol as Lance's ``rust/lance-table/src/io/commit/dynamodb.rs``, so both
libraries can commit to one dataset. The table has the key schema ``base_uri`` (HASH, S) +
``version`` (RANGE, N); each item also holds ``path`` (S), ``committer`` (S) and ``size``
(N) (pylance may add ``e_tag``). ``base_uri`` and ``path`` are object_store paths inside the
bucket, without scheme or bucket: for ``s3+ddb://bkt/a/ds.lance?ddbTableName=T``::

    base_uri = "a/ds.lance"   version = 2
    path     = "a/ds.lance/_versions/18446744073709551613.manifest-<uuid>"  (staged)
            -> "a/ds.lance/_versions/18446744073709551613.manifest"         (finalised)

Puts are conditional (``attribute_not_exists`` / ``attribute_exists`` on both keys), reads
strongly consistent. The endpoint comes from the storage option ``dynamodb_endpoint`` or the
``DYNAMODB_ENDPOINT`` variable (as pylance), credentials and region from the usual
``aws_*`` options / environment (pylance's default region is us-west-2). Needs boto3
(extra ``[s3]``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from lance_spark_ops.errors import (
    CommitConflict,
    CorruptFileError,
    InvalidInputError,
    LanceError,
    NotFoundError,
    UnsupportedError,
)
from lance_spark_ops.table.commit.handler import ExternalManifestStore, register_uri_store

__all__ = ["DDB_TABLE_QUERY_KEY", "DynamoDBManifestStore", "create_manifest_table"]

DDB_TABLE_QUERY_KEY = "ddbTableName"
DEFAULT_REGION = "us-west-2"
COMMITTER = "lance-spark-ops"

_CLIENTS: dict[tuple, Any] = {}
_CLIENTS_LOCK = threading.Lock()
_CHECKED_TABLES: set[tuple[str, str | None]] = set()  # (table, endpoint): DescribeTable once per process


def _client_kwargs(options: Mapping[str, Any]) -> dict[str, Any]:
    """boto3 client arguments from pylance-style storage options (then the environment)."""
    opts = {str(k).lower(): v for k, v in options.items()}

    def first(*names: str, env: tuple[str, ...] = ()) -> Any:
        for n in names:
            if opts.get(n):
                return opts[n]
        for e in env:
            if os.environ.get(e):
                return os.environ[e]
        return None

    kw: dict[str, Any] = {
        "region_name": first("aws_region", "region", "aws_default_region", "default_region",
                             env=("AWS_REGION", "AWS_DEFAULT_REGION")) or DEFAULT_REGION,
        "endpoint_url": first("dynamodb_endpoint", env=("DYNAMODB_ENDPOINT", "AWS_ENDPOINT_URL_DYNAMODB")),
        "aws_access_key_id": first("aws_access_key_id", "access_key_id"),
        "aws_secret_access_key": first("aws_secret_access_key", "secret_access_key"),
        "aws_session_token": first("aws_session_token", "aws_token", "session_token", "token"),
    }
    return {k: v for k, v in kw.items() if v is not None}


def _client(options: Mapping[str, Any]) -> Any:
    kw = _client_kwargs(options)
    key = tuple(sorted((k, str(v)) for k, v in kw.items()))
    with _CLIENTS_LOCK:
        if key not in _CLIENTS:
            try:
                import boto3
            except ImportError:
                raise UnsupportedError("the DynamoDB manifest store needs boto3; "
                                       "pip install lance-spark-ops[s3]") from None
            _CLIENTS[key] = boto3.client("dynamodb", **kw)
        return _CLIENTS[key]


def _code(e: Exception) -> str:
    response = getattr(e, "response", None)
    return str(response.get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""


def _call(table: str, op: str, fn: Any, **kwargs: Any) -> Any:
    """One DynamoDB request; a failure other than a failed condition becomes a LanceError naming
    the operation and the error code (botocore's messages carry no credentials, but keep it short)."""
    try:
        return fn(**kwargs)
    except Exception as e:
        if _code(e) == "ConditionalCheckFailedException":
            raise
        raise LanceError(f"DynamoDB {op} failed: {_code(e) or type(e).__name__}", path=table) from e


def bucket_path(base_uri: str) -> str:
    """The object_store path of a dataset URI: ``s3://bkt/a/ds`` -> ``a/ds``."""
    parts = urlsplit(base_uri)
    return parts.path.strip("/") if parts.scheme else base_uri.strip("/")


class DynamoDBManifestStore(ExternalManifestStore):
    """Versions of datasets in one DynamoDB table (see the module docstring).

    ``storage_options`` as for the dataset (``aws_region``, keys, ``dynamodb_endpoint``).
    Picklable: the boto3 client is made per process on first use.
    """

    def __init__(self, table_name: str, storage_options: Mapping[str, Any] | None = None,
                 committer: str = COMMITTER) -> None:
        if not table_name:
            raise InvalidInputError("the DynamoDB manifest store needs a table name")
        self.table_name = table_name
        self.storage_options = dict(storage_options or {})
        self.committer = committer

    def __repr__(self) -> str:
        return f"DynamoDBManifestStore({self.table_name!r})"

    @property
    def client(self) -> Any:
        client = _client(self.storage_options)
        key = (self.table_name, _client_kwargs(self.storage_options).get("endpoint_url"))
        if key not in _CHECKED_TABLES:
            self._check_table(client)
            _CHECKED_TABLES.add(key)
        return client

    def _check_table(self, client: Any) -> None:
        """The table must exist with HASH ``base_uri`` and RANGE ``version`` (as pylance checks)."""
        try:
            desc = client.describe_table(TableName=self.table_name)["Table"]
        except Exception as e:  # noqa: BLE001 - botocore's error classes are per client
            if _code(e) == "ResourceNotFoundException":
                raise NotFoundError("DynamoDB table does not exist", path=self.table_name) from None
            raise LanceError(f"cannot describe the DynamoDB table: {type(e).__name__}",
                             path=self.table_name) from e
        keys = {(k["AttributeName"], k["KeyType"]) for k in desc.get("KeySchema", [])}
        if keys != {("base_uri", "HASH"), ("version", "RANGE")}:
            raise InvalidInputError("DynamoDB manifest table must have the keys base_uri (HASH) and version "
                                    f"(RANGE), has {sorted(keys)}", path=self.table_name)

    # -- path mapping: our relative paths <-> pylance's bucket paths -------------------------
    @staticmethod
    def _to_store(base: str, path: str) -> str:
        return f"{base}/{path}" if base else path

    @staticmethod
    def _from_store(base: str, path: str, version: int) -> str:
        prefix = f"{base}/" if base else ""
        if not path.startswith(prefix):
            raise CorruptFileError(f"version {version} is recorded at {path!r}, outside the dataset {base!r}",
                                   path=base)
        return path[len(prefix):]

    def _item(self, base: str, version: int, path: str, size: int) -> dict[str, Any]:
        return {"base_uri": {"S": base}, "version": {"N": str(version)},
                "path": {"S": self._to_store(base, path)}, "committer": {"S": self.committer},
                "size": {"N": str(size)}}

    def _path_of(self, base: str, item: Mapping[str, Any]) -> tuple[int, str]:
        try:
            version = int(item["version"]["N"])
            path = item["path"]["S"]
        except (KeyError, TypeError, ValueError):
            raise CorruptFileError(f"DynamoDB item {sorted(item)} lacks a numeric version or a string path",
                                   path=self.table_name) from None
        return version, self._from_store(base, path, version)

    # -- ExternalManifestStore ---------------------------------------------------------------
    def get(self, base_uri: str, version: int) -> str | None:
        base = bucket_path(base_uri)
        out = _call(self.table_name, "GetItem", self.client.get_item, TableName=self.table_name,
                    ConsistentRead=True, Key={"base_uri": {"S": base}, "version": {"N": str(version)}})
        item = out.get("Item")
        return None if item is None else self._path_of(base, item)[1]

    def get_latest(self, base_uri: str) -> tuple[int, str] | None:
        base = bucket_path(base_uri)
        out = _call(self.table_name, "Query", self.client.query, TableName=self.table_name,
                    ConsistentRead=True, ScanIndexForward=False, Limit=1,
                    KeyConditionExpression="base_uri = :base_uri",
                    ExpressionAttributeValues={":base_uri": {"S": base}})
        items = out.get("Items") or []
        return self._path_of(base, items[0]) if items else None

    def _put(self, base_uri: str, version: int, path: str, size: int, condition: str) -> None:
        base = bucket_path(base_uri)
        _call(self.table_name, "PutItem", self.client.put_item, TableName=self.table_name,
              Item=self._item(base, version, path, size), ConditionExpression=condition)

    def put_if_not_exists(self, base_uri: str, version: int, path: str, size: int) -> None:
        try:
            self._put(base_uri, version, path, size,
                      "attribute_not_exists(base_uri) AND attribute_not_exists(version)")
        except Exception as e:
            if _code(e) == "ConditionalCheckFailedException":
                raise CommitConflict(f"version {version} is already recorded in DynamoDB",
                                     path=base_uri) from None
            raise

    def put_if_exists(self, base_uri: str, version: int, path: str, size: int) -> None:
        try:
            self._put(base_uri, version, path, size,
                      "attribute_exists(base_uri) AND attribute_exists(version)")
        except Exception as e:
            if _code(e) == "ConditionalCheckFailedException":
                raise NotFoundError(f"version {version} is not recorded in DynamoDB", path=base_uri) from None
            raise

    def delete(self, base_uri: str) -> None:
        base = bucket_path(base_uri)
        pages = self.client.get_paginator("query").paginate(
            TableName=self.table_name, ConsistentRead=True, KeyConditionExpression="base_uri = :base_uri",
            ExpressionAttributeValues={":base_uri": {"S": base}})
        for page in pages:
            for item in page.get("Items", []):
                self.client.delete_item(TableName=self.table_name,
                                        Key={"base_uri": item["base_uri"], "version": item["version"]})


def create_manifest_table(table_name: str, storage_options: Mapping[str, Any] | None = None) -> None:
    """Create a DynamoDB table with the layout pylance expects (on-demand billing)."""
    client = _client(dict(storage_options or {}))
    client.create_table(
        TableName=table_name, BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "base_uri", "KeyType": "HASH"},
                   {"AttributeName": "version", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": "base_uri", "AttributeType": "S"},
                              {"AttributeName": "version", "AttributeType": "N"}])
    client.get_waiter("table_exists").wait(TableName=table_name, WaiterConfig={"Delay": 1, "MaxAttempts": 30})


def _from_uri(params: Mapping[str, str], storage_options: Mapping[str, Any],
              root: str) -> DynamoDBManifestStore:
    """The store named by an ``s3+ddb://bucket/path?ddbTableName=T`` URI's query."""
    if set(params) != {DDB_TABLE_QUERY_KEY} or not params[DDB_TABLE_QUERY_KEY]:
        raise InvalidInputError("s3+ddb:// expects exactly one query parameter "
                                f"{DDB_TABLE_QUERY_KEY}=<table>", path=root)
    return DynamoDBManifestStore(params[DDB_TABLE_QUERY_KEY], storage_options)


register_uri_store("ddb", _from_uri)
