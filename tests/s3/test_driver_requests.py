"""The driver's round trips on S3, counted through the latency proxy (never timed): opening
the latest version of a dataset of many versions is one short LIST page and one GET (as
pylance: the V2 naming scheme lists the newest version first), a version asked for by number
one GET, commits over versions the page does not reach fall back to the full listing; small
vacuums and namespace listings run on the driver; each result checked against pylance."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.table.commit.handler import RECENT_PAGE, PutIfNotExistsCommitHandler
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.format.transaction import ReserveFragments
from lance_spark_ops.table.write import write_dataset
from tests.s3.conftest import SlowS3

PAGE = 4  # the LIST page of the tests (the library's is 64): 10 versions need more than one


def _versions(slow: SlowS3, name: str, n: int) -> str:
    import lance

    uri = slow.uri(name)
    for i in range(n):
        lance.write_dataset(pa.table({"id": np.arange(i * 10, i * 10 + 10, dtype=np.int64)}), uri,
                            mode="append" if i else "create", storage_options=slow.direct.options)
    return uri


def _ops(slow: SlowS3) -> Counter:
    return Counter(op for op, _, _ in slow.proxy.stats()["log"])


@pytest.fixture
def small_page() -> PutIfNotExistsCommitHandler:
    """The default commit handler listing ``PAGE`` keys a page."""
    return PutIfNotExistsCommitHandler(recent_page=PAGE)


def test_open_latest_is_one_list_page_and_one_get(slow_s3: SlowS3,
                                                  small_page: PutIfNotExistsCommitHandler) -> None:
    import lance

    uri = _versions(slow_s3, "many.lance", 10)
    theirs = lance.dataset(uri, storage_options=slow_s3.direct.options)
    slow_s3.proxy.reset()
    ds = Dataset.open(uri, storage_options=slow_s3.options, manifest_store=small_page)
    log = slow_s3.proxy.stats()["log"]
    assert _ops(slow_s3) == {"LIST": 1, "GET": 1}, log
    assert f"max-keys={PAGE}" in log[0][1]
    assert ds.version == theirs.version == 10
    assert ds.to_table().equals(theirs.to_table())


def test_open_a_known_version_is_one_get(slow_s3: SlowS3,
                                                  small_page: PutIfNotExistsCommitHandler) -> None:
    """A version asked for by number is read from its V2 name: one GET, no listing."""
    import lance

    uri = _versions(slow_s3, "old.lance", 10)
    slow_s3.proxy.reset()
    ds = Dataset.open(uri, version=2, storage_options=slow_s3.options, manifest_store=small_page)
    assert _ops(slow_s3) == {"GET": 1}
    theirs = lance.dataset(uri, version=2, storage_options=slow_s3.direct.options)
    assert ds.version == 2 and ds.to_table().equals(theirs.to_table())
    nine = Dataset.open(uri, version=9, storage_options=slow_s3.options, manifest_store=small_page)
    assert nine.version == 9
    assert ds.versions() == list(range(1, 11))


def test_commits_check_versions_beyond_the_page(slow_s3: SlowS3,
                                                  small_page: PutIfNotExistsCommitHandler) -> None:
    """An append on the latest version lists one page; a commit read at version 3 checks the
    7 versions since (older than the page: the full listing); pylance reads both."""
    import lance

    uri = _versions(slow_s3, "commit.lance", 10)
    slow_s3.proxy.reset()
    write_dataset(pa.table({"id": np.arange(100, 110, dtype=np.int64)}), uri, mode="append",
                  storage_options=slow_s3.options, manifest_store=small_page)
    assert _ops(slow_s3)["LIST"] == 2  # the open and the commit, one page each
    old = Dataset.open(uri, version=3, storage_options=slow_s3.options, manifest_store=small_page)
    new = old.commit(ReserveFragments(2), 3)
    eleven = Dataset.open(uri, version=11, storage_options=slow_s3.options, manifest_store=small_page)
    assert new.version == 12 and new.max_fragment_id == eleven.max_fragment_id + 2
    theirs = lance.dataset(uri, storage_options=slow_s3.direct.options)
    assert theirs.version == 12 and theirs.count_rows() == 110


def test_commit_puts_its_transaction_file_beside_the_manifest(slow_s3: SlowS3) -> None:
    """A commit's puts are one round trip: the proxy holds every request 1 s, and the
    transaction file's PUT and the manifest's conditional PUT reach it within half a second of
    each other (one after the other, the second would start after the first's answer, at least
    1 s later). Start times only: the proxy notes a request's end after answering it, so the
    commit may return before both ends are noted. pylance reads the version and its
    transaction."""
    import lance

    uri = _versions(slow_s3, "beside.lance", 2)
    ds = Dataset.open(uri, storage_options=slow_s3.options)
    slow_s3.proxy.reset()
    slow_s3.proxy.configure(delay_ms=1000)
    new = ds.commit(ReserveFragments(2))
    slow_s3.proxy.configure(delay_ms=2)
    puts = {("txn" if "/_transactions/" in e[1] else "manifest"): e
            for e in slow_s3.proxy.stats()["timeline"] if e[0] == "PUT"}
    assert set(puts) == {"txn", "manifest"}, slow_s3.proxy.stats()["timeline"]
    txn, manifest = puts["txn"], puts["manifest"]
    assert abs(manifest[3] - txn[3]) < 0.5, puts  # [op, path, range, start, end]
    theirs = lance.dataset(uri, storage_options=slow_s3.direct.options)
    assert theirs.version == new.version == 3 and theirs.count_rows() == 20
    assert theirs.read_transaction(3) is not None


def test_small_vacuum_runs_on_the_driver(slow_s3: SlowS3, monkeypatch: pytest.MonkeyPatch) -> None:
    """A vacuum of 12 old versions: manifests read, prefixes listed and files deleted on the
    driver (no task), the deletes in one DeleteObjects call; it removes what pylance's
    ``cleanup_old_versions`` removes from a twin."""
    from datetime import timedelta

    import lance

    from lance_spark_ops.spark.files.vacuuming import vacuum
    from lance_spark_ops.spark.runtime.job import Job

    ran: list[int] = []
    real = Job.run_tasks
    monkeypatch.setattr(Job, "run_tasks", lambda self, tasks, fn, costs=None: ran.append(len(tasks))
                        or real(self, tasks, fn, costs))
    stats = {}
    for side in ("ours", "pylance"):
        uri = _versions(slow_s3, f"vac-{side}.lance", 12)
        so = slow_s3.direct.options
        lance.dataset(uri, storage_options=so).optimize.compact_files(target_rows_per_fragment=1000)
        before = lance.dataset(uri, storage_options=so).to_table().sort_by("id")
        slow_s3.proxy.reset()
        if side == "ours":
            m = vacuum(None, uri, older_than=timedelta(0), delete_unverified=True,
                       storage_options=slow_s3.options)
            ops = slow_s3.proxy.stats()["ops"]
            assert ops.get("DELETE", 0) == 0 and ops["DELETE_OBJECTS"] == 2, ops  # files, then manifests
            stats[side] = (m.old_versions, m.data_files_removed, m.transaction_files_removed)
        else:
            s = lance.dataset(uri, storage_options=slow_s3.options).cleanup_old_versions(
                older_than=timedelta(0), delete_unverified=True)
            stats[side] = (s.old_versions, s.data_files_removed, s.transaction_files_removed)
        after = lance.dataset(uri, storage_options=so)
        assert len(after.versions()) == 1 and after.to_table().sort_by("id").equals(before)
    assert ran == []
    assert stats["ours"] == stats["pylance"] and stats["ours"][0] == 13, stats


def test_namespace_listing_checks_tables_side_by_side(slow_s3: SlowS3) -> None:
    """A directory namespace (no manifest table) of 6 tables and one non-table directory on
    S3: each ``*.lance`` entry checked with one LIST page of one key, the checks in flight
    together; the tables are pylance's answer but the non-table."""
    import lance
    from lance.namespace import DirectoryNamespace as TheirNamespace
    from lance_namespace import ListTablesRequest

    from lance_spark_ops.namespace.directory import DirectoryNamespace

    root = slow_s3.uri("lake")
    so = slow_s3.direct.options
    for i in range(6):
        lance.write_dataset(pa.table({"a": [i]}), f"{root}/t{i}.lance", storage_options=so)
    ObjectStore(f"{root}/junk.lance", so).write("notes.txt", b"not a table")
    slow_s3.proxy.reset()
    ours = DirectoryNamespace(root=root, manifest_enabled="false",
                              **{f"storage.{k}": v for k, v in slow_s3.options.items()})
    got = ours.list_tables(ListTablesRequest(id=[])).tables
    st = slow_s3.proxy.stats()
    pages = [path for op, path, _ in st["log"] if op == "LIST" and "max-keys=1&" in path + "&"]
    assert sum("_versions" in p for p in pages) == 7 and st["max_in_flight"] >= 2, pages
    theirs = TheirNamespace(root=root, manifest_enabled="false", **{f"storage.{k}": v for k, v in so.items()})
    # pylance names every *.lance directory; ours skips (and warns of) the one without _versions/
    assert sorted(theirs.list_tables(ListTablesRequest(id=[])).tables) == ["junk", *got]
    assert got == [f"t{i}" for i in range(6)]


def test_listings_are_pages_alone(slow_s3: SlowS3, monkeypatch: pytest.MonkeyPatch) -> None:
    """``ObjectStore.list`` and ``find`` on S3: an absent prefix is one LIST (s3fs's ``ls`` lists
    its parent too, its ``find`` HEADs it), a present one its pages; the names and sizes are
    s3fs's own."""
    from lance_spark_ops.io import remote

    fs = ObjectStore(slow_s3.uri("t"), slow_s3.direct.options).fs
    root = slow_s3.uri("t").removeprefix("s3://")
    for i, n in enumerate(["_indices/u1/a.idx", "_indices/u1/b.idx", "_indices/u2/a.idx", "_indices/top.bin",
                           "_indices/u3/deep/c.idx", "_indicesX/not-under.bin"]):
        fs.pipe_file(f"{root}/{n}", b"x" * (i + 1))
    store = ObjectStore(slow_s3.uri("t"), slow_s3.options)
    slow_s3.proxy.reset()
    assert store.list("_refs/branches") == [] and store.find_rel("_refs/tags") == []
    assert _ops(slow_s3) == {"LIST": 2}
    monkeypatch.setattr(remote, "LIST_PAGE", 2)
    slow_s3.proxy.reset()
    names = store.list("_indices")
    assert _ops(slow_s3) == {"LIST": 2}  # four entries, two a page
    assert names == sorted(p.rstrip("/").rsplit("/", 1)[1] for p in fs.ls(f"{root}/_indices", refresh=True))
    slow_s3.proxy.reset()
    found = store.find_rel("_indices", detail=True)
    assert _ops(slow_s3) == {"LIST": 3}  # five keys, two a page
    theirs = fs.find(f"{root}/_indices", detail=True)
    assert {p: i["size"] for p, i in found.items()} == {p[len(root) + 1:]: i["size"]
                                                          for p, i in theirs.items()}


@pytest.mark.parametrize("rows", [1_000, 200_000])  # read whole with its tail; larger than that read
def test_file_of_unknown_kind_opens_in_one_request(slow_s3: SlowS3, tmp_path, rows: int) -> None:
    """A Lance file the manifest gives no version or size of (an index's page files): opening
    it is one suffix read, which both tells a v1 footer from a v2 one and holds the metadata
    (a 16-byte footer probe and then the tail were two); its rows are pylance's."""
    from lance.file import LanceFileReader as PyReader
    from lance.file import LanceFileWriter as PyWriter

    from lance_spark_ops.file.reader import LanceFileReader

    table = pa.table({"id": np.arange(rows, dtype=np.int64), "x": np.arange(rows, dtype=np.float64) / 7})
    local = tmp_path / "page_data.lance"
    with PyWriter(str(local), table.schema) as w:
        w.write_batch(table)
    fs = ObjectStore(slow_s3.uri("t"), slow_s3.direct.options).fs
    fs.put_file(str(local), f"{slow_s3.uri('t').removeprefix('s3://')}/page_data.lance")
    slow_s3.proxy.reset()
    reader = LanceFileReader("page_data.lance", store=ObjectStore(slow_s3.uri("t"), slow_s3.options))
    assert _ops(slow_s3) == {"GET": 1}
    assert reader.read().equals(PyReader(str(local)).read_all().to_table())


def test_directory_buckets_are_listed_whole(slow_s3: SlowS3) -> None:
    """An S3 Express One Zone directory bucket (``--x-s3``, or the ``s3_express`` option) lists
    keys out of order, so one page of ``_versions/`` need not hold the newest: the open reads the
    whole listing there (as pylance does), and finds the version pylance finds."""
    import lance

    opts = slow_s3.options  # the test's endpoint and keys: no credential lookup anywhere
    assert not ObjectStore("s3://tables--usw2-az1--x-s3/t.lance", opts).lists_in_key_order
    assert not ObjectStore("s3://tables/t.lance", {**opts, "s3_express": "true"}).lists_in_key_order
    assert ObjectStore("s3://tables/t.lance", {**opts, "s3_express": "false"}).lists_in_key_order
    uri = _versions(slow_s3, "express.lance", 10)
    slow_s3.proxy.reset()
    ds = Dataset.open(uri, storage_options={**slow_s3.options, "s3_express": "true"})
    lists = [target for op, target, _ in slow_s3.proxy.stats()["log"] if op == "LIST"]
    assert len(lists) == 1 and f"max-keys={RECENT_PAGE}" not in lists[0], lists  # all, not a page
    theirs = lance.dataset(uri, storage_options=slow_s3.direct.options)
    assert ds.version == theirs.version == 10
    assert ds.to_table().equals(theirs.to_table())
