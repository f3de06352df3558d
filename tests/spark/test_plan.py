"""Compaction planning against pylance's own planner on the same dataset shape."""

from __future__ import annotations

import pytest

from lance_spark_ops.errors import InvalidInputError
from lance_spark_ops.spark.files.compaction_options import CompactionOptions
from lance_spark_ops.spark.files.compaction_plan import FragmentStats, plan_compaction


def _frags(rows: list[int], deleted: dict[int, int] | None = None) -> list[FragmentStats]:
    deleted = deleted or {}
    return [FragmentStats(i, r, deleted.get(i, 0), r * 8) for i, r in enumerate(rows)]


def test_small_neighbours_merge_in_order() -> None:
    tasks = plan_compaction(_frags([10, 10, 10, 100, 10]), CompactionOptions(target_rows_per_fragment=50))
    assert [t.fragment_ids for t in tasks] == [(0, 1, 2)]


def test_lone_small_fragment_is_left_alone() -> None:
    assert plan_compaction(_frags([100, 10, 100]), CompactionOptions(target_rows_per_fragment=50)) == []


def test_deleted_fraction_compacts_itself() -> None:
    tasks = plan_compaction(_frags([100, 100], {1: 20}), CompactionOptions(target_rows_per_fragment=50))
    assert [t.fragment_ids for t in tasks] == [(1,)]
    assert tasks[0].live_rows == 80
    off = CompactionOptions(target_rows_per_fragment=50, materialize_deletions=False)
    assert plan_compaction(_frags([100, 100], {1: 20}), off) == []


def test_split_for_size_and_limits() -> None:
    frags = _frags([30] * 10)
    tasks = plan_compaction(frags, CompactionOptions(target_rows_per_fragment=100))
    assert [t.fragment_ids for t in tasks] == [(0, 1, 2, 3), (4, 5, 6, 7, 8, 9)]
    capped = plan_compaction(frags, CompactionOptions(target_rows_per_fragment=100, max_source_fragments=5))
    assert [t.fragment_ids for t in capped] == [(0, 1, 2, 3)]


def test_excluded_fragments_break_runs() -> None:
    tasks = plan_compaction(_frags([10] * 5), CompactionOptions(target_rows_per_fragment=100,
                                                                excluded_fragment_ids=(2,)))
    assert [t.fragment_ids for t in tasks] == [(0, 1), (3, 4)]


def test_index_boundaries() -> None:
    frags = [FragmentStats(i, 10, 0, 80, frozenset({0}) if i < 2 else frozenset()) for i in range(4)]
    tasks = plan_compaction(frags, CompactionOptions(target_rows_per_fragment=100))
    assert [t.fragment_ids for t in tasks] == [(0, 1), (2, 3)]


def test_bad_options() -> None:
    with pytest.raises(InvalidInputError):
        CompactionOptions(compaction_mode="fast")
    with pytest.raises(InvalidInputError, match="unknown"):
        CompactionOptions.from_kwargs(target_rows=5)


def test_matches_pylance_plan(tmp_path) -> None:
    """Same fragments grouped as pylance's own plan_compaction."""
    import lance
    import pyarrow as pa
    from lance.optimize import Compaction

    uri = str(tmp_path / "ds")
    for i in range(12):
        lance.write_dataset(pa.table({"x": list(range(i * 100, i * 100 + 40 + 10 * (i % 3)))}), uri,
                            mode="append" if i else "create")
    ds = lance.dataset(uri)
    ds.delete("x % 10 = 0 AND x < 300")  # 10% on fragments 0..2
    ds = lance.dataset(uri)
    for target in (100, 150, 1000):
        theirs = Compaction.plan(ds, {"target_rows_per_fragment": target})
        expected = [tuple(f.id for f in t.fragments) for t in theirs.tasks]
        stats = [FragmentStats(f.fragment_id, f.physical_rows, f.physical_rows - f.count_rows(), 0)
                 for f in ds.get_fragments()]
        ours = plan_compaction(stats, CompactionOptions(target_rows_per_fragment=target))
        assert [t.fragment_ids for t in ours] == expected, target


@pytest.mark.parametrize(("frag_rows", "deleted_every", "target"),
                         [(1000, 10, 4000), (3000, 0, 4000), (3000, 0, 20000), (700, 7, 1000)])
def test_new_fragment_sizes_match_pylance(tmp_path, frag_rows: int, deleted_every: int, target: int) -> None:
    """A task group becomes the same number of files, of the same sizes, as pylance writes."""
    import lance
    import pyarrow as pa

    from lance_spark_ops.spark.files.compaction import compact

    uris = [str(tmp_path / "theirs"), str(tmp_path / "ours")]
    for uri in uris:
        for i in range(9):
            lance.write_dataset(pa.table({"a": list(range(i * frag_rows, (i + 1) * frag_rows))}), uri,
                                mode="append" if i else "create")
        if deleted_every:
            lance.dataset(uri).delete(f"a % {deleted_every} = 0")
    lance.dataset(uris[0]).optimize.compact_files(target_rows_per_fragment=target)
    compact(None, uris[1], target_rows_per_fragment=target)
    sizes = [[f.count_rows() for f in lance.dataset(u).get_fragments()] for u in uris]
    assert sizes[1] == sizes[0]


def test_planning_inputs_from_the_manifest_match_pylance_plan(tmp_path) -> None:
    """Planning over the arrays read from the manifest bytes (``fragment_stats``) groups as
    pylance does, with deletions and an index covering only the older fragments."""
    import lance
    import pyarrow as pa
    from lance.optimize import Compaction

    from lance_spark_ops.spark.files.compaction import fragment_stats
    from lance_spark_ops.table.dataset import Dataset

    uri = str(tmp_path / "ds")
    for i in range(10):
        lance.write_dataset(pa.table({"x": list(range(i * 100, i * 100 + 40 + 10 * (i % 3)))}), uri,
                            mode="append" if i else "create")
    lance.dataset(uri).delete("x % 10 = 0 AND x < 300")
    lance.dataset(uri).create_scalar_index("x", "BTREE")
    for i in range(10, 16):
        lance.write_dataset(pa.table({"x": list(range(i * 100, i * 100 + 30))}), uri, mode="append")
    ds = lance.dataset(uri)
    stats, skipped = fragment_stats(Dataset.open(uri))
    assert skipped == 0 and len(set(stats.cover.tolist())) == 2
    for target in (100, 150, 1000):
        theirs = Compaction.plan(ds, {"target_rows_per_fragment": target})
        expected = [tuple(f.id for f in t.fragments) for t in theirs.tasks]
        ours = plan_compaction(stats, CompactionOptions(target_rows_per_fragment=target))
        assert [t.fragment_ids for t in ours] == expected, target
        assert [t.live_rows for t in ours] == [sum(f.physical_rows - f.num_deletions for f in t.fragments)
                                               for t in theirs.tasks]
