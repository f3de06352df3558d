"""Our commits racing pylance's on one S3 dataset, with S3 conditional puts and with the
DynamoDB manifest store (``s3+ddb://``, both libraries): no commit is lost.

Two kinds of race: a deterministic one (pylance takes the very version our PUT is about to
create, so our conditional put must fail and be retried) and rounds started together on a
barrier (either may lose)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from lance_spark_ops.table.commit.dynamodb import DynamoDBManifestStore, create_manifest_table
from lance_spark_ops.table.commit.handler import ExternalManifestCommitHandler, PutIfNotExistsCommitHandler
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.write import write_dataset
from tests.s3.conftest import S3
from tests.table.commit_helpers import table

ROUNDS = 4


def _target(s3: S3, kind: str, name: str) -> tuple[str, dict[str, str]]:
    """The URI both libraries use and its storage options."""
    if kind == "s3":
        return s3.uri(name), s3.options
    ddb_table = f"T{s3.bucket}"
    create_manifest_table(ddb_table, s3.ddb_options)
    return f"s3+ddb://{s3.bucket}/{name}?ddbTableName={ddb_table}", s3.ddb_options


def _ids(uri: str, so: dict[str, str]) -> list[int]:
    import lance

    return sorted(lance.dataset(uri, storage_options=so).to_table(columns=["id"]).column("id").to_pylist())


def _run_together(barrier: threading.Barrier, *fns: Callable[[], None]) -> None:
    """Run ``fns`` in threads meeting at ``barrier``; the first error aborts the barrier (so no
    thread waits forever) and fails the test; every thread must finish within 120 s."""
    errors: list[BaseException] = []

    def run(fn: Callable[[], None]) -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(f,)) for f in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)


@pytest.mark.parametrize("kind", ["s3", "ddb"])
def test_pylance_takes_the_version_we_are_putting(s3: S3, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import lance

    uri, so = _target(s3, kind, "det.lance")
    lance.write_dataset(table(10), uri, storage_options=so)
    cls = PutIfNotExistsCommitHandler if kind == "s3" else ExternalManifestCommitHandler
    real: Callable = cls.commit
    calls: list[int] = []

    def pylance_first(self, store, version, scheme, data):  # type: ignore[no-untyped-def]
        calls.append(version)
        if len(calls) == 1:
            lance.write_dataset(table(10, 100), uri, mode="append", storage_options=so)  # takes `version`
        return real(self, store, version, scheme, data)

    monkeypatch.setattr(cls, "commit", pylance_first)
    ds = write_dataset(table(10, 200), uri, mode="append", storage_options=so)
    monkeypatch.undo()
    assert calls == [2, 3] and ds.version == 3
    assert _ids(uri, so) == list(range(10)) + list(range(100, 110)) + list(range(200, 210))
    assert lance.dataset(uri, storage_options=so).version == 3
    if kind == "ddb":
        _check_ddb_items(s3, uri, so, 3)


@pytest.mark.parametrize("kind", ["s3", "ddb"])
def test_rounds_on_a_barrier(s3: S3, kind: str) -> None:
    import lance

    uri, so = _target(s3, kind, "race.lance")
    lance.write_dataset(table(10), uri, storage_options=so)
    barrier = threading.Barrier(2, timeout=60)

    def ours() -> None:
        for r in range(ROUNDS):
            barrier.wait()
            write_dataset(table(10, 1000 + 10 * r), uri, mode="append", storage_options=so)

    def theirs() -> None:
        for r in range(ROUNDS):
            barrier.wait()
            lance.write_dataset(table(10, 2000 + 10 * r), uri, mode="append", storage_options=so)

    _run_together(barrier, ours, theirs)
    want = list(range(10)) + list(range(1000, 1000 + 10 * ROUNDS)) + list(range(2000, 2000 + 10 * ROUNDS))
    assert _ids(uri, so) == want
    assert lance.dataset(uri, storage_options=so).version == 1 + 2 * ROUNDS
    assert Dataset.open(uri, storage_options=so).to_table().num_rows == len(want)
    if kind == "ddb":
        _check_ddb_items(s3, uri, so, 1 + 2 * ROUNDS)


def _check_ddb_items(s3: S3, uri: str, so: dict[str, str], latest: int) -> None:
    """Every version recorded in DynamoDB, finalised, under pylance's keys; both committers."""
    table_name = uri.rsplit("=", 1)[1]
    name = uri.split("?")[0].split("/", 3)[3]
    items = s3.client("dynamodb").scan(TableName=table_name, ConsistentRead=True)["Items"]
    mine = sorted((int(i["version"]["N"]), i["path"]["S"], i["committer"]["S"]) for i in items
                  if i["base_uri"]["S"] == name)
    assert [v for v, _, _ in mine] == list(range(1, latest + 1))
    assert all(p.startswith(f"{name}/_versions/") and p.endswith(".manifest") for _, p, _ in mine)
    assert {c for _, _, c in mine} == {"lancedb", "lance-spark-ops"}
    kv = DynamoDBManifestStore(table_name, so)
    assert kv.get_latest(f"s3://{s3.bucket}/{name}")[0] == latest


def test_our_compaction_races_pylance_appends(s3: S3) -> None:
    """A compaction (Rewrite) and pylance's appends started together: both land, no row lost."""
    import lance

    from lance_spark_ops.spark.files.compaction import compact

    uri, so = s3.uri("compact-race.lance"), s3.options
    lance.write_dataset(table(600), uri, storage_options=so, max_rows_per_file=100)
    barrier = threading.Barrier(2, timeout=60)
    metrics = []

    def ours() -> None:
        barrier.wait()
        metrics.append(compact(None, uri, storage_options=so, target_rows_per_fragment=1000))

    def theirs() -> None:
        barrier.wait()
        for r in range(3):
            lance.write_dataset(table(10, 5000 + 10 * r), uri, mode="append", storage_options=so)

    _run_together(barrier, ours, theirs)
    assert metrics[0].new_version is not None
    assert _ids(uri, so) == list(range(600)) + list(range(5000, 5030))
    ds = lance.dataset(uri, storage_options=so)
    # the six original fragments were rewritten (with or without appends that landed first)
    assert not {f.fragment_id for f in ds.get_fragments()} & set(range(6))
