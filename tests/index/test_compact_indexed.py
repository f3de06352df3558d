"""Compaction and deletion materialization of indexed datasets (issue #11), pylance the oracle.

pylance builds every index type on a dataset with deletions; after our compaction (indices
remapped or deferred to the fragment reuse index) pylance must report 0 unindexed rows for
every index it keeps up to date itself, answer every query exactly as before, and as after
its own compaction of an identical copy.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lance_spark_ops.errors import UnsupportedError
from lance_spark_ops.spark.files.compaction import compact, materialize_deletions
from tests.index.helpers import build, queries, unindexed
from tests.support.pylance_indices import index_segments

SUMMARY = {"id_zm"}  # ZONEMAP: pylance drops it for rewritten fragments too


def _pylance_compacted(src: str, dst: str, defer: bool, **kw: object) -> dict[str, list]:
    import lance

    shutil.copytree(src, dst)
    lance.dataset(dst).optimize.compact_files(defer_index_remap=defer, **kw)
    return queries(lance.dataset(dst))


def _check(uri: str, before: dict, oracle: dict, fragments_before: int) -> None:
    import lance

    ds = lance.dataset(uri)
    assert len(ds.get_fragments()) < fragments_before
    after = queries(ds)
    assert after == before
    assert after == oracle
    stats = unindexed(ds)
    assert {k: v for k, v in stats.items() if k not in SUMMARY} == {k: 0 for k in stats if k not in SUMMARY}
    assert ds.count_rows() == lance.dataset(uri).count_rows(filter="id % 10 != 3")


CASES = [("2.0", False, False), ("2.1", False, True), ("2.2", False, False), ("2.2", False, True),
         ("2.1", True, False), ("2.2", True, False)]


@pytest.mark.parametrize(("version", "stable", "defer"), CASES)
def test_compact_every_index_type(tmp_path: Path, version: str, stable: bool, defer: bool) -> None:
    import lance

    uri = str(tmp_path / "ds")
    ds = build(uri, version, stable)
    before = queries(ds)
    # pylance's deferred compaction breaks its IVF_HNSW_SQ index (rows were deleted): its default
    # compaction is the oracle then
    oracle = _pylance_compacted(uri, str(tmp_path / "oracle"), False, target_rows_per_fragment=1000)
    m = compact(None, uri, target_rows_per_fragment=1000, defer_index_remap=defer)
    assert m.indexed_fragments_skipped == 0 and m.fragments_removed == 8
    _check(uri, before, oracle, 8)
    remapped, reuse = m.indices_remapped, m.indices_frag_reuse
    if stable:
        assert remapped == {"BTREE": 1} and reuse == {}
        assert m.indices_recalculated == {"BITMAP": 1, "LABEL_LIST": 1, "INVERTED": 1, "NGRAM": 1,
                                          "IVF_PQ": 1, "IVF_FLAT": 1, "IVF_HNSW_SQ": 1}
    elif defer:  # HNSW meeting deleted rows is rebuilt: pylance cannot read it through the FRI
        assert remapped == {"IVF_HNSW_SQ": 1}
        assert reuse == {"BTREE": 1, "BITMAP": 1, "LABEL_LIST": 1, "INVERTED": 1, "NGRAM": 1, "IVF_PQ": 1,
                         "IVF_FLAT": 1}
    else:
        # pylance's own INVERTED layout: re-tokenized from the rows its documents list
        assert remapped == {"BTREE": 1, "BITMAP": 1, "LABEL_LIST": 1, "INVERTED": 1, "NGRAM": 1, "IVF_PQ": 1,
                            "IVF_FLAT": 1, "IVF_HNSW_SQ": 1}
        assert reuse == {}
    assert m.indices_dropped == {"ZONEMAP": 1}
    names = {i["name"] for i in index_segments(lance.dataset(uri))}
    assert ("__lance_frag_reuse" in names) == (defer and not stable)  # every index remapped otherwise


@pytest.mark.parametrize(("version", "stable"), [("2.2", False), ("2.1", True)])
def test_materialize_deletions_every_index_type(tmp_path: Path, version: str, stable: bool) -> None:
    import lance

    uri = str(tmp_path / "ds")
    ds = build(uri, version, stable, fragments=4)
    before = queries(ds)
    m = materialize_deletions(None, uri)
    assert m.fragments_removed == 4 and m.fragments_added == 4 and m.indexed_fragments_skipped == 0
    after = lance.dataset(uri)
    assert all(f.deletion_file() is None for f in after.get_fragments())
    assert queries(after) == before
    stats = unindexed(after)
    assert all(v == 0 for k, v in stats.items() if k not in SUMMARY), stats


def test_defer_refused_with_stable_row_ids(tmp_path: Path) -> None:
    import lance

    uri = str(tmp_path / "ds")
    build(uri, "2.2", True, scalar=(("id", "BTREE", None),), vector=())
    with pytest.raises(UnsupportedError, match="stable row ids"):
        compact(None, uri, target_rows_per_fragment=1000, defer_index_remap=True)
    with pytest.raises(Exception, match="stable row IDs"):
        lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=1000, defer_index_remap=True)
    assert len(lance.dataset(uri).get_fragments()) == 8


def test_two_deferred_compactions_then_default(tmp_path: Path) -> None:
    """The FRI grows a version per compaction; a default compaction over indices still behind it
    covers them with a third version; pylance answers as before throughout."""
    import lance

    uri = str(tmp_path / "ds")
    ds = build(uri, "2.2", False, rows=3200, fragments=16)
    before = queries(ds)
    compact(None, uri, target_rows_per_fragment=400, defer_index_remap=True)
    assert queries(lance.dataset(uri)) == before
    n = len(lance.dataset(uri).get_fragments())
    lance.dataset(uri).delete("id % 10 = 7")
    before = queries(lance.dataset(uri))
    compact(None, uri, target_rows_per_fragment=800, defer_index_remap=True)
    assert queries(lance.dataset(uri)) == before
    assert len(lance.dataset(uri).get_fragments()) < n
    lance.dataset(uri).delete("id % 10 = 1")
    before = queries(lance.dataset(uri))
    m = compact(None, uri, target_rows_per_fragment=3200)
    ds = lance.dataset(uri)
    assert queries(ds) == before and len(ds.get_fragments()) == 1
    # indices behind the FRI are mapped through its versions, then through this compaction
    assert m.indices_remapped == {"BTREE": 1, "BITMAP": 1, "LABEL_LIST": 1, "INVERTED": 1, "NGRAM": 1,
                                  "IVF_PQ": 1, "IVF_FLAT": 1, "IVF_HNSW_SQ": 1}
    assert all(v == 0 for k, v in unindexed(ds).items() if k not in SUMMARY)


def test_index_segments(tmp_path: Path) -> None:
    """Indices with delta segments (pylance's optimize_indices without merging): each segment is
    remapped on its own; groups never straddle two segments."""
    import lance

    from tests.index.helpers import table

    uri = str(tmp_path / "ds")
    build(uri, "2.2", False, scalar=(("id", "BTREE", None), ("cat", "BITMAP", None)),
          vector=(("IVF_PQ", "vec_pq"),), delete="")
    lance.write_dataset(table(1200, start=2400, seed=3), uri, mode="append", max_rows_per_file=300)
    lance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=0)
    lance.dataset(uri).delete("id % 10 = 3")
    assert len(index_segments(lance.dataset(uri))) == 6
    before = queries(lance.dataset(uri))
    oracle = _pylance_compacted(uri, str(tmp_path / "oracle"), False, target_rows_per_fragment=900)
    m = compact(None, uri, target_rows_per_fragment=900)
    assert m.plan == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert m.indices_remapped == {"BTREE": 2, "BITMAP": 2, "IVF_PQ": 2}
    ds = lance.dataset(uri)
    assert queries(ds) == before == oracle and set(unindexed(ds).values()) == {0}


def test_unknown_index_files_are_covered_by_frag_reuse(tmp_path: Path) -> None:
    """An index listing files this library does not know (a newer layout) is not rewritten."""
    from lance_spark_ops.index.actions import plan_index_actions
    from lance_spark_ops.spark.indices.index_remap import index_entries
    from lance_spark_ops.table.dataset import Dataset

    uri = str(tmp_path / "ds")
    build(uri, "2.2", False, scalar=(("id", "BTREE", None),), vector=())
    (idx,) = index_entries(Dataset.open(uri))
    assert plan_index_actions([idx], [0, 1], [], False, False).remap == [idx]
    idx.files.add(path="part_0_page_data.lance", size_bytes=10)
    assert plan_index_actions([idx], [0, 1], [], False, False).reuse == [idx]


def test_range_partitioned_btree_is_refused(tmp_path: Path) -> None:
    """A BTREE whose lookup says ``range_partitioned: true`` (pylance 14's Python API writes
    none; the flag is set here on a pylance-written lookup) fails the compaction with a typed
    error naming the file; the dataset keeps its fragments, indices and answers (only the
    ReserveFragments commit made before the remap, as pylance makes it, remains)."""
    import lance
    from lance.file import LanceFileReader, LanceFileWriter

    uri = str(tmp_path / "ds")
    ds = build(uri, "2.2", False, scalar=(("id", "BTREE", None),), vector=())
    before, frags, indices = queries(ds), [f.metadata for f in ds.get_fragments()], index_segments(ds)
    index_dir = Path(uri) / "_indices" / index_segments(ds)[0]["uuid"]
    lookup = index_dir / "page_lookup.lance"
    original = lookup.read_bytes()
    table = LanceFileReader(str(lookup)).read_all().to_table()
    meta = dict(table.schema.metadata or {})
    assert meta[b"range_partitioned"] == b"false"
    meta[b"range_partitioned"] = b"true"
    flagged = table.replace_schema_metadata(meta)
    lookup.unlink()
    with LanceFileWriter(str(lookup), flagged.schema, version="2.2") as w:
        w.write_batch(flagged)
    assert LanceFileReader(str(lookup)).metadata().schema.metadata[b"range_partitioned"] == b"true"
    with pytest.raises(UnsupportedError, match="page_lookup.lance: range-partitioned"):
        compact(None, uri, target_rows_per_fragment=1000)
    after = lance.dataset(uri)
    assert [f.metadata for f in after.get_fragments()] == frags and index_segments(after) == indices
    lookup.write_bytes(original)  # the manifest records the original file's size
    assert after.count_rows() == 2160 and queries(lance.dataset(uri)) == before
