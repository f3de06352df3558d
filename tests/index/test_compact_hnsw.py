"""IVF_SQ and IVF_HNSW_{SQ,PQ,FLAT} through compaction, deletion materialization and
remap_indices (issue #11), pylance the oracle: its answers before, and after its own default
compaction of an identical copy (its deferred compaction breaks HNSW indices once rows were
deleted, so it is never the oracle for them)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from lance_spark_ops.spark.files.compaction import compact, materialize_deletions
from lance_spark_ops.spark.indices.index_remap import remap_indices, reuse_versions
from lance_spark_ops.spark.runtime.tuning import Tuning
from lance_spark_ops.table.dataset import Dataset
from tests.index.helpers import VECTOR_COLUMN, build, queries, unindexed
from tests.support.pylance_indices import index_segments

NEW = (("IVF_SQ", "vec_sq"), ("IVF_HNSW_SQ", "vec_hnsw"), ("IVF_HNSW_PQ", "vec_hnsw_pq"),
       ("IVF_HNSW_FLAT", "vec_hnsw_flat"))
HNSW = {"IVF_HNSW_SQ": 1, "IVF_HNSW_PQ": 1, "IVF_HNSW_FLAT": 1}
BTREE = (("id", "BTREE", None),)


def _oracle(src: str, dst: str, target: int = 1000) -> dict[str, list]:
    import lance

    shutil.copytree(src, dst)
    lance.dataset(dst).optimize.compact_files(target_rows_per_fragment=target)
    return queries(lance.dataset(dst))


def _uuids(uri: str) -> dict[str, str]:
    import lance

    return {i["name"]: i["uuid"] for i in index_segments(lance.dataset(uri))}


def _ok(uri: str, before: dict, oracle: dict | None, fragments_before: int) -> None:
    import lance

    ds = lance.dataset(uri)
    assert len(ds.get_fragments()) < fragments_before
    after = queries(ds)
    assert after == before
    if oracle is not None:
        assert after == oracle
    assert set(unindexed(ds).values()) == {0}, unindexed(ds)


def _run(tmp_path: Path, version: str, stable: bool, defer: bool, metric: str = "l2") -> None:
    uri = str(tmp_path / "ds")
    ds = build(uri, version, stable, scalar=BTREE, vector=NEW, metric=metric)
    before, uuids = queries(ds), _uuids(uri)
    oracle = _oracle(uri, str(tmp_path / "oracle"))
    m = compact(None, uri, target_rows_per_fragment=1000, defer_index_remap=defer)
    assert m.indexed_fragments_skipped == 0 and m.fragments_removed == 8
    _ok(uri, before, oracle, 8)
    if stable:
        assert m.indices_remapped == {"BTREE": 1}
        assert m.indices_recalculated == {"IVF_SQ": 1, **HNSW}
    elif defer:  # HNSW rebuilt in the same commit: pylance cannot read it through the FRI
        assert m.indices_remapped == HNSW and m.indices_frag_reuse == {"BTREE": 1, "IVF_SQ": 1}
    else:
        assert m.indices_remapped == {"BTREE": 1, "IVF_SQ": 1, **HNSW} and m.indices_frag_reuse == {}
    after = _uuids(uri)
    for name in ("vec_sq", "vec_hnsw", "vec_hnsw_pq", "vec_hnsw_flat"):
        assert (after[name] != uuids[name]) == (not stable and (not defer or name != "vec_sq")), name


@pytest.mark.parametrize(("version", "stable", "defer"),
                         [("2.2", False, False), ("2.1", False, True), ("2.1", True, False)])
def test_compact(tmp_path: Path, version: str, stable: bool, defer: bool) -> None:
    _run(tmp_path, version, stable, defer)


def test_compact_cosine(tmp_path: Path) -> None:
    _run(tmp_path, "2.2", False, False, metric="cosine")


@pytest.mark.slow
@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
@pytest.mark.parametrize(("stable", "defer"), [(False, False), (False, True), (True, False)])
@pytest.mark.parametrize("metric", ["l2", "cosine", "dot"])
def test_compact_matrix(tmp_path: Path, version: str, stable: bool, defer: bool, metric: str) -> None:
    _run(tmp_path, version, stable, defer, metric)


@pytest.mark.parametrize("defer", [False, True])
def test_materialize_deletions(tmp_path: Path, defer: bool) -> None:
    import lance

    uri = str(tmp_path / "ds")
    before = queries(build(uri, "2.2", False, fragments=4, scalar=BTREE, vector=NEW))
    m = materialize_deletions(None, uri, defer_index_remap=defer)
    assert m.fragments_removed == 4 and m.indexed_fragments_skipped == 0
    assert m.indices_remapped == (HNSW if defer else {"BTREE": 1, "IVF_SQ": 1, **HNSW})
    ds = lance.dataset(uri)
    assert all(f.deletion_file() is None for f in ds.get_fragments())
    assert queries(ds) == before and set(unindexed(ds).values()) == {0}


def test_hnsw_fragment_with_deleted_rows_is_compacted(tmp_path: Path) -> None:
    """pylance 14 cannot read an IVF_HNSW_* index through the fragment reuse index once rows of
    the rewritten fragments were deleted (its own deferred compaction breaks it); we rebuild
    the graphs instead, so such fragments are compacted like any other."""
    import lance

    uri = str(tmp_path / "ds")
    build(uri, "2.2", False, scalar=BTREE, vector=NEW, delete="id < 300 AND id % 10 = 3")  # fragment 0
    before = queries(lance.dataset(uri))
    broken = str(tmp_path / "pylance")
    shutil.copytree(uri, broken)
    lance.dataset(broken).optimize.compact_files(target_rows_per_fragment=1000, defer_index_remap=True)
    with pytest.raises(Exception, match="HNSW graph has"):
        queries(lance.dataset(broken))
    oracle = _oracle(uri, str(tmp_path / "oracle"))
    m = compact(None, uri, target_rows_per_fragment=1000, defer_index_remap=True)
    assert m.indexed_fragments_skipped == 0 and m.fragments_removed == 8
    # only the group holding fragment 0 had deleted rows: HNSW is rebuilt all the same
    assert m.indices_remapped == HNSW and m.indices_frag_reuse == {"BTREE": 1, "IVF_SQ": 1}
    _ok(uri, before, oracle, 8)
    # the rebuilt HNSW entries keep their dataset_version (a Rewrite cannot change it), so by
    # pylance's caught-up rule they are behind the new FRI version: remap_indices rewrites them
    # again, dropping no row (so no graph is rebuilt), and then trims the version
    from tests.index.test_index_files_vector import _partition_graphs

    graphs = {name: _partition_graphs(uri, name) for name in ("vec_hnsw", "vec_hnsw_pq", "vec_hnsw_flat")}
    r = remap_indices(None, uri)
    assert r.indices_remapped == {"BTREE": 1, "IVF_SQ": 1, **HNSW} and r.reuse_versions_trimmed == 1
    _ok(uri, before, oracle, 8)
    assert graphs == {name: _partition_graphs(uri, name) for name in graphs}


def test_deferred_hnsw_without_deletions_then_remap_indices(tmp_path: Path) -> None:
    """Rewritten fragments without deleted rows: deferred, HNSW goes behind the FRI like the
    other indices (pylance reads it); remap_indices rewrites every one of them."""
    import lance

    uri = str(tmp_path / "ds")
    before = queries(build(uri, "2.2", False, scalar=BTREE, vector=NEW, delete=""))
    m = compact(None, uri, target_rows_per_fragment=1000, defer_index_remap=True)
    assert m.indices_remapped == {} and m.indices_frag_reuse == {"BTREE": 1, "IVF_SQ": 1, **HNSW}
    _ok(uri, before, None, 8)
    r = remap_indices(None, uri)
    assert r.indices_remapped == {"BTREE": 1, "IVF_SQ": 1, **HNSW} and r.indices_still_behind == {}
    assert r.reuse_versions_trimmed == 1 and reuse_versions(Dataset.open(uri)) == []
    assert queries(lance.dataset(uri)) == before and set(unindexed(lance.dataset(uri)).values()) == {0}
    # a later deletion and pylance's own compaction of the remapped indices answer the same
    lance.dataset(uri).delete("id % 10 = 3")
    before = queries(lance.dataset(uri))
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=3000)
    assert queries(lance.dataset(uri)) == before


def test_remap_indices_after_pylance_deferred_compaction(tmp_path: Path) -> None:
    import lance

    uri = str(tmp_path / "ds")
    before = queries(build(uri, "2.1", False, scalar=BTREE, vector=NEW, delete=""))
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=1000, defer_index_remap=True)
    r = remap_indices(None, uri)
    assert r.indices_remapped == {"BTREE": 1, "IVF_SQ": 1, **HNSW}
    assert queries(lance.dataset(uri)) == before and set(unindexed(lance.dataset(uri)).values()) == {0}


def _partition_row_ids(uri: str, name: str, part: int) -> np.ndarray:
    from lance_spark_ops._pb import index_pb2
    from lance_spark_ops.file.reader import LanceFileReader
    from lance_spark_ops.index.kinds import uuid_str
    from lance_spark_ops.spark.indices.index_remap import index_entries

    (idx,) = [i for i in index_entries(Dataset.open(uri)) if i.name == name]
    r = LanceFileReader(str(Path(uri) / "_indices" / uuid_str(idx.uuid.uuid) / "auxiliary.idx"))
    (raw,) = r.read_raw_ranges([tuple(r.metadata.global_buffers.tolist()[1])])
    ivf = index_pb2.IVF.FromString(bytes(raw))
    rows = r.read().column(0).to_numpy()
    return rows[ivf.offsets[part]:ivf.offsets[part] + ivf.lengths[part]]


def test_partition_emptied_by_deletions(tmp_path: Path) -> None:
    """Every row of partition 0 deleted: the rebuilt index has an empty partition 0 (no graph
    rows, "" metadata) and pylance answers as before and as after its own compaction."""
    import lance

    from tests.index.test_index_files_vector import hnsw_partitions

    uri = str(tmp_path / "ds")
    build(uri, "2.2", False, scalar=BTREE, vector=NEW[1:2], delete="")
    addrs = _partition_row_ids(uri, "vec_hnsw", 0)
    ids = lance.dataset(uri)._take_rows(addrs.tolist(), columns=["id"]).column("id").to_pylist()
    lance.dataset(uri).delete(f"id IN ({', '.join(map(str, ids))})")
    before = queries(lance.dataset(uri))
    oracle = _oracle(uri, str(tmp_path / "oracle"))
    m = compact(None, uri, target_rows_per_fragment=1000)
    assert m.indices_remapped == {"BTREE": 1, "IVF_HNSW_SQ": 1}
    _ok(uri, before, oracle, 8)
    parts = hnsw_partitions(uri, "vec_hnsw")
    assert parts[0] == ("", 0) and parts[1][1] == 2400 - len(ids)


def test_graph_recall_with_small_ef(tmp_path: Path) -> None:
    """The rebuilt graphs are searchable, not just exhaustively scanned: with ef = k = 10 and no
    prefilter, pylance's recall over our graphs is as good as over its own rebuilt ones
    (exact neighbours from the live vectors)."""
    import lance

    uri = str(tmp_path / "ds")
    build(uri, "2.2", False, rows=4000, scalar=BTREE, vector=(("IVF_HNSW_FLAT", "vec_hnsw_flat"),))
    shutil.copytree(uri, str(tmp_path / "oracle"))
    lance.dataset(str(tmp_path / "oracle")).optimize.compact_files(target_rows_per_fragment=4000)
    compact(None, uri, target_rows_per_fragment=4000)
    ds = lance.dataset(uri)
    live = ds.to_table(columns=["id", "vec_f"])
    ids = live.column("id").to_numpy()
    vecs = np.stack(live.column("vec_f").to_numpy(zero_copy_only=False))
    probes = np.random.default_rng(5).random((30, vecs.shape[1]), dtype=np.float32)

    def recall(path: str) -> float:
        hits = 0
        d = lance.dataset(path)
        for q in probes:
            exact = set(ids[np.argsort(((vecs - q) ** 2).sum(1), kind="stable")[:10]].tolist())
            got = d.to_table(nearest={"column": "vec_f", "q": q, "k": 10, "nprobes": 2, "ef": 10},
                             columns=["id"]).column("id").to_pylist()
            hits += len(exact & set(got))
        return hits / 300

    ours, theirs = recall(uri), recall(str(tmp_path / "oracle"))
    assert ours >= 0.9 and ours >= theirs - 0.05, (ours, theirs)


def test_hnsw_graphs_rebuilt_by_several_tasks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A large HNSW index's partitions are rebuilt by several graph tasks (forced here: four
    slots, no minimum size) and assembled into one ``index.idx``: the same graphs, entries and
    IVF as one task builds, pylance's answers as before and as after its own compaction, and
    no part file left behind."""
    import lance
    from lance.file import LanceFileReader

    from lance_spark_ops.spark.indices import index_remap

    def index_files(uri: str) -> dict[str, tuple]:
        out = {}
        for name, uuid in _uuids(uri).items():
            d = Path(uri) / "_indices" / uuid
            if name.startswith("vec_hnsw"):
                assert sorted(p.name for p in d.iterdir()) == ["auxiliary.idx", "index.idx"]
                r = LanceFileReader(str(d / "index.idx"))
                out[name] = (r.read_all().to_table(), r.metadata().schema.metadata)
        return out

    uri, single = str(tmp_path / "ds"), str(tmp_path / "single")
    vector = (("IVF_HNSW_SQ", "vec_hnsw"), ("IVF_HNSW_FLAT", "vec_hnsw_flat"))
    ds = build(uri, "2.2", False, scalar=BTREE, vector=(), delete="")
    for kind, name in vector:
        ds.create_index(VECTOR_COLUMN[name], kind, name=name, num_partitions=4, metric="l2")
    lance.dataset(uri).delete("id % 7 = 2")
    shutil.copytree(uri, single)
    before = queries(lance.dataset(uri))
    oracle = _oracle(uri, str(tmp_path / "oracle"))
    compact(None, single, target_rows_per_fragment=1000)
    calls: list[int] = []
    build_graphs = index_remap._with_graphs

    def counting(job, ds, specs, out):  # noqa: ANN001 - pass-through
        original = job.run_tasks

        def run_tasks(tasks, fn):  # noqa: ANN001
            if fn.__name__ == "run_graph_build":
                calls.append(len(tasks))
            return original(tasks, fn)
        job.run_tasks = run_tasks
        return build_graphs(job, ds, specs, out)

    monkeypatch.setattr(index_remap, "default_parallelism", lambda spark: 4)
    monkeypatch.setattr(index_remap, "_with_graphs", counting)
    m = compact(None, uri, target_rows_per_fragment=1000, tuning=Tuning(graph_task_min_rows=1))
    assert len(calls) == 1 and 2 < calls[0] <= 8  # runs balanced by vectors: up to 4 per index
    assert m.indices_remapped == {"BTREE": 1, "IVF_HNSW_SQ": 1, "IVF_HNSW_FLAT": 1}
    _ok(uri, before, oracle, 8)
    split, one = index_files(uri), index_files(single)
    assert split.keys() == one.keys() == {"vec_hnsw", "vec_hnsw_flat"}
    for name in split:
        assert split[name][0].equals(one[name][0]) and split[name][1] == one[name][1]
