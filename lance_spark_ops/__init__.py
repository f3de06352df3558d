"""lance-spark-ops: maintenance operations for Lance datasets, run as Apache Spark jobs."""

from __future__ import annotations

from typing import Any

from lance_spark_ops.errors import (
    CommitConflict,
    CommitError,
    CorruptFileError,
    FormatError,
    LanceError,
    NotFoundError,
    UnsupportedError,
)

__all__ = [
    "CommitConflict",
    "CommitError",
    "CorruptFileError",
    "FormatError",
    "LanceError",
    "LanceFileReader",
    "NotFoundError",
    "UnsupportedError",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # Lazy so that `import lance_spark_ops` stays cheap on Spark executors.
    if name == "LanceFileReader":
        from lance_spark_ops.file.reader import LanceFileReader

        return LanceFileReader
    if name == "LanceFileWriter":
        from lance_spark_ops.file.writer import LanceFileWriter

        return LanceFileWriter
    if name == "Dataset":
        from lance_spark_ops.table.dataset import Dataset

        return Dataset
    if name == "write_dataset":
        from lance_spark_ops.table.write import write_dataset

        return write_dataset
    if name == "SqliteManifestStore":
        from lance_spark_ops.table.commit.handler import SqliteManifestStore

        return SqliteManifestStore
    raise AttributeError(name)
