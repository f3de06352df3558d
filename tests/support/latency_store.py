"""A latency-faithful S3 store for tests and benches: ``moto_server`` on 127.0.0.1 behind a
loopback HTTP proxy that holds each request N ms, optionally caps bandwidth per connection
(answers and request bodies alike), counts requests and bytes by method and S3 operation, and
injects faults (503 SlowDown, timeouts, connection resets).

Clients (s3fs in our executors, pylance's object_store) point ``aws_endpoint`` at the proxy.
The proxy answers its own control requests under ``/__latency__/`` (JSON: ``stats``,
``reset``, ``config``, ``fault``), so a proxy in another process (the bench runs it in a
subprocess, away from the GIL of the process it measures) is driven the same way as one in a
thread of the test process.

>>> with MotoServer() as moto, LatencyProxy(moto.endpoint, delay_ms=20) as proxy:  # doctest: +SKIP
...     ...  # point clients at proxy.endpoint
...     proxy.stats()["ops"]["GET"]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import struct
import sys
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.support.processes import ChildServer, free_port, serve_until_terminated

CONTROL = "/__latency__/"
KEY_BUFFER_BYTES = 1 << 30  # MotoServer's objects stay in memory up to this size
READY_SECONDS = 30.0
_SLOWDOWN = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
             b"<Message>Please reduce your request rate.</Message></Error>")
FAULT_KINDS = ("slowdown", "timeout", "reset")
PACED_MIN_BYTES = 16384  # smaller transfers (headers, small answers) are not paced by the cap
# not drawn by the fault harness: S3's answer to a retried CompleteMultipartUpload whose first try
# landed (moto completes twice), given here to the first try after it was forwarded
_NO_SUCH_UPLOAD = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>NoSuchUpload</Code>'
                   b"<Message>The specified upload does not exist.</Message></Error>")
# S3's answer to a request its credentials or the bucket's policy do not allow (not forwarded)
_ACCESS_DENIED = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
                  b"<Message>Access Denied</Message></Error>")
ANSWER_KINDS = ("nosuchupload", "accessdenied")


def _answer_404() -> bytes:
    return (b"HTTP/1.1 404 Not Found\r\nContent-Type: application/xml\r\nContent-Length: %d\r\n\r\n%s"
            % (len(_NO_SUCH_UPLOAD), _NO_SUCH_UPLOAD))


def _answer_403() -> bytes:
    return (b"HTTP/1.1 403 Forbidden\r\nContent-Type: application/xml\r\nContent-Length: %d\r\n\r\n%s"
            % (len(_ACCESS_DENIED), _ACCESS_DENIED))


def classify(method: str, target: str, headers: dict[str, str]) -> str:
    """The S3 operation of a request: LIST, GET, HEAD, PUT, PUT_PART, COPY, CREATE_MPU,
    COMPLETE_MPU, ABORT_MPU, DELETE_OBJECTS (batched), DELETE, or the method (GCS's and Azure's
    listings are LIST too)."""
    parts = urlsplit(target)
    query = parse_qs(parts.query, keep_blank_values=True)
    key = parts.path.lstrip("/").partition("/")[2]
    if method == "GET":
        gcs_list = parts.path.startswith("/storage/v1/b/") and parts.path.endswith("/o")
        if gcs_list or query.get("comp") == ["list"]:  # GCS's JSON-API objects.list, Azure's List Blobs
            return "LIST"
        return "LIST" if not key or "list-type" in query or "uploads" in query else "GET"
    if method == "HEAD":
        return "HEAD"
    if method == "PUT":
        if "x-amz-copy-source" in headers:
            return "COPY"
        return "PUT_PART" if "partNumber" in query else "PUT"
    if method == "POST":
        if "delete" in query:
            return "DELETE_OBJECTS"
        if "uploads" in query:
            return "CREATE_MPU"
        if "uploadId" in query:
            return "COMPLETE_MPU"
        return "POST"
    if method == "DELETE":
        return "ABORT_MPU" if "uploadId" in query else "DELETE"
    return method


@dataclass
class Fault:
    """The next ``count`` requests whose operation is in ``ops`` (any when empty) and whose
    path contains ``path_contains`` get ``kind``: ``slowdown`` (a 503 SlowDown answer, the
    request not forwarded), ``timeout`` (no answer: the connection is held ``hold_s`` and then
    reset; forwarded first when ``forward``), ``reset`` (the connection reset, RST; forwarded
    first when ``forward``: an ambiguous failure), ``accessdenied`` (a 403 AccessDenied answer,
    not forwarded) or ``nosuchupload`` (a 404 NoSuchUpload answer:
    with ``forward``, after the request was forwarded - S3's answer to a completion retried
    after its first try landed; without, a multipart upload that is gone)."""

    kind: str
    count: int = 1
    ops: tuple[str, ...] = ()
    path_contains: str = ""
    hold_s: float = 30.0
    forward: bool = False
    body_contains: str = ""  # and whose body holds this (a GCS upload names its object there)

    def matches(self, op: str, path: str, body: bytes = b"") -> bool:
        return (self.count > 0 and (not self.ops or op in self.ops) and self.path_contains in path
                and (not self.body_contains or self.body_contains.encode() in body))


@dataclass
class _Stats:
    requests: Counter = field(default_factory=Counter)  # by method
    ops: Counter = field(default_factory=Counter)  # by S3 operation
    bytes_in: Counter = field(default_factory=Counter)  # request bodies, by method
    bytes_out: Counter = field(default_factory=Counter)  # response bodies, by method
    faults: Counter = field(default_factory=Counter)
    log: list = field(default_factory=list)  # (op, path, range header) per request, when logging
    # when logging: [op, path, range, start, end] per request, wall-clock seconds (a timeline)
    timeline: list = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    connections: int = 0  # client connections accepted (a client that keeps them alive opens few)

    def as_dict(self) -> dict[str, Any]:
        return {"requests": dict(self.requests), "ops": dict(self.ops), "bytes_in": dict(self.bytes_in),
                "bytes_out": dict(self.bytes_out), "faults": dict(self.faults),
                "total": sum(self.requests.values()), "max_in_flight": self.max_in_flight,
                "connections": self.connections,
                "log": list(self.log), "timeline": list(self.timeline)}


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    """A message body by Content-Length or chunked transfer coding (returned as received)."""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        out = bytearray()
        while True:
            line = await reader.readuntil(b"\r\n")
            out += line
            n = int(line.split(b";")[0].strip(), 16)
            if n == 0:
                while True:  # trailers, then the empty line
                    t = await reader.readuntil(b"\r\n")
                    out += t
                    if t == b"\r\n":
                        return bytes(out)
            out += await reader.readexactly(n + 2)
    n = int(headers.get("content-length", "0") or 0)
    return await reader.readexactly(n) if n else b""


def _parse_head(head: bytes) -> tuple[str, dict[str, str], list[tuple[str, str]]]:
    lines = head.decode("latin-1").split("\r\n")
    raw = [tuple(x.strip() for x in line.split(":", 1)) for line in lines[1:] if ":" in line]
    return lines[0], {k.lower(): v for k, v in raw}, raw  # type: ignore[misc]


def _kept_alive(rhead: bytes) -> bytes:
    """A response head for the client without the upstream's ``Connection: close``: moto's
    server (werkzeug) closes every connection, S3 keeps them open, and so does the proxy towards
    its client (it reconnects upstream per request instead). The body must be delimited."""
    lines = rhead[:-4].split(b"\r\n")
    kept = [ln for ln in lines[1:] if ln.split(b":", 1)[0].strip().lower() != b"connection"]
    return b"\r\n".join([lines[0], *kept]) + b"\r\n\r\n"


def _body_of_response(status: int, method: str) -> bool:
    return method != "HEAD" and status not in (204, 304) and not 100 <= status < 200


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST (SO_LINGER 0), as a dropped connection looks to the client."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()


class LatencyProxy:
    """The proxy, run on an asyncio loop in a daemon thread of this process. ``start()``
    returns once it listens; ``stop()`` closes it and every connection (held ones too)."""

    def __init__(self, upstream: str, delay_ms: float = 0.0, bandwidth_bps: float | None = None,
                 port: int = 0, log: bool = False) -> None:
        up = urlsplit(upstream)
        self.upstream = (up.hostname or "127.0.0.1", int(up.port or 80))
        self.delay_ms = float(delay_ms)
        self.bandwidth_bps = bandwidth_bps
        self.logging = log
        self._port = port
        self._stats = _Stats()
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    # -- lifecycle -------------------------------------------------------
    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LatencyProxy:
        ready = threading.Event()
        failed: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                self._server = loop.run_until_complete(
                    asyncio.start_server(self._handle, "127.0.0.1", self._port, backlog=512))
                self.port = self._server.sockets[0].getsockname()[1]
            except BaseException as e:  # noqa: BLE001 - reported to start()
                failed.append(e)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=run, name="latency-proxy", daemon=True)
        self._thread.start()
        ready.wait()
        if failed:
            raise failed[0]
        return self

    def stop(self) -> None:
        loop = self._loop
        if loop is None or self._thread is None:
            return

        async def shut() -> None:
            assert self._server is not None
            self._server.close()
            for w in list(self._writers):
                w.transport.abort()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(shut(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(timeout=10)
        self._loop = None

    def __enter__(self) -> LatencyProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- control (same calls as ProxyClient) -------------------------------
    def stats(self) -> dict[str, Any]:
        with self._lock:
            return json.loads(json.dumps(self._stats.as_dict()))

    def reset(self) -> None:
        with self._lock:
            self._stats = _Stats()
            self._faults = []

    def configure(self, delay_ms: float | None = None, bandwidth_bps: float | None = -1,
                  log: bool | None = None) -> None:
        with self._lock:
            if delay_ms is not None:
                self.delay_ms = float(delay_ms)
            if bandwidth_bps != -1:
                self.bandwidth_bps = bandwidth_bps
            if log is not None:
                self.logging = log

    def inject(self, kind: str, count: int = 1, ops: tuple[str, ...] | list[str] = (),
               path_contains: str = "", hold_s: float = 30.0, forward: bool = False,
               body_contains: str = "") -> None:
        if kind not in FAULT_KINDS + ANSWER_KINDS:
            raise ValueError(f"fault kind must be one of {FAULT_KINDS + ANSWER_KINDS}")
        with self._lock:
            self._faults.append(Fault(kind, count, tuple(ops), path_contains, hold_s, forward, body_contains))

    def _control(self, target: str, body: bytes) -> dict[str, Any]:
        what = urlsplit(target).path[len(CONTROL):]
        args = json.loads(body) if body else {}
        if what == "stats":
            return self.stats()
        if what == "reset":
            self.reset()
        elif what == "config":
            self.configure(**args)
        elif what == "fault":
            self.inject(**args)
        else:
            raise ValueError(f"unknown control {what!r}")
        return {"ok": True}

    # -- the proxy ---------------------------------------------------------
    def _take_fault(self, op: str, path: str, body: bytes = b"") -> Fault | None:
        with self._lock:
            for f in self._faults:
                if f.matches(op, path, body):
                    f.count -= 1
                    self._stats.faults[f.kind] += 1
                    return f
        return None

    def _rate(self, n: int) -> float | None:
        """The capped rate a transfer of ``n`` bytes goes at (None: at once - no cap, or under
        ``PACED_MIN_BYTES``)."""
        bps = self.bandwidth_bps
        return bps if bps and n >= PACED_MIN_BYTES else None

    def _upload_seconds(self, n: int) -> float:
        """How long a request body of ``n`` bytes takes at the connection's capped rate."""
        bps = self._rate(n)
        return n / bps if bps else 0.0

    async def _send(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        bps = self._rate(len(data))
        if not bps:
            writer.write(data)
            await writer.drain()
            return
        chunk = max(PACED_MIN_BYTES, int(bps / 50))  # paced in ~20 ms slices
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        for i in range(0, len(data), chunk):
            # a slice is sent once the rate has carried it: the last byte arrives at size / rate
            piece = data[i:i + chunk]
            due = t0 + (i + len(piece)) / bps
            if due > loop.time():
                await asyncio.sleep(due - loop.time())
            writer.write(piece)
            await writer.drain()

    async def _forward(self, up: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None, request: bytes
                       ) -> tuple[tuple[asyncio.StreamReader, asyncio.StreamWriter], bytes]:
        """Send ``request`` upstream and read the answer's head; returns the connection used.
        A kept-alive upstream connection the server closed while idle (Azurite closes them after
        5 s) fails before any answer byte: the request is sent again on a new connection, as an
        HTTP client does with a stale pooled connection, and the client's connection stays up."""
        async def exchange(conn: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> bytes:
            conn[1].write(request)
            await conn[1].drain()
            return await conn[0].readuntil(b"\r\n\r\n")

        if up is not None:
            try:
                return up, await exchange(up)
            except (asyncio.IncompleteReadError, ConnectionError) as e:
                if isinstance(e, asyncio.IncompleteReadError) and e.partial:
                    raise  # the server answered part of it: not an idle close
                up[1].close()
        up = await asyncio.open_connection(*self.upstream)
        return up, await exchange(up)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        with self._lock:
            self._stats.connections += 1
        up: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        loop = asyncio.get_running_loop()
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                t0 = loop.time()
                line, headers, raw = _parse_head(head[:-4])
                method, target, _ = line.split(" ", 2)
                if headers.get("expect", "").lower() == "100-continue":
                    writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                    await writer.drain()
                body = await _read_body(reader, headers)
                if target.startswith(CONTROL):
                    try:
                        payload, status = json.dumps(self._control(target, body)).encode(), "200 OK"
                    except (ValueError, TypeError) as e:
                        payload, status = json.dumps({"error": str(e)}).encode(), "400 Bad Request"
                    writer.write(f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
                                 f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
                    await writer.drain()
                    continue
                op = classify(method, target, headers)
                path = urlsplit(target).path
                with self._lock:
                    st = self._stats
                    st.requests[method] += 1
                    st.ops[op] += 1
                    st.bytes_in[method] += len(body)
                    entry = None
                    if self.logging:
                        # a listing's prefix and page are in its query: logged whole (still URL-encoded)
                        st.log.append((op, target if op == "LIST" else path, headers.get("range", "")))
                        entry = [*st.log[-1], time.time() - (loop.time() - t0), None]
                        st.timeline.append(entry)
                    st.in_flight += 1
                    st.max_in_flight = max(st.max_in_flight, st.in_flight)
                try:
                    fault = self._take_fault(op, path, body)
                    if fault is not None and fault.kind == "slowdown":
                        await asyncio.sleep(self.delay_ms / 1000)
                        writer.write(b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
                                     b"Content-Length: %d\r\n\r\n%s" % (len(_SLOWDOWN), _SLOWDOWN))
                        await writer.drain()
                        continue
                    if fault is not None and fault.kind == "accessdenied":
                        await asyncio.sleep(self.delay_ms / 1000)
                        await self._send(writer, _answer_403())
                        continue
                    if fault is not None and fault.kind == "nosuchupload" and not fault.forward:
                        await asyncio.sleep(self.delay_ms / 1000)
                        await self._send(writer, _answer_404())
                        continue
                    if fault is not None and not fault.forward:
                        if fault.kind == "timeout":
                            await asyncio.sleep(fault.hold_s)
                        _reset(writer)
                        return
                    # forward without Expect (answered above) and keep the body as received
                    out = [line] + [f"{k}: {v}" for k, v in raw if k.lower() != "expect"]
                    request = ("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + body
                    up, rhead = await self._forward(up, request)
                    rline, rheaders, _ = _parse_head(rhead[:-4])
                    status = int(rline.split(" ", 2)[1])
                    client_close = False
                    if _body_of_response(status, method):
                        if "content-length" in rheaders or "transfer-encoding" in rheaders:
                            rbody = await _read_body(up[0], rheaders)
                        else:  # to the end of the connection: the client's ends there too
                            rbody = await up[0].read()
                            rheaders["connection"] = "close"
                            client_close = True
                    else:
                        rbody = b""
                    if rheaders.get("connection", "").lower() == "close":
                        up[1].close()
                        up = None
                        if not client_close:
                            rhead = _kept_alive(rhead)
                    if fault is not None and fault.kind == "nosuchupload":
                        await asyncio.sleep(max(0.0, t0 + self.delay_ms / 1000 - loop.time()))
                        await self._send(writer, _answer_404())
                        if client_close:
                            return
                        continue
                    if fault is not None:  # forwarded, then the answer lost
                        if fault.kind == "timeout":
                            await asyncio.sleep(fault.hold_s)
                        _reset(writer)
                        return
                    # the request's body took its time at the capped rate too (read here at
                    # loopback speed): the answer waits for it, as a client's upload would
                    wait = t0 + self.delay_ms / 1000 + self._upload_seconds(len(body)) - loop.time()
                    if wait > 0:
                        await asyncio.sleep(wait)
                    await self._send(writer, rhead + rbody)
                    with self._lock:
                        self._stats.bytes_out[method] += len(rbody)
                    if client_close:
                        return
                finally:
                    with self._lock:
                        self._stats.in_flight -= 1
                        if entry is not None:
                            entry[4] = time.time()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            return
        finally:
            self._writers.discard(writer)
            if up is not None:
                up[1].close()
            if not writer.transport.is_closing():
                writer.close()


class ProxyClient:
    """The control calls of a proxy reached over HTTP (one in another process)."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint

    def _call(self, what: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        data = json.dumps(args or {}).encode()
        req = urllib.request.Request(f"{self.endpoint}{CONTROL}{what}", data=data, method="POST")
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def stats(self) -> dict[str, Any]:
        return self._call("stats")

    def reset(self) -> None:
        self._call("reset")

    def configure(self, **kwargs: Any) -> None:
        self._call("config", kwargs)

    def inject(self, kind: str, **kwargs: Any) -> None:
        self._call("fault", {"kind": kind, **kwargs})


class MotoServer(ChildServer):
    """moto's S3 server on 127.0.0.1:<free port>, started and stopped by its owner
    (``tests.support.moto_store``: ``moto_server`` without its per-request lookup lock)."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.env = env
        self.port = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> MotoServer:
        try:
            import moto.server  # noqa: F401 - moto[server] is in the test extra
        except ImportError as e:
            raise RuntimeError("moto's server is not installed (moto[server], in the test extra)") from e
        self.port = free_port()
        # objects held in memory, not spooled to a temporary file past moto's 5 MiB default (each
        # part and completed object then written to disk on the client's CPUs, which S3 spares them)
        cmd = [sys.executable, "-m", "tests.support.moto_store", "-H", "127.0.0.1", "-p", str(self.port)]
        self.launch(cmd, f"{self.endpoint}/moto-api/", "moto_server", READY_SECONDS, env=self.env,
                    defaults={"MOTO_S3_DEFAULT_KEY_BUFFER_SIZE": str(KEY_BUFFER_BYTES)}, quiet=True)
        return self

    def __enter__(self) -> MotoServer:
        return self.start()


class ProxyProcess(ChildServer, ProxyClient):
    """A ``LatencyProxy`` in a child process (``python -m tests.support.latency_store``),
    controlled over HTTP: the bench keeps the proxy's work off the GIL it measures."""

    def __init__(self, upstream: str, delay_ms: float = 0.0, bandwidth_bps: float | None = None) -> None:
        self.upstream, self.delay_ms, self.bandwidth_bps = upstream, delay_ms, bandwidth_bps
        ProxyClient.__init__(self, "")

    def start(self) -> ProxyProcess:
        port = free_port()
        cmd = [sys.executable, "-m", "tests.support.latency_store", "--upstream", self.upstream,
               "--port", str(port), "--delay-ms", str(self.delay_ms)]
        if self.bandwidth_bps:
            cmd += ["--bandwidth-bps", str(self.bandwidth_bps)]
        self.endpoint = f"http://127.0.0.1:{port}"
        self.launch(cmd, f"{self.endpoint}{CONTROL}stats", "latency proxy", READY_SECONDS)
        return self

    def __enter__(self) -> ProxyProcess:
        return self.start()


def s3_options(endpoint: str) -> dict[str, str]:
    """pylance's storage options for a moto server (or a proxy in front of one)."""
    return {"aws_endpoint": endpoint, "allow_http": "true", "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing-secret", "aws_region": "us-east-1"}


def create_bucket(endpoint: str, bucket: str) -> None:
    import boto3

    boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                 aws_secret_access_key="testing-secret", region_name="us-east-1").create_bucket(Bucket=bucket)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--upstream", required=True)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--delay-ms", type=float, default=0.0)
    p.add_argument("--bandwidth-bps", type=float, default=None)
    a = p.parse_args(argv)
    proxy = LatencyProxy(a.upstream, a.delay_ms, a.bandwidth_bps, port=a.port).start()
    print(proxy.endpoint, flush=True)
    serve_until_terminated(proxy.stop)


if __name__ == "__main__":
    main()
