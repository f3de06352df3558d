"""The S3 fast paths brought to GCS and Azure, requests counted through the latency proxy
(``tests/support/latency_store``) in front of each emulator: the driver's latest version from
one listing page of ``RECENT_PAGE`` keys (V2 manifest names count down, and both stores list
keys in lexicographic order, as S3 does), where a full listing pages through every version;
a footer of unknown size in one suffix request on GCS (Azure has no suffix ranges).

gcp-storage-emulator answers listings whole; ``gcs_server.py`` pages them as GCS does
(``maxResults`` / ``nextPageToken``), so the counts are GCS's. Azurite pages as Azure does.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest

from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.table.commit.handler import RECENT_PAGE, PutIfNotExistsCommitHandler
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.paths import ManifestNamingScheme
from lance_spark_ops.table.write import write_dataset
from tests.gcs_azure.conftest import GCS, Azure
from tests.support.azurite import AZURITE_ACCOUNT
from tests.support.latency_store import LatencyProxy
from tests.table.commit_helpers import table

lance = pytest.importorskip("lance")

VERSIONS = 100  # more than a page of ours (RECENT_PAGE keys); -m slow: 1 100, more than gcsfs's page (1 000)


class Counted:
    """An emulator's bucket / container reached directly (set-up) and through a logging proxy."""

    def __init__(self, kind: str, direct: GCS | Azure, proxied: GCS | Azure, proxy: LatencyProxy) -> None:
        self.kind, self.direct, self.proxied, self.proxy = kind, direct, proxied, proxy

    def store(self, name: str) -> ObjectStore:
        return ObjectStore(self.proxied.uri(name), self.proxied.options)

    def prefix(self, name: str) -> str:
        return f"{self.direct.bucket if isinstance(self.direct, GCS) else self.direct.container}/{name}"

    def listings(self) -> list[dict[str, list[str]]]:
        """The query of each listing request that went through the proxy."""
        log = self.proxy.stats()["log"]
        return [parse_qs(urlsplit(target).query) for op, target, _ in log if op == "LIST"]


@contextmanager
def _counted(kind: str, direct: GCS | Azure, tmp_path: Path) -> Iterator[Counted]:
    with LatencyProxy(direct.endpoint, log=True) as proxy:
        if isinstance(direct, GCS):
            key = tmp_path / "proxied-service-account.json"
            info = json.loads(Path(direct.service_account).read_text())
            key.write_text(json.dumps({**info, "gcs_base_url": proxy.endpoint}))
            proxied: GCS | Azure = GCS(proxy.endpoint, direct.bucket, str(key))
        else:
            proxied = Azure(f"{proxy.endpoint}/{AZURITE_ACCOUNT}", direct.container)
        yield Counted(kind, direct, proxied, proxy)


@pytest.fixture(params=["gcs", "azure"])
def counted(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Counted]:
    with _counted(request.param, request.getfixturevalue(request.param), tmp_path) as env:
        yield env


@pytest.fixture
def counted_azure(azure: Azure, tmp_path: Path) -> Iterator[Counted]:
    with _counted("azure", azure, tmp_path) as env:
        yield env


def _fake_versions(env: Counted, name: str, n: int) -> None:
    """``n`` V2-named manifest objects (the listing reads names only)."""
    fs = env.direct.fs()
    scheme = ManifestNamingScheme.V2
    for v in range(1, n + 1):  # one at a time: the GCS emulator answers concurrent uploads slowly
        fs.pipe_file(f"{env.prefix(name)}/{scheme.manifest_path(v)}", b"m")


def _one_page(counted: Counted, n: int) -> None:
    _fake_versions(counted, "many.lance", n)
    store = counted.store("many.lance")
    handler = PutIfNotExistsCommitHandler()
    counted.proxy.reset()
    listing = handler.recent_versions(store)
    pages = counted.listings()
    assert listing.latest == n and not listing.complete
    assert sorted(listing.paths) == list(range(n - RECENT_PAGE + 1, n + 1))
    assert len(pages) == 1, pages
    size_key = "maxResults" if counted.kind == "gcs" else "maxresults"
    assert pages[0][size_key] == [str(RECENT_PAGE)], pages
    assert counted.proxy.stats()["total"] == 1  # nothing else (no HEAD, no size request)
    counted.proxy.reset()
    full = handler.list_versions(store)
    assert sorted(full.paths) == list(range(1, n + 1))
    if counted.kind == "gcs":  # gcsfs lists 1 000 keys a page
        assert len(counted.listings()) == -(-n // 1000)


def test_latest_version_from_one_listing_page(counted: Counted) -> None:
    """100 versions: one listing request of ``RECENT_PAGE`` keys finds the newest."""
    _one_page(counted, VERSIONS)


@pytest.mark.slow
def test_latest_version_from_one_listing_page_of_1100(counted: Counted) -> None:
    """1 100 versions: still one request of ``RECENT_PAGE`` keys, where gcsfs's full listing takes two pages
    of 1 000 (Azure's 5 000-key pages would need 5 001 versions to show it)."""
    _one_page(counted, 1100)


def test_open_and_commit_read_one_page(counted: Counted, tmp_path: Path) -> None:
    """A pylance-made dataset of more versions than a page: our Dataset opens its latest
    version through one listing request, an append commits on top (one more), and pylance reads the
    result (in place on Azurite; a downloaded copy on GCS, whose emulator pylance cannot list)."""
    name = "real.lance"
    local = tmp_path / "src.lance"
    lance.write_dataset(table(10), str(local))
    for i in range(RECENT_PAGE + 2):
        lance.write_dataset(table(2, start=100 + 2 * i), str(local), mode="append")
    want = lance.dataset(str(local)).version
    fs = counted.direct.fs()
    for f in sorted(p for p in local.rglob("*") if p.is_file()):
        fs.pipe_file(f"{counted.prefix(name)}/{f.relative_to(local).as_posix()}", f.read_bytes())
    counted.proxy.reset()
    ds = Dataset.open(counted.store(name))
    assert ds.version == want
    assert len(counted.listings()) == 1
    counted.proxy.reset()
    out = write_dataset(table(3, start=10_000), counted.proxied.uri(name), mode="append",
                        storage_options=counted.proxied.options)
    assert out.version == want + 1
    pages = counted.listings()  # the open, then the commit's check: one page each
    size_key = "maxResults" if counted.kind == "gcs" else "maxresults"
    assert len(pages) == 2 and all(p[size_key] == [str(RECENT_PAGE)] for p in pages), pages
    check = _pylance_view(counted, name, tmp_path)
    assert check.version == want + 1
    assert check.count_rows() == 10 + 2 * (RECENT_PAGE + 2) + 3


def _pylance_view(env: Counted, name: str, tmp: Path) -> Any:
    if env.kind == "azure":
        return lance.dataset(env.direct.uri(name), storage_options=env.direct.options)
    fs, root, dst = env.direct.fs(), env.prefix(name), tmp / "download.lance"
    for p in fs.find(root):
        out = dst / p[len(root) + 1:]
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(fs.cat_file(p))
    return lance.dataset(str(dst))


def test_footer_of_unknown_size(counted: Counted) -> None:
    """A footer whose object size is not known (no manifest size): one suffix request on GCS
    (``Range: bytes=-N``, the size from Content-Range). Azure has no suffix ranges: a ranged
    read of the first N bytes names the size and is the whole of a small object (one request),
    a larger one's tail a second read; no size request on either. The size is kept: the next
    read of the object is one ranged read. gcp-storage-emulator ignores the range and answers
    the whole object, which the read takes apart just the same."""
    payload = np.random.default_rng(1).integers(0, 255, 300_000, dtype=np.uint8).tobytes()
    fs = counted.direct.fs()
    fs.pipe_file(f"{counted.prefix('t')}/blob.bin", payload)
    fs.pipe_file(f"{counted.prefix('t')}/empty.bin", b"")
    store = counted.store("t")
    counted.proxy.reset()
    size, tail = store.read_tail("blob.bin", 64 << 10)
    assert size == len(payload) and tail == payload[-(64 << 10):]
    assert counted.proxy.stats()["ops"] == {"GET": 1 if counted.kind == "gcs" else 2}
    counted.proxy.reset()
    size, whole = store.read_tail("blob.bin", 1 << 10, whole_below=512 << 10)
    assert size == len(payload) and whole == payload
    assert counted.proxy.stats()["ops"] == {"GET": 1}  # the size known from the first read
    fresh = counted.store("t")
    counted.proxy.reset()
    assert fresh.read_tail("blob.bin", 1 << 10, whole_below=512 << 10) == (len(payload), payload)
    assert counted.proxy.stats()["ops"] == {"GET": 1}  # at most N bytes: read whole at once
    counted.proxy.reset()
    assert fresh.read_tail("empty.bin", 1 << 10) == (0, b"")
    assert "GET" in counted.proxy.stats()["ops"]


DATA_FILES = ["data/a.lance", "data/b.lance", "data/sub/c.lance", "data/sub/deeper/d.lance", "data/e.lance"]


def _put_data_files(env: Counted) -> None:
    """``DATA_FILES`` under table ``t`` (sizes 10, 11, ...), and a key that shares their prefix's
    letters but is not under ``data/``."""
    fs = env.direct.fs()
    for i, n in enumerate(DATA_FILES):
        fs.pipe_file(f"{env.prefix('t')}/{n}", b"x" * (10 + i))
    fs.pipe_file(f"{env.prefix('t')}/database.txt", b"not under data/")


def _found_as_theirs(env: Counted, found: dict[str, Any]) -> dict[str, Any]:
    """Checks ``found`` (``find_rel("data", detail=True)``) against the backend's own ``find``:
    the same keys and sizes, ``DATA_FILES`` and nothing else; returns theirs, by relative key."""
    root = env.prefix("t") + "/"
    theirs = {p[len(root):]: i for p, i in env.direct.fs().find(f"{root}data", detail=True).items()}
    assert {p: i["size"] for p, i in found.items()} == {p: i["size"] for p, i in theirs.items()}
    assert sorted(found) == sorted(DATA_FILES)
    return theirs


def test_find_reads_listing_pages_alone(counted: Counted, monkeypatch: pytest.MonkeyPatch) -> None:
    """``ObjectStore.find`` (vacuum's and cleanup's listings): an absent prefix is one listing
    request (gcsfs's ``find`` lists it twice, adlfs's HEADs it twice besides), a present one its
    pages and nothing else, and it finds what the backend's own ``find`` finds, sizes and
    modification times included, nested keys too (three pages of two keys here). Azure's
    through adlfs here (obstore's pages: ``test_azure_listings_through_obstore``)."""
    from lance_spark_ops.io import obstore_reads, remote
    from lance_spark_ops.table.cleanup_scan import list_files

    monkeypatch.setenv(obstore_reads.CARRIER_ENV, "fsspec")

    _put_data_files(counted)
    store = counted.store("t")
    counted.proxy.reset()
    assert store.find_rel("_refs/tags") == []
    assert counted.proxy.stats()["ops"] == {"LIST": 1}
    monkeypatch.setattr(remote, "LIST_PAGE", 2)
    counted.proxy.reset()
    found = store.find_rel("data", detail=True)
    assert counted.proxy.stats()["ops"] == {"LIST": 3}
    _found_as_theirs(counted, found)
    listed = list_files(store, "data")  # the vacuum's view: each file's time read from the listing
    assert sorted(f.path for f in listed) == sorted(DATA_FILES)
    assert all(abs(f.mtime - time.time()) < 600 for f in listed), listed


def test_list_reads_listing_pages_alone(counted: Counted, monkeypatch: pytest.MonkeyPatch) -> None:
    """``ObjectStore.list`` (the full version listing, ``_indices``' directories, branches): the
    objects and directories directly under a prefix from its listing pages alone (adlfs's ``ls``
    lists twice, and HEADs an absent prefix; gcsfs's asks again of one), as the backend's own
    ``ls`` names them. Azure's through adlfs here, as in the test above."""
    from lance_spark_ops.io import obstore_reads, remote

    monkeypatch.setenv(obstore_reads.CARRIER_ENV, "fsspec")
    fs = counted.direct.fs()
    for n in ["_indices/u1/a.idx", "_indices/u1/b.idx", "_indices/u2/a.idx", "_indices/top.bin",
              "_indices/u3/deep/c.idx", "_indicesX/not-under.bin"]:
        fs.pipe_file(f"{counted.prefix('t')}/{n}", b"x")
    store = counted.store("t")
    counted.proxy.reset()
    assert store.list("_refs/branches") == []
    assert counted.proxy.stats()["ops"] == {"LIST": 1}
    monkeypatch.setattr(remote, "LIST_PAGE", 2)
    counted.proxy.reset()
    names = store.list("_indices")
    assert counted.proxy.stats()["ops"] == {"LIST": 2}  # four entries, two a page
    theirs = sorted(p.rstrip("/").rsplit("/", 1)[1] for p in fs.ls(f"{counted.prefix('t')}/_indices"))
    assert names == theirs == ["top.bin", "u1", "u2", "u3"]


def test_azure_listings_through_obstore(counted_azure: Counted, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where obstore carries an Azure store's reads it lists it too (``io.obstore_lists``: adlfs
    parses ~0.3 ms a blob): ``find`` and ``list`` name what adlfs's ``find`` / ``ls`` name, sizes
    and times included, in one request of up to 5 000 blobs (adlfs's pages of 2 here would
    take 3 and 2), without the blob named as the prefix; the latest versions' page stays on
    adlfs, whose request asks ``RECENT_PAGE`` keys; a missing container lists as empty."""
    from lance_spark_ops.io import remote
    from lance_spark_ops.table.cleanup_scan import list_files

    env = counted_azure
    fs = env.direct.fs()
    _put_data_files(env)
    fs.pipe_file(f"{env.prefix('t')}/_indices/u1/a.idx", b"")  # an empty blob is an object
    fs.pipe_file(f"{env.prefix('t')}/_indices/top.bin", b"x")
    monkeypatch.setattr(remote, "LIST_PAGE", 2)
    store = env.store("t")
    env.proxy.reset()
    found = store.find_rel("data", detail=True)
    assert env.proxy.stats()["ops"] == {"LIST": 1}
    theirs = _found_as_theirs(env, found)
    listed = list_files(store, "data")
    assert sorted(f.path for f in listed) == sorted(DATA_FILES)
    mtimes = {p: i["last_modified"].timestamp() for p, i in theirs.items()}
    assert all(abs(f.mtime - mtimes[f.path]) < 1 for f in listed), (listed, mtimes)
    env.proxy.reset()
    assert store.list("_indices") == ["top.bin", "u1"]
    assert store.find_rel("_indices", detail=True)["_indices/u1/a.idx"]["size"] == 0
    assert env.proxy.stats()["ops"] == {"LIST": 2}
    _fake_versions(env, "many.lance", RECENT_PAGE + 3)
    many = env.store("many.lance")
    env.proxy.reset()
    listing = PutIfNotExistsCommitHandler().recent_versions(many)
    assert listing.latest == RECENT_PAGE + 3 and not listing.complete
    assert [p["maxresults"] for p in env.listings()] == [[str(RECENT_PAGE)]]
    proxied = env.proxied
    assert isinstance(proxied, Azure)
    gone = ObjectStore(Azure(proxied.endpoint, "no-such-container").uri("t"), proxied.options)
    env.proxy.reset()
    assert gone.find_rel("data") == [] and gone.list("data") == []
    assert env.proxy.stats()["ops"] == {"LIST": 4}  # obstore's refused, then adlfs's: empty


def test_adlfs_retries_as_object_store(counted_azure: Counted) -> None:
    """A request through adlfs (the latest versions' page) whose connections are reset goes
    again after object_store's backoff (0.1 s, then up to twice the last), where
    azure-storage-blob's default policy waits 15-21 s; ``client_max_retries`` bounds the tries
    as it bounds pylance's (a 503 answer: aiohttp itself sends a request again at once when a
    kept-alive connection is reset, not when it answers)."""
    from lance_spark_ops.errors import LanceError

    env = counted_azure
    _fake_versions(env, "retried.lance", 3)
    env.proxy.reset()
    env.proxy.inject(kind="reset", count=2, ops=["LIST"])
    assert PutIfNotExistsCommitHandler().recent_versions(env.store("retried.lance")).latest == 3
    starts = [entry[3] for entry in env.proxy.stats()["timeline"] if entry[0] == "LIST"]
    assert len(starts) == 3 and env.proxy.stats()["faults"] == {"reset": 2}, starts
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    assert max(gaps) < 10, gaps  # the SDK's wait: >= 15 s
    env.proxy.reset()
    env.proxy.inject(kind="slowdown", count=100, ops=["LIST"])
    store = ObjectStore(env.proxied.uri("retried.lance"), {**env.proxied.options, "client_max_retries": "2"})
    with pytest.raises(LanceError, match="retried.lance/_versions"):
        PutIfNotExistsCommitHandler().recent_versions(store)
    assert env.proxy.stats()["ops"] == {"LIST": 3}  # the first try and two retries


def test_adlfs_retry_limits_are_each_stores_own(counted_azure: Counted) -> None:
    """Two stores of one account that differ only in ``client_max_retries`` keep their own
    limits: fsspec caches one adlfs instance per set of adlfs's options, and the limits are set
    on its client, so a shared instance would take the limits of the store made last."""
    from lance_spark_ops.errors import LanceError

    env = counted_azure
    _fake_versions(env, "limits.lance", 2)
    uri = env.proxied.uri("limits.lance")
    few = ObjectStore(uri, {**env.proxied.options, "client_max_retries": "1"})
    more = ObjectStore(uri, {**env.proxied.options, "client_max_retries": "3"})
    assert few.fs is not more.fs
    for store, tries in ((few, 2), (more, 4), (few, 2)):
        env.proxy.reset()
        env.proxy.inject(kind="slowdown", count=100, ops=["LIST"])
        with pytest.raises(LanceError, match="limits.lance/_versions"):
            PutIfNotExistsCommitHandler().recent_versions(store)
        assert env.proxy.stats()["ops"] == {"LIST": tries}


@pytest.mark.parametrize("carrier", ["obstore", "fsspec"])
def test_azure_upload_in_concurrent_blocks(counted_azure: Counted, monkeypatch: pytest.MonkeyPatch,
                                           carrier: str) -> None:
    """An output above two parts is staged as blocks, several in flight, and committed by one
    Put Block List; a smaller one is one Put Blob; ``discard`` commits nothing - through obstore's
    writer where it carries the options, else adlfs's (``LSO_IO_CARRIER=fsspec``)."""
    from lance_spark_ops.io import obstore_reads
    from lance_spark_ops.io.obstore_writes import ObstoreUpload
    from lance_spark_ops.io.remote import AzureUpload

    monkeypatch.setenv("LSO_IO_PART_BYTES", str(5 << 20))
    if carrier == "fsspec":
        monkeypatch.setenv(obstore_reads.CARRIER_ENV, "fsspec")
    env = counted_azure
    store = env.store(f"mp-{carrier}")
    payload = np.random.default_rng(0).integers(0, 255, 23 << 20, dtype=np.uint8).tobytes()
    env.proxy.reset()
    out = store.open_output("big.bin")
    assert isinstance(out, ObstoreUpload if carrier == "obstore" else AzureUpload)
    for i in range(0, len(payload), 1 << 20):
        out.write(payload[i:i + (1 << 20)])
    out.close()
    log = env.proxy.stats()["log"]
    puts = [(op, path) for op, path, _ in log if op == "PUT"]
    assert len(puts) == 6 and out.parts_uploaded == 5, log  # 5 blocks + the block list
    assert env.proxy.stats()["total"] == 6, log
    assert env.direct.fs().cat_file(f"{env.prefix(f'mp-{carrier}')}/big.bin") == payload
    small = store.open_output("small.bin")
    small.write(payload[:1000])
    small.close()
    gone = store.open_output("gone.bin")
    gone.write(payload)
    gone.discard()
    assert sorted(store.list("")) == ["big.bin", "small.bin"]
    assert env.direct.fs().cat_file(f"{env.prefix(f'mp-{carrier}')}/small.bin") == payload[:1000]


def test_azure_dataset_of_multi_block_files_read_by_pylance(counted_azure: Counted,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A data file above one part (5 MiB) written through block uploads: pylance reads it in
    place on Azurite, rows equal."""
    import pyarrow as pa

    monkeypatch.setenv("LSO_IO_PART_BYTES", str(5 << 20))
    env = counted_azure
    rows = pa.table({"id": np.arange(1_500_000, dtype=np.int64),
                     "x": np.random.default_rng(3).random(1_500_000)})
    env.proxy.reset()
    write_dataset(rows, env.proxied.uri("big.lance"), storage_options=env.proxied.options)
    puts = [path for op, path, _ in env.proxy.stats()["log"] if op == "PUT" and "/data/" in path]
    assert len(puts) >= 3, puts  # blocks + the block list of the one data file
    got = lance.dataset(env.direct.uri("big.lance"), storage_options=env.direct.options).to_table()
    assert got.sort_by("id").equals(rows)


def _rows(n: int, k: int = 4) -> Any:
    import pyarrow as pa

    ids = np.arange(n, dtype=np.int64)
    return pa.table({"id": ids, **{f"c{i}": ids * (i + 2) for i in range(k - 2)},
                     "s": pa.array([f"v{i % 97}" for i in ids.tolist()])})


@pytest.mark.parametrize("carrier", ["obstore", "fsspec"])
def test_azure_prefetch_carrier(counted_azure: Counted, monkeypatch: pytest.MonkeyPatch,
                                carrier: str) -> None:
    """A compaction's prefetch on Azure fetches its data and deletion files through obstore (Rust
    threads, off the GIL), as on S3, unless ``LSO_IO_CARRIER=fsspec``: each file one GET either
    way, and pylance reads the rows it read, in place."""
    from lance_spark_ops.io import obstore_reads
    from lance_spark_ops.spark.files.compaction import compact

    if carrier == "fsspec":
        monkeypatch.setenv(obstore_reads.CARRIER_ENV, "fsspec")
    through: list[str] = []
    real = obstore_reads.AzureReader.read_many

    async def spy(self: obstore_reads.AzureReader, items: list, budget: object) -> object:
        through.extend(p for p, _, _ in items)
        return await real(self, items, budget)

    monkeypatch.setattr(obstore_reads.AzureReader, "read_many", spy)
    env = counted_azure
    uri = env.direct.uri(f"pre-{carrier}.lance")
    lance.write_dataset(_rows(16_000), uri, storage_options=env.direct.options, max_rows_per_file=2_000,
                        data_storage_version="2.1")
    lance.dataset(uri, storage_options=env.direct.options).delete("id % 5 = 0")
    expected = lance.dataset(uri, storage_options=env.direct.options).to_table().sort_by("id")
    env.proxy.reset()
    compact(None, env.proxied.uri(f"pre-{carrier}.lance"), target_rows_per_fragment=100_000,
            storage_options=env.proxied.options)
    log = env.proxy.stats()["log"]
    gets = sorted(path.split("?")[0] for op, path, _ in log if op == "GET" and "/data/" in path)
    assert len(gets) == 8 == len(set(gets)), gets  # each input data file once
    assert sum(op == "GET" and "/_deletions/" in path for op, path, _ in log) == 8
    if carrier == "obstore":
        assert sum("/data/" in p for p in through) == 8 and sum("/_deletions/" in p for p in through) == 8
    else:
        assert through == []
    got = lance.dataset(uri, storage_options=env.direct.options)
    assert len(got.get_fragments()) == 1
    assert got.to_table().sort_by("id").equals(expected)


@pytest.mark.parametrize("carrier", ["obstore", "fsspec"])
def test_azure_direct_ranged_reads_carrier(counted_azure: Counted, monkeypatch: pytest.MonkeyPatch,
                                           carrier: str) -> None:
    """A scan's footer and page reads (not prefetched) on Azure go through obstore unless
    ``LSO_IO_CARRIER=fsspec``, with the same requests either way and pylance's rows. A read
    obstore cannot serve (a missing blob) falls back to adlfs and fails typed, naming it."""
    import adlfs

    from lance_spark_ops.errors import NotFoundError
    from lance_spark_ops.io import obstore_reads

    if carrier == "fsspec":
        monkeypatch.setenv(obstore_reads.CARRIER_ENV, "fsspec")
    env = counted_azure
    uri = env.direct.uri(f"direct-{carrier}.lance")
    lance.write_dataset(_rows(100_000, k=6), uri, storage_options=env.direct.options,
                        data_storage_version="2.1")
    served: list[str] = []
    real = obstore_reads.AzureReader.get_ranges

    def spy(self: obstore_reads.AzureReader, path: str, spans: Any) -> Any:
        got = real(self, path, spans)
        if got is not None:
            served.append(path)
        return got

    monkeypatch.setattr(obstore_reads.AzureReader, "get_ranges", spy)
    asked: list[str] = []  # adlfs's ranged reads of the data file
    real_cat = adlfs.AzureBlobFileSystem._cat_file

    async def cat(self: Any, path: str, *a: Any, **k: Any) -> Any:
        asked.append(path)
        return await real_cat(self, path, *a, **k)

    monkeypatch.setattr(adlfs.AzureBlobFileSystem, "_cat_file", cat)
    ds = Dataset.open(env.store(f"direct-{carrier}.lance"))
    env.proxy.reset()
    got = ds.to_table()
    data_gets = [path for op, path, _ in env.proxy.stats()["log"] if op == "GET" and "/data/" in path]
    assert 1 <= len(data_gets) <= 3, data_gets  # the footer, then the pages coalesced
    on_data = [p for p in asked if "/data/" in p]
    if carrier == "obstore":
        assert any("/data/" in p for p in served) and on_data == [], (served, on_data)
    else:
        assert served == [] and on_data, asked
    assert got.equals(lance.dataset(uri, storage_options=env.direct.options).to_table())
    store = env.store(f"direct-{carrier}.lance")
    with pytest.raises(NotFoundError, match="missing.lance"):
        store.read_ranges("data/missing.lance", [(0, 10), (4096, 10)])


@pytest.mark.parametrize("fault", [
    # a prefetch GET reset twice and a deletion file throttled: obstore retries or the direct
    # read through adlfs serves it
    [{"kind": "reset", "count": 2, "ops": ["GET"], "path_contains": "/data/"},
     {"kind": "slowdown", "count": 1, "ops": ["GET"], "path_contains": "/_deletions/"}],
    # a block stored and its answer lost: obstore sends the same block again
    [{"kind": "reset", "count": 1, "ops": ["PUT"], "path_contains": "/data/", "forward": True}],
    # every upload of the output refused: the job fails typed, nothing committed
    [{"kind": "accessdenied", "count": 1000, "ops": ["PUT"], "path_contains": "/data/"}],
], ids=["reads", "block-answer-lost", "upload-refused"])
def test_azure_carrier_under_faults(counted_azure: Counted, monkeypatch: pytest.MonkeyPatch,
                                    fault: list[dict[str, Any]]) -> None:
    """A compaction on Azure through obstore with the proxy's faults on its reads and its block
    uploads (outputs above two 5 MiB parts): either pylance reads the rows it read, in a
    version of its own, or the job fails with a ``LanceError`` and the dataset is as it was."""
    from lance_spark_ops.errors import LanceError
    from lance_spark_ops.spark.files.compaction import compact

    monkeypatch.setenv("LSO_IO_PART_BYTES", str(5 << 20))
    env = counted_azure
    uri = env.direct.uri("faults.lance")
    rng = np.random.default_rng(5)
    import pyarrow as pa

    rows = pa.table({"id": np.arange(1_200_000, dtype=np.int64), "x": rng.random(1_200_000),
                     "y": rng.random(1_200_000)})
    lance.write_dataset(rows, uri, storage_options=env.direct.options, max_rows_per_file=200_000,
                        data_storage_version="2.1")
    lance.dataset(uri, storage_options=env.direct.options).delete("id % 7 = 0")
    before = lance.dataset(uri, storage_options=env.direct.options)
    expected, version = before.to_table().sort_by("id"), before.version
    for f in fault:
        env.proxy.inject(**f)
    try:
        compact(None, env.proxied.uri("faults.lance"), target_rows_per_fragment=10_000_000,
                storage_options={**env.proxied.options, "client_max_retries": "1"})
        failed = None
    except LanceError as e:
        failed = e
    after = lance.dataset(uri, storage_options=env.direct.options)
    if fault[0]["kind"] == "accessdenied":
        assert failed is not None and after.version == version, failed
    else:
        assert failed is None and after.version == version + 1 and len(after.get_fragments()) == 1
    assert env.proxy.stats()["faults"], "no fault fired"
    assert after.to_table().sort_by("id").equals(expected)


@pytest.mark.parametrize("carrier", ["obstore", "fsspec"])
def test_azure_deletes_in_batches(counted_azure: Counted, monkeypatch: pytest.MonkeyPatch,
                                  carrier: str) -> None:
    """``delete_batch`` on Azure through obstore: Blob Batch requests of up to 256 deletes (300
    blobs: 2 requests, where adlfs sends 300). A batch naming a blob already gone deletes the
    rest and goes again through adlfs, one request a blob, missing ones no error."""
    from lance_spark_ops.io import obstore_reads

    if carrier == "fsspec":
        monkeypatch.setenv(obstore_reads.CARRIER_ENV, "fsspec")
    env = counted_azure
    fs = env.direct.fs()
    fs.pipe({f"{env.prefix('del')}/f{i:03d}": b"x" for i in range(311)})
    store = env.store("del")
    env.proxy.reset()
    assert store.delete_batch([f"f{i:03d}" for i in range(300)]) == []
    ops = env.proxy.stats()["ops"]
    assert ops == ({"POST": 2} if carrier == "obstore" else {"DELETE": 300}), ops
    env.proxy.reset()
    assert store.delete_batch([f"f{i:03d}" for i in range(300, 311)] + ["gone"]) == []
    ops = env.proxy.stats()["ops"]
    assert ops == ({"POST": 1, "DELETE": 12} if carrier == "obstore" else {"DELETE": 12}), ops
    fs.invalidate_cache()
    assert fs.find(env.prefix("del")) == []


def test_azure_container_at_account_paths_stay_on_adlfs(counted_azure: Counted) -> None:
    """``abfss://container@account.dfs.core.windows.net/...`` names its account in the URI:
    reads, uploads and deletes there stay on adlfs (obstore's store would take the options'
    account), and the dataset pylance wrote reads the same."""
    from lance_spark_ops.io.remote import AzureUpload

    env = counted_azure
    lance.write_dataset(_rows(1_000), env.direct.uri("at.lance"), storage_options=env.direct.options)
    uri = f"abfss://{env.direct.container}@{AZURITE_ACCOUNT}.dfs.core.windows.net/at.lance"
    store = ObjectStore(uri, env.proxied.options)
    assert store._bulk_reader() is None and store._direct_ranges("x", [(0, 1)]) is None
    out = store.open_output("big.bin")
    assert isinstance(out, AzureUpload)
    out.discard()
    got = Dataset.open(uri, storage_options=env.proxied.options).to_table()
    want = lance.dataset(env.direct.uri("at.lance"), storage_options=env.direct.options).to_table()
    assert got.equals(want)
