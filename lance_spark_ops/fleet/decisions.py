"""What a policy implies for a table's health: one rule per action (``decide_<action>``: the
action with its reason and options, or None), ``decide`` runs the enabled ones in run order
(``policy.ACTIONS``). Pure: figures in, decisions out.

A decision's priority is its estimated benefit per cost; a table's is their sum, and tables go
highest first. The weights below are relative, not measured: remapping is cheap and every later
rewrite carries the reuse index further, compaction and deletions weigh by how much of the
table they fix, vacuuming gains with the bytes it frees.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lance_spark_ops.fleet.health import TableHealth
from lance_spark_ops.fleet.policy import GIB, Policy

__all__ = [
    "Decision", "decide", "decide_compact", "decide_materialize_deletions", "decide_optimize_indices",
    "decide_remap_indices", "decide_vacuum", "table_priority",
]

REMAP_PRIORITY = 10.0  # cheap, and it stops the reuse index from spreading into later rewrites
MATERIALIZE_PRIORITY_PER_DELETED = 5.0  # x the table's deleted fraction
COMPACT_PRIORITY_PER_SMALL = 4.0  # x the share of small fragments
OPTIMIZE_PRIORITY = 3.0
VACUUM_PRIORITY = 1.0  # plus one per GiB that only old versions use


@dataclass(frozen=True)
class Decision:
    """One action to run on a table: why, with what options, and its estimated benefit per cost."""

    action: str
    reason: str
    options: dict[str, Any] = field(default_factory=dict)
    priority: float = 0.0


Rule = Callable[[TableHealth, Policy], "Decision | None"]


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def decide_remap_indices(h: TableHealth, policy: Policy) -> Decision | None:
    """Indices still behind the fragment reuse index by at least ``remap_min_reuse_versions``."""
    if h.reuse_versions_behind < max(1, policy.remap_min_reuse_versions):
        return None
    return Decision("remap_indices", f"{h.reuse_versions_behind} fragment reuse version(s) behind "
                    f"(>= {policy.remap_min_reuse_versions})", priority=REMAP_PRIORITY)


def decide_materialize_deletions(h: TableHealth, policy: Policy) -> Decision | None:
    """Enough fragments over the deleted fraction (``decide`` skips it when compaction runs)."""
    heavy = h.fragments_over_deleted_threshold
    if heavy < max(1, policy.materialize_min_fragments):
        return None
    return Decision("materialize_deletions",
                    f"{heavy} fragment(s) over {_pct(policy.materialize_deleted_fraction)} deleted "
                    f"({_pct(h.deleted_fraction)} of the table's rows)",
                    {"threshold": policy.materialize_deleted_fraction},
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
                    {"target_rows_per_fragment": policy.target_rows_per_fragment,
                     "materialize_deletions_threshold": policy.materialize_deleted_fraction},
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
    return Decision("optimize_indices", "; ".join(why), {"num_indices_to_merge": merge} if merge else {},
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
    return Decision("vacuum", "; ".join(why), {"older_than": policy.vacuum_retention},
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
