"""Compaction planning on the driver: manifest fragments -> small picklable task groups.

Planned as Lance plans (``plan_compaction`` in lance's optimize.rs): walk fragments in
manifest order; a fragment is a candidate when its deleted fraction is above the
threshold (compact itself) or it has fewer rows than the target (compact with
neighbours); runs of adjacent candidates that are covered by the same set of indices
form a bin; a bin of one fragment that only wanted neighbours is dropped; bins are split
so each task produces about ``target_rows_per_fragment`` rows. Only neighbours merge, so
insertion order is kept. Excluded fragments break runs. ``max_source_*`` cap the run:
tasks are kept, oldest first, until the next would exceed a limit.

Planned over arrays (``FragmentTable``, read from the manifest bytes by ``fragment_stats``):
candidates, runs and bin boundaries are numpy masks; only bins and pieces are Python objects.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from lance_spark_ops.spark.files.compaction_options import CompactionOptions

_NO_INDICES: frozenset[int] = frozenset()


class FragmentStats(NamedTuple):
    """What planning needs to know of one fragment."""

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
class FragmentTable:
    """``FragmentStats`` of every fragment as arrays, in manifest order (a 100 000-fragment
    plan builds no object per fragment). ``cover[i]`` keys ``covers``: the index positions
    covering fragment ``i``; equal keys, equal sets. ``blocked``: never rewritten here."""

    id: np.ndarray
    physical_rows: np.ndarray
    deleted_rows: np.ndarray
    bytes: np.ndarray
    cover: np.ndarray
    covers: tuple[frozenset[int], ...] = (_NO_INDICES,)
    blocked: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.id)

    def __iter__(self) -> Iterator[FragmentStats]:
        covers = self.covers
        for i, p, d, b, c in zip(self.id.tolist(), self.physical_rows.tolist(), self.deleted_rows.tolist(),
                                 self.bytes.tolist(), self.cover.tolist(), strict=True):
            yield FragmentStats(i, p, d, b, covers[c])

    @property
    def live_rows(self) -> np.ndarray:
        return self.physical_rows - self.deleted_rows

    def deleted_fraction(self) -> np.ndarray:
        """``FragmentStats.deleted_fraction`` of every fragment (0.0 without physical rows)."""
        physical = self.physical_rows
        known = physical != 0
        return np.where(known, self.deleted_rows / np.where(known, physical, 1), 0.0)

    def blocked_ids(self) -> list[int]:
        return [] if self.blocked is None else self.id[self.blocked].tolist()

    @classmethod
    def of(cls, fragments: Sequence[FragmentStats] | FragmentTable) -> FragmentTable:
        if isinstance(fragments, FragmentTable):
            return fragments
        keys: dict[frozenset[int], int] = {_NO_INDICES: 0}
        cover = [keys.setdefault(f.indices, len(keys)) for f in fragments]
        cols = np.array([(f.id, f.physical_rows, f.deleted_rows, f.bytes) for f in fragments],
                        dtype=np.int64).reshape(len(fragments), 4)
        return cls(cols[:, 0], cols[:, 1], cols[:, 2], cols[:, 3], np.array(cover, dtype=np.int64),
                   tuple(keys))


@dataclass(frozen=True)
class CompactionTask:
    """One task group: neighbouring fragments rewritten into new fragments by one executor."""

    task_id: int
    fragment_ids: tuple[int, ...]
    live_rows: int
    bytes: int


def _bins(t: FragmentTable, opts: CompactionOptions) -> list[tuple[int, int]]:
    """[start, end) of each bin: a run of adjacent candidates with one covering set, lone
    fragments that only wanted neighbours dropped."""
    itself = np.zeros(len(t), bool)
    if opts.materialize_deletions:
        itself = t.deleted_fraction() > opts.materialize_deletions_threshold
    neighbors = ~itself & (t.physical_rows < opts.target_rows_per_fragment)
    cand = itself | neighbors
    if opts.excluded_fragment_ids:
        cand &= ~np.isin(t.id, np.fromiter(opts.excluded_fragment_ids, np.int64))
    idx = np.flatnonzero(cand)
    if not idx.size:
        return []
    cut = np.flatnonzero((np.diff(idx) != 1) | (t.cover[idx[1:]] != t.cover[idx[:-1]])) + 1
    first = np.concatenate(([0], cut))
    last = np.concatenate((cut, [len(idx)]))
    starts, ends = idx[first], idx[last - 1] + 1
    keep = (ends - starts > 1) | itself[starts]
    return list(zip(starts[keep].tolist(), ends[keep].tolist(), strict=True))


def _split_for_size(rows: list[int], start: int, end: int, target: int) -> list[tuple[int, int]]:
    """Cut ``[start, end)`` into pieces of >= target live rows; the remainder joins the last piece.
    ``rows`` is the cumulative live rows (``rows[i]`` = live rows of fragments before ``i``, never
    decreasing): each cut is one binary search."""
    out = []
    total = rows[end]
    while True:
        n = min(bisect_left(rows, rows[start] + target, start, end + 1), end)
        if total - rows[n] >= target:
            out.append((start, n))
            start = n
        else:
            out.append((start, end))
            return out


def _split_loop(live: list[int], start: int, end: int, target: int) -> list[tuple[int, int]]:
    """``_split_for_size`` for bins with negative live rows (a deletion count above the row
    count): greedy, fragment by fragment."""
    after = [0] * (end - start + 1)
    for i in range(end - 1, start - 1, -1):
        after[i - start] = after[i - start + 1] + live[i]
    out = []
    s = start
    while True:
        n, acc = s, 0
        while acc < target and n < end:
            acc += live[n]
            n += 1
        if after[n - start] >= target:
            out.append((s, n))
            s = n
        else:
            out.append((s, end))
            return out


def plan_compaction(fragments: Sequence[FragmentStats] | FragmentTable, opts: CompactionOptions
                    ) -> list[CompactionTask]:
    t = FragmentTable.of(fragments)
    target = opts.target_rows_per_fragment
    live = t.live_rows
    rows = np.concatenate(([0], np.cumsum(live))).tolist()
    size = np.concatenate(([0], np.cumsum(t.bytes))).tolist()
    monotonic = not bool((live < 0).any())
    groups: list[tuple[int, int]] = []
    for start, end in _bins(t, opts):
        groups.extend(_split_for_size(rows, start, end, target) if monotonic
                      else _split_loop(live.tolist(), start, end, target))

    tasks: list[CompactionTask] = []
    n_frags = n_rows = n_bytes = 0
    ids = t.id
    for start, end in groups:
        n, r, b = end - start, rows[end] - rows[start], size[end] - size[start]
        if ((opts.max_source_fragments is not None and n_frags + n > opts.max_source_fragments)
                or (opts.max_source_rows is not None and n_rows + r > opts.max_source_rows)
                or (opts.max_source_bytes is not None and n_bytes + b > opts.max_source_bytes)):
            break
        n_frags, n_rows, n_bytes = n_frags + n, n_rows + r, n_bytes + b
        tasks.append(CompactionTask(len(tasks), tuple(ids[start:end].tolist()), r, b))
    return tasks


def rows_per_file(live_rows: int, target_rows: int) -> int:
    """Rows per new file of a task group: its live rows split evenly over ``max(1, live //
    target)`` files, as pylance 14 is seen to write them (9000 live rows at a 4000 target ->
    two files of 4500; 6000 -> one file), never a full file plus a small tail."""
    files = max(1, live_rows // max(1, target_rows))
    return max(1, -(-live_rows // files))
