"""Fault runners for the index jobs (issues #27, #28): ``create_index`` and
``optimize_indices``. ``runners.RUNNERS`` takes them in once the BTREE / BITMAP builders exist.

* ``create_index``: builds ``id_idx`` (BTREE on id) or ``s_idx`` (BITMAP on s), replacing one
  pylance may have made; ``optimize_indices``: ``prepare`` has pylance index id and s, then
  moves a few rows to a new fragment (deleted and appended again unchanged), which the indices
  do not cover. Concurrent pylance writers include its own ``optimize_indices``.
* ``post_check``: equality queries through every index answer as a scan does; after a success
  no other commit followed, the job's indices leave no row unindexed.
"""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa

from lance_spark_ops.spark.runtime.tuning import Tuning
from tests.faults.model import WRITER_KINDS

INDEX_WRITER_KINDS = (*WRITER_KINDS, "optimize_indices")
_BEFORE: dict[str, int] = {}  # dataset -> latest version after prepare


def _target(rng: random.Random) -> tuple[str, str, str]:
    return rng.choice([("id", "BTREE", "id_idx"), ("s", "BITMAP", "s_idx")])


def create_args(uri: str, rng: random.Random, rows: pa.Table | None = None) -> list[str]:
    column, kind, name = _target(rng)
    return [uri, "--column", column, "--type", kind, "--name", name]


def create_local(uri: str, so: dict[str, Any], rng: random.Random, rows: pa.Table | None = None,
                 tuning: Tuning | None = None) -> Any:
    from lance_spark_ops.spark.indices.indexing import create_index

    column, kind, name = _target(rng)
    return create_index(None, uri, column, kind, name=name, storage_options=so, tuning=tuning)


def create_prepare(root: str, rng: random.Random) -> None:
    import lance

    _BEFORE[root] = lance.dataset(root).version


def optimize_prepare(root: str, rng: random.Random) -> None:
    """pylance's indices on id and s, then rows moved (unchanged) to a fragment they miss."""
    import lance

    ds = lance.dataset(root)
    ds.create_scalar_index("id", "BTREE", name="id_idx")
    ds.create_scalar_index("s", "BITMAP", name="s_idx")
    if rng.random() < 0.5:  # a second segment for the merge to fold in
        _move_rows(root, rng)
        lance.dataset(root).optimize.optimize_indices(num_indices_to_merge=0)
    _move_rows(root, rng)
    _BEFORE[root] = lance.dataset(root).version


def _move_rows(root: str, rng: random.Random) -> None:
    import lance

    ds = lance.dataset(root)
    ids = ds.to_table(columns=["id"])["id"].to_pylist()
    pick = sorted(rng.sample(ids, min(len(ids), rng.randint(5, 30))))
    where = f"id IN ({', '.join(map(str, pick))})"
    rows = ds.to_table(filter=where)
    ds.delete(where)
    lance.write_dataset(rows, root, mode="append")


def optimize_args(uri: str, rng: random.Random, rows: pa.Table | None = None) -> list[str]:
    merge = rng.choice([None, 0, 2])
    return [uri] + ([] if merge is None else ["--num-indices-to-merge", str(merge)])


def optimize_local(uri: str, so: dict[str, Any], rng: random.Random, rows: pa.Table | None = None,
                   tuning: Tuning | None = None) -> Any:
    from lance_spark_ops.spark.indices.indexing import optimize_indices

    return optimize_indices(None, uri, num_indices_to_merge=rng.choice([None, 0, 2]), storage_options=so,
                            tuning=tuning)


def post_check(root: str, ok: bool, job_seed: float) -> list[str]:
    """Index answers equal scans; after a success no other commit followed, nothing unindexed."""
    import lance

    before = _BEFORE.pop(root)
    ds = lance.dataset(root)
    bad: list[str] = []
    names = {i["name"] for i in ds.list_indices()}
    ids = ds.to_table(columns=["id"])["id"].to_numpy()
    rng = random.Random(job_seed)
    probes = [int(ids[rng.randrange(len(ids))]) for _ in range(3)] if len(ids) else []
    for probe in probes + [1]:
        for col, val in (("id", str(probe)), ("s", f"'r{probe}'")):
            got = ds.to_table(columns=["id", "val"], filter=f"{col} = {val}")
            want = ds.to_table(columns=["id", "val"], filter=f"{col} = {val}", use_scalar_index=False)
            if not got.sort_by("id").equals(want.sort_by("id")):
                bad.append(f"{col} = {val}: the index answers {got.num_rows} rows, a scan {want.num_rows}")
    if ok and ds.version == before + 1:  # only the job committed since prepare
        for name in sorted(names & {"id_idx", "s_idx"}):
            n = ds.stats.index_stats(name)["num_unindexed_rows"]
            if n:
                bad.append(f"index {name}: {n} unindexed rows after the job")
    return bad
