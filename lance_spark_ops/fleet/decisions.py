"""What a policy implies for a table's health: one rule per action (``decide_<action>``: the
action with its reason and typed options - ``<Action>Options``, the job function's keyword
arguments - or None), ``decide`` runs the enabled ones in run order (``policy.ACTIONS``). Pure:
figures in, decisions out.

A decision's priority is its estimated benefit per cost; a table's is their sum, and tables go
highest first. The weights below are relative, not measured: remapping is cheap and every later
rewrite carries the reuse index further, compaction and deletions weigh by how much of the
table they fix, vacuuming gains with the bytes it frees.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from lance_spark_ops.fleet.health import TableHealth
from lance_spark_ops.fleet.policy import GIB, Policy

__all__ = [
    "ActionOptions", "CompactOptions", "Decision", "MaterializeOptions", "OptimizeOptions", "RemapOptions",
    "VacuumOptions", "decide", "decide_compact", "decide_materialize_deletions", "decide_optimize_indices",
    "decide_remap_indices", "decide_vacuum", "table_priority",
]

REMAP_PRIORITY = 10.0  # cheap, and it stops the reuse index from spreading into later rewrites
MATERIALIZE_PRIORITY_PER_DELETED = 5.0  # x the table's deleted fraction
COMPACT_PRIORITY_PER_SMALL = 4.0  # x the share of small fragments
OPTIMIZE_PRIORITY = 3.0
VACUUM_PRIORITY = 1.0  # plus one per GiB that only old versions use


@dataclass(frozen=True, eq=False)
class ActionOptions(Mapping[str, Any]):
    """An action's options, typed per action; also a read-only mapping of the job function's
    keyword arguments (the fields given, None ones left out) as the report prints them
    (``eq=False``: equal to any mapping of the same names and values)."""

    def __getitem__(self, key: str) -> Any:
        value = getattr(self, key, None) if key in self._names() else None
        if value is None:
            raise KeyError(key)
        return value

    def __iter__(self) -> Iterator[str]:
        return (k for k in self._names() if getattr(self, k) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    @classmethod
    def _names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


@dataclass(frozen=True, eq=False)
class RemapOptions(ActionOptions):
    """``remap_indices``: none."""


@dataclass(frozen=True, eq=False)
class MaterializeOptions(ActionOptions):
    """``materialize_deletions``: the deleted fraction that makes a fragment rewritten."""

    threshold: float


@dataclass(frozen=True, eq=False)
class CompactOptions(ActionOptions):
    """``compact``: the target fragment size and the deleted fraction rewritten on the way."""

    target_rows_per_fragment: int
    materialize_deletions_threshold: float


@dataclass(frozen=True, eq=False)
class OptimizeOptions(ActionOptions):
    """``optimize_indices``: segments merged (None: pylance's default, the newest one)."""

    num_indices_to_merge: int | None = None


@dataclass(frozen=True, eq=False)
class VacuumOptions(ActionOptions):
    """``vacuum``: the retention, as the policy writes it (``14d``)."""

    older_than: str


@dataclass(frozen=True)
class Decision:
    """One action to run on a table: why, with what options, and its estimated benefit per cost."""

    action: str
    reason: str
    options: ActionOptions = field(default_factory=RemapOptions)
    priority: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """The decision as the report holds it (options as their keyword arguments)."""
        return {"action": self.action, "reason": self.reason, "options": dict(self.options),
                "priority": self.priority}


Rule = Callable[[TableHealth, Policy], "Decision | None"]


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def decide_remap_indices(h: TableHealth, policy: Policy) -> Decision | None:
    """Indices still behind the fragment reuse index by at least ``remap_min_reuse_versions``."""
    if h.reuse_versions_behind < max(1, policy.remap_min_reuse_versions):
        return None
    return Decision("remap_indices", f"{h.reuse_versions_behind} fragment reuse version(s) behind "
                    f"(>= {policy.remap_min_reuse_versions})", RemapOptions(), priority=REMAP_PRIORITY)


def decide_materialize_deletions(h: TableHealth, policy: Policy) -> Decision | None:
    """Enough fragments over the deleted fraction (``decide`` skips it when compaction runs)."""
    heavy = h.fragments_over_deleted_threshold
    if heavy < max(1, policy.materialize_min_fragments):
        return None
    return Decision("materialize_deletions",
                    f"{heavy} fragment(s) over {_pct(policy.materialize_deleted_fraction)} deleted "
                    f"({_pct(h.deleted_fraction)} of the table's rows)",
                    MaterializeOptions(policy.materialize_deleted_fraction),
                    priority=h.deleted_fraction * MATERIALIZE_PRIORITY_PER_DELETED)


def decide_compact(h: TableHealth, policy: Policy) -> Decision | None:
    """Enough small fragments, by count and by share, in a table of more than one fragment."""
    if not (h.small_fragments >= policy.compact_min_small_fragments
            and h.small_fragments >= policy.compact_min_small_share * max(h.fragments, 1)
            and h.fragments > 1):
        return None
    return Decision("compact", f"{h.small_fragments} of {h.fragments} fragments below "
                    f"{policy.small_rows} rows (>= {policy.compact_min_small_fragments} and "
                    f">= {_pct(policy.compact_min_small_share)})",
                    CompactOptions(policy.target_rows_per_fragment, policy.materialize_deleted_fraction),
                    priority=h.small_fragments / max(h.fragments, 1) * COMPACT_PRIORITY_PER_SMALL)


def decide_optimize_indices(h: TableHealth, policy: Policy) -> Decision | None:
    """Indices missing enough live rows (count or share), or with too many delta segments: then
    all of their segments are merged (else pylance's default, the newest one)."""
    why, merge = [], 0
    for ix in h.indices:
        share = ix.unindexed_rows / max(h.rows, 1)
        if ix.unindexed_rows and (ix.unindexed_rows >= policy.optimize_min_unindexed_rows
                                  or share >= policy.optimize_min_unindexed_fraction):
            why.append(f"{ix.name}: {ix.unindexed_rows} rows unindexed ({_pct(share)})")
        elif ix.segments > policy.optimize_max_delta_segments:
            why.append(f"{ix.name}: {ix.segments} delta segments (> {policy.optimize_max_delta_segments})")
            merge = max(merge, ix.segments)
    if not why:
        return None
    return Decision("optimize_indices", "; ".join(why), OptimizeOptions(merge or None),
                    priority=OPTIMIZE_PRIORITY)


def decide_vacuum(h: TableHealth, policy: Policy) -> Decision | None:
    """Enough old versions, or enough bytes only old versions use, or enough unreferenced bytes."""
    why = []
    if h.versions_old >= policy.vacuum_min_old_versions:
        why.append(f"{h.versions_old} versions older than {policy.vacuum_retention} "
                   f"(>= {policy.vacuum_min_old_versions})")
    if h.bytes_old >= policy.vacuum_min_old_bytes:
        why.append(f"{h.bytes_old} bytes only old versions use (>= {policy.vacuum_min_old_bytes})")
    if h.unreferenced_bytes >= policy.vacuum_min_unreferenced_bytes:
        why.append(f"{h.unreferenced_bytes} bytes no version uses "
                   f"(>= {policy.vacuum_min_unreferenced_bytes})")
    if not why:
        return None
    return Decision("vacuum", "; ".join(why), VacuumOptions(policy.vacuum_retention),
                    priority=VACUUM_PRIORITY + h.bytes_old / GIB)


def decide(health: TableHealth, policy: Policy) -> list[Decision]:
    """The actions ``policy`` implies for ``health``, in run order (only those it enables;
    materialize_deletions only without a compaction, which rewrites those fragments anyway)."""
    on = set(policy.actions)

    def rule(action: str, check: Rule) -> Decision | None:
        return check(health, policy) if action in on else None

    compact = rule("compact", decide_compact)
    found = (
        rule("remap_indices", decide_remap_indices),
        None if compact else rule("materialize_deletions", decide_materialize_deletions),
        compact,
        rule("optimize_indices", decide_optimize_indices),
        rule("vacuum", decide_vacuum),
    )
    return [d for d in found if d is not None]


def table_priority(decisions: Sequence[Decision]) -> float:
    """Tables with the most benefit per cost go first: the sum of their decisions' priorities."""
    return sum(d.priority for d in decisions)
