"""Compaction, create_index (BTREE, IVF_PQ), vacuum and conditional-put commits on GCS
(gcp-storage-emulator) and Azure (Azurite), each result checked by pylance.

pylance reaches Azurite with its own options, so on Azure pylance writes the tables and reads
our results in place. It cannot use gcp-storage-emulator (object_store lists through GCS's XML
API, which the emulator answers 501: ``test_pylance_cannot_list_on_the_gcs_emulator``), so on
GCS pylance writes the table locally, gcsfs uploads it, our jobs run on the emulator, and
pylance reads a downloaded copy.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops.errors import CommitConflict
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.spark import compact, create_index, vacuum
from lance_spark_ops.table.commit.handler import PutIfNotExistsCommitHandler
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.paths import ManifestNamingScheme
from lance_spark_ops.table.write import write_dataset
from tests.gcs_azure.conftest import GCS, Azure
from tests.support.pylance_indices import index_segments
from tests.table.commit_helpers import table

lance = pytest.importorskip("lance")

ROUNDS = 3


@dataclass
class Remote:
    """One emulator as the tests use it: where a dataset goes, how pylance gets at it."""

    kind: str  # "gcs" or "azure"
    env: GCS | Azure
    tmp: Path

    @property
    def options(self) -> dict[str, str]:
        return self.env.options

    def uri(self, name: str) -> str:
        return self.env.uri(name)

    @property
    def pylance_reaches(self) -> bool:
        return self.kind == "azure"

    def _fs_path(self, name: str) -> str:
        return f"{self.env.bucket}/{name}" if isinstance(self.env, GCS) else f"{self.env.container}/{name}"

    def fs(self) -> Any:
        """The emulator's own fsspec client (not built from our option translation)."""
        return self.env.fs()

    def upload(self, local: Path, name: str) -> str:
        fs = self.fs()
        for f in sorted(p for p in local.rglob("*") if p.is_file()):
            fs.pipe_file(f"{self._fs_path(name)}/{f.relative_to(local).as_posix()}", f.read_bytes())
        return self.uri(name)

    def files(self, name: str) -> set[str]:
        """Relative paths of every object under the dataset."""
        root = self._fs_path(name)
        return {p[len(root) + 1:] for p in self.fs().find(root)}

    def local_copy(self, name: str) -> str:
        """A downloaded copy for pylance (GCS), or the URI itself where pylance reaches the store."""
        if self.pylance_reaches:
            return self.uri(name)
        dst = self.tmp / f"download-{name}"
        fs = self.fs()
        root = self._fs_path(name)
        for p in fs.find(root):
            out = dst / p[len(root) + 1:]
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(fs.cat_file(p))
        return str(dst)

    def pylance(self, name: str) -> Any:
        """pylance's view of the dataset ``name``."""
        where = self.local_copy(name)
        return lance.dataset(where, storage_options=self.options if self.pylance_reaches else None)

    def pylance_write(self, name: str, build: Callable[[str, dict[str, str] | None], None]) -> str:
        """Make a dataset with pylance (``build(uri, storage_options)``): in place where pylance
        reaches the store, else locally and uploaded."""
        if self.pylance_reaches:
            build(self.uri(name), self.options)
            return self.uri(name)
        local = self.tmp / f"pylance-{name}"
        build(str(local), None)
        return self.upload(local, name)


@pytest.fixture(params=["gcs", "azure"])
def remote(request: pytest.FixtureRequest, tmp_path: Path) -> Remote:
    return Remote(request.param, request.getfixturevalue(request.param), tmp_path)


def _sorted(t: pa.Table) -> pa.Table:
    return t.sort_by("id")


def _fragmented(uri: str, so: dict[str, str] | None) -> None:
    """Ten fragments of 200 rows, every seventh row deleted."""
    lance.write_dataset(table(2000), uri, storage_options=so, max_rows_per_file=200)
    lance.dataset(uri, storage_options=so).delete("id % 7 = 0")


def test_pylance_cannot_list_on_the_gcs_emulator(gcs: GCS) -> None:
    """Why pylance does not run on the GCS emulator (docs/object_stores.md): object_store lists
    with GCS's XML API (``GET /bucket?list-type=2``), which gcp-storage-emulator answers 501."""
    with pytest.raises(Exception, match="501"):
        lance.write_dataset(table(10), gcs.uri("t.lance"),
                            storage_options={**gcs.options, "client_max_retries": "0"})


@pytest.mark.spark
def test_compaction(spark, remote: Remote) -> None:  # type: ignore[no-untyped-def]
    uri = remote.pylance_write("c.lance", _fragmented)
    before = remote.pylance("c.lance")
    expected = _sorted(before.to_table())
    assert expected.num_rows == 2000 - 286 and len(before.get_fragments()) == 10

    m = compact(spark, uri, storage_options=remote.options, target_rows_per_fragment=100_000)
    assert m.new_version == before.version + m.commits + len(m.reservation_versions) and m.commits == 1
    after = remote.pylance("c.lance")
    assert after.version == m.new_version and len(after.get_fragments()) == 1
    assert all(f.deletion_file() is None for f in after.get_fragments())
    assert _sorted(after.to_table()).equals(expected)
    assert _sorted(Dataset.open(uri, storage_options=remote.options).to_table()).equals(expected)


@pytest.mark.spark
def test_create_index_btree(spark, remote: Remote) -> None:  # type: ignore[no-untyped-def]
    uri = remote.pylance_write("i.lance", _fragmented)
    m = create_index(spark, uri, "id", "BTREE", storage_options=remote.options)
    ds = remote.pylance("i.lance")
    assert ds.version == m.new_version
    (idx,) = index_segments(ds)
    assert idx["name"] == "id_idx" and idx["type"] == "BTree" and idx["fields"] == ["id"]
    where = "id >= 500 AND id < 640"
    assert "ScalarIndexQuery" in ds.scanner(filter=where).explain_plan()  # pylance answers from our index
    got = _sorted(ds.to_table(filter=where))
    full = _sorted(ds.to_table())
    assert got.equals(full.filter(pa.compute.and_(pa.compute.greater_equal(full["id"], 500),
                                                  pa.compute.less(full["id"], 640))))
    assert got.num_rows == 140 - 20


def _vectors(uri: str, so: dict[str, str] | None) -> None:
    """600 rows of a 16-d float32 vector in three fragments."""
    rng = np.random.default_rng(7)
    vec = pa.FixedSizeListArray.from_arrays(pa.array(rng.normal(size=600 * 16).astype(np.float32)), 16)
    data = pa.table({"id": pa.array(range(600), pa.int64()), "vec": vec})
    lance.write_dataset(data, uri, storage_options=so, max_rows_per_file=200)


def test_create_index_ivf_pq(remote: Remote) -> None:
    """A vector index (tasks in-process): pylance loads it and, probing every partition and
    refining over every row, answers as its own brute-force scan."""
    uri = remote.pylance_write("vec.lance", _vectors)
    m = create_index(None, uri, "vec", "IVF_PQ", storage_options=remote.options, num_partitions=2,
                     num_sub_vectors=4)
    ds = remote.pylance("vec.lance")
    assert ds.version == m.new_version
    (idx,) = index_segments(ds)
    assert idx["name"] == "vec_idx" and idx["type"] == "IVF_PQ"
    q = ds.take([123], columns=["vec"]).column("vec")[0].values.to_numpy()
    near = {"column": "vec", "q": q, "k": 10}
    indexed = ds.to_table(columns=["id"], nearest={**near, "nprobes": 2, "refine_factor": 60})
    brute = ds.to_table(columns=["id"], nearest={**near, "use_index": False})
    assert "ANNIvfPartition" in ds.scanner(nearest={**near, "nprobes": 2}).explain_plan()
    assert indexed.column("id").to_pylist() == brute.column("id").to_pylist()
    assert indexed.column("id")[0].as_py() == 123


def _history(uri: str, so: dict[str, str] | None) -> None:
    """Old versions of every kind of file: data, deletions, an index replaced, compaction."""
    lance.write_dataset(table(600), uri, storage_options=so, max_rows_per_file=200)
    lance.write_dataset(table(300, 600), uri, storage_options=so, mode="append")
    ds = lance.dataset(uri, storage_options=so)
    ds.delete("id < 10")
    ds.create_scalar_index("id", "BTREE")
    ds = lance.dataset(uri, storage_options=so)
    ds.optimize.compact_files(target_rows_per_fragment=400)
    lance.dataset(uri, storage_options=so).create_scalar_index("id", "BTREE", replace=True)
    lance.dataset(uri, storage_options=so).delete("id >= 800")


def test_vacuum_removes_what_pylance_removes(remote: Remote, tmp_path: Path) -> None:
    """The same history locally (pylance's cleanup_old_versions) and uploaded (our vacuum):
    the same files remain, and pylance reads the vacuumed dataset."""
    theirs = tmp_path / "theirs.lance"
    _history(str(theirs), None)
    uri = remote.upload(theirs, "v.lance")
    # uploaded objects carry the upload's time (Azure: in whole seconds): give pylance's local copy
    # the same times, as both sides' vacuum look only at files older than the versions they keep
    root = remote._fs_path("v.lance")
    for path, info in remote.fs().find(root, detail=True).items():
        when = info.get("mtime") or info.get("last_modified")
        os.utime(theirs / path[len(root) + 1:], (when.timestamp(), when.timestamp()))
    before = remote.files("v.lance")
    expected = _sorted(lance.dataset(str(theirs)).to_table())
    stats = lance.dataset(str(theirs)).cleanup_old_versions(older_than=timedelta(0))
    m = vacuum(None, uri, older_than=timedelta(0), storage_options=remote.options)  # tasks in-process
    kept_theirs = {p.relative_to(theirs).as_posix() for p in theirs.rglob("*") if p.is_file()}
    assert remote.files("v.lance") == kept_theirs
    assert set(m.removed_paths) == before - kept_theirs and m.old_versions == stats.old_versions >= 5
    ds = remote.pylance("v.lance")
    assert [v["version"] for v in ds.versions()] == [ds.version]
    assert _sorted(ds.to_table()).equals(expected)


def _together(n: int, fn: Callable[[int], Any]) -> list[Any]:
    """Run ``fn(i)`` for i < n in threads released together by a barrier; results or exceptions."""
    barrier = threading.Barrier(n, timeout=60)
    out: list[Any] = [None] * n

    def run(i: int) -> None:
        try:
            barrier.wait()
            out[i] = fn(i)
        except BaseException as e:  # noqa: BLE001 - returned to the test
            out[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    return out


def test_two_committers_race_for_one_version(remote: Remote) -> None:
    """Two conditional puts of the same manifest (GCS ifGenerationMatch=0, Azure If-None-Match: *)
    released together: exactly one lands, the other is a CommitConflict, the winner's bytes stay."""
    handler = PutIfNotExistsCommitHandler()
    stores = [ObjectStore(remote.uri("race.lance"), remote.options) for _ in range(2)]
    scheme = ManifestNamingScheme.V2
    for version in range(1, ROUNDS + 1):
        payloads = [f"manifest {version} from committer {i}".encode() * 50 for i in range(2)]
        results = _together(2, lambda i, v=version, p=payloads: handler.commit(stores[i], v, scheme, p[i]))
        won = [i for i, r in enumerate(results) if isinstance(r, str)]
        lost = [i for i, r in enumerate(results) if isinstance(r, CommitConflict)]
        assert len(won) == 1 and len(lost) == 1, results
        assert stores[0].read(scheme.manifest_path(version)) == payloads[won[0]]


def test_appends_race_and_none_is_lost(remote: Remote) -> None:
    """Rounds of two appends released together (ours twice on GCS; ours and pylance's on Azure):
    the loser of each round retries on the next version, every row is there."""
    uri = remote.pylance_write("a.lance", lambda u, so: lance.write_dataset(table(10), u, storage_options=so))
    so = remote.options

    def ours(i: int, r: int) -> None:
        write_dataset(table(10, 1000 * (i + 1) + 10 * r), uri, mode="append", storage_options=so)

    def theirs(i: int, r: int) -> None:
        lance.write_dataset(table(10, 1000 * (i + 1) + 10 * r), uri, mode="append", storage_options=so)

    second = theirs if remote.pylance_reaches else ours
    for r in range(ROUNDS):
        results = _together(2, lambda i, r=r: (ours if i == 0 else second)(i, r))
        assert results == [None, None], results
    want = list(range(10)) + [1000 * (i + 1) + 10 * r + k for i in range(2) for r in range(ROUNDS)
                              for k in range(10)]
    ds = remote.pylance("a.lance")
    assert ds.version == 1 + 2 * ROUNDS
    assert sorted(ds.to_table(columns=["id"]).column("id").to_pylist()) == sorted(want)


def test_azure_wrong_key_is_access_denied(azure: Azure) -> None:
    """A wrong account key: Azurite refuses the signature (403) and the open fails as
    ``AccessDeniedError`` naming the table (jobs exit 8), not as a generic failure."""
    import base64

    from lance_spark_ops.errors import AccessDeniedError

    uri = azure.uri("t.lance")
    lance.write_dataset(table(10), uri, storage_options=azure.options)
    wrong = {**azure.options, "azure_storage_account_key": base64.b64encode(b"not the key" * 4).decode()}
    with pytest.raises(AccessDeniedError) as info:
        Dataset.open(uri, storage_options=wrong)
    assert "t.lance" in str(info.value)
    assert Dataset.open(uri, storage_options=azure.options).version == 1  # the right key still reads it
