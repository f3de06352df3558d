"""Lance Namespace: find tables by catalog name instead of by URI.

``connect_namespace("dir" | "rest" | class path, properties)`` gives a ``LanceNamespace``
(the interface of the ``lance-namespace`` package); ``resolve_table(namespace, "a.b.t")`` its
location, vended storage options and credential refresh (``namespace.resolve``);
``with_table_target`` lets a driver taking ``(spark, uri, ...)`` take ``namespace=`` +
``table_id=`` instead (``namespace.target``). ``directory`` implements the ``dir`` layout
itself (no pylance); ``rest`` is a client over the generated REST client.
"""

from __future__ import annotations

from lance_spark_ops._lazy import lazy_exports

_EXPORTS = {
    "DirectoryNamespace": "lance_spark_ops.namespace.directory",
    "ResolvedTable": "lance_spark_ops.namespace.resolve",
    "RestNamespace": "lance_spark_ops.namespace.rest",
    "connect_namespace": "lance_spark_ops.namespace.resolve",
    "iter_tables": "lance_spark_ops.namespace.resolve",
    "parse_table_id": "lance_spark_ops.namespace.resolve",
    "resolve_table": "lance_spark_ops.namespace.resolve",
    "with_table_target": "lance_spark_ops.namespace.target",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
