"""A task's large outputs on S3 uploaded through obstore (the Rust object_store crate's
multipart writer, as pylance uploads), where ``io.obstore_reads`` can carry the options.

Why: through s3fs every 8 MiB part costs the event-loop thread botocore's request building and
signing plus aiohttp's join of the body with its headers - ~0.2 s of CPU for a 60 MB output
against obstore's ~0.08 s, on the same cores that decode and encode (``bench/io_carrier_bench.py
--upload``). The bytes are copied once, into a part body, as with ``remote.S3Upload``; obstore
sends that body without a copy and drops it when its part is uploaded.

Same contract as ``remote.S3Upload``: parts upload while the writer goes on, at most
``upload_window`` of them in flight; an object of at most one part is one PUT at ``close``;
``discard`` (or a failure) aborts the multipart upload.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import sys
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from datetime import timedelta
from typing import Any

import numpy as np

from lance_spark_ops.cache import region
from lance_spark_ops.io.budget import IOBudget, upload_window
from lance_spark_ops.io.obstore_reads import CARRIER_ENV, OPTION_NAMES, client_options, s3_config
from lance_spark_ops.io.options import CLIENT_SETTINGS, plain_options
from lance_spark_ops.io.remote import KEPT_BODIES

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
    opts = plain_options(dict(storage_options))
    return {"max_retries": int(opts.get("client_max_retries") or 10),
            "retry_timeout": timedelta(seconds=float(opts.get("client_retry_timeout") or 180))}


def s3_write_store(bucket: str, storage_options: Mapping[str, Any]) -> Any | None:
    """An obstore ``S3Store`` of ``bucket`` for uploads under these options, or None (s3fs
    uploads: the carrier is turned off, obstore is missing, the options need botocore, or one
    of them is not ``_UPLOAD_NEUTRAL``)."""
    if os.environ.get(CARRIER_ENV, "").strip().lower() == "fsspec":
        return None
    if any(str(k).lower() not in _UPLOAD_NEUTRAL for k in plain_options(dict(storage_options))):
        return None
    config = s3_config(storage_options)
    if config is None:
        return None
    client, retry = client_options(storage_options, config.get("endpoint")), retry_config(storage_options)
    # keyed by a digest: the key would otherwise hold the secret in clear in the cache's index
    key = hashlib.sha256(repr((bucket, sorted(config.items()), sorted(client.items()),
                               sorted(retry.items()))).encode()).hexdigest()
    store = _STORES.get(key)
    if store is None:
        try:
            from obstore.store import S3Store

            store = S3Store(bucket, config=config, client_options=client, retry_config=retry)
        except Exception:  # noqa: BLE001 - obstore missing, or a config it refuses: s3fs uploads
            return None
        _STORES.put(key, store, 1 << 16)
    return store


def _released(bodies: list[bytearray], i: int) -> bool:
    """Whether obstore is done with ``bodies[i]``: while a part is in flight, its buffer export
    holds a reference to the body; the list and this call's argument are the only others."""
    return sys.getrefcount(bodies[i]) <= 2


class ObstoreUpload:
    """A writable stream into one S3 object through an obstore store (see the module
    docstring). Parts are handed to obstore's writer on a thread of their own, so the upload's
    start (CreateMultipartUpload) and a full window wait there, not in the encoder."""

    def __init__(self, store: Any, key: str, budget: IOBudget,
                 typed: Callable[[str], AbstractContextManager[None]] = lambda op: nullcontext(),
                 on_close: Callable[[], None] = lambda: None) -> None:
        self._store, self._key, self.budget = store, key, budget
        self._typed, self._on_close = typed, on_close
        self._cur: bytearray = bytearray()
        self._fill = 0
        self._bodies: list[bytearray] = []  # bodies handed to obstore; reused once it lets them go
        self._writer: Any = None
        self._thread: concurrent.futures.ThreadPoolExecutor | None = None
        self._handed: concurrent.futures.Future[Any] | None = None  # the last part handed over
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
        part = self.budget.part_bytes
        for i in range(len(self._bodies)):
            if _released(self._bodies, i):
                return self._bodies.pop(i)
        return KEPT_BODIES.take(part)

    def write(self, data: Any) -> int:
        """Copy ``data`` into the part being filled; a full part goes to obstore when more
        follows (the last part may be of any size)."""
        mv = memoryview(data).cast("B")
        n, at = len(mv), 0
        part = self.budget.part_bytes
        while at < n:
            if self._fill == part:
                with self._typed("write"):
                    self._hand(self._cur)
                self._cur, self._fill = self._fresh(), 0
            if not self._cur:
                self._cur = self._fresh()
            k = min(part - self._fill, n - at)
            # numpy's copy lets go of the GIL (a slice assignment holds it)
            np.copyto(np.frombuffer(self._cur, np.uint8, k, self._fill), np.frombuffer(mv, np.uint8, k, at))
            self._fill += k
            at += k
        self._pos += n
        return n

    def _hand(self, body: bytearray | memoryview) -> None:
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
            self._cur = bytearray()
            KEPT_BODIES.give([bodies[i] for i in range(len(bodies)) if _released(bodies, i)],
                             self.budget.part_bytes, self.budget.max_bytes)
        finally:
            self._drop()
            self._on_close()

    def _finish(self) -> None:
        import obstore

        if self._writer is None:
            obstore.put(self._store, self._key, memoryview(self._cur)[:self._fill], use_multipart=False)
            return
        if self._fill:
            self._hand(memoryview(self._cur)[:self._fill])
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
        self._cur, self._fill, self._bodies = bytearray(), 0, []

    def discard(self) -> None:
        """Give the object up: abort the multipart upload, write nothing."""
        if not self.closed:
            self.closed = True
            self._abort()
            self._drop()

    def __enter__(self) -> ObstoreUpload:
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.discard()

