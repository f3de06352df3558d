"""Tables by name: our ``dir`` namespace reads the layouts pylance 14's DirectoryNamespace
writes (plain directory and manifest table) and answers as pylance's does; ``rest`` against
pylance's RestAdapter on 127.0.0.1; the resolver, the driver decorator and the job flags."""

from __future__ import annotations

import os

import lance
import lance.namespace
import pyarrow as pa
import pytest
from lance_namespace import (
    CreateNamespaceRequest,
    DescribeTableRequest,
    ListNamespacesRequest,
    ListTablesRequest,
)

from lance_spark_ops.errors import InvalidInputError, NotFoundError
from lance_spark_ops.namespace import connect_namespace, iter_tables, resolve_table, with_table_target
from lance_spark_ops.spark.runtime.cli import Job, parse_request


def _norm(location: str) -> str:
    return os.path.normpath(location.removeprefix("file://"))


@pytest.fixture(scope="module")
def lakes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, list[list[str]]]]:
    """Two roots written by pylance: manifest mode with nested namespaces, plain directory mode."""
    base = tmp_path_factory.mktemp("lakes")
    data = pa.table({"a": list(range(5))})
    out = {}
    for mode in ("true", "false"):
        root = str(base / f"manifest_{mode}")
        ns = lance.namespace.DirectoryNamespace(root=root, manifest_enabled=mode)
        ids = [["t1"], ["t0"]]
        if mode == "true":
            ns.create_namespace(CreateNamespaceRequest(id=["a"]))
            ns.create_namespace(CreateNamespaceRequest(id=["a", "b"]))
            ids += [["a", "t2"], ["a", "b", "t3"]]
        for tid in ids:
            lance.write_dataset(data, namespace_client=ns, table_id=tid, mode="create")
        out[mode] = (root, ids)
    return out


@pytest.mark.parametrize("mode", ["true", "false"])
def test_dir_namespace_answers_as_pylance(lakes, mode: str) -> None:
    root, ids = lakes[mode]
    theirs = lance.namespace.DirectoryNamespace(root=root, manifest_enabled=mode)
    ours = connect_namespace("dir", {"root": root, "manifest_enabled": mode})
    namespaces = [[]] + ([["a"], ["a", "b"]] if mode == "true" else [])
    for nsid in namespaces:
        assert ours.list_tables(ListTablesRequest(id=nsid)).tables == \
            sorted(theirs.list_tables(ListTablesRequest(id=nsid)).tables)
        assert ours.list_namespaces(ListNamespacesRequest(id=nsid)).namespaces == \
            sorted(theirs.list_namespaces(ListNamespacesRequest(id=nsid)).namespaces)
    for tid in ids:
        mine = ours.describe_table(DescribeTableRequest(id=tid)).location
        assert _norm(mine) == _norm(theirs.describe_table(DescribeTableRequest(id=tid)).location)
        assert lance.dataset(mine).to_table().equals(lance.dataset(_norm(mine)).to_table())
    assert sorted(iter_tables(ours, recursive=True)) == sorted(ids)
    if mode == "true":  # nested namespaces exist only with the manifest table
        assert list(iter_tables(ours, "a")) == [["a", "t2"]]
    page = ours.list_tables(ListTablesRequest(id=[], limit=1))
    assert page.tables == ["t0"] and page.page_token == "t0"
    with pytest.raises(NotFoundError):
        resolve_table(ours, "nope")
    with pytest.raises(NotFoundError):
        list(iter_tables(ours, "zz"))


def test_rest_namespace_against_pylance_server(lakes) -> None:
    root, ids = lakes["true"]
    with lance.namespace.RestAdapter("dir", {"root": root}, host="127.0.0.1", port=0) as server:
        ns = connect_namespace("rest", {"uri": f"http://127.0.0.1:{server.port}"})
        assert sorted(iter_tables(ns, recursive=True)) == sorted(ids)
        for tid in ids:
            assert _norm(resolve_table(ns, tid).location) == _norm(resolve_table(("dir", {"root": root}),
                                                                                 tid).location)
        with pytest.raises(NotFoundError):
            resolve_table(ns, "a.nope")


def test_vended_options_and_refresh(lakes) -> None:
    root, _ = lakes["false"]
    props = {"root": root, "storage.aws_region": "us-east-1", "vend_input_storage_options": "true",
             "vend_input_storage_options_refresh_interval_millis": "1000"}
    table = resolve_table(("dir", props), "t1", {"allow_http": "true"})
    assert table.storage_options["aws_region"] == "us-east-1"
    assert table.storage_options["allow_http"] == "true"
    assert table.expires_at is not None
    first = table.storage_options["expires_at_millis"]
    fresh = table.options(margin=10.0)  # expires within the margin: asked again
    assert table.refreshes == 1 and fresh["expires_at_millis"] >= first
    hour = {**props, "vend_input_storage_options_refresh_interval_millis": "3600000"}
    lasting = resolve_table(("dir", hour), "t1")
    assert {k: v for k, v in lasting.options().items() if k != "storage_options_provider"} == \
        lasting.storage_options and lasting.refreshes == 0  # still valid: not asked


def test_decorator_and_errors(lakes) -> None:
    root, _ = lakes["true"]
    seen = []

    @with_table_target
    def driver(spark, uri, x=0, *, storage_options=None):
        seen.append((uri, x, storage_options))
        return uri

    assert _norm(driver(None, namespace=("dir", {"root": root}), table_id="a.b.t3", x=3)).startswith(root)
    assert driver(None, "/some/uri") == "/some/uri"
    with pytest.raises(InvalidInputError):
        driver(None, "/u", namespace=("dir", {"root": root}), table_id="t1")
    with pytest.raises(InvalidInputError):
        driver(None, table_id="t1")
    with pytest.raises(InvalidInputError):
        connect_namespace("nosuch", {})
    with pytest.raises(InvalidInputError):
        connect_namespace("no_module_here.Namespace", {})


class _Spy(lance.namespace.LanceNamespace):
    """pylance's DirectoryNamespace (versions tracked by the namespace), counting calls."""

    def __init__(self, root: str) -> None:
        self.inner = lance.namespace.DirectoryNamespace(root=root, table_version_tracking_enabled="true")
        self.calls: list[str] = []

    def namespace_id(self) -> str:
        return "spy"

    def __getattribute__(self, name: str):
        if name.startswith("_") or name in ("inner", "calls", "namespace_id"):
            return object.__getattribute__(self, name)
        target = getattr(self.inner, name)

        def call(*args, **kw):
            self.calls.append(name)
            return target(*args, **kw)

        return call


def test_managed_versions_commit_through_the_namespace(tmp_path) -> None:
    from lance_namespace import ListTableVersionsRequest

    from lance_spark_ops.errors import CommitConflict
    from lance_spark_ops.spark import compact
    from lance_spark_ops.table.commit.namespace_store import NamespaceManifestStore
    from lance_spark_ops.table.dataset import Dataset

    ns = _Spy(str(tmp_path))
    data = pa.table({"a": list(range(1000))})
    lance.write_dataset(data, namespace_client=ns, table_id=["t1"], mode="create", max_rows_per_file=100)
    table = resolve_table(ns, "t1")
    assert table.managed_versioning and "+lsons://" in table.uri
    ns.calls.clear()
    m = compact(None, namespace=ns, table_id="t1")
    assert m.fragments_removed == 10 and m.new_version == 2
    assert ns.calls.count("create_table_version") == 1  # the Rewrite (no index: no ids reserved first)
    latest = ns.list_table_versions(ListTableVersionsRequest(id=["t1"], limit=1, descending=True)).versions
    assert [v.version for v in latest] == [2]
    ds = lance.dataset(namespace_client=ns, table_id=["t1"])
    assert ds.version == 2 and len(ds.get_fragments()) == 1 and ds.to_table().sort_by("a").equals(data)
    # the namespace refuses an existing version: a conflict, as a failed conditional put
    kv = NamespaceManifestStore(ns, ["t1"], str(tmp_path / "t1.lance"))
    with pytest.raises(CommitConflict):
        kv.put_if_not_exists("", 2, "_versions/18446744073709551613.manifest-x", 1)
    # a process that never resolved the table reads it from _versions/ alone
    from lance_spark_ops.table.commit import namespace_store

    stranger = table.uri.rsplit("=", 1)[0] + "=unknown"
    assert Dataset.open(stranger).version == 2 and namespace_store._TABLES


def test_job_flags_resolve_the_table(lakes) -> None:
    root, _ = lakes["true"]
    job = Job("probe", lambda *a: {}, None)
    req = parse_request(job, ["--namespace-impl", "dir", "--namespace-prop", f"root={root}",
                              "--namespace-prop", "header.Authorization=Bearer sekrit",
                              "--table", "a.t2"], {})
    assert _norm(req.uri) == _norm(lance.namespace.DirectoryNamespace(root=root).describe_table(
        DescribeTableRequest(id=["a", "t2"])).location)
    assert list(req.namespace_secrets.values()) == ["Bearer sekrit"]
    for argv in (["/uri", "--namespace-impl", "dir", "--namespace-prop", f"root={root}", "--table", "t1"],
                 ["--table", "t1"], ["/uri", "--namespace-impl", "dir"]):
        with pytest.raises(InvalidInputError):
            parse_request(job, argv, {})


def test_dir_namespace_manages_versions_as_pylance(tmp_path) -> None:
    """With table_version_tracking_enabled our ``dir`` says managed_versioning as pylance's,
    lists and describes the same versions, takes commits (create_table_version: a version
    that exists is a conflict) and deletes old versions' records, never the latest."""
    from lance_namespace import (
        BatchDeleteTableVersionsRequest,
        ListTableVersionsRequest,
        TableVersionNotFoundError,
    )

    from lance_spark_ops.errors import CommitConflict
    from lance_spark_ops.spark import compact
    from lance_spark_ops.table.commit.namespace_store import NamespaceManifestStore

    root = str(tmp_path)
    theirs = lance.namespace.DirectoryNamespace(root=root, table_version_tracking_enabled="true")
    data = pa.table({"a": list(range(1000))})
    lance.write_dataset(data, namespace_client=theirs, table_id=["t1"], mode="create", max_rows_per_file=100)
    ours = connect_namespace("dir", {"root": root, "table_version_tracking_enabled": "true"})
    plain = connect_namespace("dir", {"root": root})
    assert ours.describe_table(DescribeTableRequest(id=["t1"])).managed_versioning is True
    assert theirs.describe_table(DescribeTableRequest(id=["t1"])).managed_versioning is True
    assert not plain.describe_table(DescribeTableRequest(id=["t1"])).managed_versioning
    assert not resolve_table(plain, "t1").managed_versioning and resolve_table(ours, "t1").managed_versioning

    def listed(ns, **kw):
        got = ns.list_table_versions(ListTableVersionsRequest(id=["t1"], **kw)).versions
        return [(v.version, _norm("/" + v.manifest_path), v.manifest_size) for v in got]

    created = []
    create = ours.create_table_version
    ours.create_table_version = lambda request: created.append(request["version"]) or create(request)
    m = compact(None, namespace=ours, table_id="t1")  # commits through our create_table_version
    assert m.fragments_removed == 10 and m.new_version == 2 and created == [2]  # no index: no reservation
    ds = lance.dataset(namespace_client=theirs, table_id=["t1"])
    assert ds.version == 2 and len(ds.get_fragments()) == 1 and ds.to_table().sort_by("a").equals(data)
    assert listed(ours) == listed(theirs) and [v[0] for v in listed(ours)] == [1, 2]
    assert listed(ours, descending=True, limit=1) == listed(theirs, descending=True, limit=1)
    top = ours.describe_table_version({"id": ["t1"], "version": None}).version
    assert (top.version, top.manifest_path) == (2, listed(ours)[-1][1].lstrip("/"))
    with pytest.raises(TableVersionNotFoundError):
        ours.describe_table_version({"id": ["t1"], "version": 9})
    staged = tmp_path / "t1.lance" / "_versions" / "staged.manifest-x"
    staged.write_bytes(b"x")
    kv = NamespaceManifestStore(ours, ["t1"], str(tmp_path / "t1.lance"))
    with pytest.raises(CommitConflict):
        kv.put_if_not_exists("", 2, "_versions/staged.manifest-x", 1)
    assert ours.batch_delete_table_versions(BatchDeleteTableVersionsRequest(
        id=["t1"], ranges=[{"start_version": 1, "end_version": 2}])).deleted_count == 1  # not the latest
    assert [v[0] for v in listed(theirs)] == [2]
    assert lance.dataset(namespace_client=theirs, table_id=["t1"]).to_table().sort_by("a").equals(data)
