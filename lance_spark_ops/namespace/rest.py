"""The Lance Namespace REST implementation (``rest``) over the generated pure-Python client
(``lance_namespace_urllib3_client``, installed with ``lance-namespace``): pylance's own
``RestNamespace`` is native code this library cannot import.

Properties as pylance's: ``uri`` (the server, e.g. ``http://127.0.0.1:2333``), ``delimiter``
(default ``$``), ``header.<Name>`` (an HTTP header on every request, e.g. a bearer token).
Objects are addressed as the spec's string ids: the parts joined by the delimiter, the
delimiter alone for the root namespace. Only the read operations maintenance needs are here
(namespaces and tables listed and described); the rest raise the interface's
``UnsupportedOperationError``.
"""

from __future__ import annotations

from typing import Any

from lance_namespace import (
    DescribeNamespaceRequest,
    DescribeNamespaceResponse,
    DescribeTableRequest,
    DescribeTableResponse,
    LanceNamespace,
    ListNamespacesRequest,
    ListNamespacesResponse,
    ListTablesRequest,
    ListTablesResponse,
    NamespaceExistsRequest,
    NamespaceExistsResponse,
    TableExistsRequest,
    TableExistsResponse,
)

from lance_spark_ops.errors import InvalidInputError

__all__ = ["RestNamespace"]


class RestNamespace(LanceNamespace):
    """``rest`` namespace: a client of a Lance REST namespace server."""

    def __init__(self, **properties: Any) -> None:
        from lance_namespace_urllib3_client import ApiClient, Configuration
        from lance_namespace_urllib3_client.api import NamespaceApi, TableApi

        props = {str(k): str(v) for k, v in properties.items()}
        uri = props.get("uri")
        if not uri:
            raise InvalidInputError("the REST namespace needs the property uri")
        self.uri = uri.rstrip("/")
        self.delimiter = props.get("delimiter", "$")
        self._headers = {k[len("header."):]: v for k, v in props.items() if k.startswith("header.")}
        client = ApiClient(Configuration(host=self.uri))
        self._namespaces = NamespaceApi(client)
        self._tables = TableApi(client)

    def namespace_id(self) -> str:
        return f"RestNamespace {{ uri: {self.uri!r} }}"

    def __repr__(self) -> str:
        return self.namespace_id()

    def _id(self, parts: list[str] | None) -> str:
        return self.delimiter.join(parts) if parts else self.delimiter

    def _kw(self) -> dict[str, Any]:
        return {"delimiter": self.delimiter, "_headers": dict(self._headers) or None}

    def list_namespaces(self, request: ListNamespacesRequest) -> ListNamespacesResponse:
        return self._namespaces.list_namespaces(self._id(request.id), page_token=request.page_token,
                                                limit=request.limit, **self._kw())

    def describe_namespace(self, request: DescribeNamespaceRequest) -> DescribeNamespaceResponse:
        return self._namespaces.describe_namespace(self._id(request.id), request, **self._kw())

    def namespace_exists(self, request: NamespaceExistsRequest) -> NamespaceExistsResponse:
        return self._namespaces.namespace_exists(self._id(request.id), request, **self._kw())

    def list_tables(self, request: ListTablesRequest) -> ListTablesResponse:
        return self._namespaces.list_tables(self._id(request.id), page_token=request.page_token,
                                            limit=request.limit, **self._kw())

    def describe_table(self, request: DescribeTableRequest) -> DescribeTableResponse:
        return self._tables.describe_table(self._id(request.id), request, **self._kw())

    def table_exists(self, request: TableExistsRequest) -> TableExistsResponse:
        return self._tables.table_exists(self._id(request.id), request, **self._kw())
