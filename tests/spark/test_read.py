"""``read_lance`` against pylance's ``to_table`` on 2.0 / 2.1 / 2.2 datasets with deletions,
and the scan task without Spark."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops.errors import NotFoundError, UnsupportedError
from lance_spark_ops.spark.runtime.scan_tasks import (
    ScanSpec,
    group_fragments,
    make_scan_mapper,
    scan_fragments,
)
from lance_spark_ops.spark.runtime.spark_types import spark_target_schema, to_spark_batch

VERSIONS = ("2.0", "2.1", "2.2")


def _table(n: int, start: int = 0) -> pa.Table:
    i = np.arange(start, start + n)
    return pa.table({
        "a": pa.array(i, pa.int64()),
        "u": pa.array(i % 300, pa.uint16()),
        "s": pa.array([f"s{k}" if k % 7 else None for k in i]),
        "f": pa.array(i * 0.25, pa.float32()),
        "v": pa.FixedSizeListArray.from_arrays(pa.array(np.repeat(i, 4).astype(np.float32)), 4),
        "st": pa.StructArray.from_arrays([pa.array(i % 5, pa.int32()), pa.array([str(k) for k in i])],
                                         names=["x", "y"]),
        "l": pa.array([[int(k)] * int(k % 3) for k in i], pa.list_(pa.int64())),
    })


def _make(uri: str, version: str) -> str:
    import lance

    ds = lance.write_dataset(_table(3000), uri, data_storage_version=version, max_rows_per_file=1200)
    lance.write_dataset(_table(500, 3000), uri, mode="append", data_storage_version=version)
    ds = lance.dataset(uri)
    ds.delete("a % 13 = 0 OR (a >= 1300 AND a < 1400)")
    return uri


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("read")
    return {v: _make(str(root / f"ds_{v}"), v) for v in VERSIONS}


def _expected(uri: str, **kw: bool) -> pa.Table:
    import lance

    tbl = lance.dataset(uri).to_table(**kw)
    target = spark_target_schema(tbl.schema)
    return pa.Table.from_batches([to_spark_batch(b, target) for b in tbl.combine_chunks().to_batches()],
                                 schema=target)


@pytest.mark.parametrize("version", VERSIONS)
def test_scan_task_without_spark(datasets: dict[str, str], version: str) -> None:
    import lance

    uri = datasets[version]
    spec = ScanSpec(uri, lance.dataset(uri).version, None, True, True)
    frag_ids = [f.fragment_id for f in lance.dataset(uri).get_fragments()]
    descriptors = pa.record_batch([pa.array([0]), pa.array([frag_ids])], names=["part", "fragment_ids"])
    got = pa.Table.from_batches(list(make_scan_mapper(spec)(iter([descriptors]))))
    assert got.equals(_expected(uri, with_row_id=True, with_row_address=True))
    # the raw task keeps Lance's types
    raw = pa.Table.from_batches(list(scan_fragments(spec, [0])))
    assert raw.schema.field("_rowaddr").type == pa.uint64()
    assert raw.schema.field("u").type == pa.uint16()


def test_group_fragments() -> None:
    assert group_fragments([(0, 10), (1, 10), (2, 50), (3, 5)], None) == [[0], [1], [2], [3]]
    assert group_fragments([(0, 10), (1, 10), (2, 50), (3, 5)], 25) == [[0, 1], [2], [3]]


@pytest.mark.spark
def test_read_lance_matches_pylance(spark, datasets: dict[str, str]) -> None:
    from lance_spark_ops.spark.datasource.read import read_lance

    for version, uri in datasets.items():
        assert read_lance(spark, uri).rdd.getNumPartitions() == 1  # small fragments packed
        df = read_lance(spark, uri, with_row_id=True, with_row_address=True, max_bytes_per_partition=0)
        assert df.rdd.getNumPartitions() == 4
        assert df.schema["_rowid"].dataType.simpleString() == "bigint"
        assert df.schema["u"].dataType.simpleString() == "int"
        assert df.schema["v"].dataType.simpleString() == "array<float>"
        got = df.toArrow()
        expected = _expected(uri, with_row_id=True, with_row_address=True)
        assert got.num_rows == expected.num_rows, version
        assert got.cast(expected.schema).equals(expected), version
    # projection, grouping, a pinned version
    uri = datasets["2.1"]
    df = read_lance(spark, uri, columns=["s", "a"], version=2, max_rows_per_partition=2500)
    assert df.columns == ["s", "a"]
    assert df.rdd.getNumPartitions() == 2
    assert df.count() == 3500


def test_read_lance_errors(datasets: dict[str, str], tmp_path: Path) -> None:
    from lance_spark_ops.spark.datasource.read import read_lance

    class NoSpark:  # errors are raised on the driver before Spark is touched
        pass

    with pytest.raises(NotFoundError):
        read_lance(NoSpark(), datasets["2.2"], columns=["nope"])
    with pytest.raises(NotFoundError):
        read_lance(NoSpark(), str(tmp_path / "missing"))
    with pytest.raises(UnsupportedError, match="'un'"):
        spark_target_schema(pa.schema([pa.field("un", pa.dense_union([pa.field("i", pa.int32())]))]))


def test_worker_cache_does_not_serve_a_replaced_dataset(tmp_path) -> None:
    """A dataset deleted and written again at the same URI has the same version number but
    another commit time: the per-worker cache opens it afresh, and a version replaced after
    planning is refused."""
    import shutil

    import lance

    from lance_spark_ops.errors import IncompatibleTransaction
    from lance_spark_ops.spark.runtime.scan_tasks import open_dataset
    from lance_spark_ops.table.dataset import Dataset

    uri = str(tmp_path / "ds")
    lance.write_dataset(pa.table({"x": [1, 2, 3]}), uri)
    first = Dataset.open(uri)
    pinned = open_dataset(uri, first.version, timestamp=first.timestamp)
    assert pinned.to_table().column("x").to_pylist() == [1, 2, 3]
    shutil.rmtree(uri)
    lance.write_dataset(pa.table({"x": [7, 8]}), uri)
    second = Dataset.open(uri)
    assert second.version == first.version and second.timestamp != first.timestamp
    pinned = open_dataset(uri, second.version, timestamp=second.timestamp)
    assert pinned.to_table().column("x").to_pylist() == [7, 8]
    with pytest.raises(IncompatibleTransaction, match="replaced"):
        open_dataset(uri, first.version, timestamp=first.timestamp.replace(year=2001))
