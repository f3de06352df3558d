"""fsspec-backed object store: ranged reads (coalesced), whole-object writes, atomic
put-if-not-exists, listing and deletion.

Local paths, ``file://`` and ``memory://`` work out of the box; ``s3://`` (extra ``[s3]``:
s3fs), ``gs://`` (``[gcs]``: gcsfs) and ``az://`` (``[azure]``: adlfs) when their filesystem
package is installed. ``storage_options`` take pylance's names (``aws_endpoint``,
``aws_access_key_id`` ...) or the backend's own; ``io.options`` translates them. Their values
never appear in reprs or errors.

Vended credentials (``expires_at_millis`` in the options) with a provider beside them
(``io.options.PROVIDER_KEY``): ``fs`` asks the provider for fresh options once they are within
its refresh offset of expiring, and continues on a filesystem built from those - in the driver
and in every executor that received the options, so a job that outlives its credentials
finishes.

Object stores (async fsspec backends): the coalesced requests of ``read_ranges`` go out
concurrently within the store's ``io.budget`` (requests and bytes in flight); a footer is one
suffix request (``read_tail``), or one ranged read when the size is known (``note_size``: the
manifest's ``file_size_bytes``, so no size request per data file); large outputs upload their
parts concurrently (``open_output``); ``delete_many`` batches (S3 DeleteObjects, 1 000 keys a
call); ``prefetch`` fetches whole objects a task will read, ahead of its reads (``io.prefetch``).

Conditional puts: local files use ``os.link``; S3 / GCS / Azure the backend's ``mode="create"``
(S3 ``If-None-Match: *``, as pylance 14 does; GCS ``ifGenerationMatch=0``; Azure
``If-None-Match: *``). Any other backend, or S3 with ``aws_conditional_put=disabled``, has
none: ``put_if_not_exists`` refuses (UnsupportedError) rather than risk a lost commit.
"""

from __future__ import annotations

import os
import posixpath
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, overload
from urllib.parse import parse_qsl

import fsspec
import numpy as np
import pyarrow as pa

from lance_spark_ops.errors import (
    AccessDeniedError,
    CommitConflict,
    CorruptFileError,
    LanceError,
    NotFoundError,
    UnsupportedError,
    WriteRefused,
)
from lance_spark_ops.io import obstore_lists, remote, s3_session
from lance_spark_ops.io.budget import IOBudget, io_budget, upload_window
from lance_spark_ops.io.denied import access_denied, all_refused, botocore_answer
from lance_spark_ops.io.obstore_reads import AZURE_PROTOCOLS
from lance_spark_ops.io.options import (
    PROVIDER_KEY,
    conditional_put_disabled,
    expiry_of,
    filesystem_class,
    fsspec_options,
    plain_options,
    redact,
    refresh_at,
)
from lance_spark_ops.io.retries import retry_adlfs_as_object_store, retry_limits
from lance_spark_ops.io.tails import TailFetcher

# Ranges closer than this are fetched in one request (cloud stores charge per request).
DEFAULT_COALESCE_GAP = 64 * 1024
# ... but a coalesced request never grows beyond this.
DEFAULT_MAX_COALESCED = 16 * 1024 * 1024
# On an object store a round trip costs more than reading a few hundred KB more: a wider gap.
REMOTE_COALESCE_GAP = 1024 * 1024
# Object sizes a store remembers (``note_size``); beyond that it forgets them all.
_SIZES_KEPT = 1 << 16
# backends whose pipe_file(mode="create") is an atomic create-if-absent on the server
_CONDITIONAL_PUT = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss"})
# where obstore may carry a task's reads (``io.obstore_reads``)
_OBSTORE_PROTOCOLS = frozenset({"s3", "s3a", "az", "abfs", "abfss"})
_REFRESH_LOCK = threading.Lock()  # stores shared by threads refresh once
_EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "az": "azure", "abfs": "azure",
           "abfss": "azure"}


def coalesce_ranges(
    ranges: Sequence[tuple[int, int]],
    gap: int = DEFAULT_COALESCE_GAP,
    max_size: int = DEFAULT_MAX_COALESCED,
) -> list[tuple[int, int, list[int]]]:
    """Merge (offset, size) ranges that are near each other.

    Returns ``(start, end, member_indices)`` per request, in file order.
    """
    order = sorted(range(len(ranges)), key=lambda i: ranges[i][0])
    out: list[tuple[int, int, list[int]]] = []
    for i in order:
        start, size = ranges[i]
        end = start + size
        if out:
            cstart, cend, members = out[-1]
            if start <= cend + gap and max(cend, end) - cstart <= max_size:
                out[-1] = (cstart, max(cend, end), [*members, i])
                continue
        out.append((start, end, [i]))
    return out


class ScratchBuffer:
    """A read buffer reused from one ``read_ranges`` call to the next (binary copy, whose
    bytes are written out before the next read). A fresh buffer per request of several MB is
    mapped, faulted in and zeroed by the kernel each time: measured 2-3 s of system time per
    1.9 GB copied from the page cache, against 0.4 s through one reused buffer."""

    def __init__(self) -> None:
        self._buf = np.empty(0, dtype=np.uint8)

    def get(self, size: int) -> np.ndarray:
        """``size`` bytes of the buffer (grown when smaller; the old contents are not kept)."""
        if len(self._buf) < size:
            self._buf = np.empty(size, dtype=np.uint8)
        return self._buf[:size]


def _s3_answer(e: BaseException) -> tuple[str, int | None] | None:
    """The error code and HTTP status of the botocore error behind ``e`` (None: not one)."""
    return botocore_answer(e.__cause__ or e.__context__)


def _lost_condition(e: BaseException) -> bool:
    """An S3 error saying the conditional put surely did not land: 412 (the object exists) or
    409 ConditionalRequestConflict (a concurrent conditional put is in flight)."""
    answer = _s3_answer(e)
    if answer is None:
        return False
    code, status = answer
    return code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412)


# S3 answers that say the request was turned away before it was acted on: throttling (503
# SlowDown, "reduce your request rate"; ServiceUnavailable is the same 503). A 500
# InternalError is not among them: AWS says such a request may have been carried out.
_REFUSED_CODES = frozenset({"SlowDown", "ServiceUnavailable"})


def _refused(e: BaseException) -> bool:
    """An S3 error saying the put was refused unexecuted (503): nothing was stored by it."""
    answer = _s3_answer(e)
    if answer is None:
        return False
    code, status = answer
    return code in _REFUSED_CODES or (status == 503 and code in ("", "503"))


_O_READ = os.O_RDONLY | getattr(os, "O_BINARY", 0)


def _pread(fd: int, size: int, offset: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, size, offset)
    os.lseek(fd, offset, os.SEEK_SET)  # Windows has no pread
    return os.read(fd, size)


def _pread_all(fd: int, size: int, offset: int) -> bytes:
    """``size`` bytes at ``offset`` (fewer at the end of the file), however the kernel splits them."""
    data = _pread(fd, size, offset)
    if len(data) == size or not data:
        return data
    parts = [data]
    got = len(data)
    while got < size:
        more = _pread(fd, size - got, offset + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def _split_protocol(uri: str) -> tuple[str, str]:
    if "://" in uri:
        proto, rest = uri.split("://", 1)
        return proto, rest
    return "file", os.path.abspath(uri)


class _TypedOutput:
    """An fsspec output stream of a remote store whose failures (opening, a write, the upload
    at ``close``) are ``ObjectStore._typed``'s errors naming the object, not the backend's."""

    def __init__(self, store: ObjectStore, rel: str, raw: Any) -> None:
        self._store, self._rel, self._raw = store, rel, raw

    def write(self, data: Any) -> int:
        with self._store._typed("write", self._rel):
            return self._raw.write(data)

    def close(self) -> None:
        with self._store._typed("write", self._rel):
            self._raw.close()

    def tell(self) -> int:
        return self._raw.tell()

    def flush(self) -> None:
        with self._store._typed("write", self._rel):
            self._raw.flush()

    def writable(self) -> bool:
        return True

    @property
    def closed(self) -> bool:
        return bool(self._raw.closed)

    def __enter__(self) -> _TypedOutput:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _tail_start(size: int, max_size: int, whole_below: int) -> int:
    """Where ``read_tail`` of an object of ``size`` bytes starts: 0 for a small one (at most
    ``whole_below``), else its last ``max_size`` bytes."""
    return 0 if size <= whole_below else max(0, size - max_size)


@dataclass(repr=False)
class ObjectStore:
    """An fsspec filesystem plus a root URI; paths given to methods are relative to the root
    unless they are absolute URIs."""

    root: str
    storage_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.protocol, root_path = _split_protocol(self.root)
        # "s3+ddb://bkt/ds?ddbTableName=T": s3 data, versions in an external store ("ddb", its query)
        self.external_scheme: str | None = None
        self.external_params: dict[str, str] = {}
        if "+" in self.protocol:
            self.protocol, self.external_scheme = self.protocol.split("+", 1)
            root_path, _, query = root_path.partition("?")
            self.external_params = dict(parse_qsl(query, keep_blank_values=True))
        self.root_path = root_path.rstrip("/") or "/"
        self._provider = self.storage_options.get(PROVIDER_KEY)
        self._refresh_at = self._when(self.storage_options)
        self._fs = self._filesystem()
        self.budget: IOBudget = io_budget(self.protocol in ("file", "local", "memory"))
        self._sizes: dict[str, int] = {}  # full path -> size, from the manifest (note_size)
        self._prefetcher: Any = None
        self._tails: TailFetcher | None = None  # footer reads fetched ahead (``prefetch_tails``)
        self._direct: tuple[int, Any] | None = None  # (id of the options, their obstore reader or None)

    def _when(self, options: dict[str, Any]) -> float | None:
        """When this store asks its provider for fresh options (None: never)."""
        expires = expiry_of(options) if self._provider is not None else None
        return None if expires is None else refresh_at(expires, self._provider.refresh_offset_s, time.time())

    def _filesystem(self) -> Any:
        kwargs = fsspec_options(self.protocol, self.storage_options)
        if self.protocol in ("s3", "s3a"):
            # botocore's pool holds 10 connections: more requests in flight would queue for one
            config = kwargs["config_kwargs"] = dict(kwargs.get("config_kwargs") or {})
            config.setdefault("max_pool_connections", max(64, 2 * io_budget(False).max_requests))
            if s3_session.http_session_class() is not None:  # one CA bundle parse per process
                config.setdefault("http_session_cls", s3_session.http_session_class())
        elif self.protocol in AZURE_PROTOCOLS:
            # fsspec keeps one adlfs instance per set of its options, and the retry limits are set
            # on that instance's client (below): stores whose limits differ need one each. adlfs
            # keeps options it does not know and passes them nowhere.
            kwargs["lso_retry_limits"] = retry_limits(self.storage_options)
        try:
            cls = filesystem_class(self.protocol, kwargs)
            fs = fsspec.filesystem(self.protocol, **kwargs) if cls is None else cls(**kwargs)
        except ImportError as e:
            extra = _EXTRAS.get(self.protocol)
            hint = f"; pip install lance-spark-ops[{extra}]" if extra else ""
            raise UnsupportedError(f"no filesystem package for {self.protocol}:// is installed{hint}",
                                   path=self.root) from e
        except ValueError as e:
            raise UnsupportedError(f"unknown storage protocol {self.protocol!r}", path=self.root) from e
        if self.protocol in ("s3", "s3a"):
            s3_session.prime(fs)  # botocore's parsed data shared by the process's S3 clients
        elif remote.is_azure(fs):
            retry_adlfs_as_object_store(fs, self.storage_options)  # not the SDK's 18 s waits
        return fs

    @property
    def fs(self) -> Any:
        """The fsspec filesystem; rebuilt on fresh credentials when the vended ones are due
        (see the module docstring): every request goes through here, so none uses expired ones."""
        due = self._refresh_at
        if due is not None and time.time() >= due:
            with _REFRESH_LOCK:
                if self._refresh_at is not None and time.time() >= self._refresh_at:
                    fresh = self._provider.storage_options()
                    if fresh is None:  # this process cannot ask (see the provider): carry on as is
                        self._refresh_at = None
                    else:
                        fresh = {**plain_options(fresh), PROVIDER_KEY: self._provider}
                        if plain_options(fresh) != plain_options(self.storage_options):
                            self.storage_options = fresh
                            self._fs = self._filesystem()
                        self._refresh_at = self._when(fresh)
        return self._fs

    @fs.setter
    def fs(self, value: Any) -> None:
        self._fs = value

    def __repr__(self) -> str:
        return f"ObjectStore({self.root!r}, {redact(plain_options(self.storage_options))!r})"

    @property
    def conditional_put(self) -> bool:
        """Whether ``put_if_not_exists`` is atomic here (see the module docstring)."""
        if self.protocol in ("file", "local", "memory"):
            return True
        return self.protocol in _CONDITIONAL_PUT and not conditional_put_disabled(self.storage_options)

    @property
    def lists_in_key_order(self) -> bool:
        """Whether a listing comes in key order, so that one page of ``_versions/`` under the V2
        naming scheme holds the newest versions: S3, GCS and Azure list so, an S3 Express One
        Zone directory bucket (a name ending in ``--x-s3``, or the ``s3_express`` option) does not,
        and there pylance reads the whole listing too."""
        if self.protocol not in ("s3", "s3a"):
            return True
        bucket = self.root_path.lstrip("/").split("/", 1)[0]
        flag = next((self.storage_options.get(k) for k in ("s3_express", "aws_s3_express")
                     if k in self.storage_options), None)
        return not (bucket.endswith("--x-s3") or str(flag).strip().lower() == "true")

    # -- paths -----------------------------------------------------------
    @classmethod
    def for_file(cls, uri: str, storage_options: dict[str, Any] | None = None) -> tuple[ObjectStore, str]:
        """Store rooted at the parent of ``uri`` and the file's name inside it."""
        proto, path = _split_protocol(uri)
        parent, name = posixpath.split(path.rstrip("/"))
        prefix = "" if proto == "file" and "://" not in uri else f"{proto}://"
        return cls(f"{prefix}{parent}", storage_options or {}), name

    def full_path(self, rel: str) -> str:
        if "://" in rel:
            return _split_protocol(rel)[1]
        if rel.startswith("/"):
            return rel
        if not rel:
            return self.root_path
        # posixpath.join's result (root_path never ends in "/" but for "/" itself), cheaper:
        # paths are built several times per data file
        return self.root_path + rel if self.root_path == "/" else f"{self.root_path}/{rel}"

    def uri(self, rel: str) -> str:
        path = self.full_path(rel)
        return path if self.protocol == "file" else f"{self.protocol}://{path}"

    # -- reads -----------------------------------------------------------
    @contextmanager
    def _typed(self, op: str, rel: str) -> Iterator[None]:
        """A missing object -> NotFoundError; access refused (credentials, policy, a local
        file's permissions) -> AccessDeniedError; any other failure of a remote store
        (unreachable, throttled ...) -> LanceError naming the operation and object. Other local
        errors pass unchanged. Messages come from the backend and hold no credentials."""
        try:
            yield
        except (LanceError, FileExistsError):
            raise
        except (FileNotFoundError, NotADirectoryError) as e:  # the latter: a parent is a plain file
            raise NotFoundError("file not found", path=self.uri(rel)) from e
        except Exception as e:
            if access_denied(e):
                raise AccessDeniedError(f"{op} refused: {type(e).__name__}: {e}", path=self.uri(rel)) from e
            if self.protocol in ("file", "local", "memory"):
                raise
            raise LanceError(f"{op} failed: {type(e).__name__}: {e}", path=self.uri(rel)) from e

    @property
    def is_local(self) -> bool:
        """Local files: reads skip fsspec (its per-call path handling costs more than the read
        of a small file, paid several times per data file on datasets of many small ones)."""
        return self.protocol in ("file", "local")

    def note_size(self, rel: str, size: int | None) -> None:
        """Remember an object's size (the manifest's ``file_size_bytes`` of a data file): its
        footer is then one ranged read and ``size`` asks nothing."""
        if size and not self.is_local:
            if len(self._sizes) >= _SIZES_KEPT:
                self._sizes.clear()
            self._sizes[self.full_path(rel)] = int(size)

    def _remote_async(self) -> bool:
        return not self.is_local and self.protocol != "memory" and remote.is_async(self.fs)

    def size(self, rel: str) -> int:
        with self._typed("size", rel):
            if self.is_local:
                return os.stat(self.full_path(rel)).st_size
            known = self._sizes.get(self.full_path(rel))
            if known is not None:
                return known
            return int(self.fs.size(self.full_path(rel)))

    # -- prefetch --------------------------------------------------------
    def prefetch(self, items: Iterable[tuple[str, int | None]]) -> None:
        """Fetch these whole objects ((rel, size) in the order they will be read; size None when
        unknown) ahead of their reads, within the byte budget; a no-op on local and non-async
        stores (``io.prefetch``)."""
        if not self._remote_async():
            return
        from lance_spark_ops.io.prefetch import Prefetcher

        if self._prefetcher is None:
            self._prefetcher = Prefetcher(self.fs, self.budget, self._bulk_reader())
        got = []
        for rel, size in items:
            self.note_size(rel, size)
            got.append((self.full_path(rel), int(size) if size else None))
        self._prefetcher.schedule(got)

    def prefetch_tails(self, items: Iterable[tuple[str, int]], max_size: int) -> None:
        """Fetch the last ``max_size`` bytes of these objects ((rel, size), sizes known) ahead of
        their ``read_tail``, many in flight at once (``io.tails``): a task opening several files
        too big to prefetch whole then waits one round trip for all their footers. At most an
        eighth of the byte budget is held this way; a no-op on local stores."""
        if self.is_local:
            return
        todo = []
        for rel, size in list(items)[:max(1, self.budget.max_bytes // (8 * max_size))]:
            self.note_size(rel, size)
            todo.append((self.full_path(rel), rel, max(0, int(size) - max_size), min(int(size), max_size)))
        if self._tails is None:
            self._tails = TailFetcher(self.read_range, self.budget.max_requests)
        self._tails.schedule(todo)

    def _obstore_bucket(self) -> str | None:
        """The bucket (Azure container) obstore may carry this store's requests for: S3 and
        Azure, but not adlfs's ``container@account`` form, whose URI names the account (obstore's
        store would take the options'); None: fsspec carries them."""
        if self.protocol not in _OBSTORE_PROTOCOLS:
            return None
        bucket = self.root_path.lstrip("/").split("/", 1)[0]
        return None if "@" in bucket else bucket

    def _bulk_reader(self) -> Any:
        """The coroutine function a prefetch fetches with on S3 and Azure when obstore can carry
        it (``io.obstore_reads``: spans of this store's bucket; others through fsspec), else None."""
        bucket = self._obstore_bucket()
        if bucket is None:
            return None
        from lance_spark_ops.io.obstore_reads import reader_for

        reader = reader_for(self.protocol, bucket, self.storage_options)
        if reader is None:
            return None
        fs, budget, mine = self.fs, self.budget, f"{bucket}/"

        def read(spans: list[tuple[str, int | None, int | None]]) -> Any:
            if all(p.startswith(mine) for p, _, _ in spans):
                return reader.read_many(spans, budget)
            return remote.read_many(fs, spans, budget)

        return read

    def _direct_ranges(self, rel: str, spans: list[tuple[int, int]]) -> list[memoryview] | None:
        """(start, end) spans of one S3 or Azure object through obstore when it can carry them
        (see ``io.obstore_reads``: ~0.3 ms of GIL a request against s3fs's ~2.5 ms, which queue
        on one event loop behind a busy decoder); None: read them through fsspec."""
        reader = self._obstore_reader()
        return None if reader is None else reader.get_ranges(self.full_path(rel), spans)

    def _obstore_reader(self) -> Any:
        """This store's obstore reader (``io.obstore_reads.reader_for``), kept for its options,
        or None: fsspec carries its requests."""
        bucket = self._obstore_bucket()
        if bucket is None:
            return None
        self.fs  # noqa: B018 - first: it refreshes vended options when they are due
        opts = self.storage_options
        if self._direct is None or self._direct[0] != id(opts):
            from lance_spark_ops.io.obstore_reads import reader_for

            self._direct = (id(opts), reader_for(self.protocol, bucket, opts))
        return self._direct[1]

    def _azure_lister(self, rel: str) -> tuple[Any, str, str] | None:
        """(obstore store, container, key prefix) to list ``rel`` with when obstore lists this
        Azure store (``io.obstore_lists``: adlfs parses a listing at ~0.3 ms of CPU a blob), else
        None: adlfs lists it."""
        if not remote.is_azure(self.fs):
            return None
        reader = self._obstore_reader()
        if reader is None:
            return None
        container, _, key = self.full_path(rel).lstrip("/").partition("/")
        return (reader.store, container, key) if container == reader.bucket else None

    def release(self, rels: Iterable[str]) -> None:
        """The task is done with these prefetched objects: their bytes leave the budget now
        (``Prefetcher.release``); a later read of one reads it directly."""
        p = self._prefetcher
        if p is not None:
            p.release([self.full_path(rel) for rel in rels])

    def stop_prefetch(self) -> None:
        """Drop what was fetched ahead and cancel the rest (end of a task's reading): open
        uploads may now hold the whole byte budget."""
        p, self._prefetcher = self._prefetcher, None
        if p is not None:
            p.close()
        t, self._tails = self._tails, None
        if t is not None:
            t.close()

    def _upload_window(self) -> int:
        """Parts of an upload in flight: half the byte budget beside a prefetch, all of it
        when none holds bytes."""
        return upload_window(self.budget, whole=self._prefetcher is None)

    def _fetched(self, rel: str) -> bytes | memoryview | None:
        p = self._prefetcher
        return None if p is None else p.get(self.full_path(rel))

    def exists(self, rel: str) -> bool:
        """Whether ``rel`` exists (fsspec's answer); a backend that raises instead of answering
        fails with ``_typed``'s LanceError naming the object."""
        with self._typed("exists", rel):
            return bool(self.fs.exists(self.full_path(rel)))

    def present(self, rel: str) -> bool:
        """Whether an object or a directory (a prefix with objects under it) is at ``rel``: one
        stat or HEAD/list request. Unlike ``exists`` (fsspec reads any error as absent) only a
        missing path is False; a denied or unreachable store raises a typed LanceError."""
        try:
            with self._typed("info", rel):
                if self.is_local:
                    os.stat(self.full_path(rel))
                else:
                    self.fs.info(self.full_path(rel))
        except NotFoundError:
            return False
        return True

    def read(self, rel: str) -> bytes:
        with self._typed("read", rel):
            if self.is_local:
                with open(self.full_path(rel), "rb") as f:
                    return f.read()
            got = self._fetched(rel)
            if got is None:
                reader = self._obstore_reader()
                got = None if reader is None else reader.get(self.full_path(rel))
            if got is not None:
                return bytes(got)
            if remote.is_s3(self.fs):  # one GET (s3fs would ask the size first, to split it)
                return bytes(self.fs.cat_file(self.full_path(rel), max_concurrency=1))
            return bytes(self.fs.cat_file(self.full_path(rel)))

    def read_all(self, rels: Sequence[str]) -> list[bytes]:
        """Whole objects, in order: on an object store in flight together (within the request
        budget; the caller bounds how many, hence the memory), elsewhere one after another."""
        if len(rels) < 2 or not self._remote_async():
            return [self.read(rel) for rel in rels]
        paths = [(self.full_path(rel), None, None) for rel in rels]
        try:
            return [bytes(b) for b in remote.run(self.fs, remote.read_many, self.fs, paths, self.budget)]
        except Exception:  # noqa: BLE001 - read one by one: the failing one raises its typed error
            return [self.read(rel) for rel in rels]

    def read_range(self, rel: str, offset: int, size: int) -> bytes:
        if size <= 0:
            return b""
        with self._typed("ranged read", rel):
            if self.is_local:
                fd = os.open(self.full_path(rel), _O_READ)
                try:
                    return _pread_all(fd, size, offset)
                finally:
                    os.close(fd)
            got = self._fetched(rel)
            if got is not None:
                return bytes(got[offset:offset + size])
            direct = self._direct_ranges(rel, [(offset, offset + size)])
            if direct is not None:
                return bytes(direct[0])
            data = self.fs.cat_file(self.full_path(rel), start=offset, end=offset + size)
        return bytes(data)

    def read_tail(self, rel: str, max_size: int, whole_below: int = 0) -> tuple[int, bytes]:
        """(object size, its last ``max_size`` bytes, or all of it when it is at most
        ``whole_below`` bytes): one open of a local file instead of a size request and a
        ranged read."""
        if not self.is_local:
            return self._remote_tail(rel, max_size, whole_below)
        try:  # what ``_typed`` does for a local file, without a context manager per small file
            fd = os.open(self.full_path(rel), _O_READ)
        except FileNotFoundError as e:
            raise NotFoundError("file not found", path=self.uri(rel)) from e
        except PermissionError as e:
            raise AccessDeniedError(f"read refused: {e}", path=self.uri(rel)) from e
        try:
            size = os.fstat(fd).st_size
            start = _tail_start(size, max_size, whole_below)
            return size, _pread_all(fd, size - start, start)
        finally:
            os.close(fd)

    def _remote_tail(self, rel: str, max_size: int, whole_below: int) -> tuple[int, bytes]:
        """``read_tail`` of an object store: from the prefetched object; one ranged read when
        the size is known; else one suffix request of ``max(max_size, whole_below)`` bytes."""
        got = self._fetched(rel)
        path = self.full_path(rel)
        ahead = self._tails.take(path) if got is None and self._tails is not None else None
        if ahead is not None:  # fetched with the task's other footers (``prefetch_tails``)
            size = self._sizes.get(path)
            start = None if size is None else _tail_start(size, max_size, whole_below)
            if start is not None and ahead[0] <= start and ahead[0] + len(ahead[1]) == size:
                return size, bytes(memoryview(ahead[1])[start - ahead[0]:])
        with self._typed("ranged read", rel):
            if got is not None:
                size = len(got)
            else:
                size = self._sizes.get(path)
                if size is None and self._remote_async():
                    size, data = remote.run(self.fs, remote.tail, self.fs, path, max(max_size, whole_below))
                    self.note_size(rel, size)  # a later read of this object asks no size (Azure)
                    if len(data) != min(size, max(max_size, whole_below)):
                        raise LanceError(f"short read of the last {max(max_size, whole_below)} bytes: got "
                                         f"{len(data)} of {size}", path=self.uri(rel))
                    start = _tail_start(size, max_size, whole_below)
                    return size, bytes(memoryview(data)[len(data) - (size - start):])
                if size is None:
                    size = int(self.fs.size(path))
            start = _tail_start(size, max_size, whole_below)
            if got is not None:
                return size, bytes(got[start:size])
        return size, self.read_range(rel, start, size - start)

    def _read_local(self, path: str, requests: list[tuple[int, int, list[int]]],
                    scratch: ScratchBuffer | None = None) -> list[memoryview]:
        """Local files: read each coalesced request straight into a fresh numpy buffer, or
        into consecutive slices of ``scratch`` (one copy from the page cache, no intermediate
        bytes object)."""
        blobs = []
        area = scratch.get(sum(end - start for start, end, _ in requests)) if scratch is not None else None
        at = 0
        try:
            f = open(path, "rb", buffering=0)  # noqa: SIM115 - closed below
        except FileNotFoundError as e:
            raise NotFoundError("file not found", path=path) from e
        except PermissionError as e:
            raise AccessDeniedError(f"read refused: {e}", path=path) from e
        with f:
            for start, end, _ in requests:
                if start < 0:
                    raise LanceError(f"invalid read of bytes {start}..{end}", path=path)
                if area is not None:
                    view = memoryview(area[at:at + end - start])
                    at += end - start
                else:
                    # Arrow's pool recycles freed pages (a fresh mmap would page-fault per 4 KiB)
                    view = memoryview(np.frombuffer(pa.allocate_buffer(end - start), dtype=np.uint8))
                got = 0
                f.seek(start)
                while got < len(view):
                    n = f.readinto(view[got:])
                    if not n:
                        break
                    got += n
                blobs.append(view[:got])
        return blobs

    def read_ranges(self, rel: str, ranges: Sequence[tuple[int, int]],
                    scratch: ScratchBuffer | None = None) -> list[memoryview]:
        """Read many (offset, size) ranges with coalesced requests; results in input order.
        With ``scratch``, local reads land in it: the results are valid until its next use."""
        out: list[memoryview] = [memoryview(b"")] * len(ranges)
        local = self.protocol in ("file", "local")
        requests = [r for r in coalesce_ranges(ranges, DEFAULT_COALESCE_GAP if local else REMOTE_COALESCE_GAP)
                    if r[1] > r[0]]
        if local and requests:
            blobs = self._read_local(self.full_path(rel), requests, scratch)  # paths: see uri(rel)
        elif requests:
            blobs = self._read_remote(rel, requests)
        else:
            blobs = []
        for (start, end, members), blob in zip(requests, blobs, strict=True):
            if len(blob) < end - start:
                raise LanceError(
                    f"short read: wanted bytes {start}..{end}, got {len(blob)}", path=self.uri(rel)
                )
            for i in members:
                off, size = ranges[i]
                out[i] = blob[off - start : off - start + size]
        return out

    def _read_remote(self, rel: str, requests: list[tuple[int, int, list[int]]]) -> list[memoryview]:
        """The coalesced requests of an object store: from the prefetched object, else all in
        flight at once within the budget (one after another on a non-async backend)."""
        got = self._fetched(rel)
        if got is not None:
            view = memoryview(got)
            return [view[start:end] for start, end, _ in requests]
        spans = [(start, end) for start, end, _ in requests]
        direct = self._direct_ranges(rel, spans)
        if direct is not None:
            return direct
        if len(requests) == 1 or not self._remote_async():
            return [memoryview(self.read_range(rel, start, end - start)) for start, end, _ in requests]
        with self._typed("ranged read", rel):
            data = remote.run(self.fs, remote.read_ranges, self.fs, self.full_path(rel), spans, self.budget)
        return [memoryview(d) for d in data]

    def list(self, rel: str) -> list[str]:
        """Names (not paths) of the objects directly under ``rel``; empty when it is absent."""
        path = self.full_path(rel)
        try:
            with self._typed("list", rel):
                if self.is_local:  # names straight from the directory (fsspec builds a path per entry)
                    return sorted(os.listdir(path)) if os.path.isdir(path) else []
                lister = self._azure_lister(rel)
                if lister is not None:
                    names = obstore_lists.list_dir(lister[0], lister[2])
                    if names is not None:
                        return names
                if self._remote_async() and remote.can_list_page(self.fs):  # pages alone
                    return remote.run(self.fs, remote.list_dir, self.fs, path)
                entries = self.fs.ls(path, detail=False)
        except NotFoundError:
            return []
        return sorted(posixpath.basename(str(e).rstrip("/")) for e in entries)

    def list_page(self, rel: str, limit: int,
                  any_order: bool = False) -> tuple[list[tuple[str, int]], bool] | None:
        """The first ``limit`` objects directly under ``rel`` in key order, (name, size), and
        whether they are all of them: one listing request of ``limit`` keys on S3, GCS and Azure
        (where a full ``list`` pages through every key; not through obstore, which asks no page
        size: Azure's pages are then 5 000 blobs); on local disks the whole directory (as
        cheap as a part of it, so never cut); None on stores whose listing is not read page by
        page here, or (unless ``any_order``: any ``limit`` objects will do) not in key order
        (``lists_in_key_order``): use ``list``."""
        if self.is_local:
            return [(n, 0) for n in self.list(rel)], True
        if not (self._remote_async() and remote.can_list_page(self.fs)):
            return None
        if not (any_order or self.lists_in_key_order):
            return None
        try:
            with self._typed("list", rel):
                path = self.full_path(rel)
                items, complete = remote.run(self.fs, remote.list_page, self.fs, path, limit)
        except NotFoundError:
            return [], True
        for name, size in items:
            self.note_size(f"{rel}/{name}" if rel else name, size)
        return items, complete

    def find(self, rel: str) -> dict[str, dict[str, Any]]:
        """Every object under ``rel`` (recursively), ``{full path: fsspec info}``; empty when it
        is absent. On S3, GCS and Azure listing pages only (``io.remote.find``: an absent prefix
        is one request, not the fsspec ``find``'s two to four); elsewhere fsspec's ``find``."""
        path = self.full_path(rel)
        try:
            with self._typed("list", rel):
                lister = self._azure_lister(rel)
                if lister is not None:
                    found = obstore_lists.find(*lister)
                    if found is not None:
                        return found
                if self._remote_async() and remote.can_list_page(self.fs):
                    return remote.run(self.fs, remote.find, self.fs, path)
                return dict(self.fs.find(path, detail=True, withdirs=False))
        except NotFoundError:
            return {}

    @overload
    def find_rel(self, rel: str, detail: Literal[False] = False) -> list[str]: ...
    @overload
    def find_rel(self, rel: str, detail: Literal[True]) -> dict[str, dict[str, Any]]: ...

    def find_rel(self, rel: str, detail: bool = False) -> list[str] | dict[str, dict[str, Any]]:
        """Paths (relative to the root, sorted) of every object under ``rel``, recursively, or
        (``detail``) ``{path: fsspec info}``; empty when it is absent. One listing (its pages)
        on object stores. A listed path outside the root is a CorruptFileError."""
        root = "" if self.root_path == "/" else self.root_path.strip("/") + "/"
        out = {}
        for path, info in self.find(rel).items():
            p = str(path).lstrip("/")
            if not p.startswith(root):
                raise CorruptFileError(f"listing returned {p!r}, outside the dataset root", path=self.uri(""))
            out[p[len(root):]] = info
        return out if detail else sorted(out)

    # -- writes ----------------------------------------------------------
    def _ensure_parent(self, path: str) -> None:
        if self.protocol in ("file", "local"):
            os.makedirs(posixpath.dirname(path), exist_ok=True)

    def write(self, rel: str, data: bytes | bytearray | memoryview) -> None:
        """Write a whole object (replacing any existing one)."""
        path = self.full_path(rel)
        self._ensure_parent(path)
        if self.protocol in ("file", "local"):
            tmp = f"{path}.tmp-{os.getpid()}-{id(data)}"
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        else:
            with self._typed("write", rel):
                self.fs.pipe_file(path, bytes(data))

    def open_output(self, rel: str) -> Any:
        """A writable binary stream for a large object written in pieces (S3 and Azure: parts
        uploaded concurrently while the writer goes on, ``io.remote.S3Upload`` / ``AzureUpload``;
        ``discard()`` gives it up; GCS: gcsfs's resumable upload, whose chunks go in order).
        On a remote store its failures are typed as ``_typed``'s, naming the object."""
        path = self.full_path(rel)
        self._ensure_parent(path)
        if self._remote_async() and (remote.is_s3(self.fs) or remote.is_azure(self.fs)):
            carried = self._obstore_upload(path, rel)
            if carried is not None:
                return carried
            upload = remote.S3Upload if remote.is_s3(self.fs) else remote.AzureUpload
            return upload(self.fs, path, self.budget, typed=lambda op: self._typed(op, rel),
                          window=self._upload_window)
        if self.is_local:
            return self.fs.open(path, "wb")
        with self._typed("write", rel):
            return _TypedOutput(self, rel, self.fs.open(path, "wb"))

    def _obstore_upload(self, path: str, rel: str) -> Any:
        """An upload through obstore when it can carry this store's options (``io.obstore_writes``:
        about a third of s3fs's CPU per part; on Azure blocks, as adlfs's), else None."""
        from lance_spark_ops.io.obstore_writes import ObstoreUpload, azure_write_store, s3_write_store

        bucket = self._obstore_bucket()
        if bucket is None:
            return None
        key = self.fs.split_path(path)[1]
        store = (s3_write_store if remote.is_s3(self.fs) else azure_write_store)(bucket, self.storage_options)
        if store is None:
            return None
        return ObstoreUpload(store, key, self.budget, typed=lambda op: self._typed(op, rel),
                             on_close=lambda: self.fs.invalidate_cache(path))

    def put_if_not_exists(self, rel: str, data: bytes) -> None:
        """Create ``rel`` atomically, failing with CommitConflict if it already exists.

        Local files: write a temp file then ``os.link`` it (atomic create-if-absent).
        S3 / GCS / Azure: the filesystem's conditional put (``mode="create"``); WriteRefused when
        S3 refused it unexecuted (503 SlowDown, after the client's own retries). Any other
        backend: UnsupportedError (use an external manifest store there).
        """
        path = self.full_path(rel)
        self._ensure_parent(path)
        if self.protocol in ("file", "local"):
            tmp = f"{path}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, path)
            except FileExistsError as e:
                raise CommitConflict("object already exists", path=self.uri(rel)) from e
            finally:
                os.unlink(tmp)
            return
        if self.protocol == "memory":
            # The memory filesystem is process-local; the store dict is the ground truth.
            store = self.fs.store
            key = self.fs._strip_protocol(path)
            if key in store:
                raise CommitConflict("object already exists", path=self.uri(rel))
            self.fs.pipe_file(path, data)
            return
        if not self.conditional_put:
            raise UnsupportedError(f"{self.protocol}:// has no conditional put here; commit through an "
                                   "external manifest store (manifest_store=...) instead",
                                   path=self.uri(rel))
        with self._typed("conditional put", rel):  # any other failure: a LanceError naming it
            try:
                self.fs.pipe_file(path, data, mode="create")
            except FileExistsError as e:
                raise CommitConflict("object already exists", path=self.uri(rel)) from e
            except OSError as e:
                if _lost_condition(e):
                    raise CommitConflict("object already exists", path=self.uri(rel)) from e
                if _refused(e):  # this request stored nothing (the client's earlier tries: see commit)
                    raise WriteRefused(f"conditional put refused: {e}", path=self.uri(rel)) from e
                raise

    def copy(self, src: str, dst: str) -> None:
        """Copy one object (server-side on object stores). ``cp_file``, not ``copy``: fsspec's
        ``copy`` first asks whether either path is a directory (a LIST each on S3)."""
        with self._typed("copy", src):
            self.fs.cp_file(self.full_path(src), self.full_path(dst))

    def delete(self, rel: str) -> None:
        try:
            with self._typed("delete", rel):
                self.fs.rm_file(self.full_path(rel))
        except NotFoundError:
            pass

    def delete_many(self, rels: Iterable[str]) -> None:
        """Delete objects, missing ones ignored: on an object store in batched calls, several in
        flight (S3 DeleteObjects, 1 000 keys each: ``io.remote.delete_many``)."""
        rels = list(rels)
        if len(rels) > 1 and self._remote_async():
            failed = self.delete_batch(rels)
            if failed:
                cls = AccessDeniedError if all_refused(failed) else LanceError
                raise cls(f"{len(failed)} of {len(rels)} deletes failed, first: {failed[0][1]}",
                          path=self.uri(failed[0][0]))
            return
        for rel in rels:
            self.delete(rel)

    def delete_tree(self, rel: str) -> None:
        """Delete the directory (object-store prefix) ``rel`` and everything under it; absent
        is no error. Object stores: its listing and batched deletes (no HEAD of the prefix first,
        no request per object); elsewhere one recursive removal."""
        if self._remote_async():
            self.delete_many(self.find_rel(rel))
            return
        try:
            with self._typed("delete", rel):
                self.fs.rm(self.full_path(rel), recursive=True)
        except NotFoundError:
            pass

    def _azure_deletes(self, paths: list[str]) -> Callable[[], Awaitable[list[tuple[str, str]]]] | None:
        """On Azure, when obstore carries the options: deletes in Blob Batch requests of 256
        (``obstore_writes.delete_azure``); None otherwise (``remote.delete_many``)."""
        container = self._obstore_bucket()
        if container is None or not remote.is_azure(self.fs) or not paths:
            return None
        from lance_spark_ops.io.obstore_writes import azure_write_store, delete_azure

        if not all(p.startswith(f"{container}/") for p in paths):
            return None
        store = azure_write_store(container, self.storage_options)
        if store is None:
            return None
        fs, budget = self.fs, self.budget

        async def go() -> list[tuple[str, str]]:
            failed = await delete_azure(store, container, paths, budget,
                                        lambda chunk: remote.delete_each(fs, chunk, budget))
            for p in paths:
                fs.invalidate_cache(p)
            return failed

        return go

    def delete_batch(self, rels: Sequence[str]) -> list[tuple[str, str]]:
        """Delete objects (missing ones ignored) and return (rel, error) of each that failed,
        instead of raising: batched on object stores (``delete_many``: S3's DeleteObjects; on
        Azure Blob Batch through obstore where it carries the options), one by one elsewhere."""
        if not self._remote_async():
            failed = []
            for rel in rels:
                try:
                    self.delete(rel)
                except (OSError, LanceError) as e:
                    failed.append((rel, f"{type(e).__name__}: {e}"))
            return failed
        paths = [self.full_path(r) for r in rels]
        with self._typed("delete", rels[0] if rels else ""):
            batched = self._azure_deletes(paths)
            if batched is not None:
                failed = remote.run(self.fs, batched)
            else:
                failed = remote.run(self.fs, remote.delete_many, self.fs, paths, self.budget)
        back = dict(zip(paths, rels, strict=True))
        return [(back.get(p, p), err) for p, err in failed]
