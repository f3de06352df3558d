"""Through a real Spark Connect server (``sc://127.0.0.1:PORT``): the ``lance`` data source (read
with options and a pushed filter, append, overwrite) and every operation; pylance checks each
result."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tests.spark.datasets import rows_multiset, small_fragments

pytestmark = pytest.mark.cluster

COLUMNS = ["id", "f", "s", "l"]


def _dataset(uri: str) -> None:
    import lance

    t = pa.table({"a": pa.array(np.arange(2000), pa.int64()),
                  "s": [f"k{i % 50}" if i % 9 else None for i in range(2000)],
                  "u": pa.array(np.arange(2000) % 300, pa.uint16())})
    lance.write_dataset(t, uri, max_rows_per_file=700)
    lance.dataset(uri).delete("a % 17 = 0")
    lance.write_dataset(t.slice(0, 100), uri, mode="append")  # version 3: 100 more rows


def test_read_with_options_and_pushed_filter(remote, tmp_path: Path) -> None:
    import lance

    uri = str(tmp_path / "ds")
    _dataset(uri)
    df = (remote.read.format("lance").option("version", "2").option("columns", "a,s")
          .option("with_row_id", "true").option("max_rows_per_partition", "400").load(uri))
    assert df.columns == ["a", "s", "_rowid"]
    filtered = df.filter("a >= 500 AND s LIKE 'k1%'")
    plan = filtered._explain_string()  # both filters taken by the reader: no Filter above the scan
    assert "BatchScan lance" in plan and "Filter " not in plan, plan
    got = filtered.orderBy("_rowid").toArrow()
    truth = lance.dataset(uri, version=2).to_table(columns=["a", "s"], with_row_id=True,
                                                    filter="a >= 500 AND s LIKE 'k1%'")
    assert got.num_rows == truth.num_rows > 0
    assert got.column("a").to_pylist() == truth.column("a").to_pylist()
    assert got.column("_rowid").to_pylist() == pc.cast(truth.column("_rowid"), pa.int64()).to_pylist()
    # the latest version, all columns, a filter Spark keeps (NOT IN with a null: never true)
    latest = remote.read.format("lance").load(uri)
    assert latest.count() == lance.dataset(uri).count_rows()
    assert latest.filter("u NOT IN (1, NULL)").count() == 0


def test_append_and_overwrite(remote, tmp_path: Path) -> None:
    import lance

    uri = str(tmp_path / "new")
    df = remote.range(0, 1000, 1, 3).selectExpr("id", "cast(id * 2 as int) AS twice",
                                                "cast(id as string) AS s")
    df.write.format("lance").mode("append").save(uri)  # creates it
    first = lance.dataset(uri).to_table().sort_by("id")
    assert first.column("twice").to_pylist() == [2 * i for i in range(1000)]
    df.where("id < 10").write.format("lance").mode("append").save(uri)
    ds = lance.dataset(uri)
    assert ds.version == 2 and ds.count_rows() == 1010
    ids = sorted(ds.to_table(columns=["id"]).column("id").to_pylist())
    assert ids == sorted(list(range(1000)) + list(range(10)))
    remote.range(5).selectExpr("id * 10 AS x").write.format("lance").mode("overwrite").save(uri)
    ds = lance.dataset(uri)
    assert ds.version == 3 and ds.schema.names == ["x"]
    assert sorted(ds.to_table().column("x").to_pylist()) == [0, 10, 20, 30, 40]


def test_operations_over_connect(remote, tmp_path: Path) -> None:
    import lance

    from lance_spark_ops.row_id_index import lookup
    from lance_spark_ops.spark.datasource.read import read_lance
    from lance_spark_ops.spark.files.columns import add_columns
    from lance_spark_ops.spark.files.compaction import compact, materialize_deletions
    from lance_spark_ops.spark.files.row_id_index import rebuild_row_id_index
    from lance_spark_ops.spark.runtime.job import speculation_on
    from lance_spark_ops.spark.runtime.tuning import Tuning

    uri = str(tmp_path / "ds")
    small_fragments(uri, "2.1", stable=True, fragments=5, rows=300)
    expected = rows_multiset(lance.dataset(uri).to_table(columns=COLUMNS), COLUMNS)
    got = read_lance(remote, uri, columns=COLUMNS).toArrow()
    assert rows_multiset(got, COLUMNS) == expected

    materialize_deletions(remote, uri)
    ds = lance.dataset(uri)
    assert all(f.metadata.deletion_file is None for f in ds.get_fragments())
    assert rows_multiset(ds.to_table(columns=COLUMNS), COLUMNS) == expected

    # the server's spark.speculation reads over Connect (unreadable would count as on): a job of
    # first attempts lists no data/ for other attempts' files there either
    assert not speculation_on(remote)
    # and in waves, a Spark job per task (as a job's past Tuning.task_inline_bytes run)
    m = compact(remote, uri, target_rows_per_fragment=100_000,
                tuning=Tuning(driver_rewrite_bytes=0, task_inline_bytes=0))
    assert m.tasks_in_driver == 0 and m.orphan_files_deleted == 0
    ds = lance.dataset(uri)
    assert len(ds.get_fragments()) == 1
    assert rows_multiset(ds.to_table(columns=COLUMNS), COLUMNS) == expected

    add_columns(remote, uri, {"twice": "id * 2"})
    t = lance.dataset(uri).to_table(columns=["id", "twice"])
    assert t.column("twice").to_pylist() == pc.multiply(t.column("id"), 2).to_pylist()

    rebuild_row_id_index(remote, uri)
    truth = lance.dataset(uri).to_table(columns=["id"], with_row_id=True, with_row_address=True)
    assert np.array_equal(lookup(uri, truth.column("_rowid")), truth.column("_rowaddr").to_numpy())


@pytest.mark.slow  # ~40 s on 2 cores: the Connect server's fresh workers for each job
def test_maintain_over_connect(remote, tmp_path: Path) -> None:
    """``maintain`` on a Connect session: tables on their own threads (tags are thread-local
    there too), exactly the policy's actions, pylance's answers unchanged."""
    import lance

    from lance_spark_ops.spark import maintain
    from tests.fleet.lake import EXPECTED, POLICY, make_lake

    root = str(tmp_path / "lake")
    locations = make_lake(root)
    names = ["small", "old", "healthy"]
    before = {n: lance.dataset(locations[n]).to_table().sort_by("id") for n in names}
    ns = ("dir", {"root": root})
    result = maintain(remote, [(ns, n) for n in names], POLICY, max_concurrent_tables=2)
    assert {t.table: [(a["action"], a["status"]) for a in t.actions] for t in result.tables} == \
        {n: [(a, "ok") for a in EXPECTED[n]] for n in names}
    for n in names:
        assert lance.dataset(locations[n]).to_table().sort_by("id").equals(before[n])
    assert lance.dataset(locations["healthy"]).version == 1
