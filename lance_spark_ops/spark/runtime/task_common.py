"""What the executor-side tasks share: the data directory, the version numbers a ``DataFile``
records, and the id of the Spark task attempt running (files are named with it so the driver
can tell which attempt's files landed)."""

from __future__ import annotations

from lance_spark_ops.file.container import BYTES_BY_VERSION
from lance_spark_ops.file.legacy.writer import LEGACY_MINOR
from lance_spark_ops.table.paths import DATA_DIR

__all__ = ["DATA_DIR", "attempt_id", "file_version_numbers"]


def file_version_numbers(version: str) -> tuple[int, int]:
    """(major, minor) a DataFile records: 2.0 files are recorded as (2, 0) in manifests,
    legacy (0.1) files as (0, 2) like pylance 14 records them."""
    if version == "0.1":
        return (0, LEGACY_MINOR)
    return (2, 0) if version == "2.0" else BYTES_BY_VERSION[version]


def attempt_id() -> str:
    """``stage.attemptNumber.taskAttemptId`` of the running Spark task (unique per attempt
    within the application), ``local`` outside Spark."""
    try:
        from pyspark import TaskContext as SparkTaskContext

        ctx = SparkTaskContext.get()
        if ctx is not None:
            return f"{ctx.stageId()}.{ctx.attemptNumber()}.{ctx.taskAttemptId()}"
    except ImportError:  # pragma: no cover - pyspark is a dependency
        pass
    return "local"
