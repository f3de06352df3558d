"""Fault runner for ``maintain`` (issue #29): one table (the harness's dataset, by URI) under a
policy that compacts and materializes deletions, so the fleet job's own steps - measuring,
deciding, running the drivers one after another, re-measuring - meet the faults. A table's
failure is recorded in maintain's result, not raised: the runner raises it again (typed) so the
harness sees the outcome; a clean rerun measures again and finishes what is left."""

from __future__ import annotations

import json
import os
import random
import tempfile
from typing import Any

import pyarrow as pa

from lance_spark_ops.spark.runtime.tuning import Tuning


def policy(rng: random.Random) -> dict[str, Any]:
    return {"actions": ["remap_indices", "materialize_deletions", "compact"],
            "target_rows_per_fragment": rng.choice([500, 1000, 4000]), "compact_min_small_fragments": 2,
            "compact_min_small_share": 0.0, "materialize_deleted_fraction": 0.0}


def maintain_args(uri: str, rng: random.Random, rows: pa.Table | None = None) -> list[str]:
    fd, path = tempfile.mkstemp(suffix=".json", prefix="lso-policy-")
    with os.fdopen(fd, "w") as f:
        json.dump(policy(rng), f)
    return [uri, "--policy", path]


def maintain_local(uri: str, so: dict[str, Any], rng: random.Random, rows: pa.Table | None = None,
                   tuning: Tuning | None = None) -> dict[str, Any]:
    from lance_spark_ops import errors
    from lance_spark_ops.spark.fleet.maintenance import maintain

    result = maintain(None, uri, policy(rng), storage_options=so, tuning=tuning)
    table = result.tables[0]
    if table.status == "failed":
        cls = getattr(errors, table.error["type"], errors.LanceError)
        raise (cls if isinstance(cls, type) and issubclass(cls, errors.LanceError) else errors.LanceError)(
            table.error["message"])
    versions = [a["metrics"].get("new_version") for a in table.actions if a.get("metrics")]
    return {"new_version": max([v for v in versions if v] or [0]) or None}
