"""Fault runners for the jobs that write rows or rewrite indices (issue #15): ``remap_indices``,
the ``lance`` data-source writer and ``import_delta``. ``runners.RUNNERS`` takes them in.

* ``remap_indices``: ``prepare`` makes a BTREE (id) + BITMAP (s) index and compacts with
  pylance's ``defer_index_remap=True``; ``post_check`` wants equality queries answered as a
  scan does and, after a success no concurrent write followed, 0 unindexed rows, index fragment
  sets equal to the live fragments and no fragment reuse version left. Concurrent writers do
  no pylance compaction here: pylance 14's compaction (no defer) over indices behind a fragment
  reuse index breaks the BTREE by itself (index answers miss rows, merge_insert then inserts
  duplicates; ``-m slow`` seeds ambiguous/33 and transient/1 with the job replaced by a no-op).
* data source / ``import_delta``: ``rows`` are fresh ids (``model.FRESH_IDS`` + 10**7 up); the
  scenario then requires all of them exactly once or none (all after a success). The data
  source's store-fault runs drive ``LanceWriter`` (write per task, commit, abort) in this process,
  as Spark does, since fault plans do not reach Python workers; its other runs use the session.
"""

from __future__ import annotations

import json
import os
import random
from typing import Any

import numpy as np
import pyarrow as pa

from lance_spark_ops.spark.runtime.tuning import Tuning
from tests.faults.model import FRESH_IDS, WRITER_KINDS
from tests.support.pylance_indices import index_segments

REMAP_WRITER_KINDS = tuple(k for k in WRITER_KINDS if k != "compaction")
WRITE_BASE = FRESH_IDS + 10**7  # ids the writing jobs write (writers' fresh ids stay below)
SESSION: dict[str, Any] = {}  # "spark": the session fixture, set by the data-source tests
_REMAP_BEFORE: dict[str, int] = {}  # dataset -> latest version after prepare


def _local(uri: str) -> str:
    return uri.split("://", 1)[1] if "://" in uri else uri


def write_rows(rng: random.Random) -> pa.Table:
    """Contiguous fresh ids; val = id * 10, s = "w<id>" (the dataset's columns)."""
    ids = np.arange(WRITE_BASE, WRITE_BASE + rng.randint(50, 600), dtype=np.int64)
    return pa.table({"id": ids, "val": ids * 10, "s": pa.array([f"w{i}" for i in ids.tolist()])})


# -- remap_indices --------------------------------------------------------------------------------

def remap_prepare(root: str, rng: random.Random) -> None:
    """Indices, then a pylance compaction that leaves them behind the fragment reuse index."""
    import lance

    ds = lance.dataset(root)
    ds.create_scalar_index("id", "BTREE", name="id_idx")
    ds.create_scalar_index("s", "BITMAP", name="s_idx")
    lance.dataset(root).optimize.compact_files(target_rows_per_fragment=rng.choice([500, 5000]),
                                               defer_index_remap=True)
    _REMAP_BEFORE[root] = lance.dataset(root).version


def remap_local(uri: str, so: dict[str, Any], rng: random.Random, rows: pa.Table | None = None,
                tuning: Tuning | None = None) -> Any:
    from lance_spark_ops.spark.indices.index_remap import remap_indices

    return remap_indices(None, uri, storage_options=so, tuning=tuning)


def remap_post_check(root: str, ok: bool, job_seed: float) -> list[str]:
    """Index answers equal scans; after a success that no other commit followed, nothing unindexed."""
    import lance

    before = _REMAP_BEFORE.pop(root)
    ds = lance.dataset(root)
    bad: list[str] = []
    ids = ds.to_table(columns=["id"])["id"].to_numpy()
    rng = random.Random(job_seed)
    for probe in [int(ids[rng.randrange(len(ids))]) for _ in range(3)] + [1]:
        for col, val in (("id", str(probe)), ("s", f"'r{probe}'")):
            got = ds.to_table(columns=["id", "val"], filter=f"{col} = {val}")
            want = ds.to_table(columns=["id", "val"], filter=f"{col} = {val}", use_scalar_index=False)
            if not got.sort_by("id").equals(want.sort_by("id")):
                bad.append(f"{col} = {val}: the index answers {got.num_rows} rows, a scan {want.num_rows}")
    if ok and ds.version == before + 1:  # only the job committed since prepare
        # pylance counts rows behind the fragment reuse index as indexed; the fragment sets tell
        indices = {i["name"]: set(i["fragment_ids"]) for i in index_segments(ds)}
        live = {f.fragment_id for f in ds.get_fragments()}
        for name in sorted(indices.keys() & {"id_idx", "s_idx"}):
            n = ds.stats.index_stats(name)["num_unindexed_rows"]
            if n or indices[name] != live:
                bad.append(f"index {name}: {n} unindexed rows, covers fragments {sorted(indices[name])} "
                           f"of {sorted(live)} after remap_indices")
        names = set(indices)
        if "__lance_frag_reuse" in names:  # every index caught up: the job trims every reuse version
            left = ds.stats.index_stats("__lance_frag_reuse")["num_versions"]
            if left:
                bad.append(f"{left} fragment reuse version(s) left after remap_indices")
        if not {"id_idx", "s_idx"} <= names:
            bad.append(f"indices lost: {sorted(names)}")
    return bad


# -- the lance data source -------------------------------------------------------------------------

def _datasource_args(uri: str, rng: random.Random, rows: pa.Table | None = None) -> list[str]:
    assert rows is not None
    return [uri, str(WRITE_BASE), str(rows.num_rows), str(rng.choice([1, 2, 3]))]


def _drive_writer(uri: str, so: dict[str, Any], rng: random.Random, rows: pa.Table) -> None:
    """Spark's protocol for a Python data-source write, in this process: one ``write`` per task
    (a failed task is retried up to 3 times), ``commit`` on the driver, ``abort`` when it fails."""
    from lance_spark_ops.spark.datasource.options import WriteOptions
    from lance_spark_ops.spark.datasource.writer import LanceWriter

    opts = {"path": uri, "storage_options": json.dumps(so),
            "max_rows_per_file": str(rng.choice([64, 100000]))}
    writer = LanceWriter(WriteOptions.parse(opts), None, False)
    parts = np.array_split(np.arange(rows.num_rows), rng.choice([1, 2, 3]))
    messages = []
    try:
        for p in parts:
            for attempt in range(4):
                try:
                    messages.append(writer.write(iter(rows.take(p).to_batches(max_chunksize=100))))
                    break
                except Exception:
                    if attempt == 3:
                        raise
        writer.commit(messages)
    except BaseException:
        writer.abort(messages)
        raise


def datasource_local(uri: str, so: dict[str, Any], rng: random.Random, rows: pa.Table | None = None,
                     tuning: Tuning | None = None) -> Any:
    """The ``lance`` data source's writer (no job scaffold: ``tuning`` has nothing to steer)."""
    assert rows is not None
    if so:
        return _drive_writer(uri, so, rng, rows)
    from lance_spark_ops.spark import register_data_source

    spark = SESSION["spark"]
    register_data_source(spark)
    lo = int(rows["id"][0].as_py())
    df = spark.range(lo, lo + rows.num_rows, 1, rng.choice([1, 2, 3]))
    df.selectExpr("id", "id * 10 AS val", "concat('w', CAST(id AS STRING)) AS s") \
        .write.format("lance").mode("append").save(uri)
    return None


# -- import_delta ------------------------------------------------------------------------------------

def _delta_table(uri: str, rows: pa.Table) -> str:
    """The Delta table holding ``rows``, next to the dataset (made once per run, by delta-rs)."""
    from deltalake import write_deltalake

    path = _local(uri).rstrip("/") + ".delta"
    if not os.path.exists(path):
        half = rows.num_rows // 2
        write_deltalake(path, rows.slice(0, half))
        write_deltalake(path, rows.slice(half), mode="append")  # two files, two log entries
    return path


def _delta_args(uri: str, rng: random.Random, rows: pa.Table | None = None) -> list[str]:
    assert rows is not None
    return [_delta_table(uri, rows), uri, "--mode", "append",
            "--rows-per-task", str(rng.choice([100, 10**6]))]


def delta_local(uri: str, so: dict[str, Any], rng: random.Random, rows: pa.Table | None = None,
                tuning: Tuning | None = None) -> Any:
    from lance_spark_ops.spark import import_delta

    assert rows is not None
    return import_delta(None, _delta_table(uri, rows), uri, "append", storage_options=so,
                        delta_storage_options={}, rows_per_task=rng.choice([100, 10**6]), tuning=tuning)
