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
right before each job, so a long maintenance run does not start a job on expired credentials.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lance_spark_ops.errors import InvalidInputError, LanceError, NotFoundError, UnsupportedError

__all__ = ["REFRESH_MARGIN_S", "LiveSecrets", "ResolvedTable", "connect_namespace", "iter_tables",
           "namespace_of", "parse_table_id", "resolve_table", "vended_secrets"]

REFRESH_MARGIN_S = 60.0  # refresh vended credentials this long before they expire
EXPIRY_KEY = "expires_at_millis"
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
    if "NotFound" in name or getattr(e, "status", None) == 404:
        return NotFoundError(f"{what}: {e}")
    if "InvalidInput" in name or getattr(e, "status", None) == 400:
        return InvalidInputError(f"{what}: {e}")
    if "Unsupported" in name:
        return UnsupportedError(f"{what}: {e}")
    return LanceError(f"{what}: {type(e).__name__}: {e}")


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

    def options(self, margin: float = REFRESH_MARGIN_S) -> dict[str, Any]:
        """The storage options, asked again when vended credentials expire within ``margin``."""
        with self._lock:
            if self.expires_at is not None and self.expires_at - time.time() < margin:
                fresh = resolve_table(self.namespace, self.table_id, self.base_options)
                self.storage_options, self.expires_at = fresh.storage_options, fresh.expires_at
                self.location = fresh.location
                self.refreshes += 1
            return dict(self.storage_options)


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
    merged = {**(storage_options or {}), **vended}
    return ResolvedTable(ns, tid, response.location, merged,
                         expires_at=int(expiry) / 1000.0 if expiry else None,
                         managed_versioning=response.managed_versioning is True,
                         base_options=dict(storage_options or {}))


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
