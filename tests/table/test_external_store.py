"""Commits through an external manifest store (SQLite): stage, record, copy, finalise; readers
repair a version that was recorded but never copied."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lance_spark_ops import SqliteManifestStore
from lance_spark_ops.errors import CommitConflict, NotFoundError
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.table.commit import ExternalManifestCommitHandler
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.format.transaction import Append
from lance_spark_ops.table.paths import ManifestNamingScheme
from lance_spark_ops.table.write import delete_rows, write_dataset
from tests.table.commit_helpers import assert_every_version, ids, pylance_fragment, table


def _versions_dir(uri: str) -> list[str]:
    return sorted(os.listdir(Path(uri) / "_versions"))


def test_commits_through_sqlite(tmp_path: Path) -> None:
    kv = SqliteManifestStore(str(tmp_path / "kv.sqlite"))
    uri = str(tmp_path / "ds")
    write_dataset(table(50), uri, data_storage_version="2.0", manifest_store=kv)
    write_dataset(table(5, 50), uri, mode="append", manifest_store=kv)
    ds = Dataset.open(uri, manifest_store=kv)
    ds = delete_rows(ds, {0: [0, 1]})
    base = ObjectStore(uri).uri("")
    assert kv.get_latest(base) == (3, ManifestNamingScheme.V2.manifest_path(3))
    assert not [n for n in _versions_dir(uri) if "manifest-" in n]  # staged files finalised
    assert_every_version(uri)  # pylance, unaware of the store, reads every version
    assert ids(ds.to_table()) == list(range(2, 55))
    with pytest.raises(CommitConflict):
        kv.put_if_not_exists(base, 3, "_versions/x.manifest", 1)


def test_reader_repairs_a_staged_manifest(tmp_path: Path) -> None:
    kv = SqliteManifestStore(str(tmp_path / "kv.sqlite"))
    uri = str(tmp_path / "ds")
    write_dataset(table(20), uri, data_storage_version="2.0", manifest_store=kv,
                  enable_v2_manifest_paths=False)

    class CrashAfterRecord(ExternalManifestCommitHandler):
        def finalize(self, store, version, path):  # type: ignore[no-untyped-def]
            raise OSError("writer died after step 2")

    frag = pylance_fragment(uri, table(5, 100), "2.0")
    ds = Dataset.open(uri).commit(Append([frag]), manifest_store=CrashAfterRecord(kv))
    assert ds.version == 2  # committed: the KV store holds it
    staged = [n for n in _versions_dir(uri) if n.startswith("2.manifest-")]
    assert len(staged) == 1 and "2.manifest" not in _versions_dir(uri)
    assert Dataset.open(uri).version == 1  # a reader without the store is one version behind
    repaired = Dataset.open(uri, manifest_store=kv)
    assert repaired.version == 2 and ids(repaired.to_table()) == list(range(20)) + list(range(100, 105))
    assert "2.manifest" in _versions_dir(uri) and not [n for n in _versions_dir(uri) if "-" in n]
    assert kv.get(ObjectStore(uri).uri(""), 2) == "_versions/2.manifest"
    assert_every_version(uri)
    # the next commit through the store lands on version 3
    assert write_dataset(table(1, 200), uri, mode="append", manifest_store=kv).version == 3


def test_repair_of_a_specific_version_and_lost_manifest(tmp_path: Path) -> None:
    kv = SqliteManifestStore(str(tmp_path / "kv.sqlite"))
    uri = str(tmp_path / "ds")
    write_dataset(table(20), uri, data_storage_version="2.0", manifest_store=kv)
    base = ObjectStore(uri).uri("")
    final = ManifestNamingScheme.V2.manifest_path(1)
    os.rename(Path(uri) / final, Path(uri) / f"{final}-0d1c2b3a-0000-4000-8000-000000000000")
    kv.put_if_exists(base, 1, f"{final}-0d1c2b3a-0000-4000-8000-000000000000", 1)
    assert Dataset.open(uri, version=1, manifest_store=kv).count_rows() == 20
    assert kv.get(base, 1) == final
    os.remove(Path(uri) / final)
    with pytest.raises(NotFoundError, match="missing"):
        Dataset.open(uri, manifest_store=kv)
