"""Import a Delta Lake table's current snapshot (or one version of it) into a Lance dataset, on
Spark, in one commit.

    spark-submit jobs/import_delta.py DELTA_URI LANCE_URI [--mode create|append|overwrite]
        [--data-storage-version V] [--delta-version N] [--max-rows-per-file N]
        [--delta-storage-option KEY=VALUE ...] [--config FILE] ...

Storage options use pylance's names (aws_endpoint, aws_region, ...); the Delta side's default
to the Lance side's. In a config file, ``delta_uri`` and ``uri`` name the two tables.
"""

# no `from __future__ import annotations`: the options dataclass must also build when this file
# is loaded by path without being registered in sys.modules (dataclasses look string annotations up there)

import sys
from dataclasses import dataclass, field
from typing import Any

from lance_spark_ops.errors import InvalidInputError
from lance_spark_ops.spark.files.delta_import import DEFAULT_MAX_ROWS_PER_FILE, MODES
from lance_spark_ops.spark.runtime.cli import Job, parse_key_values, run_job

DEFAULT_ROWS_PER_TASK = 4 * 1024 * 1024  # import_delta's default


@dataclass(frozen=True)
class ImportDeltaOptions:
    """Options of ``jobs/import_delta.py``.

    Attributes:
        delta_uri: the Delta table to read (a local path, s3://, gs://, az://)
        mode: create (fails if the Lance dataset exists), append (creates it when absent) or
            overwrite.
        data_storage_version: Lance file version to write, e.g. 2.1 (none: 2.2; append: the
            dataset's own).
        delta_version: the Delta table version to import (none: the latest).
        max_rows_per_file: at most this many rows per Lance data file.
        rows_per_task: about this many rows of Delta files per Spark task.
        delta_storage_option: a storage option of the Delta table's filesystem, KEY=VALUE (none
            given: the Lance side's storage options); values are never printed.
    """

    delta_uri: str
    mode: str = "create"
    data_storage_version: str | None = None
    delta_version: int | None = None
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE
    rows_per_task: int = DEFAULT_ROWS_PER_TASK
    delta_storage_option: tuple[str, ...] = field(default=(), metadata={"secret": True})

    def __post_init__(self) -> None:
        if not self.delta_uri.strip():
            raise InvalidInputError("delta_uri must not be empty")
        if self.max_rows_per_file <= 0 or self.rows_per_task <= 0:
            raise InvalidInputError("max_rows_per_file and rows_per_task must be positive")
        if self.delta_version is not None and self.delta_version < 0:
            raise InvalidInputError(f"delta_version must not be negative, got {self.delta_version}")
        parse_key_values(self.delta_storage_option, "--delta-storage-option")


def _run(spark: Any, uri: str, storage_options: dict[str, Any], opts: ImportDeltaOptions) -> Any:
    from lance_spark_ops.spark import import_delta

    delta_so = parse_key_values(opts.delta_storage_option, "--delta-storage-option") or None
    return import_delta(spark, opts.delta_uri, uri, opts.mode, storage_options=storage_options,
                        delta_storage_options=delta_so, data_storage_version=opts.data_storage_version,
                        delta_version=opts.delta_version, max_rows_per_file=opts.max_rows_per_file,
                        rows_per_task=opts.rows_per_task)


JOB = Job("import_delta", _run, ImportDeltaOptions, __doc__.split("\n\n")[0], choices={"mode": MODES},
          positional=("delta_uri",), uri_help="the Lance dataset to write (LANCE_URI)",
          needs_dataset=False)  # it creates the dataset


def main(argv: list[str] | None = None) -> int:
    return run_job(JOB, argv)


if __name__ == "__main__":
    sys.exit(main())
