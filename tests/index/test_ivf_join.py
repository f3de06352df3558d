"""``index.vector.ivf_join``: the vectorised placement of a join's rows equals pylance 14's rule
applied row by row (``choose_join_destination`` in lance's index/vector/builder.rs, written
out plainly here), on random preferences and rooms that fill up and run out."""

from __future__ import annotations

import numpy as np

from lance_spark_ops.index.vector.ivf_join import REASSIGN_RANGE, destinations, never_full, window


def _row_by_row(pref: np.ndarray, room: np.ndarray, every: np.ndarray) -> list[int]:
    room = room.copy()
    out = []
    for i, row in enumerate(pref):
        free = [q for q in row if room[q] > 0] or [q for q in every[i] if room[q] > 0]
        if free:
            room[free[0]] -= 1
        out.append(int(free[0]) if free else int(row[0]))  # nowhere with room: uncounted
    return out


def test_place_equals_row_by_row() -> None:
    rng = np.random.default_rng(5)
    asked = 0
    for _ in range(300):
        k = int(rng.integers(3, 40))
        n = int(rng.integers(0, 200))
        w = int(min(k - 1, rng.integers(1, 6)))
        every = np.array([rng.permutation(k) for _ in range(n)], np.int64).reshape(n, k)
        room = rng.integers(0, 8, k)

        def wide(rows: np.ndarray, every: np.ndarray = every) -> dict[int, np.ndarray]:
            nonlocal asked
            asked += rows.size
            return {int(i): every[i] for i in rows}

        got = destinations(every[:, :w], room, wide)
        assert got.tolist() == _row_by_row(every[:, :w], room, every)
    assert asked  # the full-window fallback was exercised


def test_window_leaves_out_joined_partitions() -> None:
    rng = np.random.default_rng(1)
    c = rng.standard_normal((100, 4)).astype(np.float32)
    removed = [3, 7, 9]
    got = window(c, 3, removed, "l2")
    d = ((c - c[3]) ** 2).sum(1)
    want = [int(i) for i in np.argsort(d, kind="stable") if i not in removed][:REASSIGN_RANGE]
    assert got.tolist() == want


def test_never_full_means_each_row_goes_to_its_windows_nearest() -> None:
    """When ``never_full`` holds, pylance's rule (row by row) puts every row in the first
    partition of its window - what a rank task then encodes without asking the driver."""
    rng = np.random.default_rng(11)
    held = 0
    for _ in range(300):
        k = int(rng.integers(4, 40))
        joins = rng.choice(k, size=int(rng.integers(1, max(2, k // 3))), replace=False)
        kept = np.setdiff1d(np.arange(k), joins)
        w = int(rng.integers(1, kept.size + 1))
        windows = [rng.permutation(kept)[:w] for _ in joins]
        rows = [int(rng.integers(0, 6)) for _ in joins]
        room = rng.integers(0, 12, k)
        room[joins] = 0
        pref = np.concatenate([np.tile(win, (n, 1)) for win, n in zip(windows, rows, strict=True)]
                              ).reshape(-1, w).astype(np.int64)
        # within a joined partition rows may rank the window differently: shuffle each row
        pref = np.array([rng.permutation(r) for r in pref], np.int64).reshape(-1, w)
        every = np.array([np.concatenate([r, np.setdiff1d(kept, r)]) for r in pref], np.int64)
        placed = _row_by_row(pref, room, every.reshape(-1, kept.size) if every.size else every)
        if never_full(windows, rows, room):
            held += 1
            assert placed == pref[:, 0].tolist()
    assert 20 < held < 280  # both outcomes met
