"""Fault runners for the index jobs (issues #27, #28): ``create_index`` and
``optimize_indices``. ``runners.RUNNERS`` takes them in once the BTREE / BITMAP builders exist.

* ``create_index``: builds ``id_idx`` (BTREE on id) or ``s_idx`` (BITMAP on s), replacing one
  pylance may have made; ``optimize_indices``: ``prepare`` has pylance index id and s, then
  moves a few rows to a new fragment (deleted and appended again unchanged), which the indices
  do not cover. Concurrent pylance writers include its own ``optimize_indices``.
* ``post_check``: equality queries through every index answer as a scan does; after a success
  no other commit followed, the job's indices leave no row unindexed.

RTREE and MINHASHLSH (issue #37; runners ``*_rtree_minhash``): ``prepare`` adds ``geo``
(``model.points`` of id; the concurrent writers' rows carry it too); the jobs build RTREE on geo
(``geo_idx``) or MINHASHLSH on s (``s_mh``), optimize both (pylance made them, maybe a delta
segment, then rows moved), or compact under both. ``geo_post_check``: every version's segments
of the two have files and answer; on the latest, spatial filters through the RTREE answer as a
scan does and a ``MinHashQuery`` of a row's text finds exactly the live rows of that text at
distance 0; after a successful build / optimize no other commit followed, nothing unindexed.
"""

from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import pyarrow as pa

from lance_spark_ops.spark.runtime.tuning import Tuning
from tests.faults.model import GEO, GEO_FIELD, WRITER_KINDS, points
from tests.support.pylance_indices import index_segments

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
    names = {i["name"] for i in index_segments(ds)}
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


# -- RTREE and MINHASHLSH -----------------------------------------------------------------------
GEO_TARGETS = ((GEO, "RTREE", "geo_idx"), ("s", "MINHASHLSH", "s_mh"))
GEO_NAMES = tuple(name for _, _, name in GEO_TARGETS)
BOXES = ((0.0, 0.0, 20.0, 20.0), (35.5, 10.0, 60.0, 99.0), (90.0, 90.0, 120.0, 120.0))


def add_geo(root: str) -> None:
    import lance

    def fn(batch: pa.RecordBatch) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays([points(batch["id"].to_numpy())], schema=pa.schema([GEO_FIELD]))

    lance.dataset(root).add_columns(fn, read_columns=["id"])


def _geo_target(rng: random.Random) -> tuple[str, str, str]:
    return rng.choice(GEO_TARGETS)


def geo_create_args(uri: str, rng: random.Random, rows: pa.Table | None = None) -> list[str]:
    column, kind, name = _geo_target(rng)
    return [uri, "--column", column, "--type", kind, "--name", name]


def geo_create_local(uri: str, so: dict[str, Any], rng: random.Random, rows: pa.Table | None = None,
                     tuning: Tuning | None = None) -> Any:
    from lance_spark_ops.spark.indices.indexing import create_index

    column, kind, name = _geo_target(rng)
    return create_index(None, uri, column, kind, name=name, storage_options=so, tuning=tuning)


def geo_create_prepare(root: str, rng: random.Random) -> None:
    """``geo`` added; maybe a pylance index of one of the names, for the job to replace."""
    import lance

    add_geo(root)
    if rng.random() < 0.4:
        column, kind, name = rng.choice(GEO_TARGETS)
        lance.dataset(root).create_scalar_index(column, kind, name=name)
    _BEFORE[root] = lance.dataset(root).version


def geo_indexed_prepare(root: str, rng: random.Random) -> None:
    """``geo`` added, pylance's RTREE and MINHASHLSH, maybe a delta segment, then rows moved
    (unchanged) to a fragment they miss."""
    import lance

    add_geo(root)
    for column, kind, name in GEO_TARGETS:
        lance.dataset(root).create_scalar_index(column, kind, name=name)
    if rng.random() < 0.5:
        _move_rows(root, rng)
        lance.dataset(root).optimize.optimize_indices(num_indices_to_merge=0)
    _move_rows(root, rng)
    _BEFORE[root] = lance.dataset(root).version


def _geo_answers(ds: Any, probes: list[int]) -> list[str]:
    """Spatial filters through the RTREE vs a scan; MinHash queries of the probes' texts (when
    a MINHASHLSH index is there: pylance has no MinHash search without one)."""
    from lance.query import MinHashQuery

    bad: list[str] = []
    if "s_mh" not in {i["name"] for i in index_segments(ds)}:
        probes = []
    for x0, y0, x1, y1 in BOXES:
        poly = f"POLYGON(({x0} {y0}, {x1} {y0}, {x1} {y1}, {x0} {y1}, {x0} {y0}))"
        flt = f"st_intersects({GEO}, st_geomfromtext('{poly}'))"
        got = ds.to_table(columns=["id"], filter=flt)["id"].to_numpy()
        want = ds.to_table(columns=["id"], filter=flt, use_scalar_index=False)["id"].to_numpy()
        if not np.array_equal(np.sort(got), np.sort(want)):
            missing, extra = np.setdiff1d(want, got)[:5].tolist(), np.setdiff1d(got, want)[:5].tolist()
            bad.append(f"{flt}: the index answers {got.size} rows, a scan {want.size} (missing {missing}, "
                       f"extra {extra})")
    for probe in probes:
        row = ds.to_table(columns=["s"], filter=f"id = {probe}")
        if not row.num_rows:
            continue
        text = row["s"][0].as_py()
        got = ds.to_table(columns=["id"], nearest=MinHashQuery(text, "s"), limit=50)
        exact = np.sort(got["id"].to_numpy()[np.asarray(got["_distance"].to_numpy()) == 0])
        want = np.sort(ds.to_table(columns=["id"], filter=f"s = '{text}'")["id"].to_numpy())
        if not np.array_equal(exact, want):
            bad.append(f"MinHashQuery({text!r}): ids {exact.tolist()} at distance 0, rows of that text "
                       f"{want.tolist()}")
    return bad


def geo_post_check(root: str, ok: bool, job_seed: float, unindexed: bool = True) -> list[str]:
    """Every version's RTREE / MINHASHLSH segments have files and answer; the latest answers as
    scans do; after a success no other commit followed, nothing unindexed (``unindexed``)."""
    import lance

    before = _BEFORE.pop(root)
    bad: list[str] = []
    for v in (x["version"] for x in lance.dataset(root).versions()):
        dv = lance.dataset(root, version=v)
        segs = [i for i in index_segments(dv) if i["name"] in GEO_NAMES]
        for seg in segs:
            d = os.path.join(root, "_indices", seg["uuid"])
            if not os.path.isdir(d) or not os.listdir(d):
                bad.append(f"version {v}: index {seg['name']} segment {seg['uuid']} has no files")
        if segs:
            try:
                _geo_answers(dv, [1])
            except Exception as e:  # noqa: BLE001 - a segment that does not read is the finding
                names = sorted({s["name"] for s in segs})
                bad.append(f"version {v}: a query through {names} fails: {e!r}"[:400])
    ds = lance.dataset(root)
    ids = ds.to_table(columns=["id"])["id"].to_numpy()
    rng = random.Random(job_seed)
    probes = [int(ids[rng.randrange(len(ids))]) for _ in range(3)] if len(ids) else []
    bad += _geo_answers(ds, probes + [1])
    if unindexed and ok and ds.version == before + 1:  # only the job committed since prepare
        for name in sorted({i["name"] for i in index_segments(ds)} & set(GEO_NAMES)):
            n = ds.stats.index_stats(name)["num_unindexed_rows"]
            if n:
                bad.append(f"index {name}: {n} unindexed rows after the job")
    return bad


def geo_compact_post_check(root: str, ok: bool, job_seed: float) -> list[str]:
    """As ``geo_post_check``; a compaction may leave rows unindexed (pylance's does: an RTREE
    is not remapped)."""
    return geo_post_check(root, ok, job_seed, unindexed=False)
