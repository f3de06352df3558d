"""Compaction and deletion materialization on pylance-made datasets: pylance reads the
result with the same rows (and the same _rowid per row under stable row ids)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from lance_spark_ops.errors import InvalidInputError, UnsupportedError
from lance_spark_ops.spark.files.compaction import compact, materialize_deletions
from tests.spark.datasets import small_fragments
from tests.support.commit_hooks import once_before_commit

COLS = ["id", "f", "s", "l"]


def _snapshot(uri: str):
    import lance

    ds = lance.dataset(uri)
    table = ds.to_table(with_row_id=True)
    return ds, table


def _check_same_rows(before, after, stable: bool) -> None:
    key = ["_rowid"] if stable else ["id"]
    b = before.sort_by([(k, "ascending") for k in key]).select([*COLS, "v", *(["_rowid"] if stable else [])])
    a = after.sort_by([(k, "ascending") for k in key]).select([*COLS, "v", *(["_rowid"] if stable else [])])
    assert a.equals(b)


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
@pytest.mark.parametrize("stable", [False, True])
def test_compact_local(tmp_path: Path, version: str, stable: bool) -> None:
    uri = str(tmp_path / "ds")
    small_fragments(uri, version, stable=stable)
    ds0, before = _snapshot(uri)
    metrics = compact(None, uri, target_rows_per_fragment=1000)
    ds1, after = _snapshot(uri)
    _check_same_rows(before, after, stable)
    assert len(ds1.get_fragments()) < len(ds0.get_fragments())
    assert all(f.metadata.deletion_file is None for f in ds1.get_fragments())
    assert metrics.fragments_removed == len(ds0.get_fragments())
    assert metrics.rows_written == before.num_rows
    assert metrics.new_version == ds1.version
    # no index: no ids reserved first, the Rewrite numbers its fragments (read 1 -> rewrite 2),
    # as pylance's builder would (pylance's compaction reserves: 1 -> 3)
    assert metrics.commits == 1 and metrics.reservation_versions == []
    assert metrics.new_version == metrics.read_version + 1 == ds1.version
    top, n = max(f.fragment_id for f in ds0.get_fragments()), len(ds1.get_fragments())
    assert sorted(f.fragment_id for f in ds1.get_fragments()) == list(range(top + 1, top + 1 + n))
    assert ds1.checkout_version(ds0.version).count_rows() == before.num_rows


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
@pytest.mark.parametrize("stable", [False, True])
@pytest.mark.parametrize("mode", ["reencode", "try_binary_copy"])
def test_compact_bitmap_deletions_and_added_columns(tmp_path: Path, version: str, stable: bool,
                                                     mode: str) -> None:
    uri = str(tmp_path / "ds")
    small_fragments(uri, version, stable=stable, big_delete=True, extra_column=True, fragments=4)
    import lance

    assert any(f.metadata.deletion_file.file_type == "bitmap" for f in lance.dataset(uri).get_fragments()
               if f.metadata.deletion_file is not None)
    before = lance.dataset(uri).to_table(with_row_id=True)
    compact(None, uri, target_rows_per_fragment=20_000, compaction_mode=mode)
    after = lance.dataset(uri).to_table(with_row_id=True)
    if stable:
        assert after.sort_by("_rowid").equals(before.sort_by("_rowid"))
    else:
        cols = [c for c in before.column_names if c != "_rowid"]
        assert after.select(cols).sort_by("id").equals(before.select(cols).sort_by("id"))
    assert all(len(f.metadata.files) == 1 for f in lance.dataset(uri).get_fragments())


def test_dry_run_changes_nothing(tmp_path: Path) -> None:
    import lance

    uri = str(tmp_path / "ds")
    small_fragments(uri, "2.0")
    v = lance.dataset(uri).version
    m = compact(None, uri, target_rows_per_fragment=1000, dry_run=True)
    assert m.dry_run and m.plan and m.new_version is None
    assert lance.dataset(uri).version == v


def test_materialize_deletions_one_in_one_out(tmp_path: Path) -> None:
    import lance

    uri = str(tmp_path / "ds")
    small_fragments(uri, "2.0", stable=True, fragments=3)
    n_frags = len(lance.dataset(uri).get_fragments())
    before = lance.dataset(uri).to_table(with_row_id=True)
    m = materialize_deletions(None, uri)
    ds = lance.dataset(uri)
    assert len(ds.get_fragments()) == n_frags and m.fragments_added == n_frags
    assert all(f.metadata.deletion_file is None for f in ds.get_fragments())
    assert ds.to_table(with_row_id=True).sort_by("_rowid").equals(before.sort_by("_rowid"))


def test_bad_option(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    small_fragments(uri, "2.0", fragments=2)
    with pytest.raises(InvalidInputError):
        compact(None, uri, compaction_mode="turbo")


@pytest.mark.spark
def test_compact_on_spark(spark, tmp_path: Path) -> None:
    """The real path: tasks through mapInArrow on local[2]."""
    import lance

    uri = str(tmp_path / "ds")
    small_fragments(uri, "2.0", stable=True)
    before = lance.dataset(uri).to_table(with_row_id=True)
    m = compact(spark, uri, target_rows_per_fragment=800)
    after = lance.dataset(uri).to_table(with_row_id=True)
    assert after.sort_by("_rowid").equals(before.sort_by("_rowid"))
    assert m.tasks >= 2 and m.orphan_files_deleted == 0


@pytest.mark.parametrize("stable", [False, True])
def test_btree_index_stays_correct(tmp_path: Path, stable: bool) -> None:
    """A BTREE index built by pylance before compaction answers correctly after it: indexed
    fragments are compacted among themselves (issue #11), later (unindexed) fragments among
    themselves, never mixed."""
    import lance

    uri = str(tmp_path / "ds")
    small_fragments(uri, "2.2", stable=stable, fragments=4)
    lance.dataset(uri).create_scalar_index("id", "BTREE")
    small_fragments_more = lance.dataset(uri).to_table().slice(0, 50)
    for i in range(4):
        extra = small_fragments_more.set_column(0, "id", pa.array(range(900_000 + i * 50, 900_050 + i * 50)))
        lance.write_dataset(extra, uri, mode="append")
    indexed = {f.fragment_id for f in lance.dataset(uri).get_fragments()[:4]}
    m = compact(None, uri, target_rows_per_fragment=10_000)
    ds = lance.dataset(uri)
    assert m.indexed_fragments_skipped == 0 and m.fragments_removed == 8
    assert sorted(map(sorted, m.plan)) == [sorted(indexed), sorted(set(range(8)) - indexed)]
    stats = ds.stats.index_stats("id_idx")
    assert stats["num_unindexed_rows"] == 200 and stats["num_indexed_rows"] == ds.count_rows() - 200
    for probe in (7, 100_005, 300_299, 900_010, 900_199):
        got = ds.to_table(filter=f"id = {probe}")
        want = ds.to_table(filter=f"id + 0 = {probe}")  # not answered by the index
        assert got.equals(want) and got.num_rows == 1, probe
    plan = ds.scanner(filter="id = 7").explain_plan()
    assert "ScalarIndexQuery" in plan or "MaterializeIndex" in plan


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
@pytest.mark.parametrize("stable", [False, True])
@pytest.mark.parametrize("mode", ["try_binary_copy", "force_binary_copy"])
def test_binary_copy_falls_back_on_deleted_rows(tmp_path: Path, version: str, stable: bool,
                                                mode: str) -> None:
    """Binary copy with ~10% of rows deleted everywhere (every page holds some): force
    re-encodes each fragment's pages in place, try re-encodes the fragments in runs (nothing
    of them would move; pylance's try_binary_copy re-encodes a group with deletions too);
    pylance reads either result identically."""
    import lance

    uri = str(tmp_path / "ds")
    small_fragments(uri, version, stable=stable, fragments=6)
    lance.dataset(uri).delete("id >= 100000 AND id < 100010")  # more deleted rows in fragment 1
    before = lance.dataset(uri).to_table(with_row_id=True)
    m = compact(None, uri, target_rows_per_fragment=10_000, materialize_deletions=False,
                compaction_mode=mode)
    after = lance.dataset(uri).to_table(with_row_id=True)
    _check_same_rows(before, after, stable)
    if mode == "force_binary_copy":  # its pages holding deleted rows are re-encoded
        assert m.fragments_binary_copied == 6 and m.pages_reencoded_for_deletions > 0
    else:
        assert m.fragments_binary_copied == 0 and m.pages_binary_copied == 0
    assert all(f.metadata.deletion_file is None for f in lance.dataset(uri).get_fragments())


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
@pytest.mark.parametrize("stable", [False, True])
def test_binary_copy_without_deletions(tmp_path: Path, version: str, stable: bool) -> None:
    """Fragments without deletions have their pages moved as they are (no decoding)."""
    import lance

    uri = str(tmp_path / "ds")
    rng_tables = []
    for i in range(5):
        t = pa.table({"id": pa.array(range(i * 1000, i * 1000 + 1000)),
                      "s": pa.array([f"v{j % 37}" for j in range(1000)]),
                      "l": pa.array([[j] * (j % 3) for j in range(1000)], pa.list_(pa.int64()))})
        rng_tables.append(t)
        lance.write_dataset(t, uri, mode="append" if i else "create", data_storage_version=version,
                            enable_stable_row_ids=stable)
    lance.dataset(uri).delete("id = 2500")
    before = lance.dataset(uri).to_table(with_row_id=True)
    m = compact(None, uri, target_rows_per_fragment=10_000, compaction_mode="try_binary_copy")
    after = lance.dataset(uri).to_table(with_row_id=True)
    assert after.drop_columns(["_rowid"]).equals(before.drop_columns(["_rowid"]))
    if stable:
        assert after["_rowid"].equals(before["_rowid"])
    # fragment 2 (one page per column, each holding the deleted row) is re-encoded, not moved
    assert m.fragments_binary_copied == 4 and m.fragments_added == 1
    lance.write_dataset(rng_tables[0], uri, mode="append")
    lance.write_dataset(rng_tables[1], uri, mode="append")
    lance.dataset(uri).add_columns({"twice": "id * 2"})  # two data files per fragment
    with pytest.raises(UnsupportedError, match="cannot be binary-copied"):
        compact(None, uri, target_rows_per_fragment=10_000, compaction_mode="force_binary_copy",
                materialize_deletions_threshold=0.0)


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
@pytest.mark.parametrize("stable", [False, True])
@pytest.mark.parametrize("mode", ["try_binary_copy", "force_binary_copy"])
@pytest.mark.parametrize("run_rows", [None, 300])
def test_binary_copy_reencodes_only_pages_with_deleted_rows(tmp_path: Path, version: str, stable: bool,
                                                            mode: str, run_rows: int | None) -> None:
    """Many small pages and clustered deletions: pages without deleted rows are moved, the
    few holding some are re-encoded (neighbouring ones decoded together, in runs cut at
    ``run_rows`` rows when given), a struct field (several columns) is re-encoded whole;
    pylance reads the same rows (and _rowid) back. pylance 14 writes one page per column
    for data this small whatever its max_page_bytes, so our writer makes the 16 KiB pages;
    pylance deletes and is the oracle before and after."""
    import lance
    import numpy as np

    from lance_spark_ops.file.tuning import FileTuning
    from lance_spark_ops.spark.runtime.tuning import Tuning
    from lance_spark_ops.table.write import write_dataset

    tuning = Tuning() if run_rows is None else Tuning(file=FileTuning(reencode_rows=run_rows))

    uri = str(tmp_path / "ds")
    rng = np.random.default_rng(1)
    n = 12_000
    for i in range(3):
        base = i * 100_000
        t = pa.table({
            "id": pa.array(np.arange(base, base + n, dtype=np.int64)),
            "f": pa.array(rng.random(n)),
            "s": pa.array([f"row-{base + j}" * (1 + j % 3) if j % 11 else None for j in range(n)]),
            "l": pa.array([[j, j + 1] if j % 5 else [] for j in range(n)], pa.list_(pa.int32())),
            "v": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 8).astype(np.float32)), 8),
            "st": pa.StructArray.from_arrays([pa.array(np.arange(n) % 7),
                                              pa.array([f"k{j % 5}" for j in range(n)])],
                                             names=["a", "b"]),
        })
        write_dataset(t, uri, mode="append" if i else "create", data_storage_version=version,
                      enable_stable_row_ids=stable, page_bytes=16 * 1024)
    ds = lance.dataset(uri)
    ds.delete("(id >= 3000 AND id < 3050) OR id = 200500 OR (id >= 211000 AND id < 211990)")
    before = lance.dataset(uri).to_table(with_row_id=True)
    m = compact(None, uri, target_rows_per_fragment=100_000, compaction_mode=mode, tuning=tuning)
    after = lance.dataset(uri).to_table(with_row_id=True)
    cols = ["id", "f", "s", "l", "v", "st"]
    if stable:
        assert after.sort_by("_rowid").equals(before.sort_by("_rowid"))
    assert after.select(cols).equals(before.select(cols))
    assert m.fragments_binary_copied == 3 and m.fragments_added == 1
    assert m.pages_binary_copied > m.pages_reencoded_for_deletions > 0
    frags = lance.dataset(uri).get_fragments()
    assert len(frags) == 1 and frags[0].metadata.deletion_file is None
    assert lance.dataset(uri).to_table(filter="id = 211995").num_rows == 1


def test_compaction_with_an_index_reserves_ids_first(tmp_path: Path) -> None:
    """With an index the new fragments' ids are reserved before the Rewrite (its remapped
    bitmaps name them), as pylance does: two versions; pylance answers through the index."""
    import lance

    uri = str(tmp_path / "ds")
    small_fragments(uri, "2.1")
    lance.dataset(uri).create_scalar_index("id", "BTREE")
    ds0, before = _snapshot(uri)
    m = compact(None, uri, target_rows_per_fragment=1000)
    assert m.reservation_versions == [ds0.version + 1] and m.new_version == ds0.version + 2
    ds1, after = _snapshot(uri)
    _check_same_rows(before, after, stable=False)
    want = before.filter(pa.compute.equal(before["id"], 100_007)).select(COLS)
    assert ds1.to_table(filter="id = 100007", columns=COLS).equals(want) and want.num_rows == 1
    assert "ScalarIndexQuery" in ds1.scanner(filter="id = 100007").explain_plan()


def test_unreserved_compaction_carries_a_concurrent_delete(tmp_path: Path) -> None:
    """No index: the Rewrite would number its fragments as it commits. Rows deleted by pylance
    meanwhile must go onto the new fragments as deletion files, which are named by fragment
    id: the ids are reserved then, on top of the delete, and the delete is carried."""
    import lance

    uri = str(tmp_path / "ds")
    small_fragments(uri, "2.1")
    _, before = _snapshot(uri)
    m = compact(None, uri, target_rows_per_fragment=1000,
                tuning=once_before_commit(lambda: lance.dataset(uri).delete("id % 7 = 0")))
    assert len(m.reservation_versions) == 1 and m.commits == 1
    ds1, after = _snapshot(uri)
    kept = before.filter(pa.array(before["id"].to_numpy() % 7 != 0))
    _check_same_rows(kept, after, stable=False)
    assert after.num_rows < before.num_rows and any(f.metadata.deletion_file is not None
                                                    for f in ds1.get_fragments())


def test_unreserved_compaction_remaps_an_index_created_meanwhile(tmp_path: Path) -> None:
    """No index when read: no ids reserved. pylance creates a BTREE meanwhile; the Rewrite
    conflicts, reserves the ids on top and remaps the new index onto the new fragments:
    pylance finds rows through it."""
    import lance

    uri = str(tmp_path / "ds")
    small_fragments(uri, "2.1")
    _, before = _snapshot(uri)
    m = compact(None, uri, target_rows_per_fragment=1000,
                tuning=once_before_commit(lambda: lance.dataset(uri).create_scalar_index("id", "BTREE")))
    assert len(m.reservation_versions) == 1 and m.indices_remapped == {"BTREE": 1}
    ds1, after = _snapshot(uri)
    _check_same_rows(before, after, stable=False)
    new_ids = {f.fragment_id for f in ds1.get_fragments()}
    covered = set(ds1.describe_indices()[0].segments[0].fragment_ids)
    assert covered == new_ids
    want = before.filter(pa.compute.equal(before["id"], 300_011)).select(COLS)
    assert want.num_rows == 1 and ds1.to_table(filter="id = 300011", columns=COLS).equals(want)


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_binary_copy_never_mixes_struct_validity_over_lists(tmp_path: Path, version: str) -> None:
    """pylance writes a struct over a list ALL_VALID when a write has no struct nulls, and
    pylance 14 cannot read a column mixing such pages with NULLABLE ones (its own
    try_binary_copy of these fragments is unreadable): those fragments are re-encoded, the
    others (pages NULLABLE there, or without def levels at all) still moved; force_binary_copy
    refuses them, naming why, and changes nothing."""
    import lance

    t = pa.struct([("c", pa.list_(pa.int8()))])
    uri = str(tmp_path / "ds")
    parts = [[None if i % 3 == 0 else {"c": [i % 7, 1] if i % 5 else None} for i in range(200)],
             [{"c": None}],  # one row: a constant page, struct ALL_VALID
             [{"c": [i % 7]} for i in range(200)]]
    for k, rows in enumerate(parts):
        lance.write_dataset(pa.table({"id": pa.array(range(k * 1000, k * 1000 + len(rows)), pa.int64()),
                                      "k": pa.array(rows, t)}),
                            uri, mode="append" if k else "create", data_storage_version=version)
    before, version_before = lance.dataset(uri).to_table(), lance.dataset(uri).version
    with pytest.raises(UnsupportedError, match="struct over a list"):
        compact(None, uri, target_rows_per_fragment=10_000, compaction_mode="force_binary_copy")
    assert lance.dataset(uri).version == version_before
    m = compact(None, uri, target_rows_per_fragment=10_000, compaction_mode="try_binary_copy")
    # the first (struct NULLABLE) and the last (no def levels at all) moved, the middle re-encoded
    assert m.fragments_binary_copied == 2 and m.fragments_added == 1
    assert lance.dataset(uri).to_table().equals(before)
