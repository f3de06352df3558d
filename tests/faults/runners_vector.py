"""Fault runners for the vector index jobs (issue #28): ``create_index`` / ``optimize_indices``
on IVF_PQ and IVF_HNSW_SQ (``KINDS``; IVF_RQ in its own test), small (16-d vectors, 2-4
partitions) so a run stays fast.

* ``prepare`` adds ``vec`` (``model.vectors`` of id; the concurrent writers' rows carry it too);
  ``create_vector_index`` may find a pylance index of that name (replaced); for
  ``optimize_vector_indices`` pylance builds the index, maybe a delta segment, then moves rows
  (deleted and appended again unchanged) to a fragment it misses.
* ``post_check``: every version's indices have their files and answer a nearest query (a failed
  or killed build left no half-written segment referenced, and no file of a commit whose
  outcome was unknown was deleted); on the latest version a query probing every partition and
  refined over every row answers as brute force does (a live row's own vector first, no
  deleted or duplicate row); after a success no other commit followed, 0 unindexed rows.
"""

from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import pyarrow as pa

from lance_spark_ops.spark.runtime.tuning import Tuning
from tests.faults.model import VEC, vectors
from tests.support.pylance_indices import index_segments

NAME = "vec_idx"
_BEFORE: dict[str, int] = {}  # dataset -> latest version after prepare


KINDS = ("IVF_PQ", "IVF_HNSW_SQ")


def _kind(rng: random.Random) -> tuple[str, dict[str, Any]]:
    kind = rng.choice(list(KINDS))
    params: dict[str, Any] = {"num_partitions": rng.choice([2, 4])}
    if kind == "IVF_PQ":
        params["num_sub_vectors"] = 4
    elif kind.startswith("IVF_HNSW_"):
        params.update(m=8, ef_construction=40)
    return kind, params


def _add_vec(root: str) -> None:
    import lance

    def fn(batch: pa.RecordBatch) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays([vectors(batch["id"].to_numpy())], names=[VEC])

    lance.dataset(root).add_columns(fn, read_columns=["id"])


def create_args(uri: str, rng: random.Random, rows: pa.Table | None = None) -> list[str]:
    kind, params = _kind(rng)
    return [uri, "--column", VEC, "--type", kind, "--name", NAME, "--replace",
            *(a for k, v in params.items() for a in ("--param", f"{k}={v}"))]


def create_local(uri: str, so: dict[str, Any], rng: random.Random, rows: pa.Table | None = None,
                 tuning: Tuning | None = None) -> Any:
    from lance_spark_ops.spark.indices.indexing import create_index

    kind, params = _kind(rng)
    return create_index(None, uri, VEC, kind, name=NAME, replace=True, storage_options=so, tuning=tuning,
                        **params)


def create_prepare(root: str, rng: random.Random) -> None:
    import lance

    _add_vec(root)
    if rng.random() < 0.4:  # an index of that name for the job to replace
        kind, params = _kind(rng)
        lance.dataset(root).create_index(VEC, kind, name=NAME, **params)
    _BEFORE[root] = lance.dataset(root).version


def optimize_prepare(root: str, rng: random.Random) -> None:
    """pylance's vector index, maybe a delta segment, then rows moved to a fragment it misses."""
    import lance

    from tests.faults.runners_index import _move_rows

    _add_vec(root)
    kind, params = _kind(rng)
    lance.dataset(root).create_index(VEC, kind, name=NAME, **params)
    if rng.random() < 0.5:
        _move_rows(root, rng)
        lance.dataset(root).optimize.optimize_indices(num_indices_to_merge=0)
    _move_rows(root, rng)
    _BEFORE[root] = lance.dataset(root).version


def optimize_args(uri: str, rng: random.Random, rows: pa.Table | None = None) -> list[str]:
    merge = rng.choice([None, 0, 2])
    return [uri] + ([] if merge is None else ["--num-indices-to-merge", str(merge)])


def optimize_local(uri: str, so: dict[str, Any], rng: random.Random, rows: pa.Table | None = None,
                   tuning: Tuning | None = None) -> Any:
    from lance_spark_ops.spark.indices.indexing import optimize_indices

    return optimize_indices(None, uri, num_indices_to_merge=rng.choice([None, 0, 2]), storage_options=so,
                            tuning=tuning)


def _query(ds: Any, q: np.ndarray, k: int, **kw: Any) -> pa.Table:
    return ds.to_table(columns=["id"], nearest={"column": VEC, "q": q, "k": k, **kw})


def _versions_readable(root: str) -> list[str]:
    """Every version's index segments have their files and answer a nearest query."""
    import lance

    bad: list[str] = []
    q = vectors(np.array([1]))[0].values.to_numpy()
    for v in (x["version"] for x in lance.dataset(root).versions()):
        dv = lance.dataset(root, version=v)
        segs = [i for i in index_segments(dv) if VEC in i["fields"]]
        for seg in segs:
            for f in ("index.idx", "auxiliary.idx"):
                if not os.path.exists(os.path.join(root, "_indices", seg["uuid"], f)):
                    bad.append(f"version {v}: index {seg['name']} segment {seg['uuid']} has no {f}")
        if segs:
            try:
                _query(dv, q, 5, nprobes=4)
            except Exception as e:  # noqa: BLE001 - a segment that does not read is the finding
                bad.append(f"version {v}: a nearest query through {NAME} fails: {e!r}"[:400])
    return bad


def post_check(root: str, ok: bool, job_seed: float) -> list[str]:
    import lance

    before = _BEFORE.pop(root)
    bad = _versions_readable(root)
    ds = lance.dataset(root)
    segs = [i for i in index_segments(ds) if i["name"] == NAME]
    if not segs:
        return bad + ([f"index {NAME} missing after a successful job"] if ok else [])
    live = ds.to_table(columns=["id"])["id"].to_numpy()
    rng = random.Random(job_seed)
    for probe in [int(live[rng.randrange(len(live))]) for _ in range(3)]:
        q = vectors(np.array([probe]))[0].values.to_numpy()
        # every partition probed, candidates refined over more than all rows: exact when the
        # index holds every live row once (without refining, pylance's own merged PQ segments
        # miss rows' own vectors: its merge re-encodes them coarsely)
        got = _query(ds, q, 10, nprobes=4, ef=10000, refine_factor=1000)["id"].to_numpy()
        brute = _query(ds, q, 10, use_index=False)["id"].to_numpy()
        if got.size != min(10, live.size) or len(set(got.tolist())) != got.size:
            bad.append(f"query for id {probe}: {got.size} rows, {len(set(got.tolist()))} distinct")
        if not np.isin(got, live).all():
            bad.append(f"query for id {probe} answers deleted ids {np.setdiff1d(got, live)[:5].tolist()}")
        if got.size and got[0] != probe:
            bad.append(f"query for id {probe}'s own vector answers id {got[0]} first")
        if not np.array_equal(np.sort(got), np.sort(brute)):
            bad.append(f"query for id {probe} over every row: {got.tolist()}, brute force {brute.tolist()}")
    if ok and ds.version == before + 1:  # only the job committed since prepare
        n = ds.stats.index_stats(NAME)["num_unindexed_rows"]
        if n:
            bad.append(f"index {NAME}: {n} unindexed rows after the job")
    return bad
