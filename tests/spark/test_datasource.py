"""The ``lance`` Python data source on the local session: reads (options, row-range partitions,
pushed filters) compared with pylance, writes (create / append / overwrite) read back by
pylance, and the writer's commit / abort rules without Spark."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lance_spark_ops.errors import InvalidInputError, SchemaError
from lance_spark_ops.spark.datasource.options import ReadOptions, WriteOptions, storage_options
from lance_spark_ops.spark.datasource.reader import plan_slices
from lance_spark_ops.spark.runtime.spark_types import spark_target_schema, to_spark_batch

N = 3000


def _table(n: int, start: int = 0) -> pa.Table:
    i = np.arange(start, start + n)
    return pa.table({
        "a": pa.array(i, pa.int64()),
        "b": pa.array(i % 7 == 0),
        "i8": pa.array(i % 100 - 50, pa.int8()),
        "s": pa.array([f"k{k % 40}" if k % 9 else None for k in i]),
        "d": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=int(k % 60)) for k in i], pa.date32()),
        "f": pa.array(np.where(i % 11 == 0, np.nan, i * 0.5)),
        "u": pa.array(i % 300, pa.uint16()),
        "ts": pa.array(i * 1_000_000, pa.timestamp("us", "Europe/Paris")),
        "l": pa.array([[int(k)] * int(k % 3) for k in i], pa.list_(pa.int64())),
    })


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Three 1000-row fragments with deletions (version 2), then 500 rows appended (version 3)."""
    import lance

    uri = str(tmp_path_factory.mktemp("dsrc") / "ds")
    lance.write_dataset(_table(N), uri, max_rows_per_file=1000, enable_stable_row_ids=True)
    lance.dataset(uri).delete("a % 13 = 0 OR (a >= 1300 AND a < 1400)")
    lance.write_dataset(_table(500, N), uri, mode="append")
    return uri


def _truth(uri: str, **kw) -> pa.Table:
    import lance

    tbl = lance.dataset(uri, version=kw.pop("version", None)).to_table(**kw).combine_chunks()
    target = spark_target_schema(tbl.schema)
    return pa.Table.from_batches([to_spark_batch(b, target) for b in tbl.to_batches()], schema=target)


def _same(got: pa.Table, truth: pa.Table) -> bool:
    """Equal tables, NaN equal to NaN (Arrow's ``equals`` says NaN != NaN)."""
    def fix(t: pa.Table) -> pa.Table:
        if "f" not in t.column_names:
            return t
        f = t.column("f")
        return t.set_column(t.column_names.index("f"), "f", pc.if_else(pc.is_nan(f), -1e300, f))

    return fix(got.cast(truth.schema)).equals(fix(truth))


def _reader(spark, uri: str, **opts):
    from lance_spark_ops.spark import register_data_source

    register_data_source(spark)
    return spark.read.format("lance").options(**{k: str(v) for k, v in opts.items()}).load(uri)


def test_plan_slices() -> None:
    assert plan_slices([(0, 10), (1, 10)], None) == [[(0, 0, 10)], [(1, 0, 10)]]
    assert plan_slices([(0, 10), (1, 4), (2, 5), (3, 25)], 10) == [
        [(0, 0, 10)], [(1, 0, 4), (2, 0, 5)], [(3, 0, 8)], [(3, 8, 17)], [(3, 17, 25)]]
    assert plan_slices([(3, 25), (4, None)], 10, split=False) == [[(3, 0, 25)], [(4, 0, None)]]
    # by bytes: neighbours while their files and 4 MiB apiece fit; an unknown size or a split
    # piece stands alone; max_rows (the user's) packs by rows instead
    mib = 1 << 20
    sizes = [(0, 10, 20 * mib), (1, 10, 20 * mib), (2, 10, 76 * mib), (3, 10, None), (4, 10, mib),
             (5, 3 << 20, mib), (6, 10, mib)]
    assert plan_slices(sizes, None, max_bytes=128 * mib) == [
        [(0, 0, 10), (1, 0, 10), (2, 0, 10)], [(3, 0, 10)], [(4, 0, 10)],
        [(5, 0, 1 << 20)], [(5, 1 << 20, 2 << 20)], [(5, 2 << 20, 3 << 20)], [(6, 0, 10)]]
    assert plan_slices(sizes[:3], None, max_bytes=100 * mib) == [[(0, 0, 10), (1, 0, 10)], [(2, 0, 10)]]
    assert plan_slices(sizes[:3], None, max_bytes=0) == [[(0, 0, 10)], [(1, 0, 10)], [(2, 0, 10)]]
    assert plan_slices(sizes[:3], 20, max_bytes=128 * mib) == [[(0, 0, 10), (1, 0, 10)], [(2, 0, 10)]]


def test_source_module_imports_no_table_layer() -> None:
    """Spark makes the source in a fresh planner process (``create_data_source``) that imports
    its module: that module alone, not the table and file layers it reads with."""
    import subprocess
    import sys

    code = ("import sys, lance_spark_ops.spark.datasource as d; "
            "print(sorted(m for m in sys.modules if m.startswith(('lance_spark_ops.table', "
            "'lance_spark_ops.file', 'lance_spark_ops.io', 'pyarrow'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_options() -> None:
    opts = ReadOptions.parse({"path": "/x", "columns": '["a", "b,c"]', "with_row_id": "TRUE",
                              "storage.region": "eu", "storage_options": '{"Key": 1, "region": "us"}'})
    assert opts.columns == ("a", "b,c") and opts.with_row_id and not opts.with_row_address
    assert opts.storage_options == {"Key": 1, "region": "eu"}
    assert ReadOptions.parse({"path": "/x", "columns": "a, b"}).columns == ("a", "b")
    assert storage_options({"storage.": "x"}) == {}
    with pytest.raises(InvalidInputError, match="'colums'"):
        ReadOptions.parse({"path": "/x", "colums": "a"})
    with pytest.raises(InvalidInputError, match="with_row_id"):
        ReadOptions.parse({"path": "/x", "with_row_id": "yes"})
    with pytest.raises(InvalidInputError, match="max_rows_per_file"):
        WriteOptions.parse({"path": "/x", "max_rows_per_file": "0"})
    with pytest.raises(InvalidInputError, match="URI"):
        WriteOptions.parse({})


def test_read_matches_pylance(spark, dataset: str) -> None:
    # four small fragments share a partition by default (their files within 128 MiB) ...
    assert _reader(spark, dataset).rdd.getNumPartitions() == 1
    # ... and one each without packing: the rows the same either way
    df = _reader(spark, dataset, with_row_id="true", with_row_address="true", max_bytes_per_partition=0)
    assert df.rdd.getNumPartitions() == 4
    packed = _reader(spark, dataset, with_row_id="true", with_row_address="true").toArrow()
    got = df.toArrow()
    truth = _truth(dataset, with_row_id=True, with_row_address=True)
    assert got.num_rows == truth.num_rows
    assert _same(got, truth) and _same(packed, truth)
    # a pinned version, projected, each fragment split into row ranges: same rows, same order
    df = _reader(spark, dataset, version=2, columns="s,a", with_row_id="true", max_rows_per_partition=300)
    assert df.columns == ["s", "a", "_rowid"]
    assert df.rdd.getNumPartitions() == 12
    got = df.toArrow()
    truth = _truth(dataset, version=2, columns=["s", "a"], with_row_id=True)
    assert _same(got, truth)


FILTERS = [  # (Spark SQL, pylance SQL or None when it is the same, pushed to the reader?)
    ("a > 2500 AND s = 'k3'", None, True),
    ("i8 <= -40 OR i8 = 7", None, False),  # OR: never offered to the source
    ("i8 >= 45", None, True),
    ("b", "b = true", True),
    ("NOT b AND a < 100", "b = false AND a < 100", True),
    ("s IS NULL", None, True),
    ("s IS NOT NULL AND a BETWEEN 10 AND 20", None, True),
    ("s IN ('k1', 'k2')", None, True),
    ("s LIKE 'k1%'", None, True),
    ("s LIKE '%3'", None, True),
    ("s LIKE '%2%'", None, True),
    ("s <> 'k5' AND a < 300", "s != 'k5' AND a < 300", True),
    ("d >= DATE'2024-02-15'", "d >= date '2024-02-15'", True),
    ("u = 299", None, True),
    ("_rowid < 50", None, True),
    ("f > 1000.0", None, False),  # doubles: NaN orders differently in Arrow
]


def _pushed(df) -> bool:
    """Whether the plan has no Filter left above the scan (the reader took them all)."""
    plan = df._jdf.queryExecution().executedPlan().toString()
    return "Filter " not in plan and "BatchScan" in plan


@pytest.mark.parametrize("sql,oracle,pushed", FILTERS, ids=[f[0] for f in FILTERS])
def test_filters_match_pylance(spark, dataset: str, sql: str, oracle: str | None, pushed: bool) -> None:
    df = _reader(spark, dataset, with_row_id="true").filter(sql)
    assert _pushed(df) == pushed
    got = df.select("a").toArrow().column("a").to_pylist()
    truth = _truth(dataset, columns=["a"], with_row_id=True, filter=oracle or sql)
    assert sorted(got) == sorted(truth.column("a").to_pylist())


def test_filter_three_valued_logic(spark, tmp_path: Path) -> None:
    """Null-sensitive filters pushed into the reader give Spark's own answers (checked against
    the same query over a plain in-memory DataFrame, where Spark evaluates everything)."""
    import lance

    uri = str(tmp_path / "nulls")
    lance.write_dataset(pa.table({"x": pa.array([1, 2, None, 4], pa.int32()),
                                  "s": pa.array(["a", None, "b", "ab"])}), uri)
    plain = spark.createDataFrame([(1, "a"), (2, None), (None, "b"), (4, "ab")], "x int, s string")
    src = _reader(spark, uri)
    for sql in ["x IN (1, NULL)", "NOT x IN (1, 4)", "x <=> NULL", "NOT (x <=> 2)", "NOT s LIKE 'a%'",
                "x <=> 4", "NOT x IS NULL", "NOT x <> 2"]:
        want = sorted(map(tuple, plain.filter(sql).collect()), key=str)
        assert sorted(map(tuple, src.filter(sql).collect()), key=str) == want, sql


def test_filter_pushdown_off(spark, dataset: str) -> None:
    from lance_spark_ops.spark import register_data_source

    try:
        register_data_source(spark, filter_pushdown=False)
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
        df = spark.read.format("lance").load(dataset).filter("a > 3200")
        assert not _pushed(df)
        assert df.count() == _truth(dataset, columns=["a"], filter="a > 3200").num_rows
    finally:
        register_data_source(spark)


def test_write_create_append_overwrite(spark, tmp_path: Path) -> None:
    import lance

    uri = str(tmp_path / "w")
    df = spark.range(0, 2500, 1, 3).selectExpr(
        "id", "cast(id % 5 as int) AS small", "IF(id % 4 = 0, NULL, concat('v', id)) AS s",
        "array(id, id + 1) AS arr", "named_struct('p', id * 2, 'q', cast(id as string)) AS st",
        "timestamp_seconds(id) AS ts", "date_add(DATE'2020-01-01', cast(id % 100 as int)) AS d")
    df.write.format("lance").mode("append").option("max_rows_per_file", "1000").save(uri)
    ds = lance.dataset(uri)
    assert ds.version == 1 and ds.count_rows() == 2500 and len(ds.get_fragments()) >= 3
    got = ds.to_table().sort_by("id")
    expected = df.toArrow().sort_by("id")
    for name in ["id", "small", "s", "arr", "st", "d"]:
        assert got.column(name).to_pylist() == expected.column(name).to_pylist(), name
    assert got.column("ts").cast(pa.int64()).equals(expected.column("ts").cast(pa.int64()))
    # append (any column order), then a type mismatch is refused naming the column
    df.where("id < 10").select(*reversed(df.columns)).write.format("lance").mode("append").save(uri)
    assert lance.dataset(uri).count_rows() == 2510
    with pytest.raises(Exception, match="'small'"):
        df.selectExpr("id", "'x' AS small", "s", "arr", "st", "ts", "d").write.format("lance") \
            .mode("append").save(uri)
    assert lance.dataset(uri).version == 2
    # overwrite replaces the schema and the rows
    spark.range(3).selectExpr("id * 7 AS z").write.format("lance").mode("overwrite").save(uri)
    ds = lance.dataset(uri)
    assert ds.version == 3 and ds.schema.names == ["z"]
    assert sorted(ds.to_table().column("z").to_pylist()) == [0, 7, 14]
    # a failed job leaves the dataset as it was and no data files behind
    files_before = sorted(os.listdir(Path(uri) / "data"))
    with pytest.raises(Exception, match="boom"):  # one task: no other task outliving the abort
        spark.range(0, 100, 1, 1).selectExpr("IF(id = 77, raise_error('boom'), id) AS z") \
            .write.format("lance").mode("append").save(uri)
    assert lance.dataset(uri).version == 3
    assert sorted(os.listdir(Path(uri) / "data")) == files_before


def test_append_to_pylance_dataset_round_trips(spark, tmp_path: Path) -> None:
    """Append Spark's widened types (uint16 read as int) back into a pylance dataset."""
    import lance

    uri = str(tmp_path / "p")
    lance.write_dataset(_table(100), uri)
    schema = lance.dataset(uri).schema
    src = _reader(spark, uri)
    src.where("a < 10").write.format("lance").mode("append").save(uri)
    ds = lance.dataset(uri)
    assert ds.count_rows() == 110 and ds.schema == schema
    assert ds.to_table(filter="a < 10").column("u").to_pylist() == [i % 300 for i in range(10)] * 2


def test_writer_commit_and_abort_without_spark(tmp_path: Path) -> None:
    """A concurrent pylance append between the tasks and the commit: both land. ``abort``
    deletes a job's files, but not those of a commit that landed."""
    import lance
    from pyspark.sql.types import LongType, StructField, StructType

    from lance_spark_ops.spark.datasource.writer import LanceWriter

    uri = str(tmp_path / "c")
    lance.write_dataset(pa.table({"x": pa.array([1, 2], pa.int64())}), uri)
    schema = StructType([StructField("x", LongType())])
    writer = LanceWriter(WriteOptions(uri), schema, overwrite=False)
    msg = writer.write(iter([pa.record_batch([pa.array([10, 11], pa.int64())], names=["x"])]))
    assert len(msg.fragments) == 1 and all((Path(uri) / p).exists() for p in msg.paths)
    lance.write_dataset(pa.table({"x": pa.array([5], pa.int64())}), uri, mode="append")
    writer.commit([msg, None])
    assert sorted(lance.dataset(uri).to_table().column("x").to_pylist()) == [1, 2, 5, 10, 11]
    writer.abort([msg])  # its commit landed: the files stay
    assert all((Path(uri) / p).exists() for p in msg.paths)
    other = writer.write(iter([pa.record_batch([pa.array([99], pa.int64())], names=["x"])]))
    writer.abort([other])
    assert not any((Path(uri) / p).exists() for p in other.paths)
    with pytest.raises(SchemaError, match="'y'"):
        writer.write(iter([pa.record_batch([pa.array([1])], names=["y"])]))
    assert sorted(lance.dataset(uri).to_table().column("x").to_pylist()) == [1, 2, 5, 10, 11]
