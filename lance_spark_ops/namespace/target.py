"""One helper gives every driver taking ``(spark, uri, ..., storage_options=...)`` the
namespace form too: ``compact(spark, namespace=ns, table_id="a.b.t")`` (``ns`` a
``LanceNamespace`` or ``(impl, properties)``) resolves the table, then calls the driver with its
location and the storage options (the caller's, vended ones on top). The command-line side
(``--namespace-impl``, ``--namespace-prop``, ``--table``) is ``add_arguments`` /
``resolve_arguments``, used by ``spark.runtime.cli``.

Light on imports: drivers import this module, executors may import drivers.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from lance_spark_ops.errors import InvalidInputError

__all__ = ["add_arguments", "resolve_arguments", "with_table_target"]

F = TypeVar("F", bound=Callable[..., Any])


def with_table_target(fn: F | None = None, *, read_only: bool = False) -> Any:
    """``fn(spark, uri, *args, **kw)`` that also takes ``namespace=`` + ``table_id=`` instead of
    ``uri``. Commits of a table whose namespace manages its versions go through the namespace
    (``ResolvedTable.uri``); a ``read_only`` driver opens the plain location."""
    if fn is None:
        return functools.partial(with_table_target, read_only=read_only)

    @functools.wraps(fn)
    def wrapper(spark: Any, uri: str | None = None, *args: Any, namespace: Any = None,
                table_id: Any = None, **kw: Any) -> Any:
        if namespace is None and table_id is None:
            if uri is None:
                raise InvalidInputError(f"{fn.__name__}: give a uri, or namespace= and table_id=")
            return fn(spark, uri, *args, **kw)
        if namespace is None or table_id is None:
            raise InvalidInputError(f"{fn.__name__}: namespace= and table_id= go together")
        if uri is not None:
            raise InvalidInputError(f"{fn.__name__}: give a uri or namespace= + table_id=, not both")
        from lance_spark_ops.namespace.resolve import resolve_table

        table = resolve_table(namespace, table_id, kw.get("storage_options"))
        kw["storage_options"] = table.options()
        return fn(spark, table.location if read_only else table.uri, *args, **kw)

    return wrapper


def add_arguments(parser: Any) -> None:
    """``--namespace-impl``, ``--namespace-prop`` (repeatable) and ``--table`` on a job's parser."""
    group = parser.add_argument_group("tables by name (Lance Namespace; instead of the URI)")
    group.add_argument("--namespace-impl", metavar="IMPL",
                       help="dir, rest, or a LanceNamespace class path (module.Class)")
    group.add_argument("--namespace-prop", action="append", default=[], metavar="KEY=VALUE",
                       help="a namespace property, e.g. root=s3://bucket/lake or uri=http://host:2333 "
                            "(repeatable; values are never printed)")
    group.add_argument("--table", metavar="A.B.T", help="the table id, its parts joined by dots")


def namespace_properties(items: list[str] | Mapping[str, Any]) -> dict[str, str]:
    if isinstance(items, Mapping):
        return {str(k): str(v) for k, v in items.items()}
    out = {}
    for item in items:
        key, sep, value = str(item).partition("=")
        if not sep or not key:
            raise InvalidInputError(f"a namespace property is KEY=VALUE, got {key or item!r}")
        out[key.strip()] = value
    return out


SECRET_WORDS = ("token", "secret", "password", "key", "credential", "auth", "header.")


def secret_properties(props: Mapping[str, str]) -> dict[str, str]:
    """The namespace properties whose values must never be printed (tokens, keys, headers)."""
    return {k: v for k, v in props.items() if any(w in k.lower() for w in SECRET_WORDS)}


def resolve_arguments(args: Any, config: dict[str, Any], uri: str | None, storage: dict[str, Any]
                      ) -> tuple[str | None, dict[str, Any], dict[str, str]]:
    """(uri, storage options, secret namespace properties) after ``--table``: the table's
    location and vended options on top of ``storage``. ``config`` keys ``namespace_impl``,
    ``namespace_properties`` (a table) and ``table`` are taken out of ``config``."""
    impl = args.namespace_impl or config.pop("namespace_impl", None)
    props = {**namespace_properties(config.pop("namespace_properties", {}) or {}),
             **namespace_properties(args.namespace_prop)}
    table = args.table or config.pop("table", None)
    if table is None:
        if impl is not None or props:
            raise InvalidInputError("--namespace-impl / --namespace-prop need --table")
        return uri, storage, {}
    if uri is not None:
        raise InvalidInputError("give the dataset URI or --table, not both")
    if impl is None:
        raise InvalidInputError("--table needs --namespace-impl (dir, rest or a class path)")
    from lance_spark_ops.namespace.resolve import resolve_table

    resolved = resolve_table((impl, props), table, storage)
    return resolved.uri, resolved.options(), secret_properties(props)
