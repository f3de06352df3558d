"""The real path on Spark: rewrite and index remap tasks through mapInArrow on local[2]
(remap_indices, and a default-mode compaction: rewrite job then remap job)."""

from __future__ import annotations

from pathlib import Path

from lance_spark_ops.spark.files.compaction import compact
from lance_spark_ops.spark.indices.index_remap import remap_indices, reuse_versions
from lance_spark_ops.spark.runtime.tuning import Tuning
from lance_spark_ops.table.dataset import Dataset
from tests.index.helpers import VECTOR, build, queries, unindexed
from tests.support.pylance_indices import index_segments

INDICES = (("id", "BTREE", None), ("cat", "BITMAP", None), ("labels", "LABEL_LIST", None))


def test_compact_and_remap_on_spark(spark, tmp_path: Path) -> None:
    import lance

    uri = str(tmp_path / "ds")
    before = queries(build(uri, "2.1", False, scalar=INDICES, vector=VECTOR))
    m = compact(None, uri, target_rows_per_fragment=600, defer_index_remap=True)
    assert m.indices_frag_reuse == {"BTREE": 1, "BITMAP": 1, "LABEL_LIST": 1, "IVF_PQ": 1, "IVF_FLAT": 1}
    assert m.indices_remapped == {"IVF_HNSW_SQ": 1}  # rows were deleted: rebuilt, not deferred
    assert queries(lance.dataset(uri)) == before
    r = remap_indices(spark, uri)
    assert r.indices_remapped == {**m.indices_frag_reuse, "IVF_HNSW_SQ": 1} and r.reuse_versions_kept == 0
    assert reuse_versions(Dataset.open(uri)) == []
    lance.dataset(uri).delete("id % 10 = 5")
    before = queries(lance.dataset(uri))
    m = compact(spark, uri, target_rows_per_fragment=2400)
    assert m.indices_remapped == {"BTREE": 1, "BITMAP": 1, "LABEL_LIST": 1, "IVF_PQ": 1, "IVF_FLAT": 1,
                                  "IVF_HNSW_SQ": 1}
    ds = lance.dataset(uri)
    assert len(ds.get_fragments()) == 1
    assert queries(ds) == before and set(unindexed(ds).values()) == {0}


def test_hnsw_graph_tasks_on_spark(spark, tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """On local[2], an HNSW index's partitions go to two graph tasks (forced: no minimum size)
    and one assembly task; pylance answers as before, with 0 unindexed rows."""
    import lance


    uri = str(tmp_path / "ds")
    ds = build(uri, "2.2", False, scalar=(), vector=(), delete="")
    ds.create_index("vec_h", "IVF_HNSW_SQ", name="vec_hnsw", num_partitions=4)
    lance.dataset(uri).delete("id % 9 = 4")
    before = queries(lance.dataset(uri))
    m = compact(spark, uri, target_rows_per_fragment=2400, tuning=Tuning(graph_task_min_rows=1))
    assert m.indices_remapped == {"IVF_HNSW_SQ": 1} and m.fragments_removed == 8
    assert m.seconds["remap_indices"] > 0
    ds = lance.dataset(uri)
    assert queries(ds) == before and set(unindexed(ds).values()) == {0}
    index_dir = Path(uri) / "_indices" / index_segments(ds)[0]["uuid"]
    assert sorted(p.name for p in index_dir.iterdir()) == ["auxiliary.idx", "index.idx"]
