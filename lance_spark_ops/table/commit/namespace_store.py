"""Commits through a Lance Namespace that manages a table's versions (``managed_versioning``
in its ``describe_table``), as pylance 14 commits with ``namespace_client=`` / ``table_id=``.

The namespace's version operations are the external manifest store protocol
(``table.commit.handler``) with the namespace as the KV store:

* the latest version: ``list_table_versions(id, limit=1, descending=True)``; one version:
  ``describe_table_version(id, version)``; paths come back as object-store paths
  (``bucket/lake/t.lance/_versions/...``, no scheme) and are made relative to the table root;
* a commit stages ``_versions/<name>-<uuid>`` and calls ``create_table_version(id, version,
  manifest_path=<staged>, manifest_size, naming_scheme)``: the namespace makes it the version
  (pylance's directory namespace moves it to ``_versions/<name>``) or refuses because the
  version exists (-> ``CommitConflict``).

The table's URI names the store: ``<scheme>+lsons://<path>?lsons=<key>``, ``key`` a handle to
the namespace and table id registered in this process (``register_table``) - never the
namespace's properties, which may hold tokens. A process that does not know the key (an
executor reading a fixed version) reads ``_versions/`` alone, which holds every finalised version.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping
from typing import Any

from lance_spark_ops.errors import CommitConflict, LanceError, NotFoundError
from lance_spark_ops.table.commit.handler import ExternalManifestStore, register_uri_store

__all__ = ["SUFFIX", "NamespaceManifestStore", "managed_uri", "register_table"]

SUFFIX = "lsons"
QUERY_KEY = "lsons"
_TABLES: dict[str, tuple[Any, list[str]]] = {}
_LOCK = threading.Lock()


def register_table(namespace: Any, table_id: list[str]) -> str:
    """A key for ``(namespace, table_id)`` in this process (the same one for the same pair)."""
    with _LOCK:
        for key, (ns, tid) in _TABLES.items():
            if ns is namespace and tid == table_id:
                return key
        key = uuid.uuid4().hex[:16]
        _TABLES[key] = (namespace, list(table_id))
        return key


def managed_uri(location: str, namespace: Any, table_id: list[str]) -> str:
    """``location`` as a URI whose commits go through the namespace."""
    key = register_table(namespace, table_id)
    scheme, sep, rest = location.partition("://")
    if not sep:
        scheme, rest = "file", location
    return f"{scheme}+{SUFFIX}://{rest}?{QUERY_KEY}={key}"


def _conflict(e: Exception) -> bool:
    text = f"{type(e).__name__} {e}".lower()
    return any(w in text for w in ("concurrent", "already exists", "alreadyexists", "conflict"))


class NamespaceManifestStore(ExternalManifestStore):
    """The namespace's version operations as the external manifest store (module docstring)."""

    def __init__(self, namespace: Any, table_id: list[str], root_path: str) -> None:
        self.namespace = namespace
        self.table_id = list(table_id)
        self.root_path = root_path.strip("/")

    def _rel(self, path: str) -> str:
        p = path.split("://", 1)[-1].strip("/")
        if p.startswith(self.root_path + "/"):
            return p[len(self.root_path) + 1:]
        raise LanceError(f"the namespace names a manifest outside the table: {path!r}", path=self.root_path)

    def _call(self, name: str, request: dict[str, Any]) -> Any:
        try:
            return getattr(self.namespace, name)(request)
        except (LanceError, CommitConflict):
            raise
        except Exception as e:  # noqa: BLE001 - the namespace's errors, typed
            if "NotFound" in type(e).__name__:
                raise NotFoundError(f"{name}: {e}", path=self.root_path) from e
            if name == "create_table_version" and _conflict(e):
                raise CommitConflict(f"the namespace refused the version: {e}", path=self.root_path) from e
            raise LanceError(f"{name}: {type(e).__name__}: {e}", path=self.root_path) from e

    @staticmethod
    def _version(response: Any) -> Any:
        v = response.get("version") if isinstance(response, Mapping) else getattr(response, "version", None)
        return v

    @staticmethod
    def _field(obj: Any, name: str) -> Any:
        return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)

    def get(self, base_uri: str, version: int) -> str | None:
        try:
            v = self._version(self._call("describe_table_version", {"id": self.table_id, "version": version}))
        except NotFoundError:
            return None
        return None if v is None else self._rel(self._field(v, "manifest_path"))

    def get_latest(self, base_uri: str) -> tuple[int, str] | None:
        from lance_namespace import ListTableVersionsRequest

        request = ListTableVersionsRequest(id=self.table_id, limit=1, descending=True)
        response = self._call("list_table_versions", request)
        versions = self._field(response, "versions") or []
        if not versions:
            return None
        top = max(versions, key=lambda v: int(self._field(v, "version")))
        return int(self._field(top, "version")), self._rel(self._field(top, "manifest_path"))

    def put_if_not_exists(self, base_uri: str, version: int, path: str, size: int) -> None:
        name = path.rsplit("/", 1)[-1]
        scheme = "V2" if len(name.split(".", 1)[0]) == 20 else "V1"
        self._call("create_table_version", {"id": self.table_id, "version": version, "manifest_size": size,
                                            "manifest_path": f"{self.root_path}/{path}",
                                            "naming_scheme": scheme})

    def put_if_exists(self, base_uri: str, version: int, path: str, size: int) -> None:
        """The namespace finalises the version itself when it accepts it: nothing to re-point."""

    def __repr__(self) -> str:
        return f"NamespaceManifestStore({self.table_id!r})"


class _UnknownTable(ExternalManifestStore):
    """A key this process does not know: ``_versions/`` alone (reads of finalised versions)."""

    def get(self, base_uri: str, version: int) -> str | None:
        return None

    def get_latest(self, base_uri: str) -> tuple[int, str] | None:
        return None

    def put_if_not_exists(self, base_uri: str, version: int, path: str, size: int) -> None:
        raise LanceError("this process cannot commit to a namespace-managed table it did not resolve",
                         path=base_uri)

    def put_if_exists(self, base_uri: str, version: int, path: str, size: int) -> None:
        raise LanceError("this process cannot commit to a namespace-managed table it did not resolve",
                         path=base_uri)


def _from_uri(params: Mapping[str, str], storage_options: Mapping[str, Any], root: str
              ) -> ExternalManifestStore:
    entry = _TABLES.get(params.get(QUERY_KEY, ""))
    if entry is None:
        return _UnknownTable()
    path = root.split("://", 1)[-1].split("?", 1)[0]
    return NamespaceManifestStore(entry[0], entry[1], path)


register_uri_store(SUFFIX, _from_uri)
