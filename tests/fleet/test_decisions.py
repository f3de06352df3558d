"""Each maintenance rule on its own: it fires at its policy threshold and not one step below,
with the reason, options and priority the policy's documentation gives; ``decide`` runs only
the enabled rules, in run order."""

from __future__ import annotations

import pytest

from lance_spark_ops.fleet.decisions import (
    Decision,
    decide,
    decide_compact,
    decide_materialize_deletions,
    decide_optimize_indices,
    decide_remap_indices,
    decide_vacuum,
    table_priority,
)
from lance_spark_ops.fleet.health import IndexHealth, TableHealth
from lance_spark_ops.fleet.policy import GIB, Policy

P = Policy()


def health(**kw: object) -> TableHealth:
    base: dict = dict(uri="u", version=1, fragments=10, rows=10_000, deleted_rows=0, deleted_fraction=0.0,
                      data_bytes=1, small_fragments=0, fragments_over_deleted_threshold=0)
    return TableHealth(**{**base, **kw})


def test_remap_indices() -> None:
    assert decide_remap_indices(health(reuse_versions_behind=0), P) is None
    d = decide_remap_indices(health(reuse_versions_behind=2), P)
    assert d == Decision("remap_indices", "2 fragment reuse version(s) behind (>= 1)", {}, 10.0)
    assert decide_remap_indices(health(reuse_versions_behind=2), Policy(remap_min_reuse_versions=3)) is None
    # a threshold of 0 still needs one version behind
    assert decide_remap_indices(health(reuse_versions_behind=0), Policy(remap_min_reuse_versions=0)) is None


def test_materialize_deletions() -> None:
    assert decide_materialize_deletions(health(fragments_over_deleted_threshold=0), P) is None
    d = decide_materialize_deletions(health(fragments_over_deleted_threshold=3, deleted_fraction=0.25), P)
    assert d is not None and d.action == "materialize_deletions"
    assert d.reason == "3 fragment(s) over 10% deleted (25% of the table's rows)"
    assert d.options == {"threshold": 0.1}
    assert d.priority == pytest.approx(1.25)  # 5 per unit of deleted fraction
    assert decide_materialize_deletions(health(fragments_over_deleted_threshold=3),
                                        Policy(materialize_min_fragments=4)) is None


def test_compact() -> None:
    assert decide_compact(health(small_fragments=7), P) is None  # below 8 small fragments
    d = decide_compact(health(small_fragments=8), P)
    assert d is not None and d.action == "compact"
    assert d.reason == "8 of 10 fragments below 524288 rows (>= 8 and >= 20%)"
    assert d.options == {"target_rows_per_fragment": 1024 * 1024, "materialize_deletions_threshold": 0.1}
    assert d.priority == pytest.approx(3.2)  # 4 per unit of small share
    assert decide_compact(health(fragments=100, small_fragments=19), P) is None  # under 20% small
    assert decide_compact(health(fragments=100, small_fragments=20), P) is not None
    one = Policy(compact_min_small_fragments=0, compact_min_small_share=0.0)
    assert decide_compact(health(fragments=1, small_fragments=1), one) is None  # nothing to merge


def test_optimize_indices() -> None:
    assert decide_optimize_indices(health(), P) is None
    few = IndexHealth("few", "BTREE", 1, 999)  # 10% of 10 000 rows is 1 000
    assert decide_optimize_indices(health(indices=[few]), P) is None
    share = IndexHealth("share", "BTREE", 1, 1000)
    d = decide_optimize_indices(health(indices=[few, share]), P)
    assert d == Decision("optimize_indices", "share: 1000 rows unindexed (10%)", {}, 3.0)
    many = IndexHealth("many", "BTREE", 1, 100_000)
    assert decide_optimize_indices(health(rows=10**9, indices=[many]), P) is not None  # by count
    segs = IndexHealth("segs", "IVF_PQ", 5, 0)
    d = decide_optimize_indices(health(indices=[segs, IndexHealth("four", "BTREE", 4, 0)]), P)
    assert d == Decision("optimize_indices", "segs: 5 delta segments (> 4)", {"num_indices_to_merge": 5}, 3.0)


def test_vacuum() -> None:
    assert decide_vacuum(health(versions_old=9, bytes_old=GIB - 1, unreferenced_bytes=GIB - 1), P) is None
    d = decide_vacuum(health(versions_old=10), P)
    assert d == Decision("vacuum", "10 versions older than 14d (>= 10)", {"older_than": "14d"}, 1.0)
    d = decide_vacuum(health(bytes_old=2 * GIB, unreferenced_bytes=GIB), P)
    assert d is not None and d.priority == 3.0  # 1 plus one per GiB only old versions use
    assert d.reason == (f"{2 * GIB} bytes only old versions use (>= {GIB}); "
                        f"{GIB} bytes no version uses (>= {GIB})")


def test_decide_runs_enabled_rules_in_order() -> None:
    h = health(small_fragments=9, fragments_over_deleted_threshold=3, reuse_versions_behind=1,
               versions_old=10, indices=[IndexHealth("i", "BTREE", 9, 0)])
    got = decide(h, P)
    assert [d.action for d in got] == ["remap_indices", "compact", "optimize_indices", "vacuum"]
    assert table_priority(got) == pytest.approx(10.0 + 3.6 + 3.0 + 1.0)
    # without compaction allowed, the deletions are materialized on their own
    no_compact = Policy(actions=("remap_indices", "materialize_deletions", "vacuum"))
    assert [d.action for d in decide(h, no_compact)] == ["remap_indices", "materialize_deletions", "vacuum"]
    assert decide(h, Policy(actions=())) == []
