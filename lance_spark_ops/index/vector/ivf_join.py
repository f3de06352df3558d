"""Where pylance 14 puts the rows of the IVF partitions an optimize joins away (lance's
index/vector/builder.rs, ``join_partitions`` / ``choose_join_destination``).

The rows are taken in order - joined partitions by ascending id, each one's rows by ascending
row id - and each goes to the nearest partition with room below the split threshold among its
joined partition's *window*: the ``REASSIGN_RANGE`` kept partitions nearest to the joined
partition's centroid. Every row placed uses up one unit of its partition's room (room: split
threshold minus the partition's rows before the join, new rows included). When the whole window
is full, the row goes to the nearest kept partition anywhere with room; when none has room, to
the nearest of its window, without counting. The decision is sequential; ``place`` computes it
in vectorised steps, one per partition that fills up.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

REASSIGN_RANGE = 64  # pylance's neighbours a split or joined partition's rows may go to


def distances(x: np.ndarray, centroids: np.ndarray, metric: str) -> np.ndarray:
    """(rows x centroids) distances in the index's ``metric``, float64, as pylance ranks a
    join's candidates (its distance type, not the L2 it assigns cosine rows with): squared L2,
    minus the dot product, or minus the cosine."""
    x64, c64 = x.astype(np.float64, copy=False), centroids.astype(np.float64, copy=False)
    dots = x64 @ c64.T
    if metric == "dot":
        return -dots
    xx, cc = (x64 * x64).sum(1), (c64 * c64).sum(1)
    if metric == "cosine":
        xn, cn = np.sqrt(xx), np.sqrt(cc)
        return -dots / np.where(xn == 0, 1, xn)[:, None] / np.where(cn == 0, 1, cn)[None, :]
    return xx[:, None] - 2 * dots + cc[None, :]


def window(centroids: np.ndarray, p: int, removed: Sequence[int], metric: str) -> np.ndarray:
    """The ids of the ``REASSIGN_RANGE`` kept partitions nearest to centroid ``p``, nearest
    first (``removed``, ``p`` among them, are left out)."""
    d = distances(centroids[p : p + 1], centroids, metric)[0]
    order = np.argsort(d, kind="stable")
    out = order[np.isin(order, np.asarray([p, *removed], np.int64), invert=True)]
    return out[:REASSIGN_RANGE].astype(np.int64)


def never_full(windows: Sequence[np.ndarray], rows: Sequence[int], room: np.ndarray) -> bool:
    """No partition can fill up during the join: each kept partition's room holds every row of
    all joined partitions whose window it is in (``rows``: at most that many rows each). Then
    every row simply goes to the nearest partition of its window - decided where the row is,
    with no round trip through the driver."""
    most = np.zeros(len(room), np.int64)
    for w, n in zip(windows, rows, strict=True):
        most[w] += int(n)
    return bool((most <= np.asarray(room, np.int64)).all())


def ranking(x: np.ndarray, centroids: np.ndarray, ids: np.ndarray, metric: str) -> np.ndarray:
    """Per row of ``x``: the partitions ``ids`` ordered nearest first (an exact tie keeps the
    order of ``ids``, as pylance's first minimum does)."""
    if not x.shape[0]:
        return np.zeros((0, ids.size), np.int64)
    return ids[np.argsort(distances(x, centroids[ids], metric), axis=1, kind="stable")]


def place(
    pref: np.ndarray,
    room: np.ndarray,
    wide: dict[int, np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """pylance's destinations of the joined rows, in its order: ``pref`` (rows x window) the
    window of each row's joined partition nearest first (``ranking``), ``room`` per partition
    (joined ones 0), ``wide`` for some rows every kept partition nearest first (``ranking``
    over them). Returns (destination per row, the rows whose window fills up while a partition
    elsewhere has room and that ``wide`` lacks: rank them over every kept partition and call
    again; destinations are then incomplete)."""
    n = pref.shape[0]
    room = np.asarray(room, np.int64).copy()
    dest = np.full(n, -1, np.int64)
    t = 0
    while t < n:
        rest = pref[t:]
        ok = room[rest] > 0
        has = ok.any(1)
        tgt = np.where(has, rest[np.arange(rest.shape[0]), ok.argmax(1)], -1)
        stop = int(np.argmin(has)) if not has.all() else rest.shape[0]  # first row with a full window
        head = tgt[:stop]
        fill = stop
        if head.size:
            # each partition fills at its room-th row in head; the earliest fill ends the step
            order = np.argsort(head, kind="stable")
            srt = head[order]
            starts = np.searchsorted(srt, srt, side="left")
            nth = np.arange(srt.size) - starts + 1  # occurrence number of each row's partition
            hit = nth == room[srt]
            if hit.any():
                fill = int(order[hit].min()) + 1
        dest[t : t + fill] = head[:fill]
        room -= np.bincount(head[:fill], minlength=room.size)
        t += fill
        if fill < stop or t >= n:
            continue
        # row t: its window is full
        if not (room > 0).any():
            dest[t] = pref[t, 0]  # nowhere has room: its nearest, uncounted
        elif t in wide:
            order_all = wide[t]
            q = int(order_all[np.argmax(room[order_all] > 0)])
            dest[t], room[q] = q, room[q] - 1
        else:
            later = t + np.flatnonzero(~has[stop:])  # every row whose window is full by now
            return dest, later
        t += 1
    return dest, np.zeros(0, np.int64)


def destinations(
    pref: np.ndarray, room: np.ndarray, rank_wide: Callable[[np.ndarray], dict[int, np.ndarray]]
) -> np.ndarray:
    """``place`` until complete: ``rank_wide(rows)`` ranks those rows over every kept partition
    (pylance's fallback when a window is full; rare, so asked for only when met)."""
    wide: dict[int, np.ndarray] = {}
    while True:
        dest, need = place(pref, room, wide)
        if not need.size:
            return dest
        got = rank_wide(need)
        if not set(got) >= {int(i) for i in need}:
            raise RuntimeError("join placement: rows left unranked")  # pragma: no cover
        wide.update(got)


def join_room(sizes: np.ndarray, joins: Sequence[int], split_at: int) -> np.ndarray:
    """Per partition, the rows it may still take below the split threshold (joined ones: 0)."""
    room = np.maximum(split_at - np.asarray(sizes).astype(np.int64), 0)
    room[list(joins)] = 0
    return room


def join_order(
    ranked: Sequence[tuple[Sequence[int], Sequence[int], np.ndarray]],
    windows: dict[int, np.ndarray],
    joins: Sequence[int],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The joined rows in pylance's order (joined partitions ascending, each one's rows by
    address) from the rank tasks' answers (per task: its joined partitions, their row counts,
    each row's ranks within its partition's window): per row its window nearest first
    (``place``'s ``pref``), the task that holds it, and its row number in that task."""
    where: dict[int, tuple[int, int, int]] = {}  # partition -> (task, first row, rows)
    for t, (parts, counts, _) in enumerate(ranked):
        first = 0
        for p, n in zip(parts, counts, strict=True):
            where[p] = (t, first, n)
            first += n
    order = sorted(joins)
    pref = (
        np.concatenate(
            [windows[p][ranked[where[p][0]][2][where[p][1] : where[p][1] + where[p][2]]] for p in order]
        )
        if any(where[p][2] for p in order)
        else np.zeros((0, 1), np.int64)
    )
    task_of = np.concatenate([np.full(where[p][2], where[p][0]) for p in order]).astype(np.int64)
    local = np.concatenate([where[p][1] + np.arange(where[p][2]) for p in order]).astype(np.int64)
    return pref, task_of, local


def task_destinations(
    rows: int, mine: np.ndarray, local: np.ndarray, dest: np.ndarray, pref: np.ndarray
) -> tuple[np.ndarray, bool]:
    """One rank task's ``rows`` rows: each one's destination (``dest`` of the rows ``mine``
    selects, at their ``local`` row numbers), and whether every row goes to its window's
    nearest (then the task's run, encoded there, stands as it is)."""
    d, nearest_of = np.zeros(rows, np.int64), np.zeros(rows, np.int64)
    d[local[mine]] = dest[mine]
    nearest_of[local[mine]] = pref[mine, 0]
    return d, bool(np.array_equal(d, nearest_of))
