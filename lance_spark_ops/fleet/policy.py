"""The maintenance policy: the thresholds that turn a table's health into actions (pure: no
I/O; ``policy_file.load_policy`` reads a policy file, ``decisions.decide`` applies a policy).

A policy file is TOML; every key is optional (the defaults below), keys at the top level (or
in ``[defaults]``) apply to every table, ``[namespaces."a.b"]`` to the tables under that
namespace (the longest matching prefix wins, then ``[tables."a.b.t"]``)::

    target_rows_per_fragment = 1048576
    vacuum_retention = "14d"

    [namespaces."prod"]
    vacuum_retention = "30d"          # keep a month of time travel in prod

    [tables."prod.events"]
    actions = ["compact", "vacuum"]   # never touch its indices from here

Actions, in the order a table runs them (each one's result feeds the next): ``remap_indices``
(indices still behind the fragment reuse index: cheap, and every later rewrite of those
fragments otherwise carries the reuse index further), ``materialize_deletions`` (only when no
compaction runs: compaction rewrites those fragments anyway), ``compact``,
``optimize_indices`` (after compaction, so new fragments are indexed once), ``vacuum`` (last:
it removes what the others left behind, once old enough).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from lance_spark_ops.errors import InvalidInputError

__all__ = ["ACTIONS", "GIB", "Policy", "PolicySet", "parse_duration"]

ACTIONS = ("remap_indices", "materialize_deletions", "compact", "optimize_indices", "vacuum")
GIB = 1 << 30
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> timedelta:
    """``"90s"``, ``"12h"``, ``"14d"``, ``"2w"`` -> timedelta (InvalidInputError otherwise)."""
    t = str(text).strip().lower()
    try:
        if t and t[-1] in _UNITS:
            return timedelta(seconds=float(t[:-1]) * _UNITS[t[-1]])
        raise ValueError
    except ValueError:
        raise InvalidInputError(f"a duration is a number and a unit s, m, h, d or w (e.g. 14d), "
                                f"got {text!r}") from None


@dataclass(frozen=True)
class Policy:
    """Thresholds of one table (see the module docstring for where they come from).

    Attributes:
        actions: the actions maintenance may run (default: all five).
        target_rows_per_fragment: compaction's target; pylance's ``CompactionOptions`` default
            (1 Mi rows), so our fragments are the size pylance would make.
        small_fragment_ratio: a fragment is small below this share of the target (physical rows:
            a fragment made small by deletions is materialize_deletions' business). 0.5: a
            fragment at half the target costs a file open per scan for half the rows.
        compact_min_small_fragments: compact when at least this many fragments are small. 8:
            merging fewer saves few file opens for a rewrite of the table's tail.
        compact_min_small_share: ... and they are at least this share of all fragments (0.2:
            a big table with a few small appends at its end is left alone until they pile up).
        materialize_deleted_fraction: rewrite fragments whose deleted fraction is above this;
            pylance's ``materialize_deletions_threshold`` default (0.1).
        materialize_min_fragments: ... when at least this many fragments are above it (1).
        remap_min_reuse_versions: remap indices when this many fragment reuse index versions
            are still behind (1: every one makes each index load slower).
        optimize_min_unindexed_rows: optimize indices when an index misses at least this many
            live rows (100 000: below it a flat scan of the unindexed rows is cheap) ...
        optimize_min_unindexed_fraction: ... or at least this share of the live rows (0.1).
        optimize_max_delta_segments: ... or has more delta segments than this (4: every query
            probes each segment); then its segments are merged into one (``num_indices_to_merge``).
        vacuum_retention: versions older than this may go; pylance's ``cleanup_old_versions``
            default (14 days of time travel).
        vacuum_min_old_versions: vacuum when at least this many versions are old (10) ...
        vacuum_min_old_bytes: ... or the files only old versions use hold this many bytes (1 GiB) ...
        vacuum_min_unreferenced_bytes: ... or files no version uses hold this many (1 GiB; they go
            once older than 7 days, as pylance's cleanup decides).
    """

    actions: tuple[str, ...] = ACTIONS
    target_rows_per_fragment: int = 1024 * 1024
    small_fragment_ratio: float = 0.5
    compact_min_small_fragments: int = 8
    compact_min_small_share: float = 0.2
    materialize_deleted_fraction: float = 0.1
    materialize_min_fragments: int = 1
    remap_min_reuse_versions: int = 1
    optimize_min_unindexed_rows: int = 100_000
    optimize_min_unindexed_fraction: float = 0.1
    optimize_max_delta_segments: int = 4
    vacuum_retention: str = "14d"
    vacuum_min_old_versions: int = 10
    vacuum_min_old_bytes: int = GIB
    vacuum_min_unreferenced_bytes: int = GIB

    def __post_init__(self) -> None:
        unknown = [a for a in self.actions if a not in ACTIONS]
        if unknown:
            raise InvalidInputError(f"unknown action(s) {', '.join(unknown)} (known: {', '.join(ACTIONS)})")
        parse_duration(self.vacuum_retention)
        if self.target_rows_per_fragment < 1:
            raise InvalidInputError("target_rows_per_fragment must be at least 1")
        for name in ("small_fragment_ratio", "compact_min_small_share", "materialize_deleted_fraction",
                     "optimize_min_unindexed_fraction"):
            if not 0 <= getattr(self, name) <= 1:
                raise InvalidInputError(f"{name} must be between 0 and 1, got {getattr(self, name)}")

    @property
    def small_rows(self) -> int:
        return int(self.target_rows_per_fragment * self.small_fragment_ratio)

    @property
    def retention(self) -> timedelta:
        return parse_duration(self.vacuum_retention)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], base: Policy | None = None, where: str = "policy"
                     ) -> Policy:
        known = {f.name: f for f in dataclasses.fields(cls)}
        bad = [k for k in values if k not in known]
        if bad:
            raise InvalidInputError(f"{where}: unknown key(s) {', '.join(bad)}")
        out = dict(values)
        if "actions" in out:
            out["actions"] = tuple(out["actions"])
        for k, v in out.items():
            want = type(getattr(base or cls(), k))
            if want in (int, float) and (isinstance(v, bool) or not isinstance(v, int | float)):
                raise InvalidInputError(f"{where}: {k} must be a number, got {v!r}")
        return dataclasses.replace(base or cls(), **out)


@dataclass(frozen=True)
class PolicySet:
    """The defaults plus per-namespace and per-table overrides; ``for_table`` picks one."""

    defaults: Policy = field(default_factory=Policy)
    namespaces: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    tables: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def for_table(self, name: str) -> Policy:
        """The policy of table ``name`` (dotted id, or a URI: defaults and a ``tables`` entry)."""
        policy = self.defaults
        parts = name.split(".")
        prefixes = sorted((p for p in self.namespaces if p.split(".") == parts[: len(p.split("."))]),
                          key=lambda p: len(p.split(".")))
        for p in prefixes:
            policy = Policy.from_mapping(self.namespaces[p], policy, f"namespaces.{p}")
        if name in self.tables:
            policy = Policy.from_mapping(self.tables[name], policy, f"tables.{name}")
        return policy
