"""Bring a Lance dataset's indices up to date, on Spark (pylance's optimize_indices): index
the fragments added since, merge segments, or retrain.

    spark-submit jobs/optimize_indices.py URI [--index-names a,b] [--num-indices-to-merge N]
        [--retrain] [--retrain-if-drift R] [--merge-policy pylance|tiered] [--tier-fanout N]
        [--config FILE] ...
"""

# no `from __future__ import annotations`: the options dataclass must also build when this file
# is loaded by path without being registered in sys.modules (dataclasses look string annotations up there)

import sys
from dataclasses import dataclass
from typing import Any

from lance_spark_ops.errors import InvalidInputError
from lance_spark_ops.spark.indices.indexing import DEFAULT_TIER_FANOUT, MAX_INDEX_RETRIES, MERGE_POLICIES
from lance_spark_ops.spark.runtime.cli import Job, run_job


@dataclass(frozen=True)
class OptimizeIndicesOptions:
    """Options of ``jobs/optimize_indices.py``.

    Attributes:
        index_names: comma-separated names of the indices to optimize (default: all).
        num_indices_to_merge: newest segments of each index merged with the new data (0 adds a
            delta segment). Default as pylance 14: 1 for scalar indices; for vector indices a
            delta unless partitions are due a split or join (then all segments merged).
        retrain: rebuild each index from the whole column (all segments replaced).
        retrain_if_drift: retrain a vector index when its new rows' mean squared distance to
            the nearest centroid is at least this many times the indexed rows' (sampled; e.g.
            1.5); otherwise optimize as asked.
        merge_policy: pylance (as pylance's optimize_indices) or tiered (segments of similar
            size merged in parallel rounds until one is left).
        tier_fanout: segments merged together in one tiered merge.
        max_retries: times a commit is redone from a fresh read when a concurrent commit
            conflicts with it.
    """

    index_names: str | None = None
    num_indices_to_merge: int | None = None
    retrain: bool = False
    retrain_if_drift: float | None = None
    merge_policy: str = "pylance"
    tier_fanout: int = DEFAULT_TIER_FANOUT
    max_retries: int = MAX_INDEX_RETRIES

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise InvalidInputError(f"max_retries must not be negative, got {self.max_retries}")
        if self.num_indices_to_merge is not None and self.num_indices_to_merge < 0:
            raise InvalidInputError("num_indices_to_merge must not be negative, "
                                    f"got {self.num_indices_to_merge}")
        if self.retrain_if_drift is not None and not self.retrain_if_drift > 0:
            raise InvalidInputError(f"retrain_if_drift must be positive, got {self.retrain_if_drift}")
        if self.tier_fanout < 2:
            raise InvalidInputError(f"tier_fanout must be at least 2, got {self.tier_fanout}")

    def names(self) -> list[str] | None:
        if self.index_names is None:
            return None
        names = [n.strip() for n in self.index_names.split(",") if n.strip()]
        if not names:
            raise InvalidInputError("--index-names names no index")
        return names


def _check(uri: str, storage_options: dict[str, Any], opts: OptimizeIndicesOptions) -> None:
    from lance_spark_ops.spark.indices.indexing import check_optimize
    from lance_spark_ops.table.dataset import Dataset

    ds = Dataset.open(uri, storage_options=storage_options)
    check_optimize(ds, opts.names(), opts.num_indices_to_merge, opts.merge_policy, opts.tier_fanout)


def _run(spark: Any, uri: str, storage_options: dict[str, Any], opts: OptimizeIndicesOptions) -> Any:
    from lance_spark_ops.spark.indices.indexing import optimize_indices

    return optimize_indices(spark, uri, index_names=opts.names(),
                            num_indices_to_merge=opts.num_indices_to_merge, retrain=opts.retrain,
                            merge_policy=opts.merge_policy, tier_fanout=opts.tier_fanout,
                            storage_options=storage_options, max_retries=opts.max_retries,
                            retrain_if_drift=opts.retrain_if_drift)


JOB = Job("optimize_indices", _run, OptimizeIndicesOptions, __doc__.split("\n\n")[0],
          choices={"merge_policy": MERGE_POLICIES}, precheck=_check)


def main(argv: list[str] | None = None) -> int:
    return run_job(JOB, argv)


if __name__ == "__main__":
    sys.exit(main())
