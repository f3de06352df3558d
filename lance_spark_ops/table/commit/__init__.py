"""Committing new dataset versions: the atomic put (``handler``), what an operation does to the
manifest (``operations``, ``indices``), conflicts with concurrent commits (``conflict``,
``rebase``) and the retry loop (``commit``)."""

from lance_spark_ops.table.commit.commit import (
    DEFAULT_MAX_RETRIES,
    CommitResult,
    commit_transaction,
    load_transaction,
)
from lance_spark_ops.table.commit.dynamodb import DynamoDBManifestStore  # registers s3+ddb://
from lance_spark_ops.table.commit.handler import (
    CommitHandler,
    ExternalManifestCommitHandler,
    ExternalManifestStore,
    PutIfNotExistsCommitHandler,
    SqliteManifestStore,
)
from lance_spark_ops.table.commit.namespace_store import NamespaceManifestStore  # registers <scheme>+lsons://

__all__ = [
    "NamespaceManifestStore",
    "DEFAULT_MAX_RETRIES",
    "CommitHandler",
    "CommitResult",
    "DynamoDBManifestStore",
    "ExternalManifestCommitHandler",
    "ExternalManifestStore",
    "PutIfNotExistsCommitHandler",
    "SqliteManifestStore",
    "commit_transaction",
    "load_transaction",
]
