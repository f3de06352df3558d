"""The driver's version-listing fast path on GCS and Azure, requests counted through the latency
proxy (``tests/support/latency_store``) in front of each emulator: the latest version from one
listing page of ``RECENT_PAGE`` keys (V2 manifest names count down, and both stores list keys
in lexicographic order, as S3 does), where a full listing pages through every version.

gcp-storage-emulator answers listings whole; ``gcs_server.py`` pages them as GCS does
(``maxResults`` / ``nextPageToken``), so the counts are GCS's. Azurite pages as Azure does.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.table.commit.handler import RECENT_PAGE, PutIfNotExistsCommitHandler
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.paths import ManifestNamingScheme
from lance_spark_ops.table.write import write_dataset
from tests.gcs_azure.conftest import AZURITE_ACCOUNT, GCS, Azure
from tests.support.latency_store import LatencyProxy
from tests.table.commit_helpers import table

lance = pytest.importorskip("lance")

VERSIONS = 1100  # more than a page of gcsfs's full listing (1 000 keys)


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


@pytest.fixture(params=["gcs", "azure"])
def counted(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Counted]:
    direct = request.getfixturevalue(request.param)
    up = direct.endpoint
    with LatencyProxy(up, log=True) as proxy:
        if isinstance(direct, GCS):
            key = tmp_path / "proxied-service-account.json"
            info = json.loads(Path(direct.service_account).read_text())
            key.write_text(json.dumps({**info, "gcs_base_url": proxy.endpoint}))
            proxied: GCS | Azure = GCS(proxy.endpoint, direct.bucket, str(key))
        else:
            proxied = Azure(f"{proxy.endpoint}/{AZURITE_ACCOUNT}", direct.container)
        yield Counted(request.param, direct, proxied, proxy)


def _fake_versions(env: Counted, name: str, n: int) -> None:
    """``n`` V2-named manifest objects (the listing reads names only)."""
    fs = env.direct.fs()
    scheme = ManifestNamingScheme.V2
    fs.pipe({f"{env.prefix(name)}/{scheme.manifest_path(v)}": b"m" for v in range(1, n + 1)})


def test_latest_version_from_one_listing_page(counted: Counted) -> None:
    """1 100 versions: one listing request of ``RECENT_PAGE`` keys finds the newest (the full
    listing takes two requests of gcsfs's 1 000 keys on GCS; Azure's 5 000-key pages would
    need 5 001 versions to show it, so there the page size is what is counted)."""
    _fake_versions(counted, "many.lance", VERSIONS)
    store = counted.store("many.lance")
    handler = PutIfNotExistsCommitHandler()
    counted.proxy.reset()
    listing = handler.recent_versions(store)
    pages = counted.listings()
    assert listing.latest == VERSIONS and not listing.complete
    assert sorted(listing.paths) == list(range(VERSIONS - RECENT_PAGE + 1, VERSIONS + 1))
    assert len(pages) == 1, pages
    size_key = "maxResults" if counted.kind == "gcs" else "maxresults"
    assert pages[0][size_key] == [str(RECENT_PAGE)], pages
    assert counted.proxy.stats()["total"] == 1  # nothing else (no HEAD, no size request)
    counted.proxy.reset()
    full = handler.list_versions(store)
    assert sorted(full.paths) == list(range(1, VERSIONS + 1))
    if counted.kind == "gcs":
        assert len(counted.listings()) == 2


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
