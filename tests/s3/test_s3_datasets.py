"""Datasets on S3 (a moto server): pylance writes them with its storage options, our reads and
maintenance operations run on them with the same options, pylance reads what we committed."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lance_spark_ops.errors import CommitStateUnknown, UnsupportedError
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.spark.files.columns import ColumnFunction, add_columns
from lance_spark_ops.spark.files.compaction import compact, materialize_deletions
from lance_spark_ops.spark.files.row_id_index import rebuild_row_id_index
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.write import write_dataset
from tests.s3.conftest import S3
from tests.table.commit_helpers import table


def _pylance(uri: str, so: dict[str, str], **kw: object) -> pa.Table:
    import lance

    return lance.dataset(uri, storage_options=so).to_table(with_row_id=True, **kw).sort_by("_rowid")


def _ours(uri: str, so: dict[str, str]) -> pa.Table:
    return Dataset.open(uri, storage_options=so).to_table(with_row_id=True).sort_by("_rowid")


def _make(s3: S3, name: str, rows: int = 1000, per_file: int = 250) -> str:
    import lance

    uri = s3.uri(name)
    lance.write_dataset(table(rows), uri, storage_options=s3.options, max_rows_per_file=per_file,
                        enable_stable_row_ids=True, data_storage_version="2.1")
    ds = lance.dataset(uri, storage_options=s3.options)
    ds.update({"f": "f + 1"}, where=f"id >= {rows // 8} AND id < {rows // 8 + 30}")  # rows move, ids kept
    ds.update({"f": "f + 1"}, where=f"id >= {rows // 2} AND id < {rows // 2 + 30}")
    lance.dataset(uri, storage_options=s3.options).optimize.compact_files(target_rows_per_fragment=per_file)
    lance.dataset(uri, storage_options=s3.options).delete("id % 10 = 0")
    return uri


def test_maintenance_chain_on_s3(s3: S3) -> None:
    """open/scan, materialize_deletions, compact, add_columns, rebuild_row_id_index (spark=None)."""
    import lance

    so = s3.options
    uri = _make(s3, "chain.lance")
    expected = _pylance(uri, so)
    assert expected.num_rows == 900 and _ours(uri, so).equals(expected)

    m = rebuild_row_id_index(None, uri, storage_options=so)  # pylance's compaction scattered the ids
    ds = lance.dataset(uri, storage_options=so)
    assert m.new_version == ds.version and m.fragments_rewritten > 0
    sample = expected.column("_rowid").to_pylist()[::37]
    taken = ds._take_rows(sample, columns=["id"]).column("id").to_pylist()  # by row id: pylance's index
    assert taken == expected.column("id").to_pylist()[::37]

    m = materialize_deletions(None, uri, storage_options=so)
    assert m.new_version is not None
    ds = lance.dataset(uri, storage_options=so)
    assert all(f.deletion_file() is None for f in ds.get_fragments())
    assert _pylance(uri, so).equals(expected)  # stable row ids kept


    m = compact(None, uri, storage_options=so, target_rows_per_fragment=2000)
    assert m.new_version is not None
    assert len(lance.dataset(uri, storage_options=so).get_fragments()) == 1
    assert _pylance(uri, so).equals(expected)

    fn = ColumnFunction(lambda b: {"d": pc.multiply(b.column("id"), 3)}, pa.schema([("d", pa.int64())]),
                        ("id",))
    add_columns(None, uri, fn, storage_options=so)
    got = _pylance(uri, so)
    assert got.column("d").equals(pc.multiply(got.column("id"), 3))
    assert got.select(["id", "s", "f", "_rowid"]).equals(expected)

    ds.delete("id < 100")  # pylance keeps committing on top of ours
    assert lance.dataset(uri, storage_options=so).count_rows() == 810


@pytest.mark.spark
def test_compact_with_spark_on_s3(spark, s3: S3) -> None:  # type: ignore[no-untyped-def]
    import lance

    so = s3.options
    uri = _make(s3, "spark.lance", rows=600, per_file=100)
    expected = _pylance(uri, so)
    before = len(lance.dataset(uri, storage_options=so).get_fragments())
    m = compact(spark, uri, storage_options=so, target_rows_per_fragment=600)
    assert m.new_version is not None and before > 1
    assert len(lance.dataset(uri, storage_options=so).get_fragments()) == 1
    assert _pylance(uri, so).equals(expected)


def test_no_conditional_put_refuses_and_leaves_nothing(s3: S3) -> None:
    so = {**s3.options, "aws_conditional_put": "disabled"}
    uri = s3.uri("refused.lance")
    with pytest.raises(UnsupportedError, match="conditional put"):
        write_dataset(table(10), uri, storage_options=so)
    assert ObjectStore(uri, so).fs.find(f"{s3.bucket}/refused.lance") == []


def test_put_that_landed_despite_an_error_is_recognised(s3: S3, monkeypatch: pytest.MonkeyPatch) -> None:
    """The PUT lands but the client sees an error (or a retried PUT sees 412): read back, ours."""
    import lance

    so = s3.options
    uri = s3.uri("ambiguous.lance")
    write_dataset(table(10), uri, storage_options=so)
    real = ObjectStore.put_if_not_exists
    errors = iter([OSError("connection reset after upload"), FileExistsError("412 on the retry")])

    def landed_then_failed(self: ObjectStore, rel: str, data: bytes) -> None:
        real(self, rel, data)
        err = next(errors)
        if isinstance(err, FileExistsError):
            real(self, rel, data)  # the real conditional put now reports the conflict
        raise err

    monkeypatch.setattr(ObjectStore, "put_if_not_exists", landed_then_failed)
    assert write_dataset(table(5, 10), uri, mode="append", storage_options=so).version == 2
    assert write_dataset(table(5, 15), uri, mode="append", storage_options=so).version == 3
    monkeypatch.undo()
    got = lance.dataset(uri, storage_options=so)
    assert got.version == 3 and sorted(got.to_table().column("id").to_pylist()) == list(range(20))


def test_put_that_surely_failed_to_be_told_is_unknown(s3: S3, monkeypatch: pytest.MonkeyPatch) -> None:
    """The PUT errors and the manifest is absent: it may still land -> CommitStateUnknown, files kept."""
    import lance

    so = s3.options
    uri = s3.uri("unknown.lance")
    write_dataset(table(10), uri, storage_options=so)
    store = ObjectStore(uri, so)
    data_before = set(store.list("data"))

    def fails(self: ObjectStore, rel: str, data: bytes) -> None:
        raise OSError("timeout")

    monkeypatch.setattr(ObjectStore, "put_if_not_exists", fails)
    with pytest.raises(CommitStateUnknown):
        write_dataset(table(5, 10), uri, mode="append", storage_options=so)
    monkeypatch.undo()
    assert len(set(store.list("data")) - data_before) == 1  # the new data file is kept
    assert lance.dataset(uri, storage_options=so).version == 1
