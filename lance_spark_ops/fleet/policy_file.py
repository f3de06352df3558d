"""Reading a maintenance policy: a ``PolicySet`` from a TOML file, its parsed content or a
policy (the file's layout is in ``policy.py``). The only part of the policy that does I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lance_spark_ops.fleet.policy import Policy, PolicySet

__all__ = ["load_policy"]


def load_policy(source: str | Mapping[str, Any] | Policy | PolicySet | None) -> PolicySet:
    """A ``PolicySet`` from a TOML file path, a mapping (the file's content), or a policy."""
    if source is None:
        return PolicySet()
    if isinstance(source, PolicySet):
        return source
    if isinstance(source, Policy):
        return PolicySet(source)
    where = "policy"
    if isinstance(source, str):
        from lance_spark_ops.config_file import load_config

        where, source = source, load_config(source)
    data = dict(source)
    namespaces = data.pop("namespaces", {}) or {}
    tables = data.pop("tables", {}) or {}
    defaults = {**data.pop("defaults", {}), **data}
    policies = PolicySet(Policy.from_mapping(defaults, where=where), namespaces, tables)
    for p in namespaces:  # refuse a bad override now, not when a table of it comes up
        Policy.from_mapping(namespaces[p], where=f"{where}: namespaces.{p}")
    for t in tables:
        Policy.from_mapping(tables[t], where=f"{where}: tables.{t}")
    return policies
