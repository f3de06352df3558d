"""lance-spark-ops: maintenance operations for Lance datasets, run as Apache Spark jobs.

The root holds the table and file API (``Dataset``, ``write_dataset``, ``LanceFileReader``,
``LanceFileWriter``, ``SqliteManifestStore``) and every typed error; the Spark jobs are in
``lance_spark_ops.spark``. Heavy names load on first use so that ``import lance_spark_ops``
stays cheap on Spark executors.
"""

from __future__ import annotations

from lance_spark_ops._lazy import lazy_exports
from lance_spark_ops._version import __version__
from lance_spark_ops.errors import (
    AccessDeniedError,
    CommitConflict,
    CommitError,
    CommitStateUnknown,
    CorruptFileError,
    DatasetNotFound,
    FormatError,
    IncompatibleTransaction,
    InconsistentDatasetError,
    InvalidInputError,
    LanceError,
    NotFoundError,
    SchemaError,
    UnsupportedError,
    WriteRefused,
)

_LAZY = {
    "Dataset": "lance_spark_ops.table.dataset",
    "LanceFileReader": "lance_spark_ops.file.reader",
    "LanceFileWriter": "lance_spark_ops.file.writer",
    "SqliteManifestStore": "lance_spark_ops.table.commit.handler",
    "write_dataset": "lance_spark_ops.table.write",
}

__all__ = [
    "AccessDeniedError",
    "CommitConflict",
    "CommitError",
    "CommitStateUnknown",
    "CorruptFileError",
    "Dataset",
    "DatasetNotFound",
    "FormatError",
    "InconsistentDatasetError",
    "IncompatibleTransaction",
    "InvalidInputError",
    "LanceError",
    "LanceFileReader",
    "LanceFileWriter",
    "NotFoundError",
    "SchemaError",
    "SqliteManifestStore",
    "UnsupportedError",
    "WriteRefused",
    "__version__",
    "write_dataset",
]


__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
