"""The full matrix (slow; ``-m slow`` or ``LSO_RUN_SLOW=1``): file versions x stable row ids x remap mode x
operation, every index type pylance can read after the operation, pylance the oracle."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lance_spark_ops.spark.files.compaction import compact, materialize_deletions
from lance_spark_ops.spark.indices.index_remap import remap_indices
from tests.index.helpers import VECTOR, build, queries, unindexed

SUMMARY = {"id_zm"}


def _ok(ds) -> None:
    stats = unindexed(ds)
    assert all(v == 0 for k, v in stats.items() if k not in SUMMARY), stats


@pytest.mark.slow
@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
@pytest.mark.parametrize(("stable", "defer"), [(False, False), (False, True), (True, False)])
@pytest.mark.parametrize("op", ["compact", "materialize", "compact_twice_then_remap"])
def test_matrix(tmp_path: Path, version: str, stable: bool, defer: bool, op: str) -> None:
    import lance

    uri = str(tmp_path / "ds")
    ds = build(uri, version, stable, rows=3200, fragments=16, vector=VECTOR)
    before = queries(ds)
    if op == "materialize":
        m = materialize_deletions(None, uri, defer_index_remap=defer)
        assert m.fragments_removed == 16
        assert all(f.deletion_file() is None for f in lance.dataset(uri).get_fragments())
    else:
        shutil.copytree(uri, str(tmp_path / "oracle"))
        # pylance's deferred compaction breaks its IVF_HNSW_SQ index (deleted rows): never the oracle
        lance.dataset(str(tmp_path / "oracle")).optimize.compact_files(target_rows_per_fragment=800)
        compact(None, uri, target_rows_per_fragment=800, defer_index_remap=defer)
        assert queries(lance.dataset(uri)) == queries(lance.dataset(str(tmp_path / "oracle")))
    assert queries(lance.dataset(uri)) == before
    _ok(lance.dataset(uri))
    if op == "compact_twice_then_remap":
        lance.dataset(uri).delete("id % 10 = 6")
        before = queries(lance.dataset(uri))
        compact(None, uri, target_rows_per_fragment=3200, defer_index_remap=defer)
        assert len(lance.dataset(uri).get_fragments()) == 1
        if not stable:
            remap_indices(None, uri)
        ds = lance.dataset(uri)
        assert queries(ds) == before
        _ok(ds)
