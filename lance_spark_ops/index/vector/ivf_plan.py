"""How a vector build's work is cut into tasks (no I/O): fragments into encode / sample groups,
partitions into ranges of about equal rows and ranges into pieces a task can hold, small
segments and partitions dealt onto tasks (``bin_packing``). The byte budgets are arguments:
the Spark builder owns them (and tests shrink them)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from lance_spark_ops.bin_packing import largest_first

Piece = tuple[int, int, "tuple[int, int] | None"]  # partitions [lo, hi), rows of the one partition


def rows_per_task(row_bytes: int, task_bytes: int, rows_cap: int | None = None) -> int:
    """Rows a task reads at most: ``task_bytes`` of ``row_bytes`` rows (``rows_cap`` instead when given)."""
    return rows_cap or max(1, task_bytes // max(row_bytes, 1))


def storage_row_bytes(width: int, itemsize: int) -> int:
    """Bytes of one storage row: its row id and ``width`` values of ``itemsize`` bytes."""
    return 8 + width * itemsize


def fragment_groups(live: Mapping[int, int], slots: int, per_task: int) -> list[tuple[int, ...]]:
    """Fragments (in id order) cut into at least ``min(fragments, slots)`` groups of at most
    ``per_task`` rows where a fragment allows."""
    ids = [f for f in sorted(live) if live[f]]
    if not ids:
        return []
    total = sum(live[f] for f in ids)
    per = max(1, min(per_task, math.ceil(total / min(slots, len(ids)))))
    out, cur, acc = [], [], 0
    for f in ids:
        if cur and acc + live[f] > per:
            out.append(tuple(cur))
            cur, acc = [], 0
        cur.append(f)
        acc += live[f]
    out.append(tuple(cur))
    return out


# a fragment is cut into row ranges for the encode tasks only when each range keeps this many rows
MIN_RANGE_ROWS = 16_384

Span = tuple[int, int, "int | None"]  # fragment id, first physical row, stop (None: the whole fragment)


def encode_spans(live: Mapping[int, int], physical: Mapping[int, int], slots: int, per_task: int
                 ) -> list[tuple[Span, ...]]:
    """``fragment_groups`` for the encode tasks, with a fragment of more live rows than a task's
    share (``per_task``, at most total / ``slots``) cut into physical row ranges of about equal
    rows, a task each, so that one big fragment still fills every slot. Groups keep fragment then
    row order (a partition's rows stay in fragment, offset order across the runs)."""
    ids = [f for f in sorted(live) if live[f]]
    if not ids:
        return []
    total = sum(live[f] for f in ids)
    share = max(1, min(per_task, math.ceil(total / max(1, slots))))
    whole = max(1, min(per_task, math.ceil(total / min(slots, len(ids)))))
    out: list[tuple[Span, ...]] = []
    cur: list[Span] = []
    acc = 0
    for f in ids:
        n, phys = live[f], int(physical.get(f) or 0)
        cuts = min(math.ceil(n / share), n // MIN_RANGE_ROWS, phys)
        if cuts > 1:
            if cur:
                out.append(tuple(cur))
                cur, acc = [], 0
            step = math.ceil(phys / cuts)
            out.extend(((f, s, min(phys, s + step)),) for s in range(0, phys, step))
            continue
        if cur and acc + n > whole:
            out.append(tuple(cur))
            cur, acc = [], 0
        cur.append((f, 0, None))
        acc += n
    if cur:
        out.append(tuple(cur))
    return out


def partition_ranges(counts: np.ndarray, tasks: int) -> list[tuple[int, int]]:
    """Partition ranges of about equal rows, at most ``tasks`` of them."""
    k = int(counts.size)
    tasks = max(1, min(tasks, k))
    cum = np.cumsum(counts)
    total = float(cum[-1]) if k else 0.0
    cuts = [0]
    for i in range(1, tasks):
        c = int(np.searchsorted(cum, total * i / tasks, side="right"))
        if c > cuts[-1] and c < k:
            cuts.append(c)
    cuts.append(k)
    return [(a, b) for a, b in zip(cuts, cuts[1:], strict=False) if b > a]


def pieces(ranges: list[tuple[int, int]], counts: np.ndarray, cap: int) -> list[Piece]:
    """``ranges`` cut so that no task holds more than ``cap`` rows: a range over the cap into
    runs of whole partitions, a partition over it into pieces of ``cap`` rows (``counts`` are
    the rows before deletions are dropped, so a piece only gets smaller)."""
    out: list[Piece] = []
    for lo, hi in ranges:
        if counts[lo:hi].sum() <= cap:
            out.append((lo, hi, None))
            continue
        start, acc = lo, 0
        for p in range(lo, hi):
            c = int(counts[p])
            if c > cap:
                if p > start:
                    out.append((start, p, None))
                out.extend((p, p + 1, (a, min(a + cap, c))) for a in range(0, c, cap))
                start, acc = p + 1, 0
            elif acc + c > cap:
                out.append((start, p, None))
                start, acc = p, c
            else:
                acc += c
        if hi > start:
            out.append((start, hi, None))
    return out


def range_tasks(
    counts: np.ndarray,
    row_bytes: int,
    slots: int,
    graphs: bool,
    task_bytes: int,
    piece_rows: int | None = None,
) -> list[Piece]:
    """The range tasks of one segment: partitions in about equal ranges, at least one per slot
    (two with HNSW graphs to build), at most ``task_bytes`` of storage rows each (``piece_rows``
    rows instead when given); a graph needs its whole partition (as pylance's), so HNSW ranges
    are not cut."""
    tasks = max(slots * (2 if graphs else 1), math.ceil(counts.sum() * row_bytes / task_bytes))
    cap = piece_rows or max(1, task_bytes // row_bytes)
    if graphs:
        cap = int(counts.sum()) + 1
    return pieces(partition_ranges(counts, tasks), counts, cap)


def whole_segment(
    rows: int, row_bytes: int, graphs: bool, task_bytes: int, piece_rows: int | None = None
) -> bool:
    """One task gathers and writes the segment: no graphs, at most one range task's rows."""
    return not graphs and rows <= (piece_rows or max(1, task_bytes // row_bytes))


def segment_shares(
    costs: Sequence[float], sizes: Sequence[int], slots: int, task_bytes: int
) -> list[list[int]]:
    """Small segments dealt to tasks (costliest first to the least loaded): two per slot, more
    when they hold over ``task_bytes`` of rows between them. Few tasks, each a few segments,
    because a task's start costs more than a tiny segment's work, and every task receives
    the whole job's descriptors."""
    n = min(len(costs), max(2 * slots, math.ceil(sum(sizes) / task_bytes)))
    shares, _ = largest_first(costs, n, overhead=1.0)
    return [sorted(g) for g in shares if g]


def partition_shares(
    parts: Sequence[int], sizes: np.ndarray, tasks: int
) -> tuple[list[list[int]], list[float]]:
    """Partitions ``parts`` dealt onto ``tasks`` tasks of about equal rows (``sizes``: rows per
    partition), largest first to the least loaded: each task's partitions (ascending) and rows."""
    shares, load = largest_first([int(sizes[p]) for p in parts], tasks)
    return [sorted(parts[j] for j in g) for g in shares], load


def move_tasks(parts: Sequence[int], sizes: np.ndarray, slots: int, per_task: int) -> int:
    """Tasks moving the rows of ``parts``: one per slot, more when they hold over ``per_task`` rows."""
    total = int(sum(int(sizes[p]) for p in parts))
    return min(len(parts), max(slots, math.ceil(total / per_task)))
