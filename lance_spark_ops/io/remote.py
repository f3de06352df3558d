"""Many requests in flight on an async fsspec filesystem (s3fs, gcsfs, adlfs): ranged reads,
suffix reads (S3, GCS), one-page listings, batched deletes and a concurrent multipart upload
(S3; Azure: staged blocks), run as coroutines on the filesystem's own event loop (fsspec runs
one loop per process in a thread; the calling thread blocks on the gathered result, or, for
uploads and prefetches, carries on and collects later).

The carrier was measured against obstore (``bench/io_carrier_bench.py``; docs/object_stores.md):
the two are level for whole objects in flight, obstore takes ~3x less CPU (and GIL) per request.
So these carry every store's requests except where the options let obstore take them: on S3
and Azure a task's prefetch, direct ranged reads and large uploads (``io.obstore_reads``,
``io.obstore_writes``), Azure's deletes and listings (``io.obstore_lists``).
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import hashlib
import threading
import uuid as uuidlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, TypeVar

import numpy as np
from fsspec.asyn import sync

from lance_spark_ops.io.budget import IOBudget, upload_window

T = TypeVar("T")
S3_DELETE_BATCH = 1000  # DeleteObjects takes at most 1 000 keys a call
LIST_PAGE = 1000  # keys a listing page asks for (S3's and GCS's most; Azure takes up to 5 000)


def is_async(fs: Any) -> bool:
    return bool(getattr(fs, "async_impl", False)) and getattr(fs, "loop", None) is not None


def is_s3(fs: Any) -> bool:
    return hasattr(fs, "_call_s3") and hasattr(fs, "_bulk_delete")


def run(fs: Any, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
    """``await fn(*args, **kwargs)`` on the filesystem's loop, from a thread outside it."""
    return sync(fs.loop, fn, *args, **kwargs)


def submit(fs: Any, coro: Awaitable[T]) -> concurrent.futures.Future[T]:
    """Start ``coro`` on the filesystem's loop; the caller collects the future later."""
    return asyncio.run_coroutine_threadsafe(coro, fs.loop)  # type: ignore[arg-type]


async def bounded(coros: Sequence[Awaitable[T]], limit: int) -> list[T]:
    """Every coroutine's result in order, at most ``limit`` running at once; the first
    error cancels the rest and is raised."""
    sem = asyncio.Semaphore(max(1, limit))

    async def one(c: Awaitable[T]) -> T:
        async with sem:
            return await c

    tasks = [asyncio.ensure_future(one(c)) for c in coros]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def cat_whole(fs: Any, path: str) -> bytes:
    """A whole object in one GET (s3fs would otherwise ask its size first, to split it)."""
    if is_s3(fs):
        return await fs._cat_file(path, max_concurrency=1)
    return await fs._cat_file(path)


def _cat(fs: Any, path: str, start: int | None, end: int | None) -> Awaitable[bytes]:
    return cat_whole(fs, path) if start is None else fs._cat_file(path, start=start, end=end)


async def read_ranges(fs: Any, path: str, spans: Sequence[tuple[int, int]], budget: IOBudget) -> list[bytes]:
    """The bytes of each (start, end) span of one object, ``budget.max_requests`` at a time."""
    return await bounded([fs._cat_file(path, start=s, end=e) for s, e in spans], budget.max_requests)


async def read_many(fs: Any, items: Sequence[tuple[str, int | None, int | None]], budget: IOBudget
                    ) -> list[bytes]:
    """(path, start, end) spans of several objects at once (start None: the whole object)."""
    return await bounded([_cat(fs, p, s, e) for p, s, e in items], budget.max_requests)


async def _s3_tail(fs: Any, path: str, n: int) -> tuple[int, bytes]:
    from s3fs.core import _error_wrapper, version_id_kw

    bucket, key, vers = fs.split_path(path)

    async def call() -> tuple[int, bytes]:
        resp = await fs._call_s3("get_object", Bucket=bucket, Key=key, Range=f"bytes=-{n}",
                                 **version_id_kw(vers))
        try:
            data = await resp["Body"].read()
        finally:
            resp["Body"].close()
        content_range = resp.get("ContentRange") or ""  # "bytes 100-199/200"
        size = int(content_range.rsplit("/", 1)[1]) if "/" in content_range else len(data)
        return size, data

    return await _error_wrapper(call, retries=fs.retries)


async def _gcs_tail(fs: Any, path: str, n: int) -> tuple[int, bytes]:
    """GCS's media download with ``Range: bytes=-n`` (GCS serves suffix ranges; the size from
    Content-Range). A server that ignores the range answers the whole object: still right."""
    headers, data = await fs._call("GET", fs.url(path), headers={"Range": f"bytes=-{n}"})
    content_range = str(headers.get("Content-Range") or headers.get("content-range") or "")
    if "/" in content_range:
        return int(content_range.rsplit("/", 1)[1]), bytes(data)
    return len(data), bytes(memoryview(data)[max(0, len(data) - n):])


async def _azure_tail(fs: Any, path: str, n: int) -> tuple[int, bytes]:
    """Azure has no suffix ranges: a ranged read of the first ``n`` bytes, whose Content-Range
    names the size, is the whole object when it is at most ``n`` bytes (one request where a
    size request and a read were two); a larger one's last ``n`` bytes are a second read."""
    from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

    container, key, version_id = fs.split_path(path)
    try:
        async with fs.service_client.get_blob_client(container, key) as blob:
            stream = await blob.download_blob(offset=0, length=n, version_id=version_id)
            data = await stream.readall()
    except ResourceNotFoundError as e:
        raise FileNotFoundError(path) from e
    except HttpResponseError as e:
        if e.status_code != 416:  # "InvalidRange": an empty blob has no first byte
            raise
        return await _sized_tail(fs, path, n)  # its size, and nothing to read when it is 0
    content_range = str(stream.properties.content_range or "")  # "bytes 0-99/12345"
    size = int(content_range.rsplit("/", 1)[1]) if "/" in content_range else len(data)
    if size <= n:
        return size, data[:size]
    return size, await fs._cat_file(path, start=size - n, end=size)


async def tail(fs: Any, path: str, n: int) -> tuple[int, bytes]:
    """(object size, its last ``n`` bytes or all of it when smaller): one suffix request on
    S3 and GCS (the size from Content-Range); on Azure one ranged read of an object of at most
    ``n`` bytes, two of a larger one (``_azure_tail``); elsewhere a size request and a read."""
    if is_s3(fs):
        return await _s3_tail(fs, path, n)
    if is_gcs(fs):
        return await _gcs_tail(fs, path, n)
    if is_azure(fs):
        return await _azure_tail(fs, path, n)
    return await _sized_tail(fs, path, n)


async def _sized_tail(fs: Any, path: str, n: int) -> tuple[int, bytes]:
    """A size request, then a ranged read of the last ``n`` bytes (none of an empty object)."""
    size = int((await fs._info(path))["size"])
    start = max(0, size - n)
    return size, (await fs._cat_file(path, start=start, end=size)) if size > start else b""


def _bucket_prefix(fs: Any, path: str) -> tuple[str, str]:
    """(bucket or container, the key prefix ``key/`` under it; "" at its root) of ``path``."""
    bucket, key = fs.split_path(path)[:2]
    return bucket, (key.rstrip("/") + "/" if key else "")


async def _s3_pages(fs: Any, bucket: str, prefix: str, **kwargs: Any) -> AsyncIterator[dict[str, Any]]:
    """Every ListObjectsV2 page of ``prefix`` (``LIST_PAGE`` keys each), in order."""
    token = None
    while True:
        kw = {"ContinuationToken": token} if token else {}
        page = await fs._call_s3("list_objects_v2", Bucket=bucket, Prefix=prefix, MaxKeys=LIST_PAGE,
                                 **kwargs, **kw)
        yield page
        token = page.get("NextContinuationToken")
        if not page.get("IsTruncated") or not token:
            return


async def _gcs_pages(fs: Any, bucket: str, prefix: str, **kwargs: Any) -> AsyncIterator[dict[str, Any]]:
    """Every objects.list page of ``prefix`` (``LIST_PAGE`` entries each), in order."""
    token = None
    while True:
        kw = {"pageToken": token} if token else {}
        page = await fs._call_list_objects(bucket, prefix=prefix or None, maxResults=LIST_PAGE,
                                           **kwargs, **kw)
        yield page
        token = page.get("nextPageToken")
        if not token:
            return


async def s3_list_page(fs: Any, path: str, limit: int) -> tuple[list[tuple[str, int]], bool]:
    """The first ``limit`` objects directly under ``path`` in key order, (name, size), and
    whether they are all: one LIST request of ``limit`` keys (no listing cache)."""
    from s3fs.core import _error_wrapper

    bucket, prefix = _bucket_prefix(fs, path)

    async def call() -> Any:
        return await fs._call_s3("list_objects_v2", Bucket=bucket, Prefix=prefix, Delimiter="/",
                                 MaxKeys=max(1, limit))

    out = await _error_wrapper(call, retries=fs.retries)
    items = [(str(o["Key"])[len(prefix):], int(o.get("Size") or 0)) for o in out.get("Contents", [])]
    return items, not out.get("IsTruncated")


def is_gcs(fs: Any) -> bool:
    return hasattr(fs, "_call_list_objects")  # gcsfs


def is_azure(fs: Any) -> bool:
    return hasattr(fs, "service_client") and hasattr(fs, "_ls_blobs")  # adlfs


def can_list_page(fs: Any) -> bool:
    """Whether ``list_page`` reads one page of this backend's listing: S3, GCS and Azure all
    list keys in lexicographic (byte) order with a page size (MaxKeys / maxResults / maxresults)."""
    return is_s3(fs) or is_gcs(fs) or is_azure(fs)


async def list_page(fs: Any, path: str, limit: int) -> tuple[list[tuple[str, int]], bool]:
    """The first ``limit`` objects directly under ``path`` in key order, (name, size), and
    whether they are all: one listing request of ``limit`` keys (no listing cache). A server
    that ignores the page size (gcp-storage-emulator) answers all of them, complete."""
    if is_s3(fs):
        return await s3_list_page(fs, path, limit)
    if is_gcs(fs):
        return await _gcs_list_page(fs, path, limit)
    return await _azure_list_page(fs, path, limit)


async def _gcs_list_page(fs: Any, path: str, limit: int) -> tuple[list[tuple[str, int]], bool]:
    bucket, prefix = _bucket_prefix(fs, path)
    page = await fs._call_list_objects(bucket, delimiter="/", prefix=prefix or None, maxResults=max(1, limit))
    items = [(str(o["name"])[len(prefix):], int(o.get("size") or 0)) for o in page.get("items", [])]
    return items, not page.get("nextPageToken")


async def _azure_list_page(fs: Any, path: str, limit: int) -> tuple[list[tuple[str, int]], bool]:
    from azure.core.exceptions import ResourceNotFoundError
    from azure.storage.blob import BlobProperties

    container, prefix = _bucket_prefix(fs, path)
    items: list[tuple[str, int]] = []
    try:
        async with fs.service_client.get_container_client(container=container) as cc:
            pages = cc.walk_blobs(name_starts_with=prefix or None, delimiter="/",
                                  results_per_page=max(1, limit)).by_page()
            async for blob in await pages.__anext__():
                if isinstance(blob, BlobProperties):  # not a "directory" (BlobPrefix)
                    items.append((str(blob.name)[len(prefix):], int(blob.size or 0)))
    except StopAsyncIteration:
        return [], True
    except ResourceNotFoundError as e:
        raise FileNotFoundError(path) from e
    return items, not pages.continuation_token


async def s3_find(fs: Any, path: str) -> dict[str, dict[str, Any]]:
    """Every object under the prefix ``path/`` on S3 (recursively): ``{bucket/key: info}`` with
    ``size`` and ``LastModified``, by ListObjectsV2 pages alone. s3fs's ``find`` follows an
    empty listing with a HEAD of ``path`` (is it a file?): one request more per absent prefix."""
    bucket, prefix = _bucket_prefix(fs, path)
    out: dict[str, dict[str, Any]] = {}
    async for page in _s3_pages(fs, bucket, prefix):
        for obj in page.get("Contents", []):
            out[f"{bucket}/{obj['Key']}"] = {"name": f"{bucket}/{obj['Key']}", "size": obj.get("Size", 0),
                                            "LastModified": obj.get("LastModified"), "type": "file"}
    return out


async def list_dir(fs: Any, path: str) -> list[str]:
    """Names of the objects and "directories" (common prefixes) directly under ``path/``, by
    listing pages alone (``can_list_page`` backends): one request a page of ``LIST_PAGE``
    entries, where adlfs's ``ls`` lists twice (and HEADs an absent prefix), and s3fs's and
    gcsfs's ``ls`` ask again of an absent one."""
    bucket, prefix = _bucket_prefix(fs, path)
    names: set[str] = set()
    if is_s3(fs):
        async for page in _s3_pages(fs, bucket, prefix, Delimiter="/"):
            names.update(str(o["Key"]) for o in page.get("Contents", []))
            names.update(str(p["Prefix"]) for p in page.get("CommonPrefixes", []))
    elif is_gcs(fs):
        async for page in _gcs_pages(fs, bucket, prefix, delimiter="/"):
            names.update(str(o["name"]) for o in page.get("items", []))
            names.update(str(p) for p in page.get("prefixes", []))
    else:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            async with fs.service_client.get_container_client(container=bucket) as cc:
                async for item in cc.walk_blobs(name_starts_with=prefix or None, delimiter="/",
                                                results_per_page=LIST_PAGE):
                    names.add(str(item.name))  # a blob, or a BlobPrefix ("name/")
        except ResourceNotFoundError:
            return []
    # a key equal to the prefix ("dir/", a folder placeholder) is the directory itself
    return sorted({n[len(prefix):].rstrip("/") for n in names} - {""})


async def find(fs: Any, path: str) -> dict[str, dict[str, Any]]:
    """Every object under the prefix ``path/`` (recursively), ``{bucket/key: info}`` with
    ``size`` and a modification time, by listing pages alone (``can_list_page`` backends).
    The fsspec ``find``s ask more of an absent prefix: s3fs HEADs ``path``, gcsfs lists it
    again without the slash, adlfs HEADs it before and after its listing (4 requests)."""
    if is_s3(fs):
        return await s3_find(fs, path)
    if is_gcs(fs):
        return await _gcs_find(fs, path)
    return await _azure_find(fs, path)


async def _gcs_find(fs: Any, path: str) -> dict[str, dict[str, Any]]:
    bucket, prefix = _bucket_prefix(fs, path)
    out: dict[str, dict[str, Any]] = {}
    async for page in _gcs_pages(fs, bucket, prefix):
        for obj in page.get("items", []):
            name = str(obj["name"])
            if not name.endswith("/"):  # a console-made "folder" placeholder is no file
                out[f"{bucket}/{name}"] = {"name": f"{bucket}/{name}", "size": int(obj.get("size") or 0),
                                           "updated": obj.get("updated"), "type": "file"}
    return out


async def _azure_find(fs: Any, path: str) -> dict[str, dict[str, Any]]:
    from azure.core.exceptions import ResourceNotFoundError

    container, prefix = _bucket_prefix(fs, path)
    out: dict[str, dict[str, Any]] = {}
    try:
        async with fs.service_client.get_container_client(container=container) as cc:
            async for blob in cc.list_blobs(name_starts_with=prefix or None, include=["metadata"],
                                            results_per_page=LIST_PAGE):
                if (blob.metadata or {}).get("hdi_isfolder") == "true":  # a directory (HNS accounts)
                    continue
                name = f"{container}/{blob.name}"
                out[name] = {"name": name, "size": int(blob.size or 0), "last_modified": blob.last_modified,
                             "type": "file"}
    except ResourceNotFoundError:  # no such container: nothing under the prefix
        return {}
    return out


async def delete_many(fs: Any, paths: Sequence[str], budget: IOBudget) -> list[tuple[str, str]]:
    """Delete objects (missing ones are no error); returns (path, error) of those that failed.
    S3: DeleteObjects calls of up to 1 000 keys per bucket, several in flight (its per-key
    errors reported); others: one request per object, in flight together."""
    if not paths:
        return []
    if is_s3(fs):
        by_bucket: dict[str, list[str]] = {}
        for p in paths:
            by_bucket.setdefault(fs.split_path(p)[0], []).append(p)

        async def batch(bucket: str, keys: list[str]) -> list[tuple[str, str]]:
            out = await fs._call_s3("delete_objects", Bucket=bucket,
                                    Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True})
            return [(f"{bucket}/{e.get('Key')}", f"{e.get('Code')}: {e.get('Message')}")
                    for e in out.get("Errors", [])]

        calls = []
        for bucket, group in by_bucket.items():
            keys = [fs.split_path(p)[1] for p in group]
            step = S3_DELETE_BATCH
            calls += [batch(bucket, keys[i:i + step]) for i in range(0, len(keys), step)]
        failed = [f for part in await bounded(calls, budget.max_requests) for f in part]
        for p in paths:
            fs.invalidate_cache(p)
        return failed

    return await delete_each(fs, paths, budget)


async def delete_each(fs: Any, paths: Sequence[str], budget: IOBudget) -> list[tuple[str, str]]:
    """``delete_many`` one request per object, ``budget.max_requests`` in flight (missing ones
    are no error); returns (path, error) of those that failed."""
    async def one(p: str) -> list[tuple[str, str]]:
        try:
            await fs._rm_file(p)
        except FileNotFoundError:
            pass
        except Exception as e:  # noqa: BLE001 - reported per path
            return [(p, f"{type(e).__name__}: {e}")]
        return []

    return [f for part in await bounded([one(p) for p in paths], budget.max_requests) for f in part]


class PartBody(bytearray):
    """A part's body. aiohttp sends a bytes-like body as ``body[:length]``, which copies a
    bytearray whole (8 MiB more per part being sent, besides its join with the headers);
    here a slice of all of it is a view. botocore takes it as the bytearray it is."""

    def __getitem__(self, key: Any) -> Any:
        if (isinstance(key, slice) and key.step is None and not key.start
                and (key.stop is None or key.stop >= len(self))):
            return memoryview(self)
        return super().__getitem__(key)


class _KeptBodies:
    """Part bodies of finished uploads, kept for the process's next ones. A new 8 MiB body is
    page-faulted in as it is filled (2 048 faults): a 48-fragment compaction's eight parts were
    16 000 of its 25 000 minor faults, ~0.15 s of system time a task on a VM. At most
    ``limit`` bytes are kept (the byte budget: what one upload may hold in flight anyway)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: list[PartBody] = []

    def take(self, size: int) -> PartBody:
        with self._lock:
            for i, body in enumerate(self._free):
                if len(body) == size:
                    return self._free.pop(i)
        return PartBody(size)

    def give(self, bodies: Sequence[bytearray], size: int, limit: int) -> None:
        with self._lock:
            for body in bodies:
                if type(body) is PartBody and len(body) == size and (len(self._free) + 1) * size <= limit:
                    self._free.append(body)

    def clear(self) -> None:
        with self._lock:
            self._free.clear()


KEPT_BODIES = _KeptBodies()


_Stream = TypeVar("_Stream", bound="PartStream")


class PartStream:
    """A writable stream that copies its writes into part-sized bodies and hands each full one
    to ``_start_part`` when more follows (the last part may be of any size: ``close`` sends it).
    The first full part is held back until a third begins: an object of at most two parts is
    one PUT at ``close`` (``whole_object``), not a multipart upload, whose last part and
    completion are two round trips after the writer's last byte. (With 5 MiB parts a rewrite
    task's 7.6 MB output took CreateMultipartUpload, two parts and the completion, ~0.05 s a
    task at 20 ms: ``bench/cluster_s3_bench.py``.) Subclasses send the parts, make the bodies
    (``_fresh``), and ``close`` / ``discard``; the upload's failures are raised typed by
    ``typed`` (the store's error translation)."""

    def __init__(self, budget: IOBudget,
                 typed: Callable[[str], AbstractContextManager[None]] = lambda op: nullcontext()) -> None:
        self.budget = budget
        self._typed = typed
        self._cur: bytearray = bytearray()  # the part being filled, ``_fill`` bytes of it used
        self._fill = 0
        self._held: bytearray | None = None  # the first full part, until a third part begins
        self._started = False  # a part was handed to ``_start_part``
        self.closed = False
        self._pos = 0
        self.parts_uploaded = 0

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def flush(self) -> None:
        return None

    def _fresh(self) -> bytearray:
        raise NotImplementedError

    def _start_part(self, body: bytearray) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def discard(self) -> None:
        raise NotImplementedError

    def write(self, data: Any) -> int:
        """Copy ``data`` into the part being filled (the one copy a part's bytes make here: the
        part is the request body, sent in one piece). A full part goes out when more follows,
        the first once a third begins (an object of at most two parts is one PUT at close): the
        upload runs beside the encoding."""
        mv = memoryview(data).cast("B")
        n, at = len(mv), 0
        part = self.budget.part_bytes
        while at < n:
            if self._fill == part:
                with self._typed("write"):
                    self._part_full(self._cur)
                self._cur, self._fill = self._fresh(), 0
            if not self._cur:
                self._cur = self._fresh()
            k = min(part - self._fill, n - at)
            # numpy's copy lets go of the GIL (a slice assignment holds it): the decoder and the
            # upload run while a part fills
            np.copyto(np.frombuffer(self._cur, np.uint8, k, self._fill), np.frombuffer(mv, np.uint8, k, at))
            self._fill += k
            at += k
        self._pos += n
        return n

    def _part_full(self, body: bytearray) -> None:
        """A full part with more to follow: held if it is the first, else sent (with the held
        one before it)."""
        if not self._started and self._held is None:
            self._held = body
            return
        self._send_held()
        self._started = True
        self._start_part(body)

    def _send_held(self) -> None:
        """The held first part goes out (a third part began, or the object ends past two)."""
        held, self._held = self._held, None
        if held is not None:
            self._started = True
            self._start_part(held)

    def whole_object(self) -> bytes | memoryview | None:
        """At ``close``: the object's bytes when it goes as one PUT (no part was sent: at most
        two parts' worth), else None."""
        if self._started:
            return None
        last = memoryview(self._cur)[:self._fill]
        return last if self._held is None else bytes(self._held) + last

    def __enter__(self: _Stream) -> _Stream:
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.discard()


class S3Upload(PartStream):
    """A writable stream into one S3 object: parts of ``budget.part_bytes`` upload while the
    writer goes on (``window()`` parts in flight, by default ``budget.upload_window``: the
    upload holds at most ``upload_share`` bytes, half the byte budget, while a prefetch keeps to
    the other half; the store widens it once the prefetch is over); an
    object of at most two parts is a single PUT at ``close``. The upload's start is not waited
    for: the first part awaits it on the loop. ``discard`` aborts the multipart upload (nothing
    is left behind)."""

    def __init__(self, fs: Any, path: str, budget: IOBudget,
                 typed: Callable[[str], AbstractContextManager[None]] = lambda op: nullcontext(),
                 window: Callable[[], int] | None = None) -> None:
        super().__init__(budget, typed)
        self.fs, self.path = fs, path
        self.bucket, self.key, _ = fs.split_path(path)
        # parts sent and their bodies, which are filled again once their upload is over (no
        # fresh 8 MiB to fault in per part)
        self._bodies: list[bytearray] = []
        self._sent = 0  # parts before this one are over, their bodies dropped or kept as spares
        self._spare: list[bytearray] = []
        self._upload_id: str | None = None
        # the upload's start (S3: CreateMultipartUpload), in flight while the writer goes on;
        # each part awaits it on the loop
        self._begun: concurrent.futures.Future[str] | None = None
        self._parts: list[concurrent.futures.Future[dict[str, Any]]] = []
        self._window = window or (lambda: upload_window(budget))  # asked before each part

    def _fresh(self) -> bytearray:
        """An empty part-sized body: one whose upload is over (at most two are kept for
        this), else a new one."""
        part = self.budget.part_bytes
        behind = True  # every part before this one is sent (``_sent`` moves past them)
        for i in range(self._sent, len(self._parts)):
            if not self._parts[i].done():
                behind = False  # a slow part: the ones sent after it are dropped all the same
                continue
            body, self._bodies[i] = self._bodies[i], bytearray()  # sent: its bytes are not needed again
            if behind:
                self._sent = i + 1
            if len(body) == part and len(self._spare) < 2:
                self._spare.append(body)
        return self._spare.pop() if self._spare else KEPT_BODIES.take(part)

    async def _call(self, method: str, **kwargs: Any) -> Any:
        # s3fs retries (throttling, dropped connections) and adds its request defaults (SSE ...)
        return await self.fs._call_s3(method, Bucket=self.bucket, Key=self.key, **kwargs)

    async def _upload_part(self, number: int, data: bytearray) -> dict[str, Any]:
        out = await self._call("upload_part", PartNumber=number, UploadId=self._upload_id, Body=data)
        return {"PartNumber": number, "ETag": out["ETag"]}

    async def _begin(self) -> str:
        """Start the multipart upload; its id."""
        return str((await self._call("create_multipart_upload"))["UploadId"])

    async def _part(self, number: int, data: bytearray) -> dict[str, Any]:
        """Upload one part once the upload has started."""
        if self._upload_id is None:
            assert self._begun is not None
            # shielded: a part cancelled (abort) leaves the start to finish, so it can be aborted
            self._upload_id = await asyncio.shield(asyncio.wrap_future(self._begun))
        return await self._upload_part(number, data)

    async def _complete(self, parts: list[dict[str, Any]]) -> None:
        try:
            await self._call("complete_multipart_upload", UploadId=self._upload_id,
                             MultipartUpload={"Parts": parts})
        except FileNotFoundError:
            # NoSuchUpload: a retry of a completion that landed (its answer lost) finds the
            # upload gone. Ours if the object's ETag is this upload's (MD5 of the parts' MD5s)
            if not await self._completed(parts):
                raise

    async def _completed(self, parts: list[dict[str, Any]]) -> bool:
        try:
            head = await self.fs._call_s3("head_object", Bucket=self.bucket, Key=self.key)
        except FileNotFoundError:
            return False
        try:
            digests = b"".join(bytes.fromhex(str(p["ETag"]).strip('"')) for p in parts)
        except ValueError:  # not MD5s (SSE-KMS): cannot tell
            return False
        return str(head.get("ETag", "")).strip('"') == f"{hashlib.md5(digests).hexdigest()}-{len(parts)}"

    async def _cancel(self) -> None:
        await self._call("abort_multipart_upload", UploadId=self._upload_id)

    def _start_part(self, data: bytearray) -> None:
        if self._begun is None:
            self._begun = submit(self.fs, self._begin())  # not waited for: the parts await it
        window = self._window()
        while sum(not f.done() for f in self._parts) >= window:
            concurrent.futures.wait([f for f in self._parts if not f.done()],
                                    return_when=concurrent.futures.FIRST_COMPLETED)
        for f in self._parts:  # a failed part fails the write now
            if f.done():
                f.result()
        self._parts.append(submit(self.fs, self._part(len(self._parts) + 1, data)))
        self._bodies.append(data)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            with self._typed("write"):
                self._finish()
        except BaseException:
            self._abort()
            raise
        else:
            # every part is sent (its future done, its request over): the bodies serve the next upload
            held = [self._held] if self._held is not None else []  # the object went as one PUT
            KEPT_BODIES.give([*self._bodies, *self._spare, *held], self.budget.part_bytes,
                             self.budget.max_bytes)
        finally:
            self._drop_buffers()
            self.fs.invalidate_cache(self.path)

    def _drop_buffers(self) -> None:
        self._cur, self._fill, self._bodies, self._spare, self._sent = bytearray(), 0, [], [], 0
        self._held = None

    def _finish(self) -> None:
        """The last parts and the completion (or the one PUT of a small object)."""
        whole = self.whole_object()
        if whole is not None:
            run(self.fs, self.fs._pipe_file, self.path, bytes(whole))
            return
        self._send_held()
        last = self._cur
        try:
            del last[self._fill:]  # the last part: what was filled (no copy)
        except BufferError:  # a view aiohttp took of it when it was sent before is still alive
            last = PartBody(memoryview(last)[:self._fill])
        if last:
            self._start_part(last)
        done = [f.result() for f in self._parts]
        self._upload_id = self._begun.result()
        run(self.fs, self._complete, done)
        self.parts_uploaded = len(done)

    def _abort(self) -> None:
        for f in self._parts:
            f.cancel()
        # a cancelled future of the loop counts as done for ``wait`` only once its task has
        # ended: the abort goes out after the parts' requests are over
        concurrent.futures.wait(self._parts)
        begun, self._begun = self._begun, None
        if begun is not None:
            try:
                self._upload_id = begun.result()  # not started (it failed): nothing to abort
                run(self.fs, self._cancel)
            except Exception:  # noqa: BLE001 - best effort; the lifecycle rule of the bucket cleans up
                pass
            self._upload_id = None

    def discard(self) -> None:
        """Give the object up: abort the multipart upload, write nothing."""
        if not self.closed:
            self.closed = True
            self._abort()
            self._drop_buffers()


class AzureUpload(S3Upload):
    """``S3Upload`` on Azure Blob storage: the parts are blocks (Put Block, several in flight)
    committed in order by one Put Block List at ``close``; an object of at most two parts is one
    Put Blob. ``discard`` commits nothing: Azure drops uncommitted blocks itself (after a week,
    or at the blob's next commit), and has no call to abort them."""

    async def _begin(self) -> str:
        return uuidlib.uuid4().hex  # this upload's block ids: base64 of "<hex>-<part number>"

    def _block_id(self, number: int) -> str:
        return base64.b64encode(f"{self._upload_id}-{number:06d}".encode()).decode()

    async def _upload_part(self, number: int, data: bytearray) -> dict[str, Any]:
        block = self._block_id(number)
        async with self.fs.service_client.get_blob_client(container=self.bucket, blob=self.key) as bc:
            await bc.stage_block(block_id=block, data=data)
        return {"id": block}

    async def _complete(self, parts: list[dict[str, Any]]) -> None:
        from azure.storage.blob import BlobBlock

        async with self.fs.service_client.get_blob_client(container=self.bucket, blob=self.key) as bc:
            await bc.commit_block_list([BlobBlock(block_id=p["id"]) for p in parts])

    async def _cancel(self) -> None:
        return None
