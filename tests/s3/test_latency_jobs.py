"""Every job on the latency store (issue #39, item 4): each runs through the proxy
(``tests/support/latency_store``, a few ms per request) and is checked by pylance reading the
result through the moto endpoint directly - tables, query answers, ``index_stats`` against
pylance's own. Requests are counted, never timed: no HEAD (size request) per data file, a
fragment's data file read in a bounded number of GETs, no DELETE one object at a time."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tests.s3.conftest import SlowS3
from tests.support.pylance_indices import index_segments

WORDS = np.array(["lance", "spark", "object", "store", "latency", "proxy", "index", "vector", "token",
                  "moto"])


def _table(n: int, start: int = 0) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    rng = np.random.default_rng(start + 1)
    text = [" ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(1 + i % 4)) for i in ids.tolist()]
    vec = pa.FixedSizeListArray.from_arrays(pa.array(rng.normal(size=n * 16).astype(np.float32)), 16)
    return pa.table({"id": ids, "val": ids * 10, "text": pa.array(text), "vec": vec})


def _write(slow: SlowS3, name: str, n: int = 4_000, per_file: int = 500, **kw: object) -> str:
    import lance

    uri = slow.uri(name)
    lance.write_dataset(_table(n), uri, storage_options=slow.direct.options, max_rows_per_file=per_file,
                        data_storage_version="2.1", **kw)
    return uri


def _pylance(slow: SlowS3, uri: str):  # type: ignore[no-untyped-def]
    import lance

    return lance.dataset(uri, storage_options=slow.direct.options)


def _counted(slow: SlowS3) -> dict:
    return slow.proxy.stats()


def _by_op(st: dict, contains: str) -> Counter:
    return Counter(op for op, path, _ in st["log"] if contains in path)


def _data_reads(st: dict) -> Counter:
    """GETs per data file (its name)."""
    return Counter(path.rsplit("/", 1)[1] for op, path, _ in st["log"] if op == "GET" and "/data/" in path)


def _no_size_requests(st: dict, heads: int = 0, deletes: int = 0) -> None:
    """No HEAD of a data or deletion file (sizes come from the manifest) and at most ``heads``
    elsewhere (a BTREE merge checks its part once); at most ``deletes`` single DELETEs (scratch
    files; many objects go in DeleteObjects calls)."""
    paths = [path for op, path, _ in st["log"] if op == "HEAD"]
    assert not [p for p in paths if "/data/" in p or "/_deletions/" in p] and len(paths) <= heads, paths
    assert st["ops"].get("DELETE", 0) <= deletes, st["ops"]


def _versions_listed(st: dict) -> int:
    """LISTs of ``_versions/`` (a listing's prefix is in its query, URL-encoded)."""
    return sum(op == "LIST" and "_versions%2F" in path for op, path, _ in st["log"])


def _manifest_reads(st: dict) -> int:
    """GETs of manifest files (the driver ships small ones to its tasks: ``scan_tasks.ship``)."""
    return sum(op == "GET" and path.endswith(".manifest") for op, path, _ in st["log"])


def _sorted(t: pa.Table) -> pa.Table:
    return t.sort_by("id")


# -- the file jobs ------------------------------------------------------------------------------------

def test_materialize_deletions(slow_s3: SlowS3) -> None:
    """8 fragments, 5 with deletions: those 5 rewritten, each data and deletion file read with
    one GET, no HEAD; pylance reads the same rows and no deletion file is left."""
    from lance_spark_ops.spark.files.compaction import materialize_deletions

    uri = _write(slow_s3, "md.lance")
    _pylance(slow_s3, uri).delete("id < 2500 AND id % 3 = 0")
    expected = _sorted(_pylance(slow_s3, uri).to_table())
    slow_s3.proxy.reset()
    m = materialize_deletions(None, uri, storage_options=slow_s3.options)
    st = _counted(slow_s3)
    assert m.fragments_removed == 5 and m.fragments_added == 5
    reads = _data_reads(st)
    assert len(reads) == 5 and set(reads.values()) == {1}, reads
    assert _by_op(st, "/_deletions/") == {"GET": 5}
    assert _by_op(st, "/data/")["PUT"] == 5
    _no_size_requests(st)
    after = _pylance(slow_s3, uri)
    assert all(f.deletion_file() is None for f in after.get_fragments())
    assert _sorted(after.to_table()).equals(expected)


def test_add_columns(slow_s3: SlowS3) -> None:
    """A column computed from ``id``: each fragment's data file read in at most 2 GETs (footer,
    then the column's pages), one new file per fragment, no HEAD; pylance reads the column."""
    from lance_spark_ops.spark.files.columns import ColumnFunction, add_columns

    uri = _write(slow_s3, "ac.lance")
    _pylance(slow_s3, uri).delete("id % 11 = 0")
    expected = _sorted(_pylance(slow_s3, uri).to_table())
    fn = ColumnFunction(lambda b: {"w": pc.multiply(b.column("id"), 3)}, pa.schema([("w", pa.int64())]),
                        ("id",))
    slow_s3.proxy.reset()
    add_columns(None, uri, fn, storage_options=slow_s3.options)
    st = _counted(slow_s3)
    reads = _data_reads(st)
    assert len(reads) == 8 and max(reads.values()) <= 2, reads
    assert _by_op(st, "/data/")["PUT"] == 8
    _no_size_requests(st)
    assert _versions_listed(st) == 1  # the open; the commit puts on top of it unlisted
    assert _manifest_reads(st) == 1  # the open's: the tasks parse what it shipped them
    got = _sorted(_pylance(slow_s3, uri).to_table())
    assert got.column("w").equals(pc.multiply(got.column("id"), 3))
    assert got.drop_columns(["w"]).equals(expected)


@pytest.mark.spark
def test_rebuild_row_id_index(spark, slow_s3: SlowS3) -> None:  # type: ignore[no-untyped-def]
    """Stable row ids scattered by pylance's updates and compaction: the sequences compacted and
    the row-id lookup written through the proxy (Spark executors too); pylance takes rows by id
    as before, and no data file is read at all (the job works on the manifest's sequences)."""
    from lance_spark_ops.spark.files.row_id_index import rebuild_row_id_index

    uri = _write(slow_s3, "rid.lance", enable_stable_row_ids=True)
    ds = _pylance(slow_s3, uri)
    ds.update({"val": "val + 1"}, where="id >= 600 AND id < 700")
    _pylance(slow_s3, uri).optimize.compact_files(target_rows_per_fragment=1_000)
    _pylance(slow_s3, uri).delete("id % 9 = 0")
    before = _pylance(slow_s3, uri).to_table(columns=["id", "val"], with_row_id=True).sort_by("_rowid")
    slow_s3.proxy.reset()
    m = rebuild_row_id_index(spark, uri, storage_options=slow_s3.options)
    st = _counted(slow_s3)
    assert m.new_version == _pylance(slow_s3, uri).version and m.fragments_rewritten > 0
    assert not _data_reads(st)
    _no_size_requests(st)
    assert _versions_listed(st) == 1  # the open; the commit puts on top of it unlisted
    # the open's: the sequence tasks on Spark's executors parse what it shipped them, the index
    # tasks the version the commit wrote (as the driver holds it)
    assert _manifest_reads(st) == 1
    after = _pylance(slow_s3, uri)
    assert after.to_table(columns=["id", "val"], with_row_id=True).sort_by("_rowid").equals(before)
    sample = before.column("_rowid").to_pylist()[::53]
    assert after._take_rows(sample, columns=["id"]).column("id").to_pylist() == \
        before.column("id").to_pylist()[::53]


# -- index jobs ---------------------------------------------------------------------------------------

def _index_stats(ds, name: str) -> dict:  # type: ignore[no-untyped-def]
    s = ds.stats.index_stats(name)
    return {k: s[k] for k in ("index_type", "num_indexed_fragments", "num_indexed_rows",
                              "num_unindexed_fragments", "num_unindexed_rows")}


def _twins(slow: SlowS3, name: str, **kw: object) -> tuple[str, str]:
    """The same pylance dataset twice: one for our job, one for pylance's."""
    out = []
    for side in ("ours", "theirs"):
        uri = _write(slow, f"{name}-{side}.lance", **kw)
        _pylance(slow, uri).delete("id % 13 = 0")
        out.append(uri)
    return out[0], out[1]


def test_create_inverted_index(slow_s3: SlowS3) -> None:
    """INVERTED on ``text`` through the proxy: each data file read in at most 2 GETs, no HEAD;
    pylance's full-text answers from our index equal its answers from its own index on a twin,
    and their ``index_stats`` agree."""
    from lance_spark_ops.spark.indices.indexing import create_index

    ours, theirs = _twins(slow_s3, "fts")
    _pylance(slow_s3, theirs).create_scalar_index("text", "INVERTED", name="text_idx")
    slow_s3.proxy.reset()
    m = create_index(None, ours, "text", "INVERTED", name="text_idx", storage_options=slow_s3.options)
    st = _counted(slow_s3)
    reads = _data_reads(st)
    assert len(reads) == 8 and max(reads.values()) <= 2, reads
    _no_size_requests(st)
    assert _manifest_reads(st) == 1  # the plan's: the partition tasks parse what it shipped them
    a, b = _pylance(slow_s3, ours), _pylance(slow_s3, theirs)
    assert a.version == m.new_version
    assert _index_stats(a, "text_idx") == _index_stats(b, "text_idx")
    for q in ("lance", "latency proxy", "moto"):
        got = a.to_table(columns=["id"], full_text_query=q).column("id").to_pylist()
        want = b.to_table(columns=["id"], full_text_query=q).column("id").to_pylist()
        assert got and sorted(got) == sorted(want), q


@pytest.mark.spark
@pytest.mark.parametrize("where", ["driver", "executor"])
def test_create_btree_index(spark, slow_s3: SlowS3, where: str,  # type: ignore[no-untyped-def]
                            monkeypatch: pytest.MonkeyPatch) -> None:
    """BTREE on ``id`` through the proxy, built on the driver (one small part on an object store:
    no Spark stage) and in a Spark task (``driver_index_rows=0``): each data file (~0.8 MB, four
    columns) read as its footer and then the column's pages - at most 2 ranged GETs and under a
    quarter of its bytes, never whole - and no HEAD; pylance's ``index_stats`` equal its own
    twin's, and its equality and range answers through our index equal a scan and its twin's."""
    from lance_spark_ops.spark.indices.indexing import create_index
    from lance_spark_ops.spark.runtime.job import Job
    from lance_spark_ops.spark.runtime.tuning import Tuning

    stages: list[str] = []
    run_tasks = Job.run_tasks
    monkeypatch.setattr(Job, "run_tasks", lambda self, tasks, fn, costs=None: stages.append(fn.__name__)
                        or run_tasks(self, tasks, fn, costs))
    ours, theirs = _twins(slow_s3, f"bt-{where}", n=16_000, per_file=8_000)
    _pylance(slow_s3, theirs).create_scalar_index("id", "BTREE", name="id_idx")
    files = {f.data_files()[0].path.rsplit("/", 1)[-1]: f.data_files()[0].file_size_bytes
             for f in _pylance(slow_s3, ours).get_fragments()}
    assert len(files) == 2 and min(files.values()) > 512 * 1024, files
    slow_s3.proxy.reset()
    m = create_index(spark, ours, "id", "BTREE", name="id_idx", storage_options=slow_s3.options,
                     tuning=Tuning(driver_index_rows=0) if where == "executor" else None)
    st = _counted(slow_s3)
    assert stages == ([] if where == "driver" else ["run_part_and_merge"]), stages
    reads = _data_reads(st)
    assert set(reads) == set(files) and max(reads.values()) <= 2, reads
    got_bytes: Counter = Counter()
    for op, path, rng in st["log"]:
        if op == "GET" and "/data/" in path:
            assert rng.startswith("bytes="), (path, rng)  # never the whole object
            lo, hi = (int(x) for x in rng[len("bytes="):].split("-"))
            got_bytes[path.rsplit("/", 1)[1]] += hi - lo + 1
    assert all(got_bytes[f] < size // 4 for f, size in files.items()), (got_bytes, files)
    _no_size_requests(st)
    assert _manifest_reads(st) == 1  # the plan's: a Spark task parses what it shipped it
    # the commit puts the next version on the plan's word (``expected_latest``): no listing after
    # the index files are up
    ops = [op for op, _, _ in st["log"]]
    assert "LIST" not in ops[ops.index("PUT"):], ops
    a, b = _pylance(slow_s3, ours), _pylance(slow_s3, theirs)
    assert a.version == m.new_version
    assert _index_stats(a, "id_idx") == _index_stats(b, "id_idx")
    for filt in ("id = 7", "id = 13", "id = 15999", "id >= 7990 AND id < 8030", "id < 40"):
        assert "ScalarIndexQuery" in a.scanner(filter=filt).explain_plan()
        got = _sorted(a.to_table(columns=["id", "val"], filter=filt))
        assert got.equals(_sorted(a.to_table(columns=["id", "val"], filter=filt, use_scalar_index=False)))
        assert got.equals(_sorted(b.to_table(columns=["id", "val"], filter=filt))), filt


def test_create_ivf_pq_index(slow_s3: SlowS3) -> None:
    """IVF_PQ through the proxy (its training sample, assignment and storage passes): no data
    file read more than 3 times, no HEAD; pylance probing every partition and refining answers
    as its brute-force scan, and counts every row indexed as for its own index on a twin."""
    from lance_spark_ops.spark.indices.indexing import create_index

    ours, theirs = _twins(slow_s3, "ivf")
    params = {"num_partitions": 4, "num_sub_vectors": 4}
    _pylance(slow_s3, theirs).create_index("vec", "IVF_PQ", name="vec_idx", **params)
    slow_s3.proxy.reset()
    m = create_index(None, ours, "vec", "IVF_PQ", name="vec_idx", storage_options=slow_s3.options, **params)
    st = _counted(slow_s3)
    reads = _data_reads(st)
    assert len(reads) == 8 and max(reads.values()) <= 3, reads
    _no_size_requests(st)
    assert _manifest_reads(st) == 1  # the plan's: every pass's tasks parse what it shipped them
    a, b = _pylance(slow_s3, ours), _pylance(slow_s3, theirs)
    assert a.version == m.new_version
    assert _index_stats(a, "vec_idx") == _index_stats(b, "vec_idx")
    for row in (5, 1234, 3999):
        q = a.to_table(columns=["vec"], filter=f"id = {row}").column("vec")[0].values.to_numpy()
        near = {"column": "vec", "q": q, "k": 10}
        got = a.to_table(columns=["id"], nearest={**near, "nprobes": 4, "refine_factor": 400})
        brute = a.to_table(columns=["id"], nearest={**near, "use_index": False})
        assert got.column("id").to_pylist() == brute.column("id").to_pylist()


def _append(slow: SlowS3, uri: str, n: int, start: int) -> None:
    import lance

    lance.write_dataset(_table(n, start), uri, mode="append", storage_options=slow.direct.options)


def test_optimize_indices(slow_s3: SlowS3) -> None:
    """pylance's BTREE and an INVERTED index of ours (pylance's own token files are FSTs we do
    not read: merging one re-tokenizes its rows), then two appends: our optimize reads only the
    appended fragments' data files; afterwards pylance counts every row indexed (as after its
    own optimize on a twin) and answers equality and full-text queries as a scan / its twin."""
    from lance_spark_ops.spark.indices.indexing import create_index, optimize_indices

    ours, theirs = _twins(slow_s3, "opt")
    for uri in (ours, theirs):
        ds = _pylance(slow_s3, uri)
        ds.create_scalar_index("id", "BTREE", name="id_idx")
        if uri == ours:
            create_index(None, uri, "text", "INVERTED", name="text_idx",
                         storage_options=slow_s3.direct.options)
        else:
            ds.create_scalar_index("text", "INVERTED", name="text_idx")
        _append(slow_s3, uri, 300, 10_000)
        _append(slow_s3, uri, 200, 20_000)
    old = {f.data_files()[0].path for f in _pylance(slow_s3, ours).get_fragments()[:8]}
    _pylance(slow_s3, theirs).optimize.optimize_indices()
    slow_s3.proxy.reset()
    optimize_indices(None, ours, storage_options=slow_s3.options)
    st = _counted(slow_s3)
    reads = _data_reads(st)
    assert len(reads) == 2 and not old & set(reads) and max(reads.values()) <= 4, reads
    _no_size_requests(st, heads=1, deletes=1)
    # one open (its LIST and manifest read) planned on and committed from; the segments counted
    # after from the version committed
    assert _versions_listed(st) == 1
    # the plan's manifest read alone: the builders take the plan's open (they read it again
    # before: 6 reads), and the tasks (BTREE parts and merge, INVERTED partitions; run here
    # in-process) parse the bytes the driver shipped them (before: 3 reads)
    assert _manifest_reads(st) == 1
    a, b = _pylance(slow_s3, ours), _pylance(slow_s3, theirs)
    for name in ("id_idx", "text_idx"):
        sa, sb = _index_stats(a, name), _index_stats(b, name)
        assert sa["num_unindexed_rows"] == 0 and sa["num_indexed_rows"] == sb["num_indexed_rows"], (sa, sb)
    for probe in (7, 10_100, 20_199):
        got = a.to_table(columns=["id", "val"], filter=f"id = {probe}")
        assert "ScalarIndexQuery" in a.scanner(filter=f"id = {probe}").explain_plan()
        assert got.equals(a.to_table(columns=["id", "val"], filter=f"id = {probe}", use_scalar_index=False))
        assert got.num_rows == 1
    for q in ("spark", "moto latency"):
        got = a.to_table(columns=["id"], full_text_query=q).column("id").to_pylist()
        want = b.to_table(columns=["id"], full_text_query=q).column("id").to_pylist()
        assert got and sorted(got) == sorted(want), q


def test_remap_indices(slow_s3: SlowS3) -> None:
    """pylance's BTREE, then its compaction with ``defer_index_remap``: our remap reads the
    fragment reuse index and the old index, writes the remapped one, no data file read and no
    HEAD; pylance then finds every live fragment covered, no reuse version left, and equality
    queries answer as a scan."""
    from lance_spark_ops.spark.indices.index_remap import remap_indices

    uri = _write(slow_s3, "remap.lance")
    ds = _pylance(slow_s3, uri)
    ds.create_scalar_index("id", "BTREE", name="id_idx")
    _pylance(slow_s3, uri).delete("id % 6 = 0")
    _pylance(slow_s3, uri).optimize.compact_files(target_rows_per_fragment=2_000, defer_index_remap=True)
    slow_s3.proxy.reset()
    remap_indices(None, uri, storage_options=slow_s3.options)
    st = _counted(slow_s3)
    assert not _data_reads(st)
    _no_size_requests(st)
    assert _versions_listed(st) == 1  # the open; the commit puts on top of it unlisted
    assert _manifest_reads(st) == 1  # the open's: the remap task parses what it shipped it
    a = _pylance(slow_s3, uri)
    (idx,) = [i for i in index_segments(a) if i["name"] == "id_idx"]
    assert set(idx["fragment_ids"]) == {f.fragment_id for f in a.get_fragments()}
    assert a.stats.index_stats("__lance_frag_reuse")["num_versions"] == 0
    for probe in (1, 2_501, 3_997):
        got = a.to_table(columns=["id", "val"], filter=f"id = {probe}")
        assert got.equals(a.to_table(columns=["id", "val"], filter=f"id = {probe}", use_scalar_index=False))
        assert got.num_rows == 1


# -- the fleet jobs over a namespace on S3 ---------------------------------------------------------------

POLICY = {"actions": ["remap_indices", "materialize_deletions", "compact"],
          "target_rows_per_fragment": 10_000,
          "compact_min_small_fragments": 2, "compact_min_small_share": 0.0,
          "materialize_deleted_fraction": 0.0}


def test_report_and_maintain_over_a_namespace_on_s3(slow_s3: SlowS3, tmp_path: Path) -> None:
    """A ``dir`` namespace whose root is on S3 (``storage.*`` properties for the namespace, the
    tables' options given to the job, as to pylance: a ``dir`` namespace vends none), two tables:
    ``report`` measures both without a data read, a write, a delete or a HEAD (absent ``_refs``
    prefixes are listings); ``maintain`` compacts both, reading each data file at most twice, no
    HEAD; pylance reads the same rows."""
    from lance_spark_ops.spark.fleet.maintenance import FleetTarget, maintain, report

    root = slow_s3.uri("lake")
    expected = {}
    for name, n in (("a", 3_000), ("b", 2_000)):
        uri = _write(slow_s3, f"lake/{name}.lance", n, 250)
        _pylance(slow_s3, uri).delete("id % 4 = 0")
        expected[name] = _sorted(_pylance(slow_s3, uri).to_table())
    ns = ("dir", {"root": root, **{f"storage.{k}": v for k, v in slow_s3.options.items()}})
    slow_s3.proxy.reset()
    result = report(None, FleetTarget(ns), str(tmp_path / "report"), POLICY, storage_options=slow_s3.options)
    st = _counted(slow_s3)
    assert {t.table: [d["action"] for d in t.decisions] for t in result.tables} == \
        {"a": ["compact"], "b": ["compact"]}
    assert not _data_reads(st) and not {"PUT", "DELETE_OBJECTS", "DELETE", "COPY"} & set(st["ops"]), st["ops"]
    _no_size_requests(st)
    assert (tmp_path / "report" / "report.json").exists()
    slow_s3.proxy.reset()
    result = maintain(None, FleetTarget(ns), POLICY, storage_options=slow_s3.options)
    st = _counted(slow_s3)
    assert [t.status for t in result.tables] == ["ok", "ok"], [t.error for t in result.tables]
    reads = _data_reads(st)
    assert len(reads) == 12 + 8 and max(reads.values()) <= 2, reads
    _no_size_requests(st)
    for name in ("a", "b"):
        after = _pylance(slow_s3, slow_s3.uri(f"lake/{name}.lance"))
        assert len(after.get_fragments()) == 1 and _sorted(after.to_table()).equals(expected[name])


# -- the lance data source -----------------------------------------------------------------------------

@pytest.mark.spark
@pytest.mark.parametrize("how", ["format", "read_lance"])
def test_datasource_read(spark, slow_s3: SlowS3, how: str) -> None:  # type: ignore[no-untyped-def]
    """``spark.read.format("lance")`` (or ``read_lance``) through the proxy, a projection and a
    filter: each data file read in at most 2 GETs (footer, the selected columns' pages), no
    HEAD, the manifest read twice; the rows are pylance's."""
    import json

    from lance_spark_ops.spark import read_lance, register_data_source

    uri = _write(slow_s3, f"ds-{how}.lance")
    _pylance(slow_s3, uri).delete("id % 5 = 0")
    expected = _sorted(_pylance(slow_s3, uri).to_table(columns=["id", "val"], filter="val >= 1000"))
    register_data_source(spark)
    slow_s3.proxy.reset()
    if how == "format":
        df = spark.read.format("lance").option("storage_options", json.dumps(slow_s3.options)).load(uri)
    else:
        df = read_lance(spark, uri, storage_options=slow_s3.options)
    df = df.select("id", "val").where("val >= 1000")
    got = _sorted(pa.Table.from_pylist([r.asDict() for r in df.collect()], schema=expected.schema))
    st = _counted(slow_s3)
    assert got.equals(expected)
    reads = _data_reads(st)
    assert len(reads) == 8 and max(reads.values()) <= 2, reads
    _no_size_requests(st)
    # format: the source's schema, in a Python worker of Spark's (the worker planning the read
    # parses what the source kept of it); read_lance: the driver's open (it hands Spark the
    # schema) and the reader's plan. The tasks parse the manifest the reader shipped them.
    assert _manifest_reads(st) == (1 if how == "format" else 2)


READ_FAULTS = [
    [{"kind": "slowdown", "count": 3, "ops": ["GET"], "path_contains": "/data/"},
     {"kind": "reset", "count": 2, "ops": ["GET"], "path_contains": "/data/"},
     {"kind": "reset", "count": 1, "ops": ["GET"], "path_contains": "/data/", "forward": True},
     {"kind": "slowdown", "count": 1, "ops": ["GET"], "path_contains": "/_deletions/"}],
]
READ_FAULTS_SLOW = [
    ([{"kind": "timeout", "count": 2, "ops": ["GET"], "path_contains": "/data/", "hold_s": 1.0}], True),
    ([{"kind": "slowdown", "count": 2, "ops": ["GET"], "path_contains": "/_versions/"},
      {"kind": "reset", "count": 2, "ops": ["LIST"]}], True),
    # six resets in a row may outlast the client's retries of one request: a failed job is allowed
    ([{"kind": "reset", "count": 6, "ops": ["GET"], "path_contains": "/data/", "forward": True}], False),
]


def _read_under(spark, slow: SlowS3, faults: list[dict], must_succeed: bool) -> None:  # type: ignore[no-untyped-def]
    """The data source reads through the faults: pylance's rows, or (``must_succeed`` False) a
    failed job naming a typed error - never other rows."""
    import json

    from lance_spark_ops.spark import register_data_source

    uri = _write(slow, "dsf.lance")
    _pylance(slow, uri).delete("id % 7 = 0")
    expected = _sorted(_pylance(slow, uri).to_table(columns=["id", "val", "text"]))
    register_data_source(spark)
    slow.proxy.reset()
    for f in faults:
        slow.proxy.inject(**f)
    df = spark.read.format("lance").option("storage_options", json.dumps(slow.options)).load(uri)
    try:
        rows = df.select("id", "val", "text").collect()
    except Exception as e:
        if must_succeed:
            raise
        assert "LanceError" in str(e), e
        return
    finally:
        fired = slow.proxy.stats()["faults"]
    assert sum(fired.values()) >= 1, fired
    got = _sorted(pa.Table.from_pylist([r.asDict() for r in rows], schema=expected.schema))
    assert got.equals(expected)


@pytest.mark.spark
@pytest.mark.parametrize("faults", READ_FAULTS)
def test_datasource_read_through_faults(spark, slow_s3: SlowS3, faults: list[dict]) -> None:  # type: ignore[no-untyped-def]
    _read_under(spark, slow_s3, faults, True)


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.parametrize(("faults", "must_succeed"), READ_FAULTS_SLOW)
def test_datasource_read_through_more_faults(spark, slow_s3: SlowS3, faults: list[dict],  # type: ignore[no-untyped-def]
                                             must_succeed: bool) -> None:
    _read_under(spark, slow_s3, faults, must_succeed)
