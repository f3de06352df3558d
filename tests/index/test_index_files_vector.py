"""Vector index files we write on compaction (IVF_SQ, IVF_HNSW_*), compared with pylance's own
for an identical copy it compacted: storage files equal; HNSW graphs (randomised in pylance)
checked for the layout pylance reads and its node counts. Plus Lance's neighbour-selection
heuristic against a per-candidate transcription of it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lance_spark_ops._pb import index_pb2
from lance_spark_ops.file.reader import LanceFileReader
from lance_spark_ops.index.kinds import uuid_str
from lance_spark_ops.index.vector.hnsw import Params, Space, build, select_neighbors
from lance_spark_ops.spark.files.compaction import compact
from lance_spark_ops.spark.indices.index_remap import index_entries
from lance_spark_ops.table.dataset import Dataset
from tests.index.helpers import build as build_dataset

NEW = (("IVF_SQ", "vec_sq"), ("IVF_HNSW_SQ", "vec_hnsw"), ("IVF_HNSW_PQ", "vec_hnsw_pq"),
       ("IVF_HNSW_FLAT", "vec_hnsw_flat"))


def _dir(uri: str, name: str) -> Path:
    (idx,) = [i for i in index_entries(Dataset.open(uri)) if i.name == name]
    return Path(uri) / "_indices" / uuid_str(idx.uuid.uuid)


def _buffers(r: LanceFileReader) -> list[bytes]:
    return [bytes(b) for b in r.read_raw_ranges([tuple(x) for x in r.metadata.global_buffers.tolist()[1:]])]


def _storage(uri: str, name: str) -> tuple:
    r = LanceFileReader(str(_dir(uri, name) / "auxiliary.idx"))
    return r.read().to_pydict(), r.schema.metadata, r.version, _buffers(r)


def hnsw_partitions(uri: str, name: str) -> list[tuple[str, int]]:
    """Per partition (its lance:hnsw metadata, its storage rows)."""
    aux = LanceFileReader(str(_dir(uri, name) / "auxiliary.idx"))
    ivf = index_pb2.IVF.FromString(_buffers(aux)[0])
    idx = LanceFileReader(str(_dir(uri, name) / "index.idx"))
    metas = json.loads(idx.schema.metadata[b"lance:hnsw"])
    return list(zip(metas, [int(n) for n in ivf.lengths], strict=True))


def _check_graphs(uri: str, name: str, ours: bool) -> list[int]:
    """The layout pylance reads (ours: neighbours by ascending distance); returns each
    partition's node count."""
    d = _dir(uri, name)
    aux, idx = LanceFileReader(str(d / "auxiliary.idx")), LanceFileReader(str(d / "index.idx"))
    storage_ivf = index_pb2.IVF.FromString(_buffers(aux)[0])
    index_ivf = index_pb2.IVF.FromString(_buffers(idx)[0])
    table = idx.read()
    metas = json.loads(idx.schema.metadata[b"lance:hnsw"])
    assert len(metas) == len(storage_ivf.lengths) == len(index_ivf.lengths)
    assert sum(index_ivf.lengths) == table.num_rows
    counts = []
    for p, n in enumerate(storage_ivf.lengths):
        if n == 0:
            assert metas[p] == "" and index_ivf.lengths[p] == 0
            counts.append(0)
            continue
        meta = json.loads(metas[p])
        offs, params = meta["level_offsets"], meta["params"]
        assert len(offs) == params["max_level"] + 1 and offs[-1] == index_ivf.lengths[p]
        rows = table.slice(index_ivf.offsets[p], index_ivf.lengths[p])
        vid = rows.column(0).to_numpy()
        neighbors = rows.column(1).to_pylist()
        dists = rows.column(2).to_pylist()
        assert vid[:offs[1]].tolist() == list(range(n))  # level 0: every node in storage order
        top = max(lv for lv in range(params["max_level"]) if offs[lv + 1] > offs[lv])
        for lv in range(top + 1):
            level = set(vid[offs[lv]:offs[lv + 1]].tolist())
            m_max = params["m"] * (2 if lv == 0 else 1)
            assert lv == 0 or level <= set(vid[offs[lv - 1]:offs[lv]].tolist())
            for i in range(offs[lv], offs[lv + 1]):
                assert len(neighbors[i]) <= m_max and set(neighbors[i]) <= level - {int(vid[i])}
                assert len(dists[i]) == len(neighbors[i]) and (not ours or dists[i] == sorted(dists[i]))
                assert neighbors[i] or len(level) == 1
        assert meta["entry_point"] in set(vid[offs[top]:offs[top + 1]].tolist())
        counts.append(int(n))
    return counts


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_vector_files_match_pylance(tmp_path: Path, version: str) -> None:
    import lance

    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    build_dataset(ours, version, False, fragments=5, scalar=(), vector=NEW)
    shutil.copytree(ours, theirs)
    lance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=2400)
    compact(None, ours, target_rows_per_fragment=2400)
    for _, name in NEW:
        assert _storage(ours, name) == _storage(theirs, name), name
    # IVF_SQ: index.idx holds the centroids only (the byte order of its metadata map varies)
    a, b = (LanceFileReader(str(_dir(u, "vec_sq") / "index.idx")) for u in (ours, theirs))
    assert (a.schema.metadata, _buffers(a), a.read().num_rows) == (b.schema.metadata, _buffers(b), 0)
    for _, name in NEW[1:]:
        assert _check_graphs(ours, name, True) == _check_graphs(theirs, name, False), name
        a, b = LanceFileReader(str(_dir(ours, name) / "index.idx")), LanceFileReader(str(_dir(theirs, name) /
                                                                                       "index.idx"))
        assert a.version == b.version and a.schema == b.schema.with_metadata(a.schema.metadata)
        ivf_a, ivf_b = (index_pb2.IVF.FromString(_buffers(r)[0]) for r in (a, b))
        assert ivf_a.centroids_tensor == ivf_b.centroids_tensor
        meta_a = {k: v for k, v in a.schema.metadata.items() if k != b"lance:hnsw"}
        assert meta_a == {k: v for k, v in b.schema.metadata.items() if k != b"lance:hnsw"}
        params = [json.loads(m)["params"] for m in json.loads(a.schema.metadata[b"lance:hnsw"])]
        assert params == [json.loads(m)["params"] for m in json.loads(b.schema.metadata[b"lance:hnsw"])]
    # every manifest entry records the sizes of the files on disk
    for idx in index_entries(Dataset.open(ours)):
        for f in idx.files:
            assert (Path(ours) / "_indices" / uuid_str(idx.uuid.uuid) / f.path).stat().st_size == f.size_bytes


def _reference_heuristic(space: Space, cand: list[int], dist: list[float], k: int) -> list[int]:
    """Lance's ``select_neighbors_heuristic`` (rust/lance-index/src/vector/hnsw.rs), one
    candidate at a time: sorted by distance, a candidate joins while fewer than k did and it
    is closer to the node than to every one that joined."""
    out: list[int] = []
    for c, d in sorted(zip(cand, dist, strict=True), key=lambda x: x[1]):
        if len(out) >= k:
            break
        if all(d < space.subset(np.array([c, o])).block(slice(0, 1))[0, 1] for o in out):
            out.append(c)
    return out


@pytest.mark.parametrize("metric", ["l2", "cosine", "dot"])
def test_select_neighbors_matches_lance_heuristic(metric: str) -> None:
    rng = np.random.default_rng(3)
    space = Space(rng.random((200, 6), dtype=np.float32), metric)
    ids = np.stack([rng.choice(np.arange(1, 200), 30, replace=False) for _ in range(40)])
    dist = space.block(slice(0, 1))[0][ids]
    order = np.argsort(dist, axis=1, kind="stable")
    ids, dist = np.take_along_axis(ids, order, 1), np.take_along_axis(dist, order, 1)
    sel = select_neighbors(space, ids, dist, 8, 0)
    for b in range(ids.shape[0]):
        expected = _reference_heuristic(space, ids[b].tolist(), dist[b].tolist(), 8)
        assert ids[b][sel[b]].tolist() == expected
    # topped up with the nearest pruned candidates
    full = select_neighbors(space, ids, dist, 8, 8)
    assert (full.sum(1) == 8).all() and (full >= sel).all()


def test_build_is_deterministic_and_levels_nest() -> None:
    x = np.random.default_rng(0).random((3000, 8), dtype=np.float32)
    a, b = build(Space(x, "l2"), Params(), 1), build(Space(x, "l2"), Params(), 1)
    assert a.metadata() == b.metadata()
    for la, lb in zip(a.levels, b.levels, strict=True):
        for f in ("nodes", "offsets", "neighbors", "distances"):
            assert np.array_equal(getattr(la, f), getattr(lb, f)), f
    assert len(a.levels) >= 2 and a.levels[0].nodes.size == 3000
    assert build(Space(x[:0], "l2"), Params(), 0).metadata() == ""


def _edges(uri: str, name: str) -> dict[tuple[int, int, int], float]:
    """(partition, node, neighbour) -> stored distance, every level."""
    r = LanceFileReader(str(_dir(uri, name) / "index.idx"))
    ivf = index_pb2.IVF.FromString(_buffers(r)[0])
    t = r.read()
    neighbors, dists = t.column(1).to_pylist(), t.column(2).to_pylist()
    vid = t.column(0).to_pylist()
    out = {}
    for p, (start, n) in enumerate(zip(ivf.offsets, ivf.lengths, strict=True)):
        for i in range(start, start + n):
            out.update({(p, vid[i], v): d for v, d in zip(neighbors[i], dists[i], strict=True)})
    return out


@pytest.mark.parametrize("metric", [pytest.param("l2", marks=pytest.mark.slow), "cosine", "dot"])
def test_graph_distances_match_pylance(tmp_path: Path, metric: str) -> None:
    """The distances stored with the edges are pylance's own for the same pair (storage
    positions are the same on both sides): SQ dequantised, PQ reconstructed (cosine as L2 for
    both), FLAT raw; and most edges are the same."""
    import lance

    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    build_dataset(ours, "2.2", False, scalar=(), vector=NEW[1:], metric=metric)
    shutil.copytree(ours, theirs)
    lance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=2400)
    compact(None, ours, target_rows_per_fragment=2400)
    for _, name in NEW[1:]:
        a, b = _edges(ours, name), _edges(theirs, name)
        common = sorted(a.keys() & b.keys())
        assert len(common) > 0.6 * len(a), (name, len(common), len(a), len(b))
        x, y = np.array([a[k] for k in common]), np.array([b[k] for k in common])
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5, err_msg=name)


def _partition_graphs(uri: str, name: str) -> list[tuple[str, dict]]:
    """Per partition (its lance:hnsw metadata, its graph rows)."""
    r = LanceFileReader(str(_dir(uri, name) / "index.idx"))
    ivf = index_pb2.IVF.FromString(_buffers(r)[0])
    t = r.read()
    metas = json.loads(r.schema.metadata[b"lance:hnsw"])
    return [(metas[p], t.slice(int(o), int(n)).to_pydict())
            for p, (o, n) in enumerate(zip(ivf.offsets, ivf.lengths, strict=True))]


def test_partitions_losing_no_row_keep_their_graph(tmp_path: Path) -> None:
    """Rows deleted in partition 0 only: partition 1 keeps its graph row for row, as pylance
    does (node ids are storage positions, unchanged); partition 0 is rebuilt with as many
    nodes as pylance's."""
    import lance

    from tests.index.test_compact_hnsw import _partition_row_ids

    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    build_dataset(ours, "2.2", False, scalar=(), vector=NEW[1:2], delete="")
    before = _partition_graphs(ours, "vec_hnsw")
    addrs = _partition_row_ids(ours, "vec_hnsw", 0)[::7]
    ids = lance.dataset(ours)._take_rows(addrs.tolist(), columns=["id"]).column("id").to_pylist()
    lance.dataset(ours).delete(f"id IN ({', '.join(map(str, ids))})")
    shutil.copytree(ours, theirs)
    lance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=2400)
    compact(None, ours, target_rows_per_fragment=2400)
    mine, pylance = _partition_graphs(ours, "vec_hnsw"), _partition_graphs(theirs, "vec_hnsw")
    assert mine[1] == pylance[1] == before[1]
    assert mine[0] != before[0]
    assert json.loads(mine[0][0])["level_offsets"][1] == json.loads(pylance[0][0])["level_offsets"][1]


def test_no_row_dropped_graphs_match_pylance(tmp_path: Path) -> None:
    """No deleted rows: every graph is kept, so index.idx matches pylance's row for row."""
    import lance

    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    build_dataset(ours, "2.1", False, scalar=(), vector=NEW[1:], delete="")
    shutil.copytree(ours, theirs)
    lance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=2400)
    compact(None, ours, target_rows_per_fragment=2400)
    for _, name in NEW[1:]:
        assert _storage(ours, name) == _storage(theirs, name), name
        a, b = (LanceFileReader(str(_dir(u, name) / "index.idx")) for u in (ours, theirs))
        assert a.read().to_pydict() == b.read().to_pydict(), name
        assert (a.schema.metadata, _buffers(a), a.version) == (b.schema.metadata, _buffers(b), b.version)


def _nn_scored(ds: Any) -> list[tuple[float, int]]:
    """The HNSW-PQ query of ``helpers.queries`` with pylance's distances, nearest first."""
    from tests.index.helpers import HNSW_EF, QUERY

    t = ds.to_table(nearest={"column": "vec", "q": QUERY, "k": 10, "nprobes": 2, "ef": HNSW_EF},
                    filter="id > 300", prefilter=True, columns=["id"])
    return sorted(zip(t.column("_distance").to_pylist(), t.column("id").to_pylist(), strict=True))


def _same_up_to_ties(got: list[tuple[float, int]], want: list[tuple[float, int]]) -> None:
    """The same distances, and the same rows nearer than the k-th: 4-bit codes give many rows
    one distance, and which of those tied at the k-th place make the cut follows row order,
    which compaction changes (as pylance's own does)."""
    assert len(got) == len(want) == 10
    np.testing.assert_allclose([d for d, _ in got], [d for d, _ in want], rtol=1e-6)
    last = want[-1][0]
    assert {i for d, i in got if d < last} == {i for d, i in want if d < last}


def test_hnsw_pq_4bit(tmp_path: Path) -> None:
    """4-bit PQ codes (two sub-vectors a byte): the rebuilt graph's distances are pylance's and
    the answers are as before and as after pylance's compaction (the nearest neighbours up to
    rows tied at the k-th distance)."""
    import lance

    from tests.index.helpers import queries

    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    build_dataset(ours, "2.2", False, scalar=(), vector=(), delete="")
    lance.dataset(ours).create_index("vec", "IVF_HNSW_PQ", name="vec_hnsw_pq", num_partitions=2,
                                     num_sub_vectors=4, num_bits=4)
    lance.dataset(ours).delete("id % 10 = 3")
    before, before_scored = queries(lance.dataset(ours)), _nn_scored(lance.dataset(ours))
    shutil.copytree(ours, theirs)
    lance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=2400)
    m = compact(None, ours, target_rows_per_fragment=2400)
    assert m.indices_remapped == {"IVF_HNSW_PQ": 1}
    aux = LanceFileReader(str(_dir(ours, "vec_hnsw_pq") / "auxiliary.idx"))
    assert b'\\"nbits\\":4' in aux.schema.metadata[b"storage_metadata"]
    after, pylance_after = queries(lance.dataset(ours)), queries(lance.dataset(theirs))
    nn = "nn_vec_hnsw_pq"
    assert {k: v for k, v in after.items() if k != nn} == {k: v for k, v in before.items() if k != nn} \
        == {k: v for k, v in pylance_after.items() if k != nn}
    _same_up_to_ties(_nn_scored(lance.dataset(ours)), before_scored)
    _same_up_to_ties(_nn_scored(lance.dataset(theirs)), before_scored)
    a, b = _edges(ours, "vec_hnsw_pq"), _edges(theirs, "vec_hnsw_pq")
    common = sorted(a.keys() & b.keys())
    assert len(common) > 0.6 * len(a)
    np.testing.assert_allclose([a[k] for k in common], [b[k] for k in common], rtol=1e-4, atol=1e-5)


def test_serde_float_as_pylance_rewrites_bounds() -> None:
    """pylance 14 rewrote these SQ bounds so when it remapped an IVF_HNSW_SQ index (seen in
    its files); a second pass leaves them."""
    from lance_spark_ops.index.serde_float import reserialize

    seen = {"0.9999687671661377": "0.9999687671661376", "3.635883331298828e-6": "3.635883331298828e-6",
            "0.00006777048110961914": "0.00006777048110961914", "0.9999380707740784": "0.9999380707740784"}
    for raw, written in seen.items():
        assert reserialize(raw) == written and reserialize(written) == written
