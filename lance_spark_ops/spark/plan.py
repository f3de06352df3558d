"""Compaction planning on the driver: manifest fragments -> small picklable task groups.

Planned as Lance plans (``plan_compaction`` in lance's optimize.rs): walk fragments in
manifest order; a fragment is a candidate when its deleted fraction is above the
threshold (compact itself) or it has fewer rows than the target (compact with
neighbours); runs of adjacent candidates that are covered by the same set of indices
form a bin; a bin of one fragment that only wanted neighbours is dropped; bins are split
so each task produces about ``target_rows_per_fragment`` rows. Only neighbours merge, so
insertion order is kept. Excluded fragments break runs. ``max_source_*`` cap the run:
tasks are kept, oldest first, until the next would exceed a limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from lance_spark_ops._gc import gc_paused
from lance_spark_ops.spark.options import CompactionOptions

_NO_INDICES: frozenset[int] = frozenset()


class FragmentStats(NamedTuple):
    """What planning needs to know of one fragment (a tuple: 100 000 of them are built per plan)."""

    id: int
    physical_rows: int
    deleted_rows: int
    bytes: int
    indices: frozenset[int] = _NO_INDICES  # positions of indices covering it

    @property
    def live_rows(self) -> int:
        return self.physical_rows - self.deleted_rows

    @property
    def deleted_fraction(self) -> float:
        return self.deleted_rows / self.physical_rows if self.physical_rows else 0.0


@dataclass(frozen=True)
class CompactionTask:
    """One task group: neighbouring fragments rewritten into new fragments by one executor."""

    task_id: int
    fragment_ids: tuple[int, ...]
    live_rows: int
    bytes: int


def _candidacy(f: FragmentStats, opts: CompactionOptions) -> str | None:
    if opts.materialize_deletions and f.deleted_fraction > opts.materialize_deletions_threshold:
        return "itself"
    if f.physical_rows < opts.target_rows_per_fragment:
        return "neighbors"
    return None


def _split_for_size(bin_: list[tuple[FragmentStats, str]], target: int
                    ) -> list[list[tuple[FragmentStats, str]]]:
    """Cut a bin into pieces of >= target live rows; the remainder joins the last piece.

    Linear: the rows left after each cut come from one suffix sum (a 100 000-fragment bin
    split into pieces of 200 used to re-sum the rest at every cut)."""
    rows = [f.live_rows for f, _ in bin_]
    after = [0] * (len(rows) + 1)  # after[i] = live rows of bin_[i:]
    for i in range(len(rows) - 1, -1, -1):
        after[i] = after[i + 1] + rows[i]
    out = []
    start = 0
    while True:
        n, acc = start, 0
        while acc < target and n < len(rows):
            acc += rows[n]
            n += 1
        if after[n] >= target:
            out.append(bin_[start:n])
            start = n
        else:
            out.append(bin_[start:])
            return out


def plan_compaction(fragments: Sequence[FragmentStats], opts: CompactionOptions) -> list[CompactionTask]:
    with gc_paused():  # a pass over up to 100 000s of fragments (see lance_spark_ops._gc)
        return _plan(fragments, opts)


def _plan(fragments: Sequence[FragmentStats], opts: CompactionOptions) -> list[CompactionTask]:
    excluded = set(opts.excluded_fragment_ids)
    bins: list[list[tuple[FragmentStats, str]]] = []
    current: list[tuple[FragmentStats, str]] = []
    for frag in fragments:
        cand = None if frag.id in excluded else _candidacy(frag, opts)
        if cand is None:
            if current:
                bins.append(current)
            current = []
        elif current and current[0][0].indices != frag.indices:
            bins.append(current)
            current = [(frag, cand)]
        else:
            current.append((frag, cand))
    if current:
        bins.append(current)

    groups = []
    for b in bins:
        if len(b) == 1 and b[0][1] == "neighbors":
            continue  # a lone small fragment: nothing to merge it with
        groups.extend(_split_for_size(b, opts.target_rows_per_fragment))

    tasks: list[CompactionTask] = []
    n_frags = n_rows = n_bytes = 0
    for g in groups:
        frags = [f for f, _ in g]
        rows = sum(f.live_rows for f in frags)
        size = sum(f.bytes for f in frags)
        if ((opts.max_source_fragments is not None and n_frags + len(frags) > opts.max_source_fragments)
                or (opts.max_source_rows is not None and n_rows + rows > opts.max_source_rows)
                or (opts.max_source_bytes is not None and n_bytes + size > opts.max_source_bytes)):
            break
        n_frags, n_rows, n_bytes = n_frags + len(frags), n_rows + rows, n_bytes + size
        tasks.append(CompactionTask(len(tasks), tuple(f.id for f in frags), rows, size))
    return tasks


def rows_per_file(live_rows: int, target_rows: int) -> int:
    """Rows per new file of a task group: its live rows split evenly over ``max(1, live //
    target)`` files, as pylance 14 is seen to write them (9000 live rows at a 4000 target ->
    two files of 4500; 6000 -> one file), never a full file plus a small tail."""
    files = max(1, live_rows // max(1, target_rows))
    return max(1, -(-live_rows // files))
