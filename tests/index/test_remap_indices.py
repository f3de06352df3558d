"""remap_indices: indices behind the fragment reuse index are rewritten, caught-up reuse
versions trimmed; pylance answers as before and reports no unindexed row."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lance_spark_ops.spark.files.compaction import compact
from lance_spark_ops.spark.indices.index_remap import frag_reuse_entry, remap_indices, reuse_versions
from lance_spark_ops.table.dataset import Dataset
from tests.index.helpers import VECTOR, build, queries, unindexed

REMAPPABLE = (("id", "BTREE", None), ("cat", "BITMAP", None), ("labels", "LABEL_LIST", None))


@pytest.mark.parametrize("who", ["ours", "pylance"])
def test_remap_then_trim(tmp_path: Path, who: str) -> None:
    """Deferred compactions (ours or pylance's), then remap_indices: every index is current and
    the fragment reuse index holds no version any more."""
    import lance

    uri = str(tmp_path / "ds")
    before = queries(build(uri, "2.2", False, rows=3200, fragments=16, scalar=REMAPPABLE, vector=()))
    for target in (400, 1600):
        if who == "ours":
            compact(None, uri, target_rows_per_fragment=target, defer_index_remap=True)
        else:
            lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=target, defer_index_remap=True)
    assert len(reuse_versions(Dataset.open(uri))) == 2
    m = remap_indices(None, uri)
    assert m.indices_remapped == {"BTREE": 1, "BITMAP": 1, "LABEL_LIST": 1} and m.indices_still_behind == {}
    assert m.reuse_versions_trimmed == 2 and m.reuse_versions_kept == 0
    ds = lance.dataset(uri)
    assert queries(ds) == before and set(unindexed(ds).values()) == {0}
    assert reuse_versions(Dataset.open(uri)) == []
    # nothing left to do: no commit
    again = remap_indices(None, uri)
    assert again.new_version is None and again.indices_remapped == {}
    # a later compaction of the remapped dataset (pylance's own) still answers the same
    shutil.copytree(uri, str(tmp_path / "copy"))
    lance.dataset(str(tmp_path / "copy")).optimize.compact_files(target_rows_per_fragment=3200)
    assert queries(lance.dataset(str(tmp_path / "copy"))) == before


def test_types_not_remapped_keep_their_versions(tmp_path: Path) -> None:
    import lance

    uri = str(tmp_path / "ds")
    # the last fragment's rows all deleted: it leaves the dataset, pylance's INVERTED index keeps
    # its documents, which this library cannot re-tokenize: that index stays behind
    before = queries(build(uri, "2.2", False, vector=VECTOR[:2], delete="id % 10 = 3 OR id >= 2100"))
    compact(None, uri, target_rows_per_fragment=1000, defer_index_remap=True)
    fri = frag_reuse_entry(Dataset.open(uri))
    m = remap_indices(None, uri)
    assert m.indices_remapped == {"BTREE": 1, "BITMAP": 1, "LABEL_LIST": 1, "NGRAM": 1, "IVF_PQ": 1,
                                  "IVF_FLAT": 1}
    assert m.indices_still_behind == {"INVERTED": 1}
    assert m.reuse_versions_kept == 1 and m.reuse_versions_trimmed == 0
    assert frag_reuse_entry(Dataset.open(uri)).uuid == fri.uuid
    ds = lance.dataset(uri)
    assert queries(ds) == before
    assert all(v == 0 for k, v in unindexed(ds).items() if k != "id_zm")


def test_index_replaced_during_remap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An index rebuilt between our remap tasks and our commit wins: ours is retried and never
    puts the remap of the older version over it."""
    import lance

    from lance_spark_ops.spark.indices import index_remap

    uri = str(tmp_path / "ds")
    before = queries(build(uri, "2.2", False, scalar=REMAPPABLE, vector=()))
    compact(None, uri, target_rows_per_fragment=1000, defer_index_remap=True)
    original, calls, rebuilt = index_remap.make_remapper, [], {}

    def remapper_then_replace(*args, **kwargs):
        inner = original(*args, **kwargs)

        def run(*a, **kw):
            out = inner(*a, **kw)
            if not calls:
                lance.dataset(uri).create_scalar_index("id", "BTREE", replace=True)
                section = Dataset.open(uri).manifest_file.index_section
                rebuilt.update({i.name: i.uuid for i in section.indices})
            calls.append(1)
            return out

        return run

    monkeypatch.setattr(index_remap, "make_remapper", remapper_then_replace)
    m = remap_indices(None, uri)
    assert len(calls) == 2  # the first attempt conflicted
    assert m.indices_remapped == {"BITMAP": 1, "LABEL_LIST": 1}
    now = {i.name: i.uuid for i in Dataset.open(uri).manifest_file.index_section.indices}
    assert now["id_idx"] == rebuilt["id_idx"]
    ds = lance.dataset(uri)
    assert queries(ds) == before and set(unindexed(ds).values()) == {0}


def test_remap_indices_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                           capsys: pytest.CaptureFixture) -> None:
    """jobs/remap_indices.py prints the metrics as its last line (run here without Spark)."""
    import json

    import lance

    from jobs import remap_indices as job
    from lance_spark_ops.spark.runtime import cli

    uri = str(tmp_path / "ds")
    before = queries(build(uri, "2.2", False, scalar=REMAPPABLE[:1], vector=()))
    compact(None, uri, target_rows_per_fragment=1000, defer_index_remap=True)
    monkeypatch.setattr(cli, "_session", lambda *a, **k: None)
    assert job.main([uri]) == 0
    metrics = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert metrics["indices_remapped"] == {"BTREE": 1} and metrics["reuse_versions_trimmed"] == 1
    assert queries(lance.dataset(uri)) == before
