"""The table of jobs under fault: how to run each in this process (``spark=None``) and as
``spark-submit jobs/<job>.py``. Adding a job is one ``JobRunner`` entry in ``RUNNERS``.

``vacuum`` joins the table when ``lance_spark_ops.spark.files.vacuuming`` exists (``retain_versions``
only, so files no version references yet - concurrent writers' - are never its to delete);
its ``post_check`` asserts that no data file referenced before the run by some version, and by
no version left after it, remains. ``remap_indices``, the ``lance`` data-source writer
(``datasource``) and ``import_delta`` come from ``runners_write``; ``maintain`` from ``runners_maintain``;
the vector index jobs (``create_vector_index``, ``optimize_vector_indices``) from ``runners_vector``.
"""

from __future__ import annotations

import importlib.util
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lance_spark_ops.spark.runtime.tuning import Tuning
from tests.faults import runners_index as ri
from tests.faults import runners_maintain as rm
from tests.faults import runners_vector as rv
from tests.faults import runners_write as rw

ADDED = "v2"  # the column add_columns adds: id * 2


@dataclass(frozen=True)
class JobRunner:
    """One job: ``local(uri, storage_options, rng, rows, tuning)`` runs it in-process and returns
    its metrics (``tuning``: the job's, e.g. a hook before its commit); ``script`` + ``args(uri,
    rng, rows)`` run it with spark-submit; ``phases`` are the progress phases a driver kill may
    wait for; ``kind`` is the job name in its progress lines."""

    name: str
    kind: str
    script: str
    args: Callable[[str, random.Random, pa.Table | None], list[str]]
    local: Callable[[str, dict[str, Any], random.Random, pa.Table | None, Tuning | None], Any]
    phases: tuple[str, ...]
    work_phases: tuple[str, ...] = ()  # phases whose Spark tasks run Python workers (worker kills)
    stable: bool = False  # the dataset needs stable row ids
    column: str | None = None  # a column the job adds (checked as id * 2)
    prepare: Callable[[str, random.Random], None] | None = None  # after the dataset is made (pylance)
    rows: Callable[[random.Random], pa.Table] | None = None  # rows the job writes (all or nothing)
    # job-specific invariants: (uri, job ok, job seed - ``random.Random(seed)`` was the job's rng)
    post_check: Callable[[str, bool, float], list[str]] | None = None
    # a failed run may leave versions older than the latest broken until a rerun finishes (vacuum:
    # data files go before the manifests, as in Lance's cleanup); the rerun must leave all readable
    may_break_old_versions: bool = False
    # Spark runs a Python data source's writer planning and commit in driver-side Python processes
    # of the worker daemon, which are not retried: a worker kill may fail the job (never its rows)
    worker_kill_may_fail: bool = False
    writer_kinds: tuple[str, ...] | None = None  # the concurrent pylance ops (None: all of model's)


def _compact_opts(rng: random.Random) -> dict[str, Any]:
    return {"target_rows_per_fragment": rng.choice([500, 1000, 4000]),
            "commit_every": rng.choice([None, None, 1, 2])}


def _compact_args(uri: str, rng: random.Random, rows: pa.Table | None = None) -> list[str]:
    o = _compact_opts(rng)
    out = [uri, "--target-rows-per-fragment", str(o["target_rows_per_fragment"])]
    return out + (["--commit-every", str(o["commit_every"])] if o["commit_every"] else [])


def _compact_local(uri: str, so: dict[str, Any], rng: random.Random, rows: pa.Table | None = None,
                   tuning: Tuning | None = None) -> Any:
    from lance_spark_ops.spark import compact

    return compact(None, uri, _compact_opts(rng), storage_options=so, tuning=tuning)


def _materialize_local(uri: str, so: dict[str, Any], rng: random.Random, rows: pa.Table | None = None,
                       tuning: Tuning | None = None) -> Any:
    from lance_spark_ops.spark.files.compaction import materialize_deletions

    return materialize_deletions(None, uri, 0.0, storage_options=so, tuning=tuning)


def _double_id(batch: pa.RecordBatch) -> dict[str, pa.Array]:
    return {ADDED: pc.multiply(batch.column("id"), 2)}


def _add_columns_local(uri: str, so: dict[str, Any], rng: random.Random, rows: pa.Table | None = None,
                       tuning: Tuning | None = None) -> Any:
    from lance_spark_ops.spark.files.columns import ColumnFunction, add_columns

    fn = ColumnFunction(_double_id, pa.schema([(ADDED, pa.int64())]), ("id",))
    return add_columns(None, uri, fn, storage_options=so, rows_per_task=rng.choice([None, 300]),
                       tuning=tuning)


def _rebuild_local(uri: str, so: dict[str, Any], rng: random.Random, rows: pa.Table | None = None,
                   tuning: Tuning | None = None) -> Any:
    from lance_spark_ops.spark.files.row_id_index import rebuild_row_id_index

    return rebuild_row_id_index(None, uri, storage_options=so, fragments_per_task=rng.choice([None, 1, 2]),
                                tuning=tuning)


# dataset -> (data files some version referenced, latest version) before vacuum
_VACUUM_BEFORE: dict[str, tuple[set[str], int]] = {}


def _referenced(root: str) -> set[str]:
    import lance

    versions = [v["version"] for v in lance.dataset(root).versions()]
    return {f.path for v in versions for frag in lance.dataset(root, version=v).get_fragments()
            for f in frag.data_files()}


def _vacuum_prepare(root: str, rng: random.Random) -> None:
    """Compact with pylance first, so old versions hold files that only they reference."""
    import lance

    lance.dataset(root).optimize.compact_files(target_rows_per_fragment=rng.choice([400, 5000]))
    _VACUUM_BEFORE[root] = _referenced(root), lance.dataset(root).version


def _retain(rng: random.Random) -> int:
    return rng.choice([1, 2, 4])


def _vacuum_post_check(root: str, ok: bool, job_seed: float) -> list[str]:
    """Versions beyond the retention are gone, and so are the data files only they referenced."""
    import lance

    before, latest = _VACUUM_BEFORE.pop(root)
    if not ok:
        return []
    keep = _retain(random.Random(job_seed))
    old = [v["version"] for v in lance.dataset(root).versions() if v["version"] <= latest - keep]
    bad = [f"versions {old} outlived retain_versions={keep} (latest was {latest})"] if old else []
    left = (set(os.listdir(os.path.join(root, "data"))) & before) - _referenced(root)
    return bad + ([f"vacuum left data files no version references: {sorted(left)[:5]} ({len(left)})"]
                  if left else [])


def _vacuum_local(uri: str, so: dict[str, Any], rng: random.Random, rows: pa.Table | None = None,
                  tuning: Tuning | None = None) -> Any:
    from lance_spark_ops.spark.files.vacuuming import vacuum

    return vacuum(None, uri, retain_versions=_retain(rng), storage_options=so, tuning=tuning)


RUNNERS: dict[str, JobRunner] = {r.name: r for r in [
    JobRunner("compact", "compact", "compact.py", _compact_args, _compact_local,
              ("plan", "rewrite", "commit"), ("rewrite",)),
    JobRunner("materialize_deletions", "materialize_deletions", "materialize_deletions.py",
              lambda uri, rng, rows=None: [uri, "--threshold", "0.0"], _materialize_local,
              ("plan", "rewrite", "commit"), ("rewrite",)),
    JobRunner("rebuild_row_id_index", "rebuild_row_id_index", "rebuild_row_id_index.py",
              lambda uri, rng, rows=None: [uri, "--rows-per-partition", str(rng.choice([200, 1000]))],
              _rebuild_local, ("sequences", "commit", "index"), ("sequences", "index"), stable=True),
    JobRunner("add_columns", "add_columns", "add_columns.py",
              lambda uri, rng, rows=None: [uri, "--column", f"{ADDED}=id * 2",
                                "--rows-per-task", str(rng.choice([300, 100000]))],
              _add_columns_local, ("plan", "commit"), ("plan",), column=ADDED),
]}
if importlib.util.find_spec("lance_spark_ops.spark.files.vacuuming") is not None:  # after the merge of vacuum
    RUNNERS["vacuum"] = JobRunner(
        "vacuum", "vacuum", "vacuum.py",
        lambda uri, rng, rows=None: [uri, "--retain-versions", str(_retain(rng))], _vacuum_local,
        ("read", "list", "plan", "delete"), ("list", "delete"), prepare=_vacuum_prepare,
        post_check=_vacuum_post_check, may_break_old_versions=True)
RUNNERS.update({r.name: r for r in [
    JobRunner("remap_indices", "remap_indices", "remap_indices.py", lambda uri, rng, rows=None: [uri],
              rw.remap_local, ("plan", "remap_indices"), ("remap_indices",), prepare=rw.remap_prepare,
              post_check=rw.remap_post_check, writer_kinds=rw.REMAP_WRITER_KINDS),
    JobRunner("datasource", "datasource", "../tests/faults/append_datasource.py", rw._datasource_args,
              rw.datasource_local, ("write",), ("write",), rows=rw.write_rows, worker_kill_may_fail=True),
    JobRunner("import_delta", "import_delta", "import_delta.py", rw._delta_args, rw.delta_local,
              ("plan", "convert", "commit"), ("convert",), rows=rw.write_rows),
    # the fleet job: its compaction's progress lines are the phases a driver kill waits for
    JobRunner("maintain", "compact", "maintain.py", rm.maintain_args, rm.maintain_local,
              ("plan", "rewrite", "commit"), ("rewrite",)),
]})
# the BTREE / BITMAP builders
if importlib.util.find_spec("lance_spark_ops.spark.indices.scalar_index") is not None:
    RUNNERS.update({r.name: r for r in [
        JobRunner("create_index", "create_index", "create_index.py", ri.create_args, ri.create_local,
                  ("plan", "build", "commit"), ("build",), prepare=ri.create_prepare,
                  post_check=ri.post_check, writer_kinds=ri.INDEX_WRITER_KINDS),
        JobRunner("optimize_indices", "optimize_indices", "optimize_indices.py", ri.optimize_args,
                  ri.optimize_local, ("plan", "build", "commit"), ("build",), prepare=ri.optimize_prepare,
                  post_check=ri.post_check, writer_kinds=ri.INDEX_WRITER_KINDS),
    ]})
# RTREE and MINHASHLSH (#37): built, optimized and compacted under the faults
if importlib.util.find_spec("lance_spark_ops.spark.indices.scalar_index") is not None:
    RUNNERS.update({r.name: r for r in [
        JobRunner("create_rtree_minhash", "create_index", "create_index.py", ri.geo_create_args,
                  ri.geo_create_local, ("plan", "build", "commit"), ("build",), prepare=ri.geo_create_prepare,
                  post_check=ri.geo_post_check, writer_kinds=ri.INDEX_WRITER_KINDS),
        JobRunner("optimize_rtree_minhash", "optimize_indices", "optimize_indices.py", ri.optimize_args,
                  ri.optimize_local, ("plan", "build", "commit"), ("build",), prepare=ri.geo_indexed_prepare,
                  post_check=ri.geo_post_check, writer_kinds=ri.INDEX_WRITER_KINDS),
        JobRunner("compact_rtree_minhash", "compact", "compact.py", _compact_args, _compact_local,
                  ("plan", "rewrite", "commit"), ("rewrite",), prepare=ri.geo_indexed_prepare,
                  post_check=ri.geo_compact_post_check),
    ]})
# the IVF builders (#28)
if importlib.util.find_spec("lance_spark_ops.spark.indices.vector_index") is not None:
    RUNNERS.update({r.name: r for r in [
        JobRunner("create_vector_index", "create_index", "create_index.py", rv.create_args, rv.create_local,
                  ("plan", "build", "commit"), ("build",), prepare=rv.create_prepare,
                  post_check=rv.post_check, writer_kinds=ri.INDEX_WRITER_KINDS),
        JobRunner("optimize_vector_indices", "optimize_indices", "optimize_indices.py", rv.optimize_args,
                  rv.optimize_local, ("plan", "build", "commit"), ("build",), prepare=rv.optimize_prepare,
                  post_check=rv.post_check, writer_kinds=ri.INDEX_WRITER_KINDS),
    ]})
