"""The transaction file goes out beside the manifest's put (one round trip a commit, not two),
and what happens when it fails: the manifest carries the same transaction inline, which is
where pylance 14 (and Lance since 0.40) reads a version's transaction."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from lance_spark_ops.errors import CommitConflict, LanceError
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.table.commit import PutIfNotExistsCommitHandler, commit_transaction
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.format.transaction import Append
from tests.table.commit_helpers import assert_same_as_pylance, pylance_fragment, table
from tests.table.test_commit_errors import _ds, _listing


def _fail_txn_writes(monkeypatch: pytest.MonkeyPatch, times: int) -> list[str]:
    """Make the first ``times`` writes under ``_transactions/`` fail; returns their paths."""
    failed: list[str] = []
    write = ObjectStore.write

    def flaky(self: ObjectStore, rel: str, data: bytes) -> None:
        if rel.startswith("_transactions/") and len(failed) < times:
            failed.append(rel)
            raise LanceError("injected: the transaction file's put failed", path=self.uri(rel))
        write(self, rel, data)

    monkeypatch.setattr(ObjectStore, "write", flaky)
    return failed


def test_transaction_file_is_in_flight_with_the_manifest_put(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Both puts meet at a barrier: neither finishes before the other has started (one after
    the other, the barrier breaks and the commit fails)."""
    uri = _ds(tmp_path)
    meet = threading.Barrier(2, timeout=30)
    write = ObjectStore.write

    def txn_waits(self: ObjectStore, rel: str, data: bytes) -> None:
        if rel.startswith("_transactions/"):
            meet.wait()
        write(self, rel, data)

    class ManifestWaits(PutIfNotExistsCommitHandler):
        def commit(self, store, version, scheme, data):  # type: ignore[no-untyped-def]
            meet.wait()
            return super().commit(store, version, scheme, data)

    monkeypatch.setattr(ObjectStore, "write", txn_waits)
    result = commit_transaction(uri, Append([pylance_fragment(uri, table(3, 500), "2.0")]), 1,
                                manifest_store=ManifestWaits())
    monkeypatch.undo()
    assert result.version == 2
    name = result.manifest_file.manifest.transaction_file
    assert (Path(uri) / "_transactions" / name).read_bytes() == result.manifest_file.transaction_bytes
    assert_same_as_pylance(uri)


def test_failed_transaction_file_is_written_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = _ds(tmp_path)
    failed = _fail_txn_writes(monkeypatch, 1)
    result = Dataset.open(uri).commit(Append([pylance_fragment(uri, table(3, 500), "2.0")]))
    monkeypatch.undo()
    assert len(failed) == 1 and result.version == 2
    name = result.manifest.transaction_file
    assert (Path(uri) / "_transactions" / name).exists()
    assert_same_as_pylance(uri)


def test_landed_commit_stays_when_its_transaction_file_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    """Twice failed: the version is committed and a warning names the file. pylance reads the
    transaction inline - its own writer, opened before our commit, checks its delete against
    our append and commits on top of it."""
    import lance

    uri = _ds(tmp_path)
    before = lance.dataset(uri)  # pylance's writer, at version 1
    txns = _listing(uri, "_transactions")
    failed = _fail_txn_writes(monkeypatch, 2)
    with caplog.at_level(logging.WARNING, logger="lance_spark_ops"):
        result = Dataset.open(uri).commit(Append([pylance_fragment(uri, table(3, 500), "2.0")]))
    monkeypatch.undo()
    assert len(failed) == 2 and result.version == 2
    name = result.manifest.transaction_file
    assert _listing(uri, "_transactions") == txns and name not in txns  # not there, still named
    assert any(name in r.getMessage() and "committed" in r.getMessage() for r in caplog.records)
    txn = lance.dataset(uri).read_transaction(2)
    assert txn is not None and type(txn.operation).__name__ == "Append"
    before.delete("id < 10")  # a conflict check against version 2 reads its transaction
    after = lance.dataset(uri)
    assert after.version == 3
    assert sorted(after.to_table().column("id").to_pylist()) == list(range(10, 100)) + [500, 501, 502]
    assert_same_as_pylance(uri)


class _AlwaysLoses(PutIfNotExistsCommitHandler):
    def commit(self, store, version, scheme, data):  # type: ignore[no-untyped-def]
        raise CommitConflict("taken")


def test_failed_transaction_file_and_lost_race_fail_the_commit(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing landed: the transaction file's error is raised, as when it was written first,
    and nothing of the commit is left."""
    uri = _ds(tmp_path)
    txns = _listing(uri, "_transactions")
    _fail_txn_writes(monkeypatch, 10)
    with pytest.raises(LanceError, match="injected"):
        commit_transaction(uri, Append([pylance_fragment(uri, table(3, 500), "2.0")]), 1,
                           manifest_store=_AlwaysLoses(), max_retries=2)
    monkeypatch.undo()
    assert _listing(uri, "_transactions") == txns
    assert Dataset.open(uri).versions() == [1]
    assert_same_as_pylance(uri)


def test_transaction_file_first_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``LSO_TRANSACTION_FILE_FIRST=1`` (tables older writers commit to): the file is written
    before the manifest's put is tried, so a failed file means no put at all."""
    uri = _ds(tmp_path)
    txns = _listing(uri, "_transactions")
    monkeypatch.setenv("LSO_TRANSACTION_FILE_FIRST", "1")
    _fail_txn_writes(monkeypatch, 1)

    class Counted(PutIfNotExistsCommitHandler):
        puts = 0

        def commit(self, store, version, scheme, data):  # type: ignore[no-untyped-def]
            Counted.puts += 1
            return super().commit(store, version, scheme, data)

    with pytest.raises(LanceError, match="injected"):
        commit_transaction(uri, Append([pylance_fragment(uri, table(3, 500), "2.0")]), 1,
                           manifest_store=Counted())
    assert Counted.puts == 0 and _listing(uri, "_transactions") == txns
    result = commit_transaction(uri, Append([pylance_fragment(uri, table(3, 600), "2.0")]), 1,
                                manifest_store=Counted())
    assert Counted.puts == 1 and result.version == 2
    name = result.manifest_file.manifest.transaction_file
    assert (Path(uri) / "_transactions" / name).read_bytes() == result.manifest_file.transaction_bytes
    assert_same_as_pylance(uri)
