"""A task's large outputs on S3 and Azure uploaded through obstore (the Rust object_store
crate's multipart writer, as pylance uploads), where ``io.obstore_reads`` can carry the options
(on Azure the parts are blocks and the completion a Put Block List, as with adlfs).

Why: through s3fs every 8 MiB part costs the event-loop thread botocore's request building and
signing plus aiohttp's join of the body with its headers - ~0.2 s of CPU for a 60 MB output
against obstore's ~0.08 s, on the same cores that decode and encode (``bench/io_carrier_bench.py
--upload``). The bytes are copied once, into a part body, as with ``remote.S3Upload``; obstore
sends that body without a copy and drops it when its part is uploaded.

Same contract as ``remote.S3Upload``: parts upload while the writer goes on, at most
``upload_window`` of them in flight; an object of at most two parts is one PUT at ``close``;
``discard`` (or a failure) aborts the multipart upload.
"""

from __future__ import annotations

import concurrent.futures
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import timedelta
from typing import Any

from lance_spark_ops.cache import region
from lance_spark_ops.io.budget import IOBudget, upload_window
from lance_spark_ops.io.obstore_reads import OPTION_NAMES, azure_config, cached_store
from lance_spark_ops.io.options import CLIENT_SETTINGS, plain_options
from lance_spark_ops.io.remote import KEPT_BODIES, PartStream, bounded
from lance_spark_ops.io.retries import retry_limits

# the options an upload through obstore honours as s3fs would: credentials, endpoint and region
# (``s3_config``), client settings both ignore or obstore takes (``client_options``), and keys
# of commits, not of uploads. Any other - server-side encryption, a checksum algorithm, fsspec's
# own ``s3_additional_kwargs`` ... - keeps the uploads on s3fs, which applies them to every request
_UPLOAD_NEUTRAL = frozenset({*OPTION_NAMES, *CLIENT_SETTINGS,
                             "aws_conditional_put", "conditional_put", "dynamodb_endpoint",
                             "aws_copy_if_not_exists", "copy_if_not_exists", "aws_bucket", "aws_bucket_name",
                             "bucket", "bucket_name"})

# stores by bucket and options, kept for the process (their connections outlive a task)
_STORES = region("io.obstore_writers", max_entries=16)


def retry_config(storage_options: Mapping[str, Any]) -> dict[str, Any]:
    """pylance's ``client_max_retries`` / ``client_retry_timeout`` (seconds), with its defaults
    (10 retries within 180 s): an upload has no other carrier to fall back to."""
    retries, timeout_s = retry_limits(storage_options)
    return {"max_retries": retries, "retry_timeout": timedelta(seconds=timeout_s)}


def s3_write_store(bucket: str, storage_options: Mapping[str, Any]) -> Any | None:
    """An obstore ``S3Store`` of ``bucket`` for uploads under these options, or None (s3fs
    uploads: the carrier is turned off, obstore is missing, the options need botocore, or one
    of them is not ``_UPLOAD_NEUTRAL``)."""
    if any(str(k).lower() not in _UPLOAD_NEUTRAL for k in plain_options(dict(storage_options))):
        return None
    return cached_store(_STORES, bucket, storage_options, retry_config(storage_options), _s3_store)


def _s3_store(bucket: str, config: dict[str, Any], client: dict[str, Any], retry: dict[str, Any]) -> Any:
    from obstore.store import S3Store

    return S3Store(bucket, config=config, client_options=client, retry_config=retry)


def azure_write_store(container: str, storage_options: Mapping[str, Any]) -> Any | None:
    """An obstore ``AzureStore`` of ``container`` for uploads under these options, or None (adlfs
    block uploads: the carrier is turned off, obstore is missing, or the options need adlfs -
    ``obstore_reads.azure_config`` takes only options obstore honours as adlfs does)."""
    return cached_store(_STORES, container, storage_options, retry_config(storage_options), _azure_store,
                        azure_config)


def _azure_store(container: str, config: dict[str, Any], client: dict[str, Any],
                 retry: dict[str, Any]) -> Any:
    from obstore.store import AzureStore

    return AzureStore(container, config=config, client_options=client, retry_config=retry)


def _released(bodies: list[bytearray], i: int) -> bool:
    """Whether obstore is done with ``bodies[i]``: while a part is in flight, its buffer export
    holds a reference to the body; the list and this call's argument are the only others."""
    return sys.getrefcount(bodies[i]) <= 2


class ObstoreUpload(PartStream):
    """A writable stream into one S3 or Azure object through an obstore store (see the module
    docstring). Parts are handed to obstore's writer on a thread of their own, so the upload's
    start (CreateMultipartUpload) and a full window wait there, not in the encoder."""

    def __init__(self, store: Any, key: str, budget: IOBudget,
                 typed: Callable[[str], AbstractContextManager[None]] = lambda op: nullcontext(),
                 on_close: Callable[[], None] = lambda: None) -> None:
        super().__init__(budget, typed)
        self._store, self._key, self._on_close = store, key, on_close
        self._bodies: list[bytearray] = []  # bodies handed to obstore; reused once it lets them go
        self._writer: Any = None
        self._thread: concurrent.futures.ThreadPoolExecutor | None = None
        self._handed: concurrent.futures.Future[Any] | None = None  # the last part handed over

    def _fresh(self) -> bytearray:
        part = self.budget.part_bytes
        for i in range(len(self._bodies)):
            if _released(self._bodies, i):
                return self._bodies.pop(i)
        return KEPT_BODIES.take(part)

    def _start_part(self, body: bytearray | memoryview) -> None:
        """Give one part to obstore's writer, after the previous one was taken (a failure of
        the upload so far is raised here). The upload holds the ``upload_window`` parts that
        fit its share besides the one being filled: obstore keeps all but one of them in flight
        and one waits for it on the hand-over thread (a window of one part: that part is in
        flight and the hand-over is waited for here)."""
        import obstore

        window = upload_window(self.budget)
        if self._writer is None:
            self._writer = obstore.open_writer(self._store, self._key, buffer_size=self.budget.part_bytes,
                                               max_concurrency=max(1, window - 1))
            self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="lso-upload")
        if self._handed is not None:
            self._handed.result()
        assert self._thread is not None
        self._handed = self._thread.submit(self._writer.write, body)
        if window == 1:
            self._handed.result()
        if isinstance(body, bytearray):
            self._bodies.append(body)

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
            bodies = self._bodies
            bodies.append(self._cur)
            if self._held is not None:  # the object went as one PUT
                bodies.append(self._held)
            self._cur, self._held = bytearray(), None
            KEPT_BODIES.give([bodies[i] for i in range(len(bodies)) if _released(bodies, i)],
                             self.budget.part_bytes, self.budget.max_bytes)
        finally:
            self._drop()
            self._on_close()

    def _finish(self) -> None:
        import obstore

        whole = self.whole_object()
        if whole is not None:
            obstore.put(self._store, self._key, whole, use_multipart=False)
            return
        self._send_held()
        if self._fill:
            self._start_part(memoryview(self._cur)[:self._fill])
        assert self._handed is not None
        self._handed.result()
        try:
            self._writer.close()  # the last part, then CompleteMultipartUpload
        except Exception:
            if not self._landed():
                raise
        self.parts_uploaded = -(-self._pos // self.budget.part_bytes)

    def _landed(self) -> bool:
        """Whether the object is there with every byte written although the completion failed:
        S3 answers a completion retried after its first try landed (the answer lost) with
        NoSuchUpload. The writers' keys are fresh (a data or index file's UUID name), so an
        object of exactly this size under the key is this upload's."""
        import obstore

        try:
            return int(obstore.head(self._store, self._key)["size"]) == self._pos
        except Exception:  # noqa: BLE001 - not there (or not reachable): the completion's error stands
            return False

    def _abort(self) -> None:
        writer, self._writer = self._writer, None
        if writer is None:
            return
        try:
            if self._handed is not None:
                concurrent.futures.wait([self._handed])
            writer.__exit__(RuntimeError, RuntimeError("upload discarded"), None)  # AbortMultipartUpload
        except Exception:  # noqa: BLE001 - best effort; the bucket's lifecycle rule cleans up
            pass

    def _drop(self) -> None:
        if self._thread is not None:
            self._thread.shutdown(wait=False)
        self._thread, self._handed = None, None
        self._cur, self._fill, self._bodies, self._held = bytearray(), 0, [], None

    def discard(self) -> None:
        """Give the object up: abort the multipart upload, write nothing."""
        if not self.closed:
            self.closed = True
            self._abort()
            self._drop()


# Azure's Blob Batch takes at most 256 sub-requests
AZURE_DELETE_BATCH = 256


async def delete_azure(store: Any, container: str, paths: Sequence[str], budget: IOBudget,
                       one_by_one: Callable[[Sequence[str]], Awaitable[list[tuple[str, str]]]]
                       ) -> list[tuple[str, str]]:
    """Delete ``paths`` (``container/key``) through obstore's Azure store: Blob Batch requests
    of up to 256 deletes (where adlfs sends one request a blob), ``budget.max_requests`` in
    flight. A batch that fails in any part - a blob already gone is reported as a failure there,
    after the rest of the batch was deleted - goes again through ``one_by_one`` (adlfs, one
    request a blob, missing ones no error), which names each path that fails. Returns (path,
    error) of those."""
    import obstore

    prefix = f"{container}/"

    async def batch(chunk: Sequence[str]) -> list[tuple[str, str]]:
        try:
            await obstore.delete_async(store, [p[len(prefix):] for p in chunk])
            return []
        except Exception:  # noqa: BLE001 - deletes are idempotent: adlfs reports per path
            return await one_by_one(chunk)

    step = AZURE_DELETE_BATCH
    calls = [batch(paths[i:i + step]) for i in range(0, len(paths), step)]
    return [f for part in await bounded(calls, budget.max_requests) for f in part]
