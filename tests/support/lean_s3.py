"""An S3 store that costs its clients' machine little CPU, for benches that ask how a job scales
with workers: objects in memory, served by one asyncio process that holds each request N ms
itself (no proxy hop), the subset of S3's REST API that our executors (s3fs, obstore), boto3 and
pylance's object_store use.

Why: real S3 spends its CPU on its own hosts. moto (``latency_store``) spends 1-4 ms of CPU per
request in Python and the proxy ~1 ms more, on the same 2 CPUs as the Spark workers being
measured; with two workers sending requests together that is a third of the machine, and the
cluster bench then measures the store. This store answers a ranged GET or a part's PUT in
~0.1-0.3 ms of CPU. It is not a reference S3: the tests' correctness runs stay on moto, and the
bench that uses this one checks each result with pylance reading through it.

What it does: buckets (create, head, location, delete); objects (PUT with ``If-None-Match: *`` /
``If-Match``, server-side copy, GET with ``Range`` (``a-b``, ``a-``, ``-n``) and 206 /
``Content-Range`` / 416, HEAD, DELETE); batch deletes (``POST ?delete``); ListObjects v1 and
v2 (prefix, delimiter, ``max-keys``, ``start-after``, continuation and marker); multipart
uploads (create, parts, complete with ``If-None-Match``, abort, list). Signatures are not
checked; ``aws-chunked`` bodies are decoded. Anything else answers 501 and is counted in
``stats()["unsupported"]``. ETags are unique per write, not MD5s (no client here checks them).

Two ports share one store: ``endpoint`` holds each request ``delay_ms`` (counted in
``stats``), ``direct`` answers at once (the bench's setup and checks).

    python -m tests.support.lean_s3 --port P --direct-port Q --delay-ms 20
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import html
import itertools
import json
import re
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from email.utils import formatdate
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from tests.support.processes import ChildServer, free_port, serve_until_terminated

CONTROL = "/__lean__/"
READY_SECONDS = 30.0
_XML = b'<?xml version="1.0" encoding="UTF-8"?>\n'
_KEY = re.compile(rb"<Key>(.*?)</Key>", re.S)
_PART = re.compile(rb"<PartNumber>\s*(\d+)\s*</PartNumber>")
_LIST_KEYS = {"list-type", "prefix", "delimiter", "max-keys", "continuation-token", "start-after", "marker",
              "encoding-type", "fetch-owner"}
_REASON = {200: "OK", 204: "No Content", 206: "Partial Content", 304: "Not Modified",
           400: "Bad Request", 404: "Not Found", 409: "Conflict", 412: "Precondition Failed",
           416: "Requested Range Not Satisfiable", 501: "Not Implemented"}


@dataclass
class _Object:
    data: bytes
    etag: str
    mtime: float


@dataclass
class _Bucket:
    objects: dict[str, _Object] = field(default_factory=dict)
    keys: list[str] = field(default_factory=list)  # sorted: listings are in key order, as S3's
    # upload id -> its key, when it began, its parts by number
    uploads: dict[str, tuple[str, float, dict[int, bytes]]] = field(default_factory=dict)

    def put(self, key: str, obj: _Object) -> None:
        if key not in self.objects:
            bisect.insort(self.keys, key)
        self.objects[key] = obj

    def delete(self, key: str) -> None:
        if self.objects.pop(key, None) is not None:
            del self.keys[bisect.bisect_left(self.keys, key)]


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"


def _x(s: str) -> str:
    return html.escape(s, quote=False)


def _error(status: int, code: str, message: str, resource: str = "") -> tuple[int, dict[str, str], bytes]:
    body = (_XML + f"<Error><Code>{code}</Code><Message>{_x(message)}</Message>"
            f"<Resource>{_x(resource)}</Resource></Error>".encode())
    return status, {"Content-Type": "application/xml"}, body


def _past(prefix: str) -> str:
    """The least string above every key that starts with ``prefix``."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def _decode_aws_chunked(body: bytes) -> bytes:
    """The payload of an ``aws-chunked`` body (``<hex size>[;chunk-signature=..]\\r\\n<data>\\r\\n``
    ..., a zero chunk, then trailers)."""
    out, i = [], 0
    while True:
        j = body.index(b"\r\n", i)
        n = int(body[i:j].split(b";")[0], 16)
        if n == 0:
            return b"".join(out)
        out.append(body[j + 2:j + 2 + n])
        i = j + 2 + n + 2


class LeanS3:
    """The store on an asyncio loop in a daemon thread of this process (``start`` / ``stop``);
    ``LeanS3Process`` runs it in a child process, as the benches do."""

    def __init__(self, delay_ms: float = 0.0, port: int = 0, direct_port: int = 0, log: bool = False) -> None:
        self.delay_ms = delay_ms
        # with ``log``: [wall-clock start, end, operation, path] per delayed request (a timeline)
        self.log: list[list] | None = [] if log else None
        self.port, self.direct_port = port or free_port(), direct_port or free_port()
        self.buckets: dict[str, _Bucket] = {}
        self._etags = itertools.count(1)
        self._uploads = itertools.count(1)
        self._lock = threading.Lock()  # the stats, read from other threads
        self.requests: Counter = Counter()  # delayed port only, by operation
        self.unsupported: Counter = Counter()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._servers: list[asyncio.base_events.Server] = []
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def direct(self) -> str:
        return f"http://127.0.0.1:{self.direct_port}"

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> LeanS3:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop

            async def serve() -> None:
                for port, delayed in ((self.port, True), (self.direct_port, False)):
                    self._servers.append(await asyncio.start_server(
                        lambda r, w, d=delayed: self._connection(r, w, d), "127.0.0.1", port))
                ready.set()

            loop.run_until_complete(serve())
            loop.run_forever()

        self._thread = threading.Thread(target=run, name="lean-s3", daemon=True)
        self._thread.start()
        if not ready.wait(READY_SECONDS):
            raise RuntimeError("lean S3 store did not start")
        return self

    def stop(self) -> None:
        loop = self._loop
        if loop is None:
            return

        def shut() -> None:
            for s in self._servers:
                s.close()
            for task in asyncio.all_tasks(loop):  # connections kept alive by clients
                task.cancel()
            loop.call_soon(loop.stop)

        loop.call_soon_threadsafe(shut)
        if self._thread is not None:
            self._thread.join(10)
        self._loop = None

    def __enter__(self) -> LeanS3:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stats(self) -> dict:
        with self._lock:
            out = {"requests": dict(self.requests), "total": sum(self.requests.values()),
                   "unsupported": dict(self.unsupported)}
            if self.log is not None:
                out["log"] = list(self.log)
            return out

    # -- HTTP -----------------------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                          delayed: bool) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
                    return
                t0 = loop.time()
                lines = head[:-4].decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {}
                for ln in lines[1:]:
                    k, _, v = ln.partition(":")
                    headers[k.strip().lower()] = v.strip()
                if headers.get("expect", "").lower() == "100-continue":
                    writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                body = await self._body(reader, headers)
                try:
                    status, out_headers, payload, op = self._answer(method, target, headers, body)
                except Exception as e:  # a bug here must be a visible 500, not a hung client
                    status, out_headers, payload = _error(500, "InternalError", repr(e))
                    op = "ERROR"
                    print(f"lean_s3: {method} {target}: {e!r}", file=sys.stderr, flush=True)
                entry = None
                if delayed and not target.startswith(CONTROL):
                    with self._lock:
                        self.requests[op] += 1
                        if self.log is not None:
                            entry = [time.time() - (loop.time() - t0), 0.0, op, target.split("?", 1)[0]]
                            self.log.append(entry)
                    wait = t0 + self.delay_ms / 1000 - loop.time()
                    if wait > 0:
                        await asyncio.sleep(wait)
                size = out_headers.pop("_size", None)
                length = len(payload) if size is None else size
                head_out = [f"HTTP/1.1 {status} {_REASON.get(status, 'Status')}",
                            f"Content-Length: {length}", "x-amz-request-id: lean",
                            *(f"{k}: {v}" for k, v in out_headers.items())]
                writer.write(("\r\n".join(head_out) + "\r\n\r\n").encode("latin-1"))
                if method != "HEAD" and payload:
                    writer.write(payload)
                await writer.drain()
                if entry is not None:
                    entry[1] = time.time()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            return
        finally:
            writer.close()

    @staticmethod
    async def _body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
        if headers.get("transfer-encoding", "").lower() == "chunked":
            out = []
            while True:
                n = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
                if n == 0:
                    while await reader.readuntil(b"\r\n") != b"\r\n":
                        pass
                    body = b"".join(out)
                    break
                out.append((await reader.readexactly(n + 2))[:-2])
        else:
            n = int(headers.get("content-length", "0") or 0)
            body = await reader.readexactly(n) if n else b""
        if "aws-chunked" in headers.get("content-encoding", "") or \
                headers.get("x-amz-content-sha256", "").startswith("STREAMING-"):
            body = _decode_aws_chunked(body)
        return body

    # -- S3 -------------------------------------------------------------------------------------

    def _answer(self, method: str, target: str, headers: dict[str, str],
                body: bytes) -> tuple[int, dict[str, str], bytes | memoryview, str]:
        url = urlsplit(target)
        if url.path.startswith(CONTROL):
            return 200, {"Content-Type": "application/json"}, json.dumps(self.stats()).encode(), "CONTROL"
        query = dict(parse_qsl(url.query, keep_blank_values=True))
        path = unquote(url.path).lstrip("/")
        name, _, key = path.partition("/")
        if not name:
            return (*self._unsupported(method, target), "OTHER")
        bucket = self.buckets.get(name)
        if not key:
            if method == "PUT" and not query:
                self.buckets.setdefault(name, _Bucket())
                return 200, {"Location": f"/{name}"}, b"", "CREATE_BUCKET"
            if bucket is None:
                return (*_error(404, "NoSuchBucket", "The specified bucket does not exist", name), "OTHER")
            if method == "HEAD":
                return 200, {}, b"", "HEAD"
            if method == "GET" and "location" in query:
                return 200, {"Content-Type": "application/xml"}, \
                    _XML + b"<LocationConstraint>us-east-1</LocationConstraint>", "GET"
            if method == "GET" and "uploads" in query:
                return (*self._list_uploads(name, bucket, query), "LIST")
            if method == "GET" and set(query) <= _LIST_KEYS:
                return (*self._list(name, bucket, query), "LIST")
            if method == "POST" and "delete" in query:
                return (*self._delete_many(bucket, body), "DELETE")
            if method == "DELETE" and not query:
                if bucket.objects:
                    return (*_error(409, "BucketNotEmpty", "The bucket you tried to delete is not empty",
                                    name), "DELETE")
                del self.buckets[name]
                return 204, {}, b"", "DELETE"
            return (*self._unsupported(method, target), "OTHER")
        if bucket is None:
            return (*_error(404, "NoSuchBucket", "The specified bucket does not exist", name), "OTHER")
        if "uploadId" in query:
            return self._upload(method, bucket, name, key, query, headers, body)
        if method == "POST" and "uploads" in query:
            upload = f"lean{next(self._uploads)}"
            bucket.uploads[upload] = (key, time.time(), {})
            return 200, {"Content-Type": "application/xml"}, _XML + (
                f"<InitiateMultipartUploadResult><Bucket>{_x(name)}</Bucket><Key>{_x(key)}</Key>"
                f"<UploadId>{upload}</UploadId></InitiateMultipartUploadResult>").encode(), "POST"
        if method in ("GET", "HEAD"):
            return (*self._get(method, bucket, key, headers), method)
        if method == "PUT":
            source = headers.get("x-amz-copy-source")
            if source is not None:
                return (*self._copy(bucket, key, source, headers), "COPY")
            return (*self._put(bucket, key, body, headers), "PUT")
        if method == "DELETE":
            bucket.delete(key)
            return 204, {}, b"", "DELETE"
        return (*self._unsupported(method, target), "OTHER")

    def _unsupported(self, method: str, target: str) -> tuple[int, dict[str, str], bytes]:
        with self._lock:
            self.unsupported[f"{method} {urlsplit(target).query or urlsplit(target).path}"] += 1
        return _error(501, "NotImplemented", f"{method} {target} is not supported by lean_s3")

    def _new(self, data: bytes, parts: int = 0) -> _Object:
        tag = f"{next(self._etags):032x}" + (f"-{parts}" if parts else "")
        return _Object(data, f'"{tag}"', time.time())

    @staticmethod
    def _precondition(bucket: _Bucket, key: str, headers: dict[str, str]) -> bool:
        """Whether a write's ``If-None-Match: *`` / ``If-Match: etag`` allows it."""
        have = bucket.objects.get(key)
        if headers.get("if-none-match", "").strip() == "*" and have is not None:
            return False
        match = headers.get("if-match")
        return match is None or (have is not None and match.strip() in (have.etag, "*"))

    def _put(self, bucket: _Bucket, key: str, body: bytes,
             headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        if not self._precondition(bucket, key, headers):
            return _error(412, "PreconditionFailed", "At least one of the pre-conditions you specified "
                          "did not hold", key)
        obj = self._new(body)
        bucket.put(key, obj)
        return 200, {"ETag": obj.etag}, b""

    def _copy(self, bucket: _Bucket, key: str, source: str,
              headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        src_bucket, _, src_key = unquote(source.split("?", 1)[0]).lstrip("/").partition("/")
        src = self.buckets.get(src_bucket, _Bucket()).objects.get(src_key)
        if src is None:
            return _error(404, "NoSuchKey", "The specified key does not exist.", src_key)
        if not self._precondition(bucket, key, headers):
            return _error(412, "PreconditionFailed", "At least one of the pre-conditions you specified "
                          "did not hold", key)
        obj = self._new(src.data)
        bucket.put(key, obj)
        return 200, {"Content-Type": "application/xml"}, _XML + (
            f"<CopyObjectResult><LastModified>{_iso(obj.mtime)}</LastModified>"
            f"<ETag>{_x(obj.etag)}</ETag></CopyObjectResult>").encode()

    def _get(self, method: str, bucket: _Bucket, key: str,
             headers: dict[str, str]) -> tuple[int, dict[str, str], bytes | memoryview]:
        obj = bucket.objects.get(key)
        if obj is None:
            return _error(404, "NoSuchKey", "The specified key does not exist.", key)
        base = {"ETag": obj.etag, "Last-Modified": formatdate(obj.mtime, usegmt=True),
                "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
        if headers.get("if-none-match") == obj.etag:
            return 304, base, b""
        if (m := headers.get("if-match")) is not None and m not in (obj.etag, "*"):
            return _error(412, "PreconditionFailed", "At least one of the pre-conditions you specified "
                          "did not hold", key)
        size = len(obj.data)
        spec = headers.get("range", "")
        if not spec.startswith("bytes="):
            return 200, ({**base, "_size": str(size)} if method == "HEAD" else base), \
                (b"" if method == "HEAD" else obj.data)
        first, _, last = spec[6:].partition("-")
        if first == "":  # the last N bytes
            start, end = max(0, size - int(last)), size - 1
        else:
            start, end = int(first), (size - 1 if last == "" else min(int(last), size - 1))
        if start >= size or end < start:
            status, h, b = _error(416, "InvalidRange", "The requested range is not satisfiable", key)
            return status, {**h, "Content-Range": f"bytes */{size}"}, b
        part = memoryview(obj.data)[start:end + 1]
        h = {**base, "Content-Range": f"bytes {start}-{end}/{size}"}
        if method == "HEAD":
            return 206, {**h, "_size": str(len(part))}, b""
        return 206, h, part

    def _delete_many(self, bucket: _Bucket, body: bytes) -> tuple[int, dict[str, str], bytes]:
        keys = [html.unescape(k.decode()) for k in _KEY.findall(body)]
        for k in keys:
            bucket.delete(k)
        quiet = b"<Quiet>true</Quiet>" in body
        done = "" if quiet else "".join(f"<Deleted><Key>{_x(k)}</Key></Deleted>" for k in keys)
        body = f"<DeleteResult>{done}</DeleteResult>".encode()
        return 200, {"Content-Type": "application/xml"}, _XML + body

    def _list(self, name: str, bucket: _Bucket, q: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        v2 = q.get("list-type") == "2"
        prefix, delim = q.get("prefix", ""), q.get("delimiter", "")
        max_keys = min(int(q.get("max-keys", "1000") or 1000), 1000)
        after = q.get("continuation-token") or q.get("start-after", "") if v2 else q.get("marker", "")
        keys = bucket.keys
        i = bisect.bisect_left(keys, prefix)
        if after:  # resume past the last key or common prefix of the page before
            i = max(i, bisect.bisect_left(keys, _past(after)) if delim and after.endswith(delim)
                    else bisect.bisect_right(keys, after))
        contents, prefixes, last, truncated = [], [], "", False
        while i < len(keys):
            k = keys[i]
            if not k.startswith(prefix):
                break
            if len(contents) + len(prefixes) >= max_keys:
                truncated = True
                break
            if delim and (d := k.find(delim, len(prefix))) >= 0:
                cp = k[:d + len(delim)]
                prefixes.append(cp)
                last = cp
                i = bisect.bisect_left(keys, _past(cp))  # past every key under this common prefix
                continue
            o = bucket.objects[k]
            contents.append(f"<Contents><Key>{_x(k)}</Key><LastModified>{_iso(o.mtime)}</LastModified>"
                            f"<ETag>{_x(o.etag)}</ETag><Size>{len(o.data)}</Size>"
                            f"<StorageClass>STANDARD</StorageClass></Contents>")
            last = k
            i += 1
        common = "".join(f"<CommonPrefixes><Prefix>{_x(p)}</Prefix></CommonPrefixes>" for p in prefixes)
        more = ""
        if truncated:
            more = (f"<NextContinuationToken>{_x(last)}</NextContinuationToken>" if v2
                    else f"<NextMarker>{_x(last)}</NextMarker>")
        count = f"<KeyCount>{len(contents) + len(prefixes)}</KeyCount>" if v2 else ""
        body = (f"<ListBucketResult><Name>{_x(name)}</Name><Prefix>{_x(prefix)}</Prefix>"
                f"{f'<Delimiter>{_x(delim)}</Delimiter>' if delim else ''}<MaxKeys>{max_keys}</MaxKeys>"
                f"{count}<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>{more}"
                f"{''.join(contents)}{common}</ListBucketResult>")
        return 200, {"Content-Type": "application/xml"}, _XML + body.encode()

    def _list_uploads(self, name: str, bucket: _Bucket,
                      q: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        prefix = q.get("prefix", "")
        ups = "".join(f"<Upload><Key>{_x(k)}</Key><UploadId>{u}</UploadId><Initiated>{_iso(t)}</Initiated>"
                      f"<StorageClass>STANDARD</StorageClass></Upload>"
                      for u, (k, t, _) in sorted(bucket.uploads.items(), key=lambda x: x[1][0])
                      if k.startswith(prefix))
        return 200, {"Content-Type": "application/xml"}, _XML + (
            f"<ListMultipartUploadsResult><Bucket>{_x(name)}</Bucket><IsTruncated>false</IsTruncated>"
            f"{ups}</ListMultipartUploadsResult>").encode()

    def _upload(self, method: str, bucket: _Bucket, name: str, key: str, q: dict[str, str],
                headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str], bytes, str]:
        upload = bucket.uploads.get(q["uploadId"])
        if upload is None or upload[0] != key:
            return (*_error(404, "NoSuchUpload", "The specified upload does not exist.", key), method)
        parts = upload[2]
        if method == "PUT" and "partNumber" in q:
            if "x-amz-copy-source" in headers:
                return (*self._unsupported(method, f"UploadPartCopy {key}"), "PUT")
            n = int(q["partNumber"])
            parts[n] = body
            return 200, {"ETag": f'"p{n}-{next(self._etags):x}"'}, b"", "PUT"
        if method == "DELETE":
            del bucket.uploads[q["uploadId"]]
            return 204, {}, b"", "DELETE"
        if method == "GET":  # ListParts
            items = "".join(f"<Part><PartNumber>{n}</PartNumber><Size>{len(b)}</Size></Part>"
                            for n, b in sorted(parts.items()))
            return 200, {"Content-Type": "application/xml"}, _XML + (
                f"<ListPartsResult><Bucket>{_x(name)}</Bucket><Key>{_x(key)}</Key>"
                f"<UploadId>{q['uploadId']}</UploadId><IsTruncated>false</IsTruncated>{items}"
                f"</ListPartsResult>").encode(), "LIST"
        if method == "POST":
            numbers = [int(n) for n in _PART.findall(body)]
            if not numbers or any(n not in parts for n in numbers):
                return (*_error(400, "InvalidPart", "One or more of the specified parts could not be "
                                "found.", key), "POST")
            if not self._precondition(bucket, key, headers):
                return (*_error(412, "PreconditionFailed", "At least one of the pre-conditions you "
                                "specified did not hold", key), "POST")
            obj = self._new(b"".join(parts[n] for n in numbers), len(numbers))
            bucket.put(key, obj)
            del bucket.uploads[q["uploadId"]]
            return 200, {"Content-Type": "application/xml"}, _XML + (
                f"<CompleteMultipartUploadResult><Location>/{_x(name)}/{quote(key)}</Location>"
                f"<Bucket>{_x(name)}</Bucket><Key>{_x(key)}</Key><ETag>{_x(obj.etag)}</ETag>"
                f"</CompleteMultipartUploadResult>").encode(), "POST"
        return (*self._unsupported(method, f"upload {key}"), method)


class LeanS3Process(ChildServer):
    """``LeanS3`` in a child process (``python -m tests.support.lean_s3``), so its CPU is its own
    process's (the bench counts it apart) and off the GIL of the process that measures."""

    def __init__(self, delay_ms: float = 0.0, log: bool = False) -> None:
        self.delay_ms, self.log = delay_ms, log
        self.port, self.direct_port = free_port(), free_port()

    endpoint = LeanS3.endpoint
    direct = LeanS3.direct

    def start(self) -> LeanS3Process:
        cmd = [sys.executable, "-m", "tests.support.lean_s3", "--port", str(self.port),
               "--direct-port", str(self.direct_port), "--delay-ms", str(self.delay_ms)]
        cmd += ["--log"] if self.log else []
        self.launch(cmd, f"{self.direct}{CONTROL}stats", "lean S3 store", READY_SECONDS)
        return self

    def stats(self) -> dict:
        import urllib.request

        with urllib.request.urlopen(f"{self.direct}{CONTROL}stats", timeout=10) as r:
            return json.loads(r.read())

    def __enter__(self) -> LeanS3Process:
        return self.start()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--direct-port", type=int, default=0)
    p.add_argument("--delay-ms", type=float, default=0.0)
    p.add_argument("--log", action="store_true", help="keep a timeline of the delayed requests (stats' log)")
    a = p.parse_args(argv)
    serve_until_terminated(LeanS3(a.delay_ms, a.port, a.direct_port, a.log).start().stop)


if __name__ == "__main__":
    main()
