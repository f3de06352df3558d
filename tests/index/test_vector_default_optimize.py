"""``optimize_indices`` of a vector index without ``num_indices_to_merge`` (pylance 14's
default): a delta segment, unless the rows per partition call for a join (all segments merged,
partitions under 25 % of the target size joined into their neighbours) or a split. Our
optimize on one copy, pylance's on a twin built with the same centroids (so the partition sizes,
and with them the decisions, are the same): after each of three rounds of appends the segment
counts and partitions per segment equal pylance's, 0 rows unindexed, recall within 0.02; the
metrics' partitions before / after are pylance's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops.index.vector.ivf_split import partition_adjustment
from lance_spark_ops.spark.indices.indexing import create_index, optimize_indices
from lance_spark_ops.spark.runtime.tuning import Tuning
from tests.support.pylance_indices import index_segments

DIM = 16
CASES = [  # kind, rows, partitions, stable row ids (pylance: 4 x 4000 joins, 2 x 4000 deltas,
    # 2 x 40000 splits; a join or split keeps the untouched partitions' rows as stored, except
    # with stable row ids and HNSW, where every row is encoded again)
    ("IVF_FLAT", 4000, 4, False),
    ("IVF_FLAT", 40000, 2, False),
    ("IVF_PQ", 4000, 4, False),
    ("IVF_PQ", 4000, 4, True),
    ("IVF_SQ", 4000, 4, False),
    ("IVF_HNSW_SQ", 4000, 4, False),
    ("IVF_PQ", 4000, 2, False),
    ("IVF_RQ", 4000, 4, False),
    ("IVF_RQ", 40000, 2, True),
]


def _table(rng: np.random.Generator, n: int, start: int) -> pa.Table:
    x = rng.standard_normal((n, DIM)).astype(np.float32)
    return pa.table({"id": pa.array(np.arange(start, start + n), pa.int64()),
                     "vec": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), DIM)})


def _shape(uri: str) -> tuple[int, list[int], int]:
    import lance

    st = lance.dataset(uri).stats.index_stats("vec_idx")
    return st["num_indices"], [i["num_partitions"] for i in st["indices"]], st["num_unindexed_rows"]


def _sizes(uri: str) -> list[list[int]]:
    import lance

    st = lance.dataset(uri).stats.index_stats("vec_idx")
    return [[p["size"] for p in i["partitions"]] for i in st["indices"]]


def _recall(uri: str, k_parts: int, qs: np.ndarray | None = None) -> float:
    import lance

    ds = lance.dataset(uri)
    t = ds.to_table(columns=["id", "vec"])
    x = np.stack(t.column("vec").to_numpy(zero_copy_only=False)).astype(np.float32)
    ids = t.column("id").to_numpy()
    if qs is None:
        qs = np.random.default_rng(7).standard_normal((50, DIM)).astype(np.float32)
    hits = 0
    for q in qs:
        truth = set(ids[np.argsort(((x - q) ** 2).sum(1), kind="stable")[:10]].tolist())
        got = ds.to_table(nearest={"column": "vec", "q": q, "k": 10, "nprobes": max(1, k_parts // 2),
                                   "ef": 100}, columns=["id"]).column("id").to_pylist()
        hits += len(truth & set(got))
    return hits / 500


@pytest.mark.parametrize("kind,rows,parts,stable", CASES)
def test_default_optimize_equals_pylance(
    tmp_path: Path, kind: str, rows: int, parts: int, stable: bool
) -> None:
    import lance

    rng = np.random.default_rng(3)
    first = _table(rng, rows, 0)
    appends = [_table(rng, 500, rows + 500 * i) for i in range(3)]
    kw = {"num_partitions": parts, "ivf_centroids": rng.standard_normal((parts, DIM)).astype(np.float32)}
    if kind.endswith("PQ"):  # one codebook too: pylance's PQ training is not seeded
        kw["num_sub_vectors"] = 4
        kw["pq_codebook"] = rng.standard_normal((4, 256, DIM // 4)).astype(np.float32)
    if kind == "IVF_RQ":  # one rotation too (pylance draws a random one)
        from lance.lance import indices

        kw["rabitq_model"] = indices.build_rq_model(DIM, 5)
    ours, theirs = str(tmp_path / "ours.lance"), str(tmp_path / "theirs.lance")
    for uri in (ours, theirs):
        lance.write_dataset(first, uri, enable_stable_row_ids=stable)
    create_index(None, ours, "vec", kind, **kw)
    lance.dataset(theirs).create_index("vec", kind, **kw)
    before = _shape(theirs)[1][-1]
    for t in appends:
        for uri in (ours, theirs):
            lance.write_dataset(t, uri, mode="append")
        m = optimize_indices(None, ours).indices["vec_idx"]
        lance.dataset(theirs).optimize.optimize_indices()
        got, want = _shape(ours), _shape(theirs)
        assert got == want and got[2] == 0, (got, want)
        # the metrics say what pylance's stats say: partitions before -> after (a join, a split)
        assert (m["partitions_before"], m["partitions_after"]) == (before, want[1][-1]), m
        before = want[1][-1]
        if rows < 10000:  # same centroids, a join's rows placed as pylance places them (no k-means)
            assert _sizes(ours) == _sizes(theirs)
    k = _shape(ours)[1][-1]
    assert _recall(ours, k) >= _recall(theirs, k) - 0.02


def test_partition_adjustment_rules() -> None:
    """pylance 14's thresholds: split over 4 x target into ceil(rows / target) ways (2..1 024);
    join under 25 % of target, smallest first, while the rest can hold every row below 4 x."""
    assert partition_adjustment([100, 5000, 40000], 8192) == ([(2, 5)], [0])
    assert partition_adjustment([1000, 1100, 1200, 1300], 8192) == ([], [0, 1, 2])
    assert partition_adjustment([3000, 3000], 8192) == ([], [])
    assert partition_adjustment([10], 8192) == ([], [])
    # 65 556 rows need 3 partitions below the split threshold: one of the two small ones joins
    assert partition_adjustment([10, 10, 8192 * 4, 8192 * 4], 8192) == ([], [0])


def _rows_per_partition(uri: str) -> list[list[int]]:
    """Per partition of the one segment its row ids (sorted), read with pylance."""
    import lance
    from lance.file import LanceFileReader

    ds = lance.dataset(uri)
    (idx,) = [i for i in index_segments(ds) if i["name"] == "vec_idx"]
    (sizes,) = _sizes(uri)
    t = LanceFileReader(f"{uri}/_indices/{idx['uuid']}/auxiliary.idx").read_all().to_table()
    ids = t.column("_rowid").to_numpy()
    bounds = np.cumsum([0, *sizes])
    return [sorted(ids[a:b].tolist()) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def _pq_codes(uri: str) -> list[dict[int, bytes]]:
    """Per partition of the one IVF_PQ segment: row id -> its PQ code (stored transposed per
    partition)."""
    import lance
    from lance.file import LanceFileReader

    ds = lance.dataset(uri)
    (idx,) = [i for i in index_segments(ds) if i["name"] == "vec_idx"]
    (sizes,) = _sizes(uri)
    t = LanceFileReader(f"{uri}/_indices/{idx['uuid']}/auxiliary.idx").read_all().to_table()
    ids, codes = t.column("_rowid").to_numpy(), t.column(1).combine_chunks()
    bounds = np.cumsum([0, *sizes])
    out = []
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        c = codes.slice(a, b - a).flatten().to_numpy(zero_copy_only=False).reshape(-1, b - a).T
        out.append({int(i): row.tobytes() for i, row in zip(ids[a:b], c, strict=True)})
    return out


def _rq_codes(uri: str) -> list[dict[int, bytes]]:
    """Per partition of the one IVF_RQ segment: row id -> its storage row (codes, factors)."""
    from tests.index.test_build_rq import rq_storage

    out: list[dict[int, bytes]] = [{} for _ in _sizes(uri)[0]]
    for i, (p, row) in rq_storage(uri).items():
        out[p][i] = row
    return out


@pytest.mark.parametrize("case", ["spill", "window_full", "nearest_has_room"])
def test_join_fills_partitions_as_pylance(spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          case: str) -> None:
    """80 partitions (more than pylance's 64-partition window), target 40 rows (split over
    160, join under 10). spill: 5 partitions of 6 rows are joined, each one's two nearest kept
    partitions 2 rows short of 160, so its rows spill over to the next ones. window_full: one
    is joined, its 64 nearest kept partitions hold 160 rows, so its rows go to the nearest of
    the other 15. The nearest-remaining rule puts them all in the nearest; per-partition
    sizes and row ids equal pylance's. nearest_has_room: far members of the windows 2 rows
    short, so a fill cannot be ruled out from sizes (``never_full`` fails), yet every row's
    nearest has room: the rows the rank tasks encoded in place are kept, no second round.
    Through Spark (the join's tasks and results pickled)."""
    import lance

    rng = np.random.default_rng(11)
    k, dim = 80, 8
    cents = (rng.standard_normal((k, dim)) * 10).astype(np.float32)
    d = ((cents[:, None] - cents[None]) ** 2).sum(-1)
    if case == "spill":
        joined, sizes = [3, 17, 40, 41, 66], np.full(k, 40)
        for j in joined:  # the two nearest kept partitions of each joined one: room for 2 rows
            sizes[[int(q) for q in np.argsort(d[j]) if q != j and q not in joined][:2]] = 158
    elif case == "window_full":
        joined, sizes = [5], np.full(k, 100)
        sizes[[int(q) for q in np.argsort(d[5]) if q != 5][:64]] = 160
    else:
        joined, sizes = [3, 17, 40, 41, 66], np.full(k, 40)
        wins = [[int(q) for q in np.argsort(d[j]) if q != j and q not in joined][:64] for j in joined]
        near = {q for w in wins for q in w[:8]}
        sizes[[q for w in wins for q in w[40:] if q not in near]] = 158
        from lance_spark_ops.spark.indices import vector_index as vix

        real, seen = vix.never_full, []
        monkeypatch.setattr(vix, "never_full", lambda *a: seen.append(real(*a)) or seen[-1])

        def second_round(*a: Any) -> None:
            raise AssertionError("the join's second round ran")

        monkeypatch.setattr(vix, "run_join_encode", second_round)
    sizes[joined] = 6
    lab = np.repeat(np.arange(k), sizes)
    x = (cents[lab] + rng.standard_normal((lab.size, dim)) * 0.8).astype(np.float32)
    t = pa.table({"id": pa.array(np.arange(x.shape[0]), pa.int64()),
                  "vec": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), dim)})
    add = pa.table({"id": pa.array([x.shape[0]], pa.int64()),
                    "vec": pa.FixedSizeListArray.from_arrays(pa.array(cents[joined[0]]), dim)})
    kw = {"num_partitions": k, "ivf_centroids": cents, "target_partition_size": 40}
    ours, theirs = str(tmp_path / "ours.lance"), str(tmp_path / "theirs.lance")
    for uri in (ours, theirs):
        lance.write_dataset(t, uri)
    create_index(None, ours, "vec", "IVF_FLAT", **kw)
    lance.dataset(theirs).create_index("vec", "IVF_FLAT", **kw)
    assert _sizes(theirs) == [sizes.tolist()]  # the rows fall where they were drawn
    for uri in (ours, theirs):
        lance.write_dataset(add, uri, mode="append")
    optimize_indices(spark, ours)
    lance.dataset(theirs).optimize.optimize_indices()
    got, want = _shape(ours), _shape(theirs)
    assert got == want == (1, [k - len(joined)], 0), (got, want)
    assert _sizes(ours) == _sizes(theirs)
    if case == "nearest_has_room":
        assert seen == [False]  # the rank tasks kept the vectors; the driver found no row moved
    else:
        assert max(_sizes(theirs)[0]) == 160  # the room rule was in play
    assert _rows_per_partition(ours) == _rows_per_partition(theirs)


@pytest.mark.parametrize("kind,pieces,through_spark",
                         [("IVF_FLAT", None, True), ("IVF_PQ", 30, False), ("IVF_RQ", 30, False)])
def test_split_moves_only_affected_rows(spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        kind: str, pieces: int | None, through_spark: bool) -> None:
    """80 partitions, target 40 (split over 160): partition 0 (200 rows, stretched along the
    first axis) splits 5 ways. pylance moves only the affected partitions' rows - the split
    one's and those of its 64 nearest (a ring around it) - and keeps every other partition's
    rows as stored: partition 1 keeps row ``r`` although a new centroid is now nearer to it
    (encoding every row again would move it). Row ids per kept partition equal pylance's, the
    rows moved are exactly the affected partitions', 0 rows unindexed, recall within 0.02.
    Partition 70 (5 rows) is under the join threshold too: pylance splits and joins nothing. FLAT
    through Spark (the tasks pickled); PQ gathered in pieces of 30 rows (partitions hold ~40)."""
    import lance

    import lance_spark_ops.spark.indices.vector_index as vi

    rng = np.random.default_rng(5)
    k, e1 = 80, np.eye(DIM, dtype=np.float32)[0]
    cents = np.zeros((k, DIM), np.float32)
    cents[1] = 40 * e1  # far from partition 0: outside its window
    ring = rng.standard_normal((64, DIM)).astype(np.float32)
    ring[:, 0] = 0
    cents[2:66] = 30 * ring / np.linalg.norm(ring, axis=1, keepdims=True)
    cents[66:] = -60 * e1 + rng.standard_normal((14, DIM)).astype(np.float32) * 8
    sizes = np.full(k, 40)
    sizes[0], sizes[70] = 200, 5  # 70: under the join threshold, but pylance splits instead
    lab = np.repeat(np.arange(k), sizes)
    x = (cents[lab] + rng.standard_normal((lab.size, DIM)) * 0.5).astype(np.float32)
    x[lab == 0, 0] = np.clip(rng.standard_normal(200) * 5, -14, 14)
    r = 20.5 * e1  # nearer partition 1 (19.5) than 0 (20.5); a new centroid near x = 8
    x = np.concatenate([x, r[None]])
    t = pa.table({"id": pa.array(np.arange(x.shape[0]), pa.int64()),
                  "vec": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), DIM)})
    add = _table(rng, 20, x.shape[0])
    kw: dict[str, Any] = {"num_partitions": k, "ivf_centroids": cents, "target_partition_size": 40}
    if kind == "IVF_PQ":
        kw["num_sub_vectors"] = 4
        kw["pq_codebook"] = rng.standard_normal((4, 256, DIM // 4)).astype(np.float32)
    if kind == "IVF_RQ":  # one rotation too (pylance draws a random one)
        from lance.lance import indices

        kw["rabitq_model"] = indices.build_rq_model(DIM, 5)
    ours, theirs = str(tmp_path / "ours.lance"), str(tmp_path / "theirs.lance")
    for uri in (ours, theirs):
        lance.write_dataset(t, uri)
    create_index(None, ours, "vec", kind, **kw)
    lance.dataset(theirs).create_index("vec", kind, **kw)
    before = _rows_per_partition(theirs)
    assert [len(p) for p in before] == [200, 41, *[40] * 68, 5, *[40] * 9]
    for uri in (ours, theirs):
        lance.write_dataset(add, uri, mode="append")
    moved: list[int] = []
    move = vi.VectorSegmentBuilder._move

    def spy(*args: Any) -> Any:
        out = move(*args)
        moved.extend(r.rows for r in out)
        return out

    monkeypatch.setattr(vi.VectorSegmentBuilder, "_move", staticmethod(spy))
    optimize_indices(spark if through_spark else None, ours, tuning=Tuning(vector_piece_rows=pieces))
    lance.dataset(theirs).optimize.optimize_indices()
    got, want = _shape(ours), _shape(theirs)
    assert got == want and got[0] == 1 and got[1][0] > k and got[2] == 0, (got, want)
    mine, pylance = _rows_per_partition(ours), _rows_per_partition(theirs)
    kept = [1, *range(66, k)]  # outside partition 0's 64 nearest
    assert [mine[p] for p in kept] == [pylance[p] for p in kept]
    assert x.shape[0] - 1 in mine[1]  # r stays where it was stored
    # the rows moved: partitions 0..65's, stored and appended
    d = ((add.column("vec").combine_chunks().values.to_numpy().reshape(-1, DIM)[:, None] - cents[None]) ** 2)
    new_affected = int(np.isin(d.sum(-1).argmin(1), np.arange(66)).sum())
    assert sum(moved) == 200 + 64 * 40 + new_affected
    assert sum(len(p) for p in mine) == x.shape[0] + 20 and len(mine[70]) >= 5  # not joined
    # queries near the rows of every partition (the split's new centroids are k-means', not
    # bit for bit pylance's: a PQ index's recall around them differs a little)
    qs = x[rng.choice(x.shape[0], 50, replace=False)]
    qs = qs + rng.standard_normal(qs.shape).astype(np.float32) * 0.3
    assert _recall(ours, got[1][0], qs) >= _recall(theirs, got[1][0], qs) - 0.02
    if kind == "IVF_RQ":  # same rotation, same centroids for the neighbours: pylance's rows
        from tests.index.test_build_rq import rq_storage

        a, b = rq_storage(ours), rq_storage(theirs)
        both = [i for i, (p, _) in a.items() if 2 <= p < 66 and i in b and b[i][0] == p]
        assert len(both) > 60 * 40 and all(a[i] == b[i] for i in both)
    if not through_spark:
        # the moved rows are stored as encoding every row again stores them (same k-means):
        # same rows, same codes (PQ residuals to the new centroids) in every affected partition
        again = str(tmp_path / "again.lance")
        lance.write_dataset(t, again)
        create_index(None, again, "vec", kind, **kw)
        lance.write_dataset(add, again, mode="append")
        monkeypatch.setattr(vi.VectorSegmentBuilder, "_join_in_place", staticmethod(lambda *a: False))
        optimize_indices(None, again)
        affected = [0, *range(2, 66), *range(k, got[1][0])]
        mine_pq, all_again = (_pq_codes(ours), _pq_codes(again)) if kind == "IVF_PQ" else (
            _rq_codes(ours), _rq_codes(again))
        for p in affected:  # r stays in partition 1 here, moves to a new centroid there
            all_again[p].pop(x.shape[0] - 1, None)
        assert [mine_pq[p] for p in affected] == [all_again[p] for p in affected]
