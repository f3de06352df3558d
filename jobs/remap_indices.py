"""Rewrite every index still behind a Lance dataset's fragment reuse index, on Spark, and trim
the reuse versions all indices have caught up with (after compaction with defer_index_remap).

    spark-submit jobs/remap_indices.py URI [--max-retries N] [--config FILE] ...
"""

# no `from __future__ import annotations`: the options dataclass must also build when this file
# is loaded by path without being registered in sys.modules (dataclasses look string annotations up there)

import sys
from dataclasses import dataclass
from typing import Any

from lance_spark_ops.errors import InvalidInputError
from lance_spark_ops.spark.indices.index_remap import MAX_INDEX_RETRIES
from lance_spark_ops.spark.runtime.cli import Job, run_job


@dataclass(frozen=True)
class RemapIndicesOptions:
    """Options of ``jobs/remap_indices.py``.

    Attributes:
        max_retries: times the one CreateIndex commit is redone from a fresh read when a
            concurrent commit conflicts with it.
    """

    max_retries: int = MAX_INDEX_RETRIES

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise InvalidInputError(f"max_retries must not be negative, got {self.max_retries}")


def _run(spark: Any, uri: str, storage_options: dict[str, Any], opts: RemapIndicesOptions) -> Any:
    from lance_spark_ops.spark.indices.index_remap import remap_indices

    return remap_indices(spark, uri, storage_options=storage_options, max_retries=opts.max_retries)


JOB = Job("remap_indices", _run, RemapIndicesOptions, __doc__.split("\n\n")[0])


def main(argv: list[str] | None = None) -> int:
    return run_job(JOB, argv)


if __name__ == "__main__":
    sys.exit(main())
