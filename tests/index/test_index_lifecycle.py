"""Index lifecycle end to end on Spark (issue #27): ``create_index`` of every scalar type through
the driver and the real builders on one copy, pylance's ``create_scalar_index`` on a twin; then
appends and ``optimize_indices`` (default, delta, retrain) on both; then each side's own
optimize and compaction over the other's work. pylance's answers through our indices equal its
answers through its own and a scan's, and it counts no unindexed row."""

from __future__ import annotations

import shutil
from typing import Any

import pytest

from lance_spark_ops.spark.indices.indexing import create_index, optimize_indices
from tests.index.helpers import table
from tests.support.pylance_indices import index_segments

lance = pytest.importorskip("lance")

pytestmark = pytest.mark.spark

INDICES = (("id", "BTREE", "id_idx"), ("cat", "BITMAP", "cat_idx"), ("labels", "LABEL_LIST", "labels_idx"),
           ("text", "INVERTED", "text_idx"), ("text", "NGRAM", "text_ngram"), ("id", "ZONEMAP", "id_zm"),
           ("cat", "BLOOMFILTER", "cat_bf"))
FILTERS = ("id = 1234", "id >= 100 AND id < 160", "id IN (5, 13, 777, 2001, 2405)", "id IS NULL",
           "cat = 'c5'", "cat IN ('c1', 'c2')", "cat IS NULL", "array_has_any(labels, ['l3'])",
           "array_has_all(labels, ['l1', 'l3'])", "contains(text, 'other1')")
FTS = ("word7", "other11", "word3 other3")


def answers(uri: str) -> dict[str, Any]:
    ds = lance.dataset(uri)
    out: dict[str, Any] = {}
    for f in FILTERS:
        got = sorted(ds.to_table(filter=f, columns=["id"])["id"].to_pylist())
        scan = sorted(ds.to_table(filter=f, columns=["id"], use_scalar_index=False)["id"].to_pylist())
        assert got == scan, f"{uri}: {f}"
        out[f] = got
    for q in FTS:
        t = ds.to_table(full_text_query=q, columns=["id"], with_row_id=False)
        out[f"fts {q}"] = sorted(zip(t["id"].to_pylist(), [round(s, 4) for s in t["_score"].to_pylist()],
                                     strict=True))
    return out


def unindexed(uri: str) -> dict[str, int]:
    ds = lance.dataset(uri)
    return {name: ds.stats.index_stats(name)["num_unindexed_rows"] for _, _, name in INDICES}


def segments(uri: str) -> dict[str, int]:
    names = [i["name"] for i in index_segments(lance.dataset(uri))]
    return {n: names.count(n) for _, _, n in INDICES}


@pytest.mark.parametrize(("version", "stable"), [("2.1", False), ("2.2", True)])
def test_lifecycle_against_pylance(spark: Any, tmp_path: Any, version: str, stable: bool) -> None:
    ours, twin = str(tmp_path / "ours"), str(tmp_path / "twin")
    lance.write_dataset(table(2400), ours, max_rows_per_file=600, data_storage_version=version,
                        enable_stable_row_ids=stable)
    lance.dataset(ours).delete("id % 10 = 3")
    shutil.copytree(ours, twin)
    for column, kind, name in INDICES:
        create_index(spark, ours, column, kind, name=name)
        lance.dataset(twin).create_scalar_index(column, kind, name=name)
    assert answers(ours) == answers(twin)
    assert set(unindexed(ours).values()) == {0}

    for k, step in enumerate([{}, {"num_indices_to_merge": 0}, {}, {"retrain": True}]):
        for uri in (ours, twin):
            lance.write_dataset(table(200, start=10_000 + 1000 * k, seed=k), uri, mode="append")
            lance.dataset(uri).delete(f"id = {10_000 + 1000 * k + 7}")
        optimize_indices(spark, ours, **step)
        lance.dataset(twin).optimize.optimize_indices(**step)
        assert segments(ours) == segments(twin), step
        assert answers(ours) == answers(twin), step
        assert set(unindexed(ours).values()) == {0}, step

    # pylance maintains what we wrote; we maintain what pylance wrote
    for uri in (ours, twin):
        lance.write_dataset(table(100, start=50_000, seed=9), uri, mode="append")
    lance.dataset(ours).optimize.optimize_indices()
    optimize_indices(spark, twin)
    assert answers(ours) == answers(twin)
    assert set(unindexed(ours).values()) == set(unindexed(twin).values()) == {0}
    for uri in (ours, twin):
        lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=100_000)
    assert answers(ours) == answers(twin)
