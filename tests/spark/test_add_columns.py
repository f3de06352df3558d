"""``add_columns``: the physical-row writer without Spark, the function and all-null modes in
process, and SQL / DataFrame-join modes on Spark - always read back by pylance, on 2.0 / 2.1 /
2.2 datasets with deletions, with the existing data files untouched."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lance_spark_ops.errors import InvalidInputError
from lance_spark_ops.file.schema import LanceSchema, schema_from_arrow
from lance_spark_ops.spark.files.columns import ColumnFunction, add_columns
from lance_spark_ops.spark.files.columns_tasks import ColumnWriteSpec, write_stream
from tests.spark.datasets import before_commit

VERSIONS = ("2.0", "2.1", "2.2")
LIVE = sum(1 for a in range(3000) if not (a % 7 == 0 or 1000 <= a < 1100))  # rows _make leaves


def _make(uri: str, version: str, n: int = 3000) -> str:
    import lance

    tbl = pa.table({"a": pa.array(range(n), pa.int64()), "s": [f"x{i}" for i in range(n)],
                    "u": pa.array(np.arange(n) % 200, pa.uint8())})
    ds = lance.write_dataset(tbl, uri, data_storage_version=version, max_rows_per_file=1000)
    ds.delete("a % 7 = 0 OR (a >= 1000 AND a < 1100)")
    return uri


def _files(uri: str) -> dict[str, int]:
    import lance

    return {f.path: os.path.getsize(f"{uri}/data/{f.path}")
            for fr in lance.dataset(uri).get_fragments() for f in fr.metadata.files}


def _job(name: str):
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "jobs" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"job_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _table(uri: str):
    import lance

    return lance.dataset(uri).to_table()


# -- the writer ---------------------------------------------------------------------------------
def _spec(tmp_path: Path, version: str = "2.1", rows: dict[int, int] | None = None) -> ColumnWriteSpec:
    schema = pa.schema([pa.field("x", pa.int64()), pa.field("st", pa.struct([("k", pa.string())]))])
    lance_schema: LanceSchema = schema_from_arrow(schema, 10)
    return ColumnWriteSpec(str(tmp_path), 1, "job", schema, lance_schema, (10, 12), (0, 1), version, (2, 1),
                           rows or {0: 6, 3: 4})


def _batch(addrs: list[int], xs: list[int]) -> pa.RecordBatch:
    st = pa.array([{"k": str(x)} for x in xs], pa.struct([("k", pa.string())]))
    return pa.record_batch([pa.array(addrs, pa.int64()), pa.array(xs, pa.int64()), st],
                           names=["_rowaddr", "x", "st"])


@pytest.mark.parametrize("version", ["2.0", "2.1"])
def test_writer_places_values_at_physical_rows(tmp_path: Path, version: str) -> None:
    from lance_spark_ops.file.reader import LanceFileReader

    spec = _spec(tmp_path, version)
    f3 = 3 << 32
    batches = [_batch([1, 2], [10, 20]), _batch([5, f3 | 2], [50, 32]), _batch([f3 | 3], [33])]
    written = write_stream(spec, iter(batches), "t")
    assert [(w.fragment_id, w.rows) for w in written] == [(0, 6), (3, 4)]
    got0 = LanceFileReader(f"{tmp_path}/data/{written[0].path}").read()
    assert got0.column("x").to_pylist() == [None, 10, 20, None, None, 50]
    got3 = LanceFileReader(f"{tmp_path}/data/{written[1].path}").read()
    assert got3.column("x").to_pylist() == [None, None, 32, 33]
    keys = pc.struct_field(got3.column("st"), "k").to_pylist()
    assert keys == [None, None, "32", "33"]


def test_writer_refuses_bad_streams(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    with pytest.raises(InvalidInputError, match="two values"):
        write_stream(spec, iter([_batch([1, 1], [1, 2])]), "t")
    with pytest.raises(InvalidInputError, match="fragment 9"):
        write_stream(spec, iter([_batch([9 << 32], [1])]), "t")
    with pytest.raises(InvalidInputError, match="past the 6 rows"):
        write_stream(spec, iter([_batch([6], [1])]), "t")
    assert not [n for n in os.listdir(tmp_path / "data")]  # failed attempts leave no file


# -- in process: function and all-null modes ---------------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
def test_function_mode(tmp_path: Path, version: str) -> None:
    uri = _make(str(tmp_path / "ds"), version)
    before = _files(uri)
    fn = ColumnFunction(
        lambda b: {"d": pc.multiply(b.column("a"), 3),
                   "st": pa.StructArray.from_arrays([b.column("u"), b.column("s")], names=["x", "y"])},
        pa.schema([("d", pa.int64()), ("st", pa.struct([("x", pa.uint8()), ("y", pa.string())]))]),
        ("a", "s", "u"))
    m = add_columns(None, uri, fn)
    assert m.mode == "function" and m.files_written == 3 and m.rows_written == 3000
    tbl = _table(uri)
    assert tbl.num_rows == LIVE
    assert tbl.column("d").equals(pc.multiply(tbl.column("a"), 3))
    assert pc.struct_field(tbl.column("st"), "x").equals(tbl.column("u"))
    assert pc.struct_field(tbl.column("st"), "y").equals(tbl.column("s"))
    m = add_columns(None, uri, pa.field("n", pa.float32()))
    assert m.mode == "nulls" and m.files_written == 0
    tbl = _table(uri)
    assert tbl.column("n").null_count == tbl.num_rows and tbl.schema.field("n").type == pa.float32()
    after = _files(uri)
    assert {p: after[p] for p in before} == before  # existing data files untouched


def test_concurrent_append_is_computed_too(tmp_path: Path) -> None:
    import lance

    uri = _make(str(tmp_path / "ds"), "2.1")
    extra = pa.table({"a": pa.array(range(5000, 5400), pa.int64()), "s": ["y"] * 400,
                      "u": pa.array([1] * 400, pa.uint8())})

    def concurrent(rnd: int) -> None:
        if rnd == 1:
            lance.write_dataset(extra, uri, mode="append")
            lance.dataset(uri).delete("a = 5001")

    fn = ColumnFunction(lambda b: {"d": pc.add(b.column("a"), 1)}, pa.schema([("d", pa.int64())]), ("a",))
    m = add_columns(None, uri, fn, tuning=before_commit(concurrent))
    assert m.rounds == 2 and m.fragments_recomputed == 1
    tbl = _table(uri)
    assert tbl.num_rows == LIVE + 399
    assert tbl.column("d").equals(pc.add(tbl.column("a"), 1))
    # all-null columns over a concurrent append: metadata only, still committed
    m = add_columns(None, uri, pa.schema([("n", pa.string())]),
                    tuning=before_commit(lambda rnd: concurrent(rnd) if rnd == 1 else None))
    assert m.rounds == 2 and m.files_written == 0
    assert _table(uri).column("n").null_count == LIVE + 2 * 399  # a = 5001 deleted in both copies


def test_bad_requests(tmp_path: Path) -> None:
    uri = _make(str(tmp_path / "ds"), "2.2", 100)
    with pytest.raises(InvalidInputError, match="new, unique"):
        add_columns(None, uri, pa.field("a", pa.int32()))
    with pytest.raises(InvalidInputError, match="SparkSession"):
        add_columns(None, uri, {"b": "a + 1"})
    with pytest.raises(InvalidInputError, match="cannot add columns"):
        add_columns(None, uri, 42)


# -- Spark: SQL expressions and DataFrame joins -------------------------------------------------------
@pytest.fixture(scope="module")
def sql_datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("add_sql")
    return {v: _make(str(root / f"ds_{v}"), v) for v in VERSIONS}


def test_job_column_flags() -> None:
    parse = _job("add_columns").parse_columns
    assert parse(["b=a == 1", " c = x+1 "]) == {"b": "a == 1", "c": "x+1"}
    for bad in (["b"], ["=a"], ["b=a", "b=c"]):
        with pytest.raises(InvalidInputError):  # the job exits 2 with an error line (spark.runtime.cli)
            parse(bad)


@pytest.mark.spark
@pytest.mark.parametrize("version", VERSIONS)
def test_sql_expressions(spark, sql_datasets: dict[str, str], version: str,
                         capsys: pytest.CaptureFixture) -> None:
    uri = sql_datasets[version]
    before = _files(uri)
    _job("add_columns").main([uri, "--column", "b=a * 2 + u", "--column", "t=concat(s, '!')",
                              "--column", "z=named_struct('p', a, 'q', s)"])
    m = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert m["mode"] == "sql" and m["columns"] == ["b", "t", "z"] and m["files_written"] == 3
    assert m["engine"] == "spark"  # u is widened on read and named_struct is not translated
    tbl = _table(uri)
    a, u = tbl.column("a").to_pylist(), tbl.column("u").to_pylist()
    assert tbl.column("b").to_pylist() == [x * 2 + y for x, y in zip(a, u, strict=True)]
    assert tbl.column("t").to_pylist() == [s + "!" for s in tbl.column("s").to_pylist()]
    assert pc.struct_field(tbl.column("z"), "p").equals(tbl.column("a"))
    after = _files(uri)
    assert {p: after[p] for p in before} == before


@pytest.mark.spark
@pytest.mark.parametrize("version", VERSIONS)
def test_dataframe_joins(spark, tmp_path: Path, version: str) -> None:
    from lance_spark_ops.spark.datasource.read import read_lance

    uri = _make(str(tmp_path / "ds"), version)
    before = _files(uri)
    values = spark.createDataFrame([(i, i / 2) for i in range(0, 3000, 3)], "a long, half double")
    add_columns(spark, uri, values, on="a")
    by_addr = read_lance(spark, uri, columns=["a"], with_row_address=True)
    by_addr = by_addr.selectExpr("_rowaddr", "a + 1000 AS plus")
    add_columns(spark, uri, by_addr)
    tbl = _table(uri)
    a = tbl.column("a").to_pylist()
    assert tbl.column("half").to_pylist() == [x / 2 if x % 3 == 0 else None for x in a]
    assert tbl.column("plus").to_pylist() == [a + 1000 for a in tbl.column("a").to_pylist()]
    assert not [n for n in os.listdir(f"{uri}/data") if n.startswith("lso-") and n not in _files(uri)]
    after = _files(uri)
    assert {p: after[p] for p in before} == before  # existing data files untouched


@pytest.mark.spark
def test_sql_with_concurrent_append(spark, tmp_path: Path) -> None:
    import lance

    uri = _make(str(tmp_path / "ds"), "2.2")
    extra = pa.table({"a": pa.array(range(5000, 5300), pa.int64()), "s": ["y"] * 300,
                      "u": pa.array([2] * 300, pa.uint8())})
    def concurrent(rnd: int) -> None:
        if rnd == 1:
            lance.write_dataset(extra, uri, mode="append")

    m = add_columns(spark, uri, {"b": "a - u"}, tuning=before_commit(concurrent))
    assert m.rounds == 2 and m.fragments_recomputed == 1
    tbl = _table(uri)
    assert tbl.num_rows == LIVE + 300
    assert tbl.column("b").to_pylist() == [a - u for a, u in zip(tbl.column("a").to_pylist(),
                                                                  tbl.column("u").to_pylist(), strict=True)]
