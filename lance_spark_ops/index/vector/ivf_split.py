"""pylance 14's partition adjustment of a default optimize (no I/O; lance-index's lib.rs and
lance's index/vector/builder.rs): which partitions split and which join (``partition_adjustment``),
where a split's new centroids come from (``split_centroids``), which partitions' rows move with
it (``affected``), and the rows per partition after a split in place (``InPlaceSplit``).
Where a join's rows go: ``ivf_join``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lance_spark_ops.index.vector.ivf_join import window
from lance_spark_ops.index.vector.ivf_model import Model, assign_metric
from lance_spark_ops.index.vector.kmeans import assign, train

# an optimize without num_indices_to_merge splits a partition over MAX_PARTITION_SIZE_FACTOR x
# the target size and joins those under MIN_PARTITION_SIZE_PERCENT % of it, merging every
# segment when it does
MAX_PARTITION_SIZE_FACTOR = 4
MIN_PARTITION_SIZE_PERCENT = 25
MAX_SPLIT_WAYS = 1024
SPLIT_SAMPLE_RATE = 256  # pylance 14's split: vectors sampled per new centroid,
SPLIT_ITERS = 50  # k-means iterations (neighbours its rows may go to: ivf_join.REASSIGN_RANGE)


def partition_adjustment(sizes: Sequence[int], target: int) -> tuple[list[tuple[int, int]], list[int]]:
    """pylance 14's decision from the rows per partition (new rows plus every segment's):
    ``(partition, ways)`` to split (over the split threshold: ``ceil(rows / target)`` ways,
    2..1 024) and the partitions to join away (under the join threshold, smallest first, as
    long as the survivors' room below the split threshold holds all rows)."""
    split_at = MAX_PARTITION_SIZE_FACTOR * target
    join_at = MIN_PARTITION_SIZE_PERCENT * target // 100
    sizes = [int(n) for n in sizes]
    splits = [(p, min(max(-(-n // target), 2), MAX_SPLIT_WAYS)) for p, n in enumerate(sizes) if n > split_at]
    if len(sizes) < 2:
        return splits, []
    max_joins = max(len(sizes) - max(-(-sum(sizes) // split_at), 1), 0)
    small = sorted((n, p) for p, n in enumerate(sizes) if n < join_at)
    return splits, sorted(p for _, p in small[:max_joins])


def split_steps(splits: Sequence[tuple[int, int]], sizes: np.ndarray) -> tuple[int, ...]:
    """Per split ``(partition, ways)``: the stride its ``SPLIT_SAMPLE_RATE`` x ways sampled rows
    are taken at."""
    return tuple(max(1, int(sizes[p]) // (SPLIT_SAMPLE_RATE * w)) for p, w in splits)


def sample_ids(ids: np.ndarray, ways: int) -> np.ndarray:
    """pylance 14's split sample of one partition: its row ids (every segment's and the new
    rows') sorted without repeats, then ``SPLIT_SAMPLE_RATE`` x ways of them taken at a stride
    of ``rows // that`` (deleted rows are dropped after, by the take)."""
    ids = np.unique(ids)
    want = SPLIT_SAMPLE_RATE * ways
    if ids.size > want:
        ids = ids[:: ids.size // want][:want]
    return ids


def split_centroids(
    model: Model, splits: Sequence[tuple[int, int]], samples: Sequence[np.ndarray]
) -> tuple[np.ndarray, list[int]] | None:
    """pylance 14's split: per partition, k-means (``SPLIT_ITERS`` iterations, seeded by the
    partition) over its sampled rows (``samples``, one per split, at most ``SPLIT_SAMPLE_RATE``
    x ways used); the new centroids that win a sampled row against the partition's
    ``REASSIGN_RANGE`` nearest neighbours are kept (fewer than two: not split); the first
    replaces the old centroid, the others are appended. Returns the centroids and the
    partitions split, None when none splits."""
    metric = assign_metric(model.metric)
    centroids, appended, applied = model.centroids.copy(), [], []
    for (p, ways), rows in zip(splits, samples, strict=True):
        sample = rows[: SPLIT_SAMPLE_RATE * ways]
        ways = min(ways, sample.shape[0])
        if ways < 2:
            continue
        trained, _ = train(sample, ways, metric, SPLIT_ITERS, p)
        win, new_d = assign(sample, trained, metric)
        _, old_d = assign(sample, model.centroids[window(model.centroids, p, (), model.metric)], metric)
        keep = np.unique(win[new_d < old_d])  # an exact tie stays with the old centroid
        if keep.size < 2:
            continue
        centroids[p] = trained[keep[0]]
        appended.extend(trained[keep[1:]])
        applied.append(p)
    if not appended:
        return None
    return np.concatenate([centroids, np.asarray(appended, np.float32)]).astype(np.float32), applied


def affected(model: Model, applied: Sequence[int], k: int) -> list[int]:
    """pylance 14's partitions a split touches: the split ones, those appended for them, and
    each split one's ``REASSIGN_RANGE`` nearest by its old centroid (``model``'s)."""
    out = set(applied) | set(range(model.num_partitions, k))
    for p in applied:
        out.update(int(q) for q in window(model.centroids, p, (), model.metric))
    return sorted(out)


def split_destinations(old: Model, new: Model, v: np.ndarray, home: np.ndarray) -> np.ndarray:
    """Each row's nearest centroid of ``new`` (the model after a split of ``old``), as an encode
    task assigns a new row. ``home``: the partition a row is stored in when the split left its
    centroid as it was, else -1. Such a row was nearest to that centroid among the old ones,
    and only the split partitions' and the appended centroids are new: it is ranked against
    those and its own (ascending ids, so ties go as over all of them) - a few centroids
    instead of every one; the other rows against every centroid."""
    metric = assign_metric(new.metric)
    k_old = old.num_partitions
    changed = np.concatenate([
        np.flatnonzero((old.centroids != new.centroids[:k_old]).any(axis=1)),
        np.arange(k_old, new.num_partitions),
    ]).astype(np.int64)
    dest = np.empty(v.shape[0], np.int64)
    rest = np.flatnonzero(home < 0)
    if rest.size:
        dest[rest] = assign(v[rest], new.centroids, metric)[0]
    order = np.argsort(home, kind="stable")
    bounds = np.searchsorted(home[order], np.arange(k_old + 1))
    for p in np.flatnonzero(np.diff(bounds)):
        rows = order[bounds[p] : bounds[p + 1]]
        cand = np.union1d(changed, [p])
        dest[rows] = cand[assign(v[rows], new.centroids[cand], metric)[0]]
    return dest


def out_of_reach(old: Model, new: Model, p: int, dist_sq: np.ndarray) -> np.ndarray:
    """Rows of partition ``p`` (its centroid unchanged by the split of ``old`` into ``new``; l2)
    at squared distance at most ``dist_sq`` from it that no new centroid can take: every split
    or appended centroid is over twice that distance from ``p``'s, so by the triangle
    inequality it is farther from the row than ``p``'s is (and ``p``'s was its nearest old
    one). Those rows stay as stored without being read again; the others are ranked."""
    k_old = old.num_partitions
    changed = np.concatenate([
        np.flatnonzero((old.centroids != new.centroids[:k_old]).any(axis=1)),
        np.arange(k_old, new.num_partitions),
    ])
    if not changed.size:
        return np.ones(dist_sq.shape[0], bool)
    c = new.centroids.astype(np.float64)
    gap = float(np.sqrt(((c[changed] - c[p]) ** 2).sum(axis=1)).min())
    with np.errstate(invalid="ignore"):
        reach = 2 * np.sqrt(np.maximum(dist_sq, 0)) * (1 + 1e-4)
    return reach < gap  # NaN: not out of reach


@dataclass(frozen=True)
class InPlaceSplit:
    """A split in place: the moved rows' runs (each with ``counts`` per partition), the stored
    rows' partition count, the partitions whose stored rows are left out (affected, old
    numbering)."""

    moved: tuple[Any, ...] = ()
    stored: int = 0
    gone: tuple[int, ...] = ()

    def counts(self, stored_counts: np.ndarray, k: int) -> np.ndarray:
        """Rows per partition of the new segment from the stored ones' (old numbering)."""
        out = np.zeros(k, np.int64)
        out[: stored_counts.size] = stored_counts
        out[list(self.gone)] = 0
        for r in self.moved:
            out += r.counts
        return out
