"""Build an index on a column of a Lance dataset, on Spark (pylance's create_scalar_index /
create_index).

    spark-submit jobs/create_index.py URI --column C --type BTREE [--name N] [--replace]
        [--param key=value ...] [--config FILE] ...

Types: BTREE, BITMAP, LABEL_LIST, ZONEMAP, BLOOMFILTER, NGRAM, RTREE (GeoArrow geometry
columns), MINHASHLSH (near-duplicate text), INVERTED (FTS), IVF_FLAT, IVF_PQ, IVF_SQ,
IVF_HNSW_FLAT, IVF_HNSW_SQ, IVF_HNSW_PQ (IVF_RQ is refused). Parameters take pylance's names
(``--param num_partitions=256 --param metric=cosine``); a value that reads as JSON is taken
as such (numbers, true/false, lists), any other as text.
"""

# no `from __future__ import annotations`: the options dataclass must also build when this file
# is loaded by path without being registered in sys.modules (dataclasses look string annotations up there)

import sys
from dataclasses import dataclass
from typing import Any

from lance_spark_ops.errors import InvalidInputError
from lance_spark_ops.spark.indices.index_registry import type_names
from lance_spark_ops.spark.runtime.cli import Job, run_job
from lance_spark_ops.spark.runtime.config import parse_param_values


@dataclass(frozen=True)
class CreateIndexOptions:
    """Options of ``jobs/create_index.py``.

    Attributes:
        column: the column to index (a dotted path for a nested field).
        type: the index type, as pylance names it, in any case: {TYPES}.
        name: the index name (default: COLUMN_idx, as pylance).
        replace: replace an index of that name (default: yes for scalar types, no for vector
            types, as pylance).
        param: an index parameter as KEY=VALUE with pylance's names; give one per parameter.
        max_retries: times the build and commit are redone from a fresh read when a concurrent
            commit conflicts with it.
    """

    column: str
    type: str
    name: str | None = None
    replace: bool | None = None
    param: tuple[str, ...] = ()
    max_retries: int = 3

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise InvalidInputError(f"max_retries must not be negative, got {self.max_retries}")
        # the --param pairs parsed once, here at the edge (not an option field: no flag of its own)
        object.__setattr__(self, "_params", parse_param_values(self.param))

    @property
    def params(self) -> dict[str, Any]:
        """The ``--param`` values by pylance's names (JSON values parsed, text kept)."""
        return dict(self._params)


# the type list in --help follows the index registry
CreateIndexOptions.__doc__ = CreateIndexOptions.__doc__.replace("{TYPES}", type_names())


def _check(uri: str, storage_options: dict[str, Any], opts: CreateIndexOptions) -> None:
    from lance_spark_ops.spark.indices.indexing import check_create_index
    from lance_spark_ops.table.dataset import Dataset

    ds = Dataset.open(uri, storage_options=storage_options)
    check_create_index(ds, opts.column, opts.type, opts.name, opts.replace, opts.params)


def _run(spark: Any, uri: str, storage_options: dict[str, Any], opts: CreateIndexOptions) -> Any:
    from lance_spark_ops.spark.indices.indexing import create_index

    return create_index(spark, uri, opts.column, opts.type, name=opts.name, replace=opts.replace,
                        storage_options=storage_options, max_retries=opts.max_retries,
                        **opts.params)


JOB = Job("create_index", _run, CreateIndexOptions, __doc__.split("\n\n")[0], precheck=_check)


def main(argv: list[str] | None = None) -> int:
    return run_job(JOB, argv)


if __name__ == "__main__":
    sys.exit(main())
