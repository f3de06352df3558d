"""The storage layer on its own: coalesced ranged reads, whole-object and streamed writes,
put-if-not-exists, listing, local paths / file:// / memory:// and storage_options."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops import LanceFileReader
from lance_spark_ops.errors import AccessDeniedError, CommitConflict, NotFoundError
from lance_spark_ops.io.storage import ObjectStore, ScratchBuffer, coalesce_ranges


def test_coalesce_merges_near_ranges_and_keeps_members() -> None:
    ranges = [(1000, 10), (0, 100), (150, 50), (10**7, 5)]
    out = coalesce_ranges(ranges, gap=800, max_size=10**6)
    assert out == [(0, 1010, [1, 2, 0]), (10**7, 10**7 + 5, [3])]
    assert coalesce_ranges(ranges, gap=0, max_size=10**6) == [
        (0, 100, [1]), (150, 200, [2]), (1000, 1010, [0]), (10**7, 10**7 + 5, [3])
    ]
    # never grows a request beyond max_size
    assert len(coalesce_ranges([(0, 10), (20, 10), (40, 10)], gap=100, max_size=30)) == 2


@pytest.mark.parametrize("kind", ["plain", "file_url", "memory"])
def test_round_trip_of_every_operation(tmp_path: Path, kind: str) -> None:
    root = {"plain": str(tmp_path / "r"), "file_url": f"file://{tmp_path}/r",
            "memory": f"memory://lso-storage-test-{id(tmp_path)}"}[kind]
    store = ObjectStore(root)
    payload = bytes(range(256)) * 40
    store.write("a/obj.bin", payload)
    assert store.exists("a/obj.bin") and store.size("a/obj.bin") == len(payload)
    assert store.read("a/obj.bin") == payload
    assert store.read_range("a/obj.bin", 100, 50) == payload[100:150]
    ranges = [(5000, 10), (0, 3), (7, 100), (9000, 1240)]
    got = store.read_ranges("a/obj.bin", ranges)
    assert [bytes(g) for g in got] == [payload[o:o + n] for o, n in ranges]
    with store.open_output("a/stream.bin") as f:
        f.write(b"abc")
        f.write(b"def")
    assert store.read("a/stream.bin") == b"abcdef"
    store.put_if_not_exists("a/once", b"1")
    with pytest.raises(CommitConflict):
        store.put_if_not_exists("a/once", b"2")
    assert store.read("a/once") == b"1"
    assert store.list("a") == ["obj.bin", "once", "stream.bin"]
    assert store.list("missing-dir") == []
    store.delete_many(["a/once", "a/stream.bin"])
    assert store.list("a") == ["obj.bin"]
    with pytest.raises(NotFoundError):
        store.read("a/once")
    store.write("t/x/1", b"1")
    store.write("t/x/y/2", b"2")
    store.write("t/z", b"3")
    assert store.find_rel("t") == ["t/x/1", "t/x/y/2", "t/z"] and store.find_rel("absent") == []
    store.delete_tree("t/x")
    store.delete_tree("t/absent")
    assert store.find_rel("t") == ["t/z"] and store.list("a") == ["obj.bin"]


@pytest.mark.parametrize("kind", ["plain", "memory"])
def test_reads_into_a_reused_scratch_buffer(tmp_path: Path, kind: str) -> None:
    """With a scratch buffer (binary copy) the ranges read are the file's bytes, call after
    call, the buffer growing when a call needs more (memory:// ignores it)."""
    root = str(tmp_path / "r") if kind == "plain" else f"memory://lso-scratch-test-{id(tmp_path)}"
    store = ObjectStore(root)
    payload = np.random.default_rng(0).integers(0, 256, 300_000, dtype=np.uint8).tobytes()
    store.write("obj.bin", payload)
    scratch = ScratchBuffer()
    for ranges in ([(5000, 10), (0, 3), (7, 100)], [(100_000, 150_000), (10, 5)], [(299_990, 10)]):
        got = store.read_ranges("obj.bin", ranges, scratch)
        assert [bytes(g) for g in got] == [payload[o:o + n] for o, n in ranges]


def test_short_ranged_read_is_an_error(tmp_path: Path) -> None:
    store = ObjectStore(str(tmp_path))
    store.write("x", b"12345")
    with pytest.raises(Exception) as e:  # noqa: PT011 - a LanceError or NotFoundError, typed either way
        store.read_ranges("x", [(0, 100)])
    assert "x" in str(e.value)


def test_storage_options_reach_the_filesystem(tmp_path: Path, lance_file) -> None:
    """Options are handed to fsspec (here: the local filesystem's ``auto_mkdir``) and kept."""
    store = ObjectStore(str(tmp_path / "deep"), {"auto_mkdir": True})
    assert store.storage_options == {"auto_mkdir": True}
    assert store.fs.auto_mkdir is True
    path = lance_file(pa.table({"a": pa.array(np.arange(10))}), "2.2")
    r = LanceFileReader(f"file://{path}", storage_options={"auto_mkdir": True})
    assert r.read().column("a").to_pylist() == list(range(10))


def test_s3_stores_share_the_parsed_botocore_data() -> None:
    """Each new s3fs filesystem's session takes the process's one data loader (parsed once)
    and keeps its own credentials; a filesystem that has a session already is left alone."""
    pytest.importorskip("s3fs")
    from lance_spark_ops.io import s3_session

    opts = {"aws_endpoint": "http://127.0.0.1:9", "aws_access_key_id": "k1", "aws_secret_access_key": "s1",
            "aws_region": "us-east-1", "allow_http": "true"}
    a = ObjectStore("s3://bkt-one/ds", opts)
    b = ObjectStore("s3://bkt-one/ds", {**opts, "aws_access_key_id": "k2"})
    assert a.fs is not b.fs and a.fs.session is not b.fs.session
    for store in (a, b):
        assert store.fs.session.get_component("data_loader") is s3_session.shared_loader()
    session = a.fs.session
    s3_session.prime(a.fs)
    assert a.fs.session is session
    factory = session.get_component("response_parser_factory")
    assert factory.create_parser("rest-xml")._timestamp_parser is s3_session.fast_timestamp


@pytest.mark.parametrize("value", ["Sun, 29 Nov 2026 03:20:00 GMT", "Sun, 06 Nov 1994 08:49:37 GMT",
                                   "2026-11-29T03:20:00.000Z", "2026-11-29T03:20:00.123456Z",
                                   "2026-11-29T03:20:00Z", "2026-11-29T03:20:00+01:00", 1700000000,
                                   "1700000000", "Sunday, 06-Nov-94 08:49:37 GMT"])
def test_fast_timestamp_parses_as_botocore(value: object) -> None:
    """The S3 sessions' timestamp parser gives botocore's datetime for every form (its own
    fast paths and the forms it hands to botocore), and fails where botocore fails."""
    pytest.importorskip("botocore")
    from botocore.utils import parse_timestamp

    from lance_spark_ops.io.s3_session import fast_timestamp

    assert fast_timestamp(value) == parse_timestamp(value)
    with pytest.raises(ValueError):
        parse_timestamp("not a time")
    with pytest.raises(ValueError):
        fast_timestamp("not a time")


def test_s3_clients_share_one_tls_verify_context() -> None:
    """Every S3 filesystem's HTTP session takes the process's TLS verify context for its CA
    setting (the CA bundle parsed once per process, not once per client); another CA setting
    gets its own."""
    pytest.importorskip("s3fs")
    import ssl

    from lance_spark_ops.io.s3_http import SharedContextSession

    opts = {"aws_endpoint": "http://127.0.0.1:9", "aws_access_key_id": "k1", "aws_secret_access_key": "s1",
            "aws_region": "us-east-1", "allow_http": "true"}
    for key in ("k1", "k2"):
        store = ObjectStore("s3://bkt-one/ds", {**opts, "aws_access_key_id": key})
        assert store.fs.config_kwargs["http_session_cls"] is SharedContextSession
    ctx, proxy_ctx = SharedContextSession(verify=True)._build_ssl_contexts(None)
    assert proxy_ctx is None and isinstance(ctx, ssl.SSLContext)
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert SharedContextSession(verify=True)._build_ssl_contexts(None)[0] is ctx
    off = SharedContextSession(verify=False)._build_ssl_contexts(None)[0]
    assert off is not ctx and off.verify_mode == ssl.CERT_NONE and not off.check_hostname


def test_local_permission_errors_are_access_denied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A local file the process may not read fails as the store's refusals do (exit 8), on
    each read path: a footer's tail, ranged reads, a whole read. (Root reads any file, so the
    refusal is the operating system's error, raised where each path opens the file.)"""
    import builtins

    from lance_spark_ops.io import storage

    store = ObjectStore(str(tmp_path))
    store.write("f.lance", b"x" * 100)

    def refuse(*a: object, **k: object) -> object:
        raise PermissionError(13, "Permission denied", str(tmp_path / "f.lance"))

    with monkeypatch.context() as m:
        m.setattr(storage.os, "open", refuse)
        with pytest.raises(AccessDeniedError, match="read refused") as e:
            store.read_tail("f.lance", 10)
        assert e.value.path.endswith("f.lance")
    with monkeypatch.context() as m:
        m.setattr(builtins, "open", refuse)
        with pytest.raises(AccessDeniedError, match="read refused"):
            store.read_ranges("f.lance", [(0, 10)])
        with pytest.raises(AccessDeniedError, match="read refused: PermissionError"):
            store.read("f.lance")
