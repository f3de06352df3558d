"""Requests counted through the latency proxy (``tests/support/latency_store``), never seconds:
a fragment's columns read in a bounded number of requests, no size request per data file,
footers in one request, vacuum deletes in batches, compaction within pylance's request count
and checked by pylance, and jobs that finish through injected 503 SlowDown answers, connection
resets and timeouts."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.spark.files.compaction import compact
from lance_spark_ops.spark.files.vacuuming import vacuum
from lance_spark_ops.table.dataset import Dataset
from tests.s3.conftest import SlowS3


def _by_op(log: list, contains: str) -> Counter:
    return Counter(op for op, path, _ in log if contains in path)


def _table(n: int, start: int = 0, k: int = 4) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    cols = {"id": ids, **{f"c{i}": ids * (i + 2) for i in range(k - 2)}}
    return pa.table({**cols, "s": pa.array([f"v{i % 97}" for i in ids.tolist()])})


def _write(slow: SlowS3, name: str, n: int, per_file: int, k: int = 4) -> str:
    import lance

    uri = slow.uri(name)
    lance.write_dataset(_table(n, k=k), uri, storage_options=slow.direct.options, max_rows_per_file=per_file,
                        data_storage_version="2.1")
    return uri


def test_proxy_counts_operations_and_holds_requests(slow_s3: SlowS3) -> None:
    import boto3

    proxy = slow_s3.proxy
    client = boto3.client("s3", endpoint_url=proxy.endpoint, aws_access_key_id="testing",
                          aws_secret_access_key="testing-secret", region_name="us-east-1")
    bucket = slow_s3.direct.bucket
    proxy.reset()
    client.put_object(Bucket=bucket, Key="a/x", Body=b"0123456789")
    assert client.get_object(Bucket=bucket, Key="a/x", Range="bytes=2-4")["Body"].read() == b"234"
    client.head_object(Bucket=bucket, Key="a/x")
    client.list_objects_v2(Bucket=bucket, Prefix="a/")
    client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "a/x"}]})
    st = proxy.stats()
    assert st["ops"] == {"PUT": 1, "GET": 1, "HEAD": 1, "LIST": 1, "DELETE_OBJECTS": 1}
    assert st["requests"] == {"PUT": 1, "GET": 2, "HEAD": 1, "POST": 1}
    assert st["bytes_in"]["PUT"] == 10 and st["bytes_out"]["GET"] >= 3
    proxy.inject("slowdown", count=1, ops=["GET"])  # botocore retries a 503 SlowDown
    client.put_object(Bucket=bucket, Key="a/y", Body=b"y")
    assert client.get_object(Bucket=bucket, Key="a/y")["Body"].read() == b"y"
    assert proxy.stats()["faults"] == {"slowdown": 1}


def test_proxy_caps_bandwidth_both_ways(slow_s3: SlowS3) -> None:
    """With a bandwidth cap an upload's body and a download's answer each take at least their
    size over the rate (lower bounds only: pacing cannot make a transfer faster)."""
    import time

    import boto3

    proxy = slow_s3.proxy
    client = boto3.client("s3", endpoint_url=proxy.endpoint, aws_access_key_id="testing",
                          aws_secret_access_key="testing-secret", region_name="us-east-1")
    bucket, body = slow_s3.direct.bucket, bytes(range(256)) * 4096  # 1 MiB
    proxy.configure(bandwidth_bps=4 << 20)  # 4 MiB/s: 0.25 s a MiB
    try:
        t0 = time.perf_counter()
        client.put_object(Bucket=bucket, Key="bw/x", Body=body)
        put = time.perf_counter() - t0
        t0 = time.perf_counter()
        got = client.get_object(Bucket=bucket, Key="bw/x")["Body"].read()
        get = time.perf_counter() - t0
    finally:
        proxy.configure(bandwidth_bps=None)
    assert got == body
    assert put >= 0.25 and get >= 0.25, (put, get)
    assert proxy.stats()["bytes_in"]["PUT"] == len(body)


def test_proxy_resends_on_an_upstream_connection_closed_while_idle() -> None:
    """An upstream that closes a kept-alive connection while it is idle (Azurite does after 5
    s; no ``Connection: close`` in its answer) costs the proxy's client nothing: the next request
    is sent again on a new upstream connection and answered on the client's same connection.
    Before, the proxy dropped the client's connection, and azure-storage's retry waited ~15-20 s."""
    import http.client
    import socket
    import threading

    from tests.support.latency_store import LatencyProxy

    closed = threading.Semaphore(0)  # released once the upstream has closed a connection
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[int] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                accepted.append(1)
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(4096)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            closed.release()  # one answer a connection, then closed as an idle timeout would

    threading.Thread(target=serve, daemon=True).start()
    try:
        with LatencyProxy(f"http://127.0.0.1:{server.getsockname()[1]}") as proxy:
            client = http.client.HTTPConnection(proxy.endpoint.removeprefix("http://"), timeout=10)
            for path in ("/a", "/b", "/c"):
                client.request("GET", path)
                answer = client.getresponse()
                assert (answer.status, answer.read()) == (200, b"ok"), path
                assert closed.acquire(timeout=10)
            client.close()
            assert proxy.stats()["connections"] == 1  # the client's one connection served all three
        assert len(accepted) == 3
    finally:
        server.close()


def test_proxy_keeps_client_connections_alive(slow_s3: SlowS3, monkeypatch: pytest.MonkeyPatch) -> None:
    """moto's server closes every connection; the proxy keeps its client's open, as S3 does (a
    client then pays one connection for many requests, not one per request). Through s3fs,
    whose pool has a connection back as soon as its answer is read (obstore's pool takes it
    back on its own thread, so a read right after may open a second one: seen once in CI)."""
    from lance_spark_ops.io import obstore_reads

    monkeypatch.setenv(obstore_reads.CARRIER_ENV, "fsspec")
    store = ObjectStore(f"s3://{slow_s3.direct.bucket}/ka", slow_s3.options)
    store.write("x", b"0123456789")
    slow_s3.proxy.reset()
    for i in range(6):
        assert store.read_range("x", i, 2) == b"0123456789"[i:i + 2]
    st = slow_s3.proxy.stats()
    assert st["ops"] == {"GET": 6} and st["connections"] <= 1, st


def test_fragment_of_k_columns_in_two_requests(slow_s3: SlowS3) -> None:
    """A 6-column fragment of ~3 MB (footer not read with the data): one request for the footer
    (its size from the manifest), one round of coalesced page reads - not one per column; no
    HEAD. pylance reads the same table."""
    import lance

    uri = _write(slow_s3, "wide.lance", 100_000, 100_000, k=6)
    ds = Dataset.open(uri, storage_options=slow_s3.options)
    proxy = slow_s3.proxy
    proxy.reset()
    got = ds.to_table()
    data = _by_op(proxy.stats()["log"], "/data/")
    assert data == {"GET": 2}, data
    assert got.equals(lance.dataset(uri, storage_options=slow_s3.direct.options).to_table())
    proxy.reset()
    ds.to_table(columns=["c1", "s"])
    assert _by_op(proxy.stats()["log"], "/data/") == {"GET": 2}


def test_no_size_request_per_data_file(slow_s3: SlowS3) -> None:
    """Eight small fragments: each data file is one GET (read whole with its footer, the size
    from the manifest), no HEAD anywhere; a footer without a known size is one suffix GET."""
    uri = _write(slow_s3, "small.lance", 8_000, 1_000)
    proxy = slow_s3.proxy
    proxy.reset()
    Dataset.open(uri, storage_options=slow_s3.options).to_table()
    log = proxy.stats()["log"]
    assert _by_op(log, "/data/") == {"GET": 8}
    assert not any(op == "HEAD" for op, _, _ in log)
    store = ObjectStore(uri, slow_s3.options)
    name = store.list("data")[0]
    proxy.reset()
    size, tail = store.read_tail(f"data/{name}", 64 * 1024, 512 * 1024)
    assert size == len(tail) == ObjectStore(uri, slow_s3.direct.options).size(f"data/{name}")
    log = proxy.stats()["log"]
    assert [(op, rng) for op, _, rng in log] == [("GET", "bytes=-524288")]


def test_compaction_on_latency_store_checked_by_pylance(slow_s3: SlowS3) -> None:
    """Re-encode compaction of 8 fragments with deletions through the proxy: every data file
    read with one GET (prefetched whole), no HEAD, as many requests as pylance's compaction of
    a twin but two; pylance reads the same rows."""
    import lance

    counts = {}
    for side in ("ours", "pylance"):
        uri = _write(slow_s3, f"{side}.lance", 16_000, 2_000)
        lance.dataset(uri, storage_options=slow_s3.direct.options).delete("id % 7 = 0")
        expected = lance.dataset(uri, storage_options=slow_s3.direct.options).to_table().sort_by("id")
        slow_s3.proxy.reset()
        if side == "ours":
            m = compact(None, uri, target_rows_per_fragment=100_000, storage_options=slow_s3.options)
            assert m.fragments_removed == 8 and m.fragments_added == 1
        else:
            lance.dataset(uri, storage_options=slow_s3.options).optimize.compact_files(
                target_rows_per_fragment=100_000, num_threads=2)
        st = slow_s3.proxy.stats()
        counts[side] = st["total"]
        if side == "ours":
            assert _by_op(st["log"], "/data/") == {"GET": 8, "PUT": 1}
            assert _by_op(st["log"], "/_deletions/") == {"GET": 8}
            assert st["ops"].get("HEAD", 0) == 0
        after = lance.dataset(uri, storage_options=slow_s3.direct.options)
        assert len(after.get_fragments()) == 1
        assert after.to_table().sort_by("id").equals(expected)
    # + the task's read of its manifest slice (executors are other processes) and the job's
    # sweep (a LIST of data/) for files of failed task attempts
    assert counts["ours"] <= counts["pylance"] + 2, counts


def test_small_budget_reads_each_file_once(slow_s3: SlowS3, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 16 MiB budget (parts of 5 MiB, a 6 MiB prefetch keeping 3 MiB of files in use): the
    runs of small fragments decoded together stay within those 3 MiB, so no file is dropped
    while its run reads it - each data and deletion file is one GET (runs as large as
    ``batch_rows`` allows, ~4.8 MB here, made 18 GETs of the 12 data files); pylance reads the
    rows."""
    import lance

    from lance_spark_ops.io.budget import MIB, io_budget

    monkeypatch.setenv("LSO_IO_MAX_BYTES", str(16 * MIB))
    monkeypatch.delenv("LSO_IO_PART_BYTES", raising=False)
    assert io_budget(local=False).part_bytes == 5 * MIB
    n, per = 120_000, 10_000
    rng = np.random.default_rng(5)
    vec = rng.standard_normal((n, 16), dtype=np.float32)
    table = pa.table({"id": np.arange(n, dtype=np.int64), "x": rng.standard_normal(n),
                      "v": pa.FixedSizeListArray.from_arrays(pa.array(vec.ravel()), 16)})
    uri = slow_s3.uri("budget16.lance")
    so = slow_s3.direct.options
    lance.write_dataset(table, uri, storage_options=so, max_rows_per_file=per, data_storage_version="2.1")
    lance.dataset(uri, storage_options=so).delete("id % 11 = 0")
    expected = lance.dataset(uri, storage_options=so).to_table().sort_by("id")
    slow_s3.proxy.reset()
    m = compact(None, uri, target_rows_per_fragment=10**6, storage_options=slow_s3.options)
    assert m.fragments_removed == n // per and m.fragments_added == 1
    log = slow_s3.proxy.stats()["log"]
    assert _by_op(log, "/data/")["GET"] == n // per, _by_op(log, "/data/")
    assert _by_op(log, "/_deletions/") == {"GET": n // per}
    assert lance.dataset(uri, storage_options=so).to_table().sort_by("id").equals(expected)


def test_vacuum_deletes_in_batches(slow_s3: SlowS3) -> None:
    """Removing 20 old versions: the unreferenced files and manifests go in DeleteObjects calls
    (one per delete task), never one DELETE per object; pylance then sees one version."""
    import lance

    uri = _write(slow_s3, "vac.lance", 200, 100)
    so = slow_s3.direct.options
    for i in range(20):
        lance.write_dataset(_table(10, 1000 + 10 * i), uri, mode="append", storage_options=so)
    lance.dataset(uri, storage_options=so).optimize.compact_files(target_rows_per_fragment=10_000)
    expected = lance.dataset(uri, storage_options=so).to_table().sort_by("id")
    slow_s3.proxy.reset()
    m = vacuum(None, uri, older_than=timedelta(0), delete_unverified=True, storage_options=slow_s3.options)
    ops = slow_s3.proxy.stats()["ops"]
    assert m.failed_deletes == 0 and len(m.removed_paths) >= 40
    assert ops.get("DELETE", 0) == 0 and 1 <= ops["DELETE_OBJECTS"] <= 2, ops
    assert ops.get("HEAD", 0) == 0, ops  # absent prefixes (_refs/tags ...) are listings, not HEADs
    after = lance.dataset(uri, storage_options=slow_s3.direct.options)
    assert len(after.versions()) == 1 and after.to_table().sort_by("id").equals(expected)


def test_cleanup_lists_once_and_deletes_in_batches(slow_s3: SlowS3) -> None:
    """A failed job's unreferenced files, sidecar directories among them, and an index build's
    scratch directory go by listings and DeleteObjects: no HEAD, no DELETE per object."""
    from lance_spark_ops.spark.runtime.job import Job

    store = ObjectStore(f"s3://{slow_s3.direct.bucket}/cleanup", slow_s3.options)
    job = Job(None, "demo", store.uri(""))
    mine = [f"{job.job_id}-t{i}-a0-u.lance" for i in range(6)]
    for name in [*mine, "other.lance"]:
        store.write(f"data/{name}", b"x")
    for i in range(3):  # a sidecar directory of one of them
        store.write(f"data/{mine[0][:-len('.lance')]}/{i}.blob", b"b")
    for i in range(5):
        store.write(f"_indices/scratch/part-{i}", b"p")
    slow_s3.proxy.reset()
    assert job.delete_unreferenced(store, {mine[5]}) == 6  # five files and the sidecar
    store.delete_tree("_indices/scratch")
    store.delete_tree("_indices/absent")
    ops = slow_s3.proxy.stats()["ops"]
    assert ops == {"LIST": 4, "DELETE_OBJECTS": 2}, ops
    assert store.find_rel("") == sorted(["data/other.lance", f"data/{mine[5]}"])


def _carrier(monkeypatch: pytest.MonkeyPatch, carrier: str) -> list[str]:
    """Uploads through ``carrier`` (obstore, or s3fs with ``LSO_IO_CARRIER=fsspec``); the names
    of the S3 calls s3fs makes from now on (obstore's parts must not be among them)."""
    import s3fs

    from lance_spark_ops.io import obstore_reads

    if carrier == "fsspec":
        monkeypatch.setenv(obstore_reads.CARRIER_ENV, "fsspec")
    asked: list[str] = []
    real = s3fs.S3FileSystem._call_s3

    async def counted(self, method, *a, **kw):  # type: ignore[no-untyped-def]
        asked.append(method)
        return await real(self, method, *a, **kw)

    monkeypatch.setattr(s3fs.S3FileSystem, "_call_s3", counted)
    return asked


def _no_uploads_left(slow: SlowS3) -> bool:
    return not slow.direct.client().list_multipart_uploads(Bucket=slow.direct.bucket).get("Uploads")


@pytest.mark.parametrize("carrier", ["obstore", "fsspec"])
def test_multipart_upload_and_discard(slow_s3: SlowS3, monkeypatch: pytest.MonkeyPatch, carrier: str) -> None:
    """An output above one part uploads as a multipart upload whose parts go out while the
    writer goes on, through obstore where it carries the options (s3fs makes none of its
    calls) or s3fs; ``discard`` aborts it and leaves no object and no upload."""
    from lance_spark_ops.io.obstore_writes import ObstoreUpload
    from lance_spark_ops.io.remote import S3Upload

    monkeypatch.setenv("LSO_IO_PART_BYTES", str(5 << 20))
    asked = _carrier(monkeypatch, carrier)
    store = ObjectStore(slow_s3.uri(f"mp-{carrier}"), slow_s3.options)
    bodies: list[str] = []  # what each part's request carries as its body, as sent
    store.fs.connect()  # s3fs caches filesystems: this one's client may exist already

    def sent(request: object, **_kw: object) -> None:
        bodies.append(type(request.body).__name__)  # type: ignore[attr-defined]

    store.fs.s3.meta.events.register("before-send.s3.UploadPart", sent)
    payload = np.random.default_rng(0).integers(0, 255, 23 << 20, dtype=np.uint8).tobytes()
    slow_s3.proxy.reset()
    out = store.open_output("big.bin")
    assert type(out) is (ObstoreUpload if carrier == "obstore" else S3Upload)
    for i in range(0, len(payload), 1 << 20):
        out.write(payload[i:i + (1 << 20)])
    out.close()
    ops = slow_s3.proxy.stats()["ops"]
    assert ops == {"CREATE_MPU": 1, "PUT_PART": 5, "COMPLETE_MPU": 1}, ops
    assert out.parts_uploaded == 5
    store.fs.s3.meta.events.unregister("before-send.s3.UploadPart", sent)
    if carrier == "fsspec":
        # one buffer per part, not a stream botocore and aiohttp copy in small chunks holding the GIL
        assert bodies == ["PartBody"] * 5, bodies  # a bytearray: botocore sends it as it is (no BytesIO)
        assert asked.count("upload_part") == 5
    else:
        assert bodies == [] and asked == [], asked
    assert ObjectStore(slow_s3.uri(f"mp-{carrier}"), slow_s3.direct.options).read("big.bin") == payload
    out = store.open_output("gone.bin")
    out.write(payload)
    out.discard()
    assert ObjectStore(slow_s3.uri(f"mp-{carrier}"), slow_s3.direct.options).list("") == ["big.bin"]
    assert _no_uploads_left(slow_s3)
    small = store.open_output("small.bin")  # at most one part: one PUT, no multipart upload
    slow_s3.proxy.reset()
    small.write(payload[:1000])
    small.close()
    # this object's requests only: a part of the discarded upload whose body the closed
    # connection had buffered may still reach the proxy (the server refuses it: no upload)
    assert _by_op(slow_s3.proxy.stats()["log"], "/small.bin") == {"PUT": 1}
    direct = ObjectStore(slow_s3.uri(f"mp-{carrier}"), slow_s3.direct.options)
    assert direct.read("small.bin") == payload[:1000]
    # two parts' worth is one PUT too (the first full part waits for a third); given up, nothing
    two, held = store.open_output("two.bin"), store.open_output("held.bin")
    slow_s3.proxy.reset()
    for i in range(0, 10 << 20, 1 << 20):
        two.write(payload[i:i + (1 << 20)])
        held.write(payload[i:i + (1 << 20)])
    two.close()
    held.discard()
    log = slow_s3.proxy.stats()["log"]
    assert _by_op(log, "/two.bin") == {"PUT": 1} and _by_op(log, "/held.bin") == {}
    assert direct.read("two.bin") == payload[:10 << 20]
    assert "held.bin" not in direct.list("")


@pytest.mark.parametrize("carrier", ["obstore", "fsspec"])
def test_multipart_parts_retried_after_slowdowns_and_resets(slow_s3: SlowS3, monkeypatch: pytest.MonkeyPatch,
                                                          carrier: str) -> None:
    """A part answered 503 SlowDown, or whose connection is reset after the server got it, is
    sent again whole: the object is the payload."""
    monkeypatch.setenv("LSO_IO_PART_BYTES", str(5 << 20))
    _carrier(monkeypatch, carrier)
    store = ObjectStore(slow_s3.uri(f"mpr-{carrier}"), slow_s3.options)
    payload = np.random.default_rng(3).integers(0, 255, 16 << 20, dtype=np.uint8).tobytes()
    slow_s3.proxy.reset()
    slow_s3.proxy.inject("slowdown", count=2, ops=["PUT_PART"])
    slow_s3.proxy.inject("reset", count=1, ops=["PUT_PART"], forward=True)
    out = store.open_output("big.bin")
    for i in range(0, len(payload), 3 << 20):
        out.write(payload[i:i + (3 << 20)])
    out.close()
    st = slow_s3.proxy.stats()
    assert st["faults"] == {"slowdown": 2, "reset": 1}
    assert st["ops"]["PUT_PART"] == 4 + 3, st["ops"]
    assert ObjectStore(slow_s3.uri(f"mpr-{carrier}"), slow_s3.direct.options).read("big.bin") == payload


def _closes_as_landed(out: object, direct: ObjectStore, payload: bytes, landed: bool, named: str) -> None:
    """``out`` (holding ``payload`` as ``big.bin``) closes when its completion landed, and the
    object is the payload; else close fails with a LanceError naming the object (its path ends
    with ``named``), and none is left."""
    from lance_spark_ops.errors import LanceError

    if landed:
        out.close()  # type: ignore[attr-defined]
        assert direct.read("big.bin") == payload
    else:
        with pytest.raises(LanceError) as e:
            out.close()  # type: ignore[attr-defined]
        assert e.value.path is not None and e.value.path.endswith(named)
        assert direct.list("") == []


@pytest.mark.parametrize("landed", [True, False])
def test_multipart_completion_answered_no_such_upload(slow_s3: SlowS3, monkeypatch: pytest.MonkeyPatch,
                                                      landed: bool) -> None:
    """S3 answers a retried CompleteMultipartUpload whose first try landed (its answer lost) with
    NoSuchUpload, which s3fs raises as a bare FileNotFoundError (moto completes twice, so the
    answer is simulated): the object with this upload's ETag is the upload's, and close
    succeeds; without it close fails with a LanceError naming the object, not FileNotFoundError."""
    from lance_spark_ops.io import remote

    monkeypatch.setenv("LSO_IO_PART_BYTES", str(5 << 20))
    _carrier(monkeypatch, "fsspec")
    call = remote.S3Upload._call

    async def completes_then_lost(self, method, **kwargs):  # type: ignore[no-untyped-def]
        if method == "complete_multipart_upload":
            if landed:
                await call(self, method, **kwargs)
            raise FileNotFoundError(f"NoSuchUpload: {self.path}")
        return await call(self, method, **kwargs)

    monkeypatch.setattr(remote.S3Upload, "_call", completes_then_lost)
    store = ObjectStore(slow_s3.uri("mp"), slow_s3.options)
    payload = np.random.default_rng(2).integers(0, 255, 12 << 20, dtype=np.uint8).tobytes()
    out = store.open_output("big.bin")
    out.write(payload)
    direct = ObjectStore(slow_s3.uri("mp"), slow_s3.direct.options)
    _closes_as_landed(out, direct, payload, landed, "mp/big.bin")
    assert _no_uploads_left(slow_s3)  # a failed completion's upload is aborted


@pytest.mark.parametrize("landed", [True, False])
def test_obstore_completion_answered_no_such_upload(slow_s3: SlowS3, monkeypatch: pytest.MonkeyPatch,
                                                    landed: bool) -> None:
    """The same through obstore, S3's answer given by the proxy: the completion lands and is
    answered 404 NoSuchUpload, and the object under the (fresh) key with every byte written is
    the upload's: close succeeds; answered so without landing, close fails with a LanceError
    naming the object and no object is left."""
    from lance_spark_ops.io.obstore_writes import ObstoreUpload

    monkeypatch.setenv("LSO_IO_PART_BYTES", str(5 << 20))
    _carrier(monkeypatch, "obstore")
    store = ObjectStore(slow_s3.uri(f"mpo-{landed}"), slow_s3.options)
    payload = np.random.default_rng(2).integers(0, 255, 12 << 20, dtype=np.uint8).tobytes()
    slow_s3.proxy.reset()
    slow_s3.proxy.inject("nosuchupload", count=1, ops=["COMPLETE_MPU"], forward=landed)
    out = store.open_output("big.bin")
    assert type(out) is ObstoreUpload
    out.write(payload)
    direct = ObjectStore(slow_s3.uri(f"mpo-{landed}"), slow_s3.direct.options)
    _closes_as_landed(out, direct, payload, landed, "/big.bin")
    assert slow_s3.proxy.stats()["faults"] == {"nosuchupload": 1}
    assert _no_uploads_left(slow_s3)  # obstore's writer aborts the upload its completion failed


def _faulty_compaction(slow: SlowS3, name: str, faults: list[dict], extra: dict | None = None) -> dict:
    import lance

    uri = _write(slow, name, 12_000, 2_000)
    lance.dataset(uri, storage_options=slow.direct.options).delete("id % 5 = 0")
    expected = lance.dataset(uri, storage_options=slow.direct.options).to_table().sort_by("id")
    slow.proxy.reset()
    for f in faults:
        slow.proxy.inject(**f)
    compact(None, uri, target_rows_per_fragment=100_000, storage_options={**slow.options, **(extra or {})})
    st = slow.proxy.stats()
    after = lance.dataset(uri, storage_options=slow.direct.options)
    assert after.to_table().sort_by("id").equals(expected)  # 0 rows lost
    assert len(after.get_fragments()) == 1
    return st


def test_compaction_through_slowdowns_and_resets(slow_s3: SlowS3) -> None:
    """503 SlowDown on data and deletion reads, a reset after a data read was served, a reset
    of a part upload before it reached the server: retried; the result is pylance's."""
    st = _faulty_compaction(slow_s3, "faults.lance", [
        {"kind": "slowdown", "count": 3, "ops": ["GET"], "path_contains": "/data/"},
        {"kind": "slowdown", "count": 2, "ops": ["GET"], "path_contains": "/_deletions/"},
        {"kind": "reset", "count": 1, "ops": ["GET"], "path_contains": "/data/", "forward": True},
        {"kind": "slowdown", "count": 1, "ops": ["PUT"], "path_contains": "/_transactions/"},
    ])
    assert st["faults"] == {"slowdown": 6, "reset": 1}


@pytest.mark.slow
@pytest.mark.parametrize("faults", [
    [{"kind": "timeout", "count": 2, "ops": ["GET"], "path_contains": "/data/", "hold_s": 3.0}],
    [{"kind": "reset", "count": 4, "ops": ["GET"], "path_contains": "/data/"}],
    [{"kind": "reset", "count": 1, "ops": ["PUT"], "path_contains": "/data/", "forward": True}],
    [{"kind": "slowdown", "count": 3, "ops": ["LIST"]}, {"kind": "slowdown", "count": 2, "ops": ["PUT"]}],
])
def test_compaction_through_more_faults(slow_s3: SlowS3, faults: list[dict]) -> None:
    timeouts = {"config_kwargs": {"read_timeout": 1, "connect_timeout": 1}}  # s3fs's own: held -> retried
    st = _faulty_compaction(slow_s3, "more.lance", faults, timeouts)
    assert sum(st["faults"].values()) == sum(f["count"] for f in faults)


def test_prefetch_holds_only_what_is_ahead(slow_s3: SlowS3, monkeypatch: pytest.MonkeyPatch) -> None:
    """A prefetch of 12 objects of 1 MiB within a 4 MiB share: never more held than the share,
    each object fetched with one GET, the released ones dropped at once (their room goes to
    the next), one released before its fetch started never fetched."""
    from lance_spark_ops.io.budget import prefetch_share, upload_share

    monkeypatch.setenv("LSO_IO_MAX_BYTES", str(8 << 20))
    monkeypatch.setenv("LSO_IO_PART_BYTES", str(5 << 20))
    rng = np.random.default_rng(1)
    blobs = {f"o{i:02d}": rng.integers(0, 255, 1 << 20, dtype=np.uint8).tobytes() for i in range(12)}
    writer = ObjectStore(slow_s3.uri("pf"), slow_s3.direct.options)
    for name, data in blobs.items():
        writer.write(name, data)
    store = ObjectStore(slow_s3.uri("pf"), slow_s3.options)
    assert upload_share(store.budget) == 10 << 20  # two parts: the prefetch gets what is left
    monkeypatch.setenv("LSO_IO_MAX_BYTES", str(14 << 20))
    store = ObjectStore(slow_s3.uri("pf"), slow_s3.options)
    slow_s3.proxy.reset()
    store.prefetch([(n, len(b)) for n, b in blobs.items()])
    p = store._prefetcher  # noqa: SLF001 - the bound is the point
    assert p.max_bytes == prefetch_share(store.budget) == 4 << 20
    names = list(blobs)
    store.release([names[-1]])  # the task will not read it after all
    for name in names[:-1]:
        assert p._bytes <= p.max_bytes  # noqa: SLF001
        assert bytes(store.read(name)) == blobs[name]
        store.release([name])
        assert name not in p._held  # noqa: SLF001
    assert _by_op(slow_s3.proxy.stats()["log"], "/pf/") == {"GET": 11}
    store.stop_prefetch()


def test_upload_window_within_its_share() -> None:
    """An upload's parts in flight and the part being filled fit in its share of
    the byte budget, at least one part in flight, at most one per request."""
    from lance_spark_ops.io.budget import MIB, IOBudget, upload_share, upload_window

    for max_bytes, part, window in [(128 * MIB, 8 * MIB, 7), (32 * MIB, 8 * MIB, 1), (1 << 30, 8 * MIB, 32),
                                    (16 * MIB, 5 * MIB, 1), (64 * MIB, 5 * MIB, 5)]:
        b = IOBudget(32, max_bytes, part)
        assert upload_window(b) == window
        assert (window + 1) * part <= upload_share(b) <= max(max_bytes // 2, 2 * part)


@pytest.mark.parametrize("carrier", ["obstore", "fsspec"])
def test_prefetch_carrier(slow_s3: SlowS3, monkeypatch: pytest.MonkeyPatch, carrier: str) -> None:
    """A rewrite task's prefetch fetches its data and deletion files through obstore (Rust
    threads, off the GIL) unless ``LSO_IO_CARRIER=fsspec``; either way each file is one GET
    (nothing read twice) and pylance reads the rows it read. obstore's buffers are kept as
    they came (a view, not a copy)."""
    import lance

    from lance_spark_ops.io import obstore_reads

    if carrier == "fsspec":
        monkeypatch.setenv(obstore_reads.CARRIER_ENV, "fsspec")
    through: list[str] = []
    held: set[str] = set()  # what the fetched objects' bytes are: views of obstore's buffers, no copy
    real = obstore_reads.S3Reader.read_many

    async def spy(self: obstore_reads.S3Reader, items: list, budget: object) -> object:
        through.extend(p for p, _, _ in items)
        got = await real(self, items, budget)
        held.update(type(getattr(g, "obj", g)).__name__ for g in got)
        return got

    monkeypatch.setattr(obstore_reads.S3Reader, "read_many", spy)
    uri = _write(slow_s3, f"carrier-{carrier}.lance", 16_000, 2_000)
    lance.dataset(uri, storage_options=slow_s3.direct.options).delete("id % 5 = 0")
    expected = lance.dataset(uri, storage_options=slow_s3.direct.options).to_table().sort_by("id")
    slow_s3.proxy.reset()
    compact(None, uri, target_rows_per_fragment=100_000, storage_options=slow_s3.options)
    log = slow_s3.proxy.stats()["log"]
    assert _by_op(log, "/data/") == {"GET": 8, "PUT": 1}
    assert _by_op(log, "/_deletions/") == {"GET": 8}
    if carrier == "obstore":
        assert sum("/data/" in p for p in through) == 8 and sum("/_deletions/" in p for p in through) == 8
        assert held == {"Bytes"}, held
    else:
        assert through == []
    after = lance.dataset(uri, storage_options=slow_s3.direct.options)
    assert after.to_table().sort_by("id").equals(expected)


@pytest.mark.parametrize("carrier", ["obstore", "fsspec"])
def test_multipart_bodies_reused_and_bytes_exact(slow_s3: SlowS3, monkeypatch: pytest.MonkeyPatch,
                                                 carrier: str) -> None:
    """With one part in flight at a time, a part's body is filled again once its upload is
    over (no new buffer per part), and the object holds exactly the bytes written, whatever
    the sizes of the writes."""
    from lance_spark_ops.io import remote

    monkeypatch.setenv("LSO_IO_PART_BYTES", str(5 << 20))
    monkeypatch.setenv("LSO_IO_MAX_BYTES", str(16 << 20))  # upload share 10 MiB: one part in flight
    _carrier(monkeypatch, carrier)
    remote.KEPT_BODIES.clear()
    made: list[int] = []  # bodies the uploads asked for that none of theirs could serve again
    take = remote.KEPT_BODIES.take
    monkeypatch.setattr(remote.KEPT_BODIES, "take", lambda size: made.append(size) or take(size))
    store = ObjectStore(slow_s3.uri(f"mp2-{carrier}"), slow_s3.options)
    store.fs.connect()
    bodies: list[object] = []  # held: a freed body's id could come back for a new one

    def sent(request: object, **_kw: object) -> None:
        bodies.append(request.body)  # type: ignore[attr-defined]

    store.fs.s3.meta.events.register("before-send.s3.UploadPart", sent)
    rng = np.random.default_rng(1)
    payload = rng.integers(0, 255, (37 << 20) + 12345, dtype=np.uint8).tobytes()
    slow_s3.proxy.reset()
    out = store.open_output("odd.bin")
    at = 0
    while at < len(payload):  # writes of odd sizes, some larger than a part
        n = int(rng.integers(1, 12 << 20))
        out.write(payload[at:at + n])
        at += n
    out.close()
    store.fs.s3.meta.events.unregister("before-send.s3.UploadPart", sent)
    assert slow_s3.proxy.stats()["ops"]["PUT_PART"] == 8
    if carrier == "fsspec":
        assert len(bodies) == 8, len(bodies)
        assert len({id(b) for b in bodies}) <= 3  # the part being filled, one spare, the last part
    # obstore: the part in flight, the one waiting for it, the one being filled
    assert len(made) <= 3, made
    remote.KEPT_BODIES.clear()
    assert ObjectStore(slow_s3.uri(f"mp2-{carrier}"), slow_s3.direct.options).read("odd.bin") == payload


@pytest.mark.parametrize("carrier", ["obstore", "fsspec"])
def test_direct_ranged_reads_carrier(slow_s3: SlowS3, monkeypatch: pytest.MonkeyPatch, carrier: str) -> None:
    """A scan's footer and page reads (not prefetched) go through obstore, off the GIL, unless
    ``LSO_IO_CARRIER=fsspec``: s3fs is not asked for them, the requests are the same either
    way and pylance reads the same rows. A read obstore cannot serve (a missing object) falls
    back to s3fs and fails typed, naming the object."""
    import lance
    import s3fs

    from lance_spark_ops.errors import NotFoundError
    from lance_spark_ops.io import obstore_reads

    if carrier == "fsspec":
        monkeypatch.setenv(obstore_reads.CARRIER_ENV, "fsspec")
    uri = _write(slow_s3, f"direct-{carrier}.lance", 100_000, 100_000, k=6)
    asked: list[str] = []
    real = s3fs.S3FileSystem._call_s3

    async def spy(self: s3fs.S3FileSystem, method: str, *a: object, **k: object) -> object:
        asked.append(f"{method} {k.get('Key', '')}")
        return await real(self, method, *a, **k)

    monkeypatch.setattr(s3fs.S3FileSystem, "_call_s3", spy)
    ds = Dataset.open(uri, storage_options=slow_s3.options)
    slow_s3.proxy.reset()
    got = ds.to_table()
    assert _by_op(slow_s3.proxy.stats()["log"], "/data/") == {"GET": 2}
    through_s3fs = [p for p in asked if p.startswith("get_object") and "/data/" in p]
    assert (through_s3fs == []) == (carrier == "obstore"), through_s3fs
    assert got.equals(lance.dataset(uri, storage_options=slow_s3.direct.options).to_table())
    store = ObjectStore(uri, slow_s3.options)
    with pytest.raises(NotFoundError, match="missing.lance"):
        store.read_ranges("data/missing.lance", [(0, 10), (4096, 10)])
    with pytest.raises(NotFoundError, match="missing.lance"):
        store.read_range("data/missing.lance", 0, 10)
