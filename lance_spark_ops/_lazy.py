"""Lazy package exports: a name loads its module on first access (so importing a package stays
cheap on executors) and is then stored in the package, so every later access - attribute or
``from ... import`` - yields the same object."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(namespace: dict[str, Any], exports: Mapping[str, str]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for a package whose ``namespace`` (its ``globals()``) lists
    ``exports``: public name -> module that defines it."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:  # noqa: N807 - a module's __getattr__ hook
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # later look-ups skip this hook
        return value

    def __dir__() -> list[str]:  # noqa: N807
        return sorted(set(namespace) | set(namespace.get("__all__", ())))

    return __getattr__, __dir__
