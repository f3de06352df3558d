"""``optimize_indices(retrain_if_drift=R)``: a vector index whose new rows sit far from its
centroids (a shifted distribution) is retrained, one whose new rows come from the data it was
trained on is optimized as pylance's default would; the measure (``spark.indices.vector_drift``) is
about 1 in the second case. pylance builds the index and reads the results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops.spark.indices import vector_drift
from lance_spark_ops.spark.indices.indexing import optimize_indices, user_segments
from lance_spark_ops.spark.indices.vector_models import read_model
from lance_spark_ops.table.dataset import Dataset
from tests.index.test_build_vector import brute

lance = pytest.importorskip("lance")

DIM = 16


def _table(x: np.ndarray, start: int) -> pa.Table:
    return pa.table({"id": pa.array(np.arange(start, start + x.shape[0]), pa.int64()),
                     "vec": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), DIM)})


@pytest.mark.parametrize("shift,scan", [(0.0, False), (6.0, False), (6.0, True)])
def test_retrain_if_drift(spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shift: float,
                          scan: bool) -> None:
    """``scan``: the rows sampled by scanning fragments (columns not takeable by address)."""
    if scan:
        monkeypatch.setattr(vector_drift, "takeable", lambda *a: False)
    rng = np.random.default_rng(3)
    base = rng.normal(size=(4000, DIM)).astype(np.float32)
    new = (rng.normal(size=(1000, DIM)) + shift).astype(np.float32)
    ours, theirs = str(tmp_path / "ours.lance"), str(tmp_path / "theirs.lance")
    for uri in (ours, theirs):
        lance.write_dataset(_table(base, 0), uri, max_rows_per_file=1000)
        lance.dataset(uri).create_index("vec", "IVF_PQ", num_partitions=4, num_sub_vectors=4)
        lance.write_dataset(_table(new, 4000), uri, mode="append", max_rows_per_file=500)
    ds = Dataset.open(ours)
    before = read_model(ds, "IVF_PQ", user_segments(ds)["vec_idx"][-1]).centroids
    m = optimize_indices(spark, ours, retrain_if_drift=1.5)
    info = m.indices["vec_idx"]
    if shift:
        assert info["drift"] > 3 and info["retrained"] is True, info
        lance.dataset(theirs).optimize.optimize_indices(retrain=True)
    else:
        assert 0.8 < info["drift"] < 1.25 and info["retrained"] is False, info
        lance.dataset(theirs).optimize.optimize_indices()
    st, tst = (lance.dataset(u).stats.index_stats("vec_idx") for u in (ours, theirs))
    assert st["num_unindexed_rows"] == tst["num_unindexed_rows"] == 0
    assert st["num_indices"] == tst["num_indices"]
    assert [i["num_partitions"] for i in st["indices"]] == [i["num_partitions"] for i in tst["indices"]]
    # the model: retrained afresh (pylance's retrain also re-sizes the partitions: 5 000 rows
    # make one), else pylance's default optimize kept the old centroids (joined ones dropped)
    ds = Dataset.open(ours)
    cents = read_model(ds, "IVF_PQ", user_segments(ds)["vec_idx"][-1]).centroids
    gaps = np.linalg.norm(cents[:, None] - before[None], axis=2).min(1)
    if shift:
        assert (gaps > 1).all(), gaps
        assert np.linalg.norm(cents.mean(0) - np.concatenate([base, new]).mean(0)) < 2
    else:
        assert (gaps < 1e-5).all(), gaps
    x = np.concatenate([base, new])
    hits = 0
    for q in rng.normal(size=(20, DIM)).astype(np.float32) + shift:
        got = lance.dataset(ours).to_table(nearest={"column": "vec", "q": q, "k": 10, "nprobes": 4},
                                           columns=["id"]).column("id").to_pylist()
        hits += len(set(got) & brute(x, np.arange(x.shape[0]), q, "l2"))
    assert hits / 200 > 0.3
