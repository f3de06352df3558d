"""One bin-packing rule for every planner: items dealt costliest first, each onto the least
loaded bin (no I/O). Greedy "largest first" keeps bins within one item of each other, which is
what task plans need: about equal work per task, decided in one pass."""

from __future__ import annotations

from collections.abc import Sequence


def largest_first(
    costs: Sequence[float], bins: int, overhead: float = 0.0
) -> tuple[list[list[int]], list[float]]:
    """The items (indices into ``costs``) of each of ``bins`` bins, in the order dealt, and each
    bin's load: costliest item first (equal costs in index order) onto the least loaded bin (the
    first of equals); an item adds its cost plus ``overhead`` (a per-item charge, e.g. a task's
    start). Bins that got nothing stay empty."""
    shares: list[list[int]] = [[] for _ in range(bins)]
    load = [0.0] * bins
    for j in sorted(range(len(costs)), key=lambda j: -costs[j]):
        i = load.index(min(load))
        shares[i].append(j)
        load[i] += costs[j] + overhead
    return shares, load
