"""Failed commits: typed errors, no partial manifest, and only files we surely orphaned removed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lance_spark_ops.errors import (
    CommitConflict,
    CommitError,
    CommitStateUnknown,
    InvalidInputError,
    NotFoundError,
    UnsupportedError,
    WriteRefused,
)
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.table.commit import PutIfNotExistsCommitHandler, commit_transaction
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.format.manifest import parse_manifest_file, serialize_manifest_file
from lance_spark_ops.table.format.transaction import Append
from lance_spark_ops.table.write import write_dataset
from tests.table.commit_helpers import assert_same_as_pylance, pylance_fragment, table


def _ds(tmp_path: Path) -> str:
    uri = str(tmp_path / "ds")
    write_dataset(table(100), uri, data_storage_version="2.0")
    return uri


def _listing(uri: str, sub: str) -> list[str]:
    d = Path(uri) / sub
    return sorted(os.listdir(d)) if d.exists() else []


def test_unknown_writer_flag_blocks_writes_not_reads(tmp_path: Path) -> None:
    uri = _ds(tmp_path)
    ds = Dataset.open(uri)
    path = ds.store.full_path(ds.manifest_path)
    mf = parse_manifest_file(open(path, "rb").read())
    mf.manifest.writer_feature_flags |= 1 << 20
    open(path, "wb").write(serialize_manifest_file(mf.manifest, mf.transaction_bytes, mf.index_section))
    ds = Dataset.open(uri)
    assert ds.count_rows() == 100
    frag = pylance_fragment(uri, table(3, 500), "2.0")
    with pytest.raises(UnsupportedError, match="writer feature flags") as e:
        ds.commit(Append([frag]))
    assert e.value.path.endswith(".manifest")
    with pytest.raises(UnsupportedError):
        commit_transaction(uri, Append([frag]), 1)
    with pytest.raises(UnsupportedError):
        write_dataset(table(3, 500), uri, mode="append")
    assert Dataset.open(uri).versions() == [1]


def test_failed_put_leaves_no_manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = _ds(tmp_path)
    txns = _listing(uri, "_transactions")
    frag = pylance_fragment(uri, table(3, 500), "2.0")

    def broken_link(src: str, dst: str) -> None:
        raise OSError(5, "I/O error")

    monkeypatch.setattr(os, "link", broken_link)
    with pytest.raises(CommitError, match="failed") as e:
        Dataset.open(uri).commit(Append([frag]))
    assert not isinstance(e.value, CommitStateUnknown)
    monkeypatch.undo()
    assert _listing(uri, "_versions") == [n for n in _listing(uri, "_versions") if "tmp" not in n]
    assert Dataset.open(uri).versions() == [1]
    assert _listing(uri, "_transactions") == txns  # our transaction file is gone again
    assert (Path(uri) / "data" / frag.files[0].path).exists()  # the caller's data file is not ours
    assert_same_as_pylance(uri)
    assert Dataset.open(uri).commit(Append([frag])).version == 2


def test_crash_inside_put_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = _ds(tmp_path)

    class Crash(BaseException):
        pass

    def crash(src: str, dst: str) -> None:
        raise Crash()

    monkeypatch.setattr(os, "link", crash)
    with pytest.raises(Crash):
        write_dataset(table(3, 500), uri, mode="append")
    monkeypatch.undo()
    assert Dataset.open(uri).versions() == [1]
    assert not [n for n in _listing(uri, "_versions") if n.endswith(".manifest") and not n.startswith("1844")]
    assert len(_listing(uri, "_transactions")) == 1  # surely not landed: its transaction file went
    assert_same_as_pylance(uri)  # (its data file stays: after an interrupt the caller cleans up)


class _LandsThenFails(PutIfNotExistsCommitHandler):
    def commit(self, store, version, scheme, data):  # type: ignore[no-untyped-def]
        super().commit(store, version, scheme, data)
        raise TimeoutError("response lost")


class _FailsSilently(PutIfNotExistsCommitHandler):
    def commit(self, store, version, scheme, data):  # type: ignore[no-untyped-def]
        raise TimeoutError("no answer")


class _AlwaysLoses(PutIfNotExistsCommitHandler):
    def commit(self, store, version, scheme, data):  # type: ignore[no-untyped-def]
        raise CommitConflict("taken")


def test_lost_response_is_resolved_by_reading_back(tmp_path: Path) -> None:
    uri = _ds(tmp_path)
    ds = commit_transaction(uri, Append([pylance_fragment(uri, table(3, 500), "2.0")]), 1,
                            manifest_store=_LandsThenFails())
    assert ds.version == 2
    assert_same_as_pylance(uri)


def test_unknown_state_keeps_files() -> None:
    store = ObjectStore("memory://commit-unknown")
    write_dataset(table(10), "memory://commit-unknown", data_storage_version="2.0")
    before = set(store.list("_transactions"))
    frag = Dataset.open(store).fragments[0]
    with pytest.raises(CommitStateUnknown, match="may have landed"):
        commit_transaction(store, Append([frag]), 1, manifest_store=_FailsSilently())
    assert len(set(store.list("_transactions")) - before) == 1  # kept: it may be referenced


def test_retries_exhausted(tmp_path: Path) -> None:
    uri = _ds(tmp_path)
    txns = _listing(uri, "_transactions")
    with pytest.raises(CommitConflict, match="lost the race"):
        commit_transaction(uri, Append([pylance_fragment(uri, table(3, 500), "2.0")]), 1,
                           manifest_store=_AlwaysLoses(), max_retries=2)
    assert _listing(uri, "_transactions") == txns


class _RefusedButLandsLate(PutIfNotExistsCommitHandler):
    """The store answers 503 (refused) to the first put and says nothing is there when read
    back, but an earlier try of the client's lands after that (before the next attempt)."""

    def __init__(self) -> None:
        self.late: tuple | None = None
        self.puts = 0

    def commit(self, store, version, scheme, data):  # type: ignore[no-untyped-def]
        self.puts += 1
        if self.puts == 1:
            self.late = (store, version, scheme, data)
            raise WriteRefused("SlowDown", path=store.uri(scheme.manifest_path(version)))
        return super().commit(store, version, scheme, data)

    def landed(self, store, version, scheme, data):  # type: ignore[no-untyped-def]
        found = super().landed(store, version, scheme, data)
        if self.late is not None:  # the late put lands now, after the read-back found nothing
            st, v, sc, d = self.late
            self.late = None
            st.put_if_not_exists(sc.manifest_path(v), d)
        return found


class _AlwaysRefused(PutIfNotExistsCommitHandler):
    def commit(self, store, version, scheme, data):  # type: ignore[no-untyped-def]
        raise WriteRefused("SlowDown", path=store.uri(scheme.manifest_path(version)))


def test_refused_put_is_retried_and_a_late_landing_is_ours(tmp_path: Path) -> None:
    """A refused put (S3 503) is retried after a backoff; when an earlier try of it landed
    late, the next attempt finds our transaction as that version and returns it, instead of
    committing the operation a second time."""
    uri = _ds(tmp_path)
    handler = _RefusedButLandsLate()
    ds = commit_transaction(uri, Append([pylance_fragment(uri, table(3, 500), "2.0")]), 1,
                            manifest_store=handler)
    assert ds.version == 2 and handler.puts == 1  # found, not put again as version 3
    assert Dataset.open(uri).versions() == [1, 2]
    assert_same_as_pylance(uri)


def test_refusals_exhausted_are_a_known_failure(tmp_path: Path) -> None:
    uri = _ds(tmp_path)
    txns = _listing(uri, "_transactions")
    with pytest.raises(CommitError, match="refused") as e:
        commit_transaction(uri, Append([pylance_fragment(uri, table(3, 500), "2.0")]), 1,
                           manifest_store=_AlwaysRefused(), max_retries=2)
    assert not isinstance(e.value, CommitStateUnknown | CommitConflict)
    assert _listing(uri, "_transactions") == txns  # cleaned up: nothing of it landed


def test_bad_read_version_and_arguments(tmp_path: Path) -> None:
    uri = _ds(tmp_path)
    frag = pylance_fragment(uri, table(3, 500), "2.0")
    with pytest.raises(NotFoundError, match="newer than the latest"):
        commit_transaction(uri, Append([frag]), 7)
    with pytest.raises(NotFoundError, match="no dataset"):
        commit_transaction(str(tmp_path / "nothing"), Append([frag]), 3)
    with pytest.raises(InvalidInputError, match="needs an existing dataset"):
        commit_transaction(str(tmp_path / "nothing"), Append([frag]), 0)
    frag.physical_rows = None
    with pytest.raises(InvalidInputError, match="physical_rows"):
        commit_transaction(uri, Append([frag]), 1)
    assert Dataset.open(uri).versions() == [1]
