"""Tables by name: (namespace, table id) -> location, storage options, credential refresh.

``connect_namespace(impl, properties)``: ``dir`` is this library's ``DirectoryNamespace``,
``rest`` its ``RestNamespace``; any other name goes to ``lance_namespace.connect`` (an alias a
plugin registered, or a class path such as ``lance_namespace_impls.glue.GlueNamespace``).

``resolve_table`` asks ``describe_table`` once and returns a ``ResolvedTable``: the location,
the storage options (the caller's, with the ones the namespace vends on top, as pylance 14
merges them), when vended credentials expire (``expires_at_millis``) and whether the
namespace manages the table's versions (``managed_versioning``: then ``ResolvedTable.uri``
routes commits through it, ``table.commit.namespace_store``). ``ResolvedTable.options()``
asks again when the vended credentials expire within ``REFRESH_MARGIN_S``: callers take it
right before each job, so a long maintenance run does not start a job on expired credentials;
with vended credentials that expire it also carries a ``NamespaceCredentials`` (under
``io.options.PROVIDER_KEY``): a small picklable descriptor (implementation, properties, table
id - no vended secret) from which the storage layer of the driver and of every executor asks
the namespace again during one job (``io.storage.ObjectStore.fs``), ``refresh_offset_s``
(storage option ``credentials_refresh_offset_seconds``, default ``REFRESH_MARGIN_S``) before
the expiry. One refresh per process and expiry, shared by its stores.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lance_spark_ops.errors import (
    DatasetNotFound,
    InvalidInputError,
    LanceError,
    NotFoundError,
    UnsupportedError,
)
from lance_spark_ops.io.options import EXPIRY_KEY as EXPIRY_OPTION
from lance_spark_ops.io.options import PROVIDER_KEY, plain_options, refresh_at

__all__ = ["REFRESH_MARGIN_S", "LiveSecrets", "NamespaceCredentials", "ResolvedTable", "connect_namespace",
           "iter_tables", "namespace_of", "parse_table_id", "refresh_count", "resolve_table",
           "vended_secrets"]

REFRESH_MARGIN_S = 60.0  # refresh vended credentials this long before they expire (pylance's default)
EXPIRY_KEY = EXPIRY_OPTION
OFFSET_KEY = "credentials_refresh_offset_seconds"  # a storage option: REFRESH_MARGIN_S for one run
MIN_SECRET_LENGTH = 6  # as spark.config.secret_values: shorter values (flags, "true") stay readable
_VENDED: set[str] = set()  # every storage option value a namespace vended in this process
_VENDED_LOCK = threading.Lock()


def vended_secrets() -> tuple[str, ...]:
    """The values namespaces vended so far (longest first): what a job's output must hide."""
    with _VENDED_LOCK:
        return tuple(sorted(_VENDED, key=len, reverse=True))


class LiveSecrets:
    """``static`` plus every value vended so far, read each time it is iterated: give it to
    ``setup_logging`` / ``redact`` so credentials a refresh brings are hidden too."""

    def __init__(self, static: Sequence[str] = ()) -> None:
        self.static = tuple(static)

    def _all(self) -> tuple[str, ...]:
        return tuple(sorted({*self.static, *vended_secrets()}, key=len, reverse=True))

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


def parse_table_id(text: str | Sequence[str]) -> list[str]:
    """``"a.b.t"`` (or ``["a", "b", "t"]``) -> ``["a", "b", "t"]``; empty parts are refused."""
    parts = text.split(".") if isinstance(text, str) else [str(p) for p in text]
    if not parts or any(not p for p in parts):
        raise InvalidInputError(f"a table id is names joined by dots (a.b.t), got {text!r}")
    return parts


def connect_namespace(impl: str, properties: Mapping[str, str] | None = None) -> Any:
    """A ``LanceNamespace``: ``dir``, ``rest`` or another implementation by alias / class path."""
    props = {str(k): str(v) for k, v in (properties or {}).items()}
    ns = _connect(impl, props)
    try:  # how to connect again elsewhere (an executor refreshing credentials)
        ns._lso_connect = (impl, tuple(sorted(props.items())))
    except AttributeError:
        pass
    return ns


def _connect(impl: str, props: dict[str, str]) -> Any:
    if impl == "dir":
        from lance_spark_ops.namespace.directory import DirectoryNamespace

        return DirectoryNamespace(**props)
    if impl == "rest":
        from lance_spark_ops.namespace.rest import RestNamespace

        return RestNamespace(**props)
    import lance_namespace

    if "." not in impl and impl not in getattr(lance_namespace, "_REGISTERED_IMPLS", {}):
        raise InvalidInputError(f"unknown namespace implementation {impl!r}: dir, rest, a registered alias "
                                "or a class path (module.Class)")
    try:
        return lance_namespace.connect(impl, props)
    except (ImportError, AttributeError, ValueError) as e:
        raise InvalidInputError(f"cannot load the namespace implementation {impl!r}: {e}") from e


def namespace_of(namespace: Any) -> Any:
    """A ``LanceNamespace`` from one, or from ``(impl, properties)``."""
    if isinstance(namespace, tuple) and len(namespace) == 2 and isinstance(namespace[0], str):
        return connect_namespace(namespace[0], namespace[1])
    if hasattr(namespace, "describe_table"):
        return namespace
    raise InvalidInputError(f"namespace must be a LanceNamespace or (impl, properties), got "
                            f"{type(namespace).__name__}")


def _lance_namespace_error(e: Exception, what: str) -> LanceError:
    """The namespace interface's errors as this library's typed ones."""
    name = type(e).__name__
    if name in ("TableNotFoundError", "NamespaceNotFoundError"):  # the caller named what is not there
        return DatasetNotFound(f"{what}: {e}")
    if "NotFound" in name or getattr(e, "status", None) == 404:
        return NotFoundError(f"{what}: {e}")
    if "InvalidInput" in name or getattr(e, "status", None) == 400:
        return InvalidInputError(f"{what}: {e}")
    if "Unsupported" in name:
        return UnsupportedError(f"{what}: {e}")
    return LanceError(f"{what}: {type(e).__name__}: {e}")


_FRESH: dict[Any, tuple[dict[str, Any], float | None]] = {}  # per process: a table's newest options, when due
_CONNECTED: dict[Any, Any] = {}  # per process: namespaces connected from a descriptor
_FRESH_LOCK = threading.Lock()
_REFRESHES = [0]


def refresh_count() -> int:
    """How many times this process asked a namespace for fresh credentials of a known table."""
    return _REFRESHES[0]


@dataclass(frozen=True)
class NamespaceCredentials:
    """Where fresh storage options of one table come from, small and picklable: the namespace
    implementation and properties (None when the caller gave a namespace object this library
    cannot connect again: then only this process refreshes), the table id, the caller's own
    options and the refresh offset. Its repr shows no property or option value."""

    impl: str | None
    properties: tuple[tuple[str, str], ...] = field(repr=False)
    table_id: tuple[str, ...] = ()
    base_options: tuple[tuple[str, Any], ...] = field(default=(), repr=False)
    refresh_offset_s: float = REFRESH_MARGIN_S
    namespace: Any = field(default=None, repr=False, compare=False)  # this process's, not pickled

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return NamespaceCredentials, (self.impl, self.properties, self.table_id, self.base_options,
                                      self.refresh_offset_s)

    @property
    def key(self) -> tuple[Any, ...]:
        where = (self.impl, self.properties) if self.impl is not None else id(self.namespace)
        return where, self.table_id, self.base_options

    def remember(self, options: Mapping[str, Any], expires_at: float | None) -> None:
        due = None if expires_at is None else refresh_at(expires_at, self.refresh_offset_s, time.time())
        with _FRESH_LOCK:
            _FRESH[self.key] = (plain_options(options), due)

    def storage_options(self) -> dict[str, Any] | None:
        """The table's storage options, asked again (``describe_table``) once the newest this
        process has expire within ``refresh_offset_s``; None when this process cannot ask."""
        with _FRESH_LOCK:  # one request per process and expiry, whichever store asks first
            cached = _FRESH.get(self.key)
            if cached is not None and (cached[1] is None or time.time() < cached[1]):
                return dict(cached[0])
            ns = self.namespace
            if ns is None and self.impl is not None:
                ns = _CONNECTED.get(self.key[0])
                if ns is None:
                    ns = _CONNECTED[self.key[0]] = connect_namespace(self.impl, dict(self.properties))
            if ns is None:
                return None
            fresh = resolve_table(ns, list(self.table_id), dict(self.base_options))
            due = None if fresh.expires_at is None else refresh_at(fresh.expires_at, self.refresh_offset_s,
                                                                    time.time())
            _FRESH[self.key] = (plain_options(fresh.storage_options), due)
            _REFRESHES[0] += 1
            return dict(fresh.storage_options)


def _offset(options: Mapping[str, Any]) -> float:
    value = options.get(OFFSET_KEY)
    try:
        return REFRESH_MARGIN_S if value in (None, "") else float(value)
    except (TypeError, ValueError):
        raise InvalidInputError(f"storage option {OFFSET_KEY} must be a number of seconds") from None


@dataclass
class ResolvedTable:
    """Where a table is and how to reach it (see the module docstring)."""

    namespace: Any
    table_id: list[str]
    location: str
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)
    expires_at: float | None = None  # epoch seconds
    managed_versioning: bool = False
    base_options: dict[str, Any] = field(default_factory=dict, repr=False)
    refreshes: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def name(self) -> str:
        return ".".join(self.table_id)

    @property
    def uri(self) -> str:
        """The URI drivers open: the location, or - when the namespace manages the versions - the
        location naming this process's handle to it (``table.commit.namespace_store``), so
        commits go through ``create_table_version``."""
        if not self.managed_versioning:
            return self.location
        from lance_spark_ops.table.commit.namespace_store import managed_uri

        return managed_uri(self.location, self.namespace, self.table_id)

    @property
    def credentials(self) -> NamespaceCredentials:
        """The descriptor the storage layer refreshes these credentials from (see the module docstring)."""
        spec = getattr(self.namespace, "_lso_connect", None)
        base = plain_options(self.base_options)
        return NamespaceCredentials(spec[0] if spec else None, spec[1] if spec else (), tuple(self.table_id),
                                    tuple(sorted(base.items(), key=lambda kv: kv[0])), _offset(base),
                                    namespace=self.namespace)

    def options(self, margin: float | None = None) -> dict[str, Any]:
        """The storage options, asked again when vended credentials expire within ``margin``
        (default: the refresh offset); with expiring credentials, their provider too."""
        margin = _offset(self.base_options) if margin is None else margin
        with self._lock:
            if self.expires_at is not None and self.expires_at - time.time() < margin:
                fresh = resolve_table(self.namespace, self.table_id, self.base_options)
                self.storage_options, self.expires_at = fresh.storage_options, fresh.expires_at
                self.location = fresh.location
                self.refreshes += 1
            if self.expires_at is None:
                return dict(self.storage_options)
            provider = self.credentials
            provider.remember(self.storage_options, self.expires_at)
            return {**self.storage_options, PROVIDER_KEY: provider}


def resolve_table(namespace: Any, table_id: str | Sequence[str],
                  storage_options: Mapping[str, Any] | None = None) -> ResolvedTable:
    """``describe_table`` -> ``ResolvedTable`` (errors typed: NotFoundError, InvalidInputError ...)."""
    from lance_namespace import DescribeTableRequest

    ns = namespace_of(namespace)
    tid = parse_table_id(table_id)
    try:
        response = ns.describe_table(DescribeTableRequest(id=tid))
    except LanceError:
        raise
    except Exception as e:  # noqa: BLE001 - every namespace error becomes a typed one
        raise _lance_namespace_error(e, f"describe_table {'.'.join(tid)}") from e
    if not response.location:
        raise NotFoundError(f"namespace {ns.namespace_id()} gave no location for table {'.'.join(tid)}")
    vended = dict(response.storage_options or {})
    with _VENDED_LOCK:
        _VENDED.update(str(v) for v in vended.values() if v is not None and len(str(v)) >= MIN_SECRET_LENGTH)
    expiry = vended.get(EXPIRY_KEY)
    merged = {**plain_options(storage_options), **vended}
    return ResolvedTable(ns, tid, response.location, merged,
                         expires_at=int(expiry) / 1000.0 if expiry else None,
                         managed_versioning=response.managed_versioning is True,
                         base_options=plain_options(storage_options))


def iter_tables(namespace: Any, namespace_id: str | Sequence[str] | None = None,
                recursive: bool = False) -> Iterator[list[str]]:
    """Table ids of a namespace (``"a.b"``, ``[]``/None: the root), of its children too if ``recursive``."""
    from lance_namespace import ListNamespacesRequest, ListTablesRequest

    ns = namespace_of(namespace)
    base = [] if not namespace_id else parse_table_id(namespace_id)

    def pages(call: Any, request_cls: Any, key: str, at: list[str]) -> Iterator[str]:
        token = None
        while True:
            try:
                response = call(request_cls(id=at, page_token=token))
            except Exception as e:  # noqa: BLE001
                raise _lance_namespace_error(e, f"{call.__name__} {'.'.join(at) or '(root)'}") from e
            yield from getattr(response, key) or ()
            token = response.page_token
            if not token:
                return

    todo = [base]
    while todo:
        base_id = todo.pop(0)
        for name in sorted(pages(ns.list_tables, ListTablesRequest, "tables", base_id)):
            yield [*base_id, name]
        if recursive:
            try:
                children = sorted(pages(ns.list_namespaces, ListNamespacesRequest, "namespaces", base_id))
            except UnsupportedError:
                children = []
            todo.extend([*base_id, c] for c in children)
