"""The Lance Namespace directory implementation (``dir``), read with this library's own table
reader, so tables can be found by name without pylance.

Layout (the Lance Namespace spec's directory namespace, as pylance 14 writes it):

* **plain directory**: the namespace is one directory (``root``); table ``t`` of the root
  namespace is the dataset at ``<root>/t.lance``. A table directory exists once it holds a
  ``_versions/`` manifest or the ``.lance-reserved`` marker (a declared, still empty table).
  Only the root namespace exists in this mode.
* **manifest table** (``manifest_enabled``, the default): ``<root>/__manifest`` is a Lance
  table with one row per object, ``object_id`` (the id's parts joined by ``$``: ``a$b$t``),
  ``object_type`` (``namespace`` / ``table``), ``location`` (relative to ``root``, e.g.
  ``t1.lance`` or ``245561be_a$b$t2``; an absolute URI is used as is), ``metadata`` and
  ``base_objects``. Nested namespaces exist only here. With ``dir_listing_enabled`` (default)
  root-level ``*.lance`` directories the manifest does not know are tables too.

Versions: with ``table_version_tracking_enabled`` (default false) the namespace manages its
tables' versions, as the spec's directory namespace and pylance 14's: ``describe_table`` says
``managed_versioning``, and the version operations work on the table's ``_versions/``
manifests themselves (the version records *are* those files): ``list_table_versions`` /
``describe_table_version`` (paths as object-store paths, no scheme), ``create_table_version``
(the staged manifest is put under its final name only if no such version exists - else
``ConcurrentModificationError`` - then the staged file goes) and
``batch_delete_table_versions`` (the manifests of the given ranges, never the latest).

Properties: ``root`` (required), ``manifest_enabled``, ``dir_listing_enabled``,
``table_version_tracking_enabled``,
``storage.<key>`` (storage options for the root and every table; not vended unless
``vend_input_storage_options`` is true, then with ``expires_at_millis`` now +
``vend_input_storage_options_refresh_interval_millis`` when that is set - pylance's test
properties for credential refresh). Creating or dropping tables and namespaces is not supported.

Unlike pylance's (which lists nothing), a ``root`` that does not exist is a
``NamespaceNotFoundError`` when listed or looked in, so a typo does not read as an empty fleet;
a root-level ``*.lance`` entry that is not a table (a plain file) is named in a warning.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from lance_namespace import (
    BatchDeleteTableVersionsResponse,
    ConcurrentModificationError,
    CreateTableVersionResponse,
    DescribeNamespaceRequest,
    DescribeNamespaceResponse,
    DescribeTableRequest,
    DescribeTableResponse,
    DescribeTableVersionResponse,
    LanceNamespace,
    ListNamespacesRequest,
    ListNamespacesResponse,
    ListTablesRequest,
    ListTablesResponse,
    ListTableVersionsResponse,
    NamespaceExistsRequest,
    NamespaceExistsResponse,
    NamespaceNotFoundError,
    TableExistsRequest,
    TableExistsResponse,
    TableNotFoundError,
    TableVersion,
    TableVersionNotFoundError,
    UnsupportedOperationError,
)

from lance_spark_ops.concurrency import map_concurrently
from lance_spark_ops.errors import CommitConflict, InvalidInputError
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.paths import VERSIONS_DIR, ManifestNamingScheme, scan_versions

__all__ = ["DirectoryNamespace", "MANIFEST_TABLE", "OBJECT_ID_DELIMITER", "RESERVED_MARKER"]

MANIFEST_TABLE = "__manifest"
OBJECT_ID_DELIMITER = "$"
RESERVED_MARKER = ".lance-reserved"
TABLE_SUFFIX = ".lance"
TABLE_CHECKS = 16  # root entries checked for a table at once
log = logging.getLogger("lance_spark_ops.namespace")


def _flag(properties: dict[str, str], key: str, default: bool) -> bool:
    text = str(properties.get(key, default)).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise InvalidInputError(f"namespace property {key} must be true or false, got {text!r}")


def _page(names: list[str], page_token: str | None, limit: int | None) -> tuple[list[str], str | None]:
    """Names after ``page_token`` (the last name of the previous page), at most ``limit``."""
    names = sorted(set(names))
    if page_token:
        names = [n for n in names if n > page_token]
    if limit is not None and limit >= 0 and len(names) > limit:
        return names[:limit], names[limit - 1] if limit else None
    return names, None


class DirectoryNamespace(LanceNamespace):
    """``dir`` namespace over ``root`` (see the module docstring for the layout)."""

    def __init__(self, **properties: Any) -> None:
        props = {str(k): str(v) for k, v in properties.items()}
        root = props.get("root")
        if not root:
            raise InvalidInputError("the directory namespace needs the property root")
        self.root = root.rstrip("/") or "/"
        self.manifest_enabled = _flag(props, "manifest_enabled", True)
        self.dir_listing_enabled = _flag(props, "dir_listing_enabled", True)
        self.storage_options = {k[len("storage."):]: v for k, v in props.items() if k.startswith("storage.")}
        self.version_tracking = _flag(props, "table_version_tracking_enabled", False)
        self.vend = _flag(props, "vend_input_storage_options", False)
        interval = props.get("vend_input_storage_options_refresh_interval_millis")
        self.vend_interval_ms = int(interval) if interval else None
        self.store = ObjectStore(self.root, dict(self.storage_options))
        self._cache: tuple[tuple[str, ...], list[dict[str, Any]]] | None = None
        self._warned: set[str] = set()

    def namespace_id(self) -> str:
        return f"DirectoryNamespace {{ root: {self.root!r} }}"

    def __repr__(self) -> str:
        return self.namespace_id()

    # -- the manifest table ------------------------------------------------------------------
    def _objects(self) -> list[dict[str, Any]] | None:
        """Rows of ``__manifest`` (object_id, object_type, location); None without one. Read
        again only when its ``_versions/`` listing changed (a fleet describes many tables)."""
        if not self.manifest_enabled:
            return None
        listing = tuple(self.store.list(f"{MANIFEST_TABLE}/{VERSIONS_DIR}"))
        if not listing:
            return None
        cached = self._cache
        if cached is not None and cached[0] == listing:
            return cached[1]
        ds = Dataset.open(self.store.uri(MANIFEST_TABLE), storage_options=dict(self.storage_options))
        rows = ds.to_table(columns=["object_id", "object_type", "location"]).to_pylist()
        self._cache = (listing, rows)
        return rows

    @staticmethod
    def _split(object_id: str) -> tuple[list[str], str]:
        parts = object_id.split(OBJECT_ID_DELIMITER)
        return parts[:-1], parts[-1]

    def _table_dirs(self) -> list[str]:
        """Names of root-level ``<name>.lance`` directories holding a table; any other
        ``*.lance`` entry (a plain file, a directory without ``_versions/``) is named in a
        warning, once per namespace object, and skipped."""
        out = []
        entries = [e for e in self.store.list("") if e.endswith(TABLE_SUFFIX)]
        # each entry's check is independent: side by side (on an object store a round trip each)
        for entry, table in zip(entries, map_concurrently(self._holds_table, entries, TABLE_CHECKS),
                                strict=True):
            if table:
                out.append(entry[: -len(TABLE_SUFFIX)])
            elif entry not in self._warned:
                self._warned.add(entry)
                log.warning("namespace %s: %s is not a table (no %s/ directory inside): skipped",
                            self.root, self.store.uri(entry), VERSIONS_DIR)
        return out

    def _holds_table(self, entry: str) -> bool:
        """Whether ``entry`` has a manifest in ``_versions/`` (the first key of one short LIST
        page on S3) or a reservation marker."""
        page = self.store.list_page(f"{entry}/{VERSIONS_DIR}", 1, any_order=True)
        found = bool(page[0]) if page is not None else bool(self.store.list(f"{entry}/{VERSIONS_DIR}"))
        return found or self.store.exists(f"{entry}/{RESERVED_MARKER}")

    def _check_root(self) -> None:
        """NamespaceNotFoundError when ``root`` does not exist (a typo must not read as an empty
        fleet). Asked only when a listing came back empty."""
        if not self.store.present(""):
            raise NamespaceNotFoundError(f"the namespace root {self.root} does not exist")

    def _namespace_known(self, ns: list[str], objects: list[dict[str, Any]] | None) -> bool:
        if not ns:
            return True
        wanted = OBJECT_ID_DELIMITER.join(ns)
        return any(o["object_type"] == "namespace" and o["object_id"] == wanted for o in objects or ())

    def _check_namespace(self, ns: list[str], objects: list[dict[str, Any]] | None) -> None:
        if not self._namespace_known(ns, objects):
            raise NamespaceNotFoundError(f"namespace {'.'.join(ns)} does not exist in {self.root}")

    def _location(self, location: str) -> str:
        if "://" in location or location.startswith("/"):
            return location
        return f"{self.root}/{location}"

    # -- namespaces -------------------------------------------------------------------------
    def list_namespaces(self, request: ListNamespacesRequest) -> ListNamespacesResponse:
        ns = list(request.id or [])
        objects = self._objects()
        self._check_namespace(ns, objects)
        names = [self._split(o["object_id"])[1] for o in objects or ()
                 if o["object_type"] == "namespace" and self._split(o["object_id"])[0] == ns]
        page, token = _page(names, request.page_token, request.limit)
        return ListNamespacesResponse(namespaces=page, page_token=token)

    def describe_namespace(self, request: DescribeNamespaceRequest) -> DescribeNamespaceResponse:
        self._check_namespace(list(request.id or []), self._objects())
        return DescribeNamespaceResponse(properties={})

    def namespace_exists(self, request: NamespaceExistsRequest) -> NamespaceExistsResponse:
        self._check_namespace(list(request.id or []), self._objects())
        return NamespaceExistsResponse()

    # -- tables -----------------------------------------------------------------------------
    def list_tables(self, request: ListTablesRequest) -> ListTablesResponse:
        ns = list(request.id or [])
        objects = self._objects()
        self._check_namespace(ns, objects)
        names = [self._split(o["object_id"])[1] for o in objects or ()
                 if o["object_type"] == "table" and self._split(o["object_id"])[0] == ns]
        if not ns and (objects is None or self.dir_listing_enabled):
            names += self._table_dirs()
        if not names and not ns:
            self._check_root()
        page, token = _page(names, request.page_token, request.limit)
        return ListTablesResponse(tables=page, page_token=token)

    def _find_table(self, table_id: list[str]) -> str:
        """The table's location; TableNotFoundError when the namespace does not hold it."""
        if not table_id:
            raise TableNotFoundError("a table id needs at least a name")
        objects = self._objects()
        wanted = OBJECT_ID_DELIMITER.join(table_id)
        for o in objects or ():
            if o["object_type"] == "table" and o["object_id"] == wanted and o["location"]:
                return self._location(o["location"])
        if len(table_id) == 1 and (objects is None or self.dir_listing_enabled):
            if table_id[0] in self._table_dirs():
                return self._location(table_id[0] + TABLE_SUFFIX)
        self._check_namespace(table_id[:-1], objects)
        if objects is None:
            self._check_root()
        raise TableNotFoundError(f"table {'.'.join(table_id)} does not exist in {self.root}")

    def describe_table(self, request: DescribeTableRequest) -> DescribeTableResponse:
        location = self._find_table(list(request.id or []))
        options = None
        if self.vend:
            options = dict(self.storage_options)
            if self.vend_interval_ms is not None:
                options["expires_at_millis"] = str(int(time.time() * 1000) + self.vend_interval_ms)
        return DescribeTableResponse(location=location, table_uri=location, storage_options=options,
                                     managed_versioning=True if self.version_tracking else None)

    def table_exists(self, request: TableExistsRequest) -> TableExistsResponse:
        self._find_table(list(request.id or []))
        return TableExistsResponse()

    # -- versions (table_version_tracking_enabled; see the module docstring) ---------------------
    def _versions(self, request: Any) -> tuple[ObjectStore, dict[int, str], ManifestNamingScheme | None]:
        """The table's store, ``{version: manifest name}`` and naming scheme."""
        if not self.version_tracking:
            raise UnsupportedOperationError("table versions are not managed by this namespace "
                                            "(table_version_tracking_enabled is false)")
        store = ObjectStore(self._find_table(list(_get(request, "id") or [])), dict(self.storage_options))
        scheme, versions = scan_versions(store.list(VERSIONS_DIR), store.root)
        return store, versions, scheme

    @staticmethod
    def _record(store: ObjectStore, version: int, name: str) -> TableVersion:
        rel = f"{VERSIONS_DIR}/{name}"
        return TableVersion(version=version, manifest_path=store.full_path(rel).lstrip("/"),
                            manifest_size=store.size(rel))

    def list_table_versions(self, request: Any) -> ListTableVersionsResponse:
        store, versions, _ = self._versions(request)
        numbers = sorted(versions, reverse=bool(_get(request, "descending")))
        limit = _get(request, "limit")
        if limit is not None and limit >= 0:
            numbers = numbers[:limit]
        return ListTableVersionsResponse(versions=[self._record(store, v, versions[v]) for v in numbers])

    def describe_table_version(self, request: Any) -> DescribeTableVersionResponse:
        store, versions, _ = self._versions(request)
        version = _get(request, "version")
        if version is None and versions:
            version = max(versions)
        if version not in versions:
            table = ".".join(_get(request, "id") or [])
            raise TableVersionNotFoundError(f"table {table} has no version {version}")
        return DescribeTableVersionResponse(version=self._record(store, version, versions[version]))

    def create_table_version(self, request: Any) -> CreateTableVersionResponse:
        store, versions, scheme = self._versions(request)
        version = int(_get(request, "version"))
        wanted = str(_get(request, "naming_scheme") or (scheme or ManifestNamingScheme.V2).name).upper()
        if wanted not in ("V1", "V2"):
            raise InvalidInputError(f"create_table_version: unknown naming scheme {wanted!r}")
        raw = str(_get(request, "manifest_path")).split("://", 1)[-1].strip("/")
        root = store.root_path.strip("/")
        if not raw.startswith(root + "/"):
            raise InvalidInputError(f"create_table_version: the staged manifest {raw!r} is not in the table")
        staged = raw[len(root) + 1:]
        name = ManifestNamingScheme[wanted].manifest_name(version)
        if version in versions:
            raise ConcurrentModificationError(f"version {version} already exists")
        try:
            store.put_if_not_exists(f"{VERSIONS_DIR}/{name}", store.read(staged))
        except CommitConflict as e:
            raise ConcurrentModificationError(f"version {version} already exists") from e
        store.delete(staged)
        return CreateTableVersionResponse(version=self._record(store, version, name))

    def batch_delete_table_versions(self, request: Any) -> BatchDeleteTableVersionsResponse:
        store, versions, _ = self._versions(request)
        latest = max(versions) if versions else None
        doomed = set()
        for r in _get(request, "ranges") or ():
            start, end = int(_get(r, "start_version")), int(_get(r, "end_version") or 0)
            doomed.update(v for v in versions if start <= v <= (end if end > 0 else start) and v != latest)
        store.delete_many(f"{VERSIONS_DIR}/{versions[v]}" for v in sorted(doomed))
        return BatchDeleteTableVersionsResponse(deleted_count=len(doomed))


def _get(request: Any, name: str) -> Any:
    """A field of a request given as the interface's model or as a dict (pylance passes dicts)."""
    return request.get(name) if isinstance(request, dict) else getattr(request, name, None)
