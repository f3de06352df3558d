"""Shallow clones and multi-base datasets (files under registered base paths), as pylance 14
writes them: read like pylance, compacted into the dataset's own root (where pylance puts new
files), and paths that leave the root without a registered base refused."""

from __future__ import annotations

import os
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from lance_spark_ops.errors import CorruptFileError
from lance_spark_ops.spark.files.compaction import compact
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.write import delete_rows
from tests.table.test_refusals import edit_manifest


def _table(n: int = 40) -> pa.Table:
    return pa.table({"a": pa.array(range(n), pa.int64()), "s": [f"v{i}" for i in range(n)]})


def _same(uri: str, version: int | None = None) -> None:
    theirs = lance.dataset(uri, version=version).to_table(with_row_id=True, with_row_address=True)
    ours = Dataset.open(uri, version).to_table(with_row_id=True, with_row_address=True)
    assert ours.equals(theirs)


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*.lance")}


@pytest.fixture
def clone(tmp_path) -> tuple[str, str]:
    src, dst = str(tmp_path / "src"), str(tmp_path / "clone")
    ds = lance.write_dataset(_table(), src, max_rows_per_file=10)
    ds.delete("a = 3")
    ds.tags.create("t1", ds.version)
    ds.shallow_clone(dst, "t1")
    c = lance.dataset(dst)
    c.delete("a = 15")
    lance.write_dataset(_table(5), dst, mode="append")
    return src, dst


def test_shallow_clone_reads_like_pylance(clone):
    _, dst = clone
    assert Dataset.open(dst).manifest.base_paths  # files really live under the source
    for v in Dataset.open(dst).versions():
        _same(dst, v)


def test_shallow_clone_compaction_writes_under_its_own_root(clone, tmp_path):
    src, dst = clone
    src_files = _files(Path(src))
    before = lance.dataset(dst).to_table()
    compact(None, dst, target_rows_per_fragment=1000)
    after = lance.dataset(dst)
    assert after.to_table().equals(before)
    for frag in after.get_fragments():
        for f in frag.metadata.files:
            assert os.path.exists(os.path.join(dst, "data", f.path))
    assert _files(Path(src)) == src_files and lance.dataset(src).version == 2
    _same(dst)


def test_delete_on_clone_merges_the_base_deletion_file(clone):
    _, dst = clone
    ds = Dataset.open(dst)
    delete_rows(ds, {0: [5]})
    _same(dst)
    assert lance.dataset(dst).count_rows() == ds.count_rows() - 1


def test_multi_base_dataset(tmp_path):
    uri, base = str(tmp_path / "ds"), str(tmp_path / "b1")
    ds = lance.write_dataset(_table(), uri, max_rows_per_file=10,
                             initial_bases=[lance.DatasetBasePath(base, name="b1")], target_bases=["b1"])
    ds.delete("a = 3")
    lance.write_dataset(_table(5), uri, mode="append")
    assert os.listdir(base)
    _same(uri)
    compact(None, uri, target_rows_per_fragment=1000)
    _same(uri)


def test_unregistered_base_id_refused(tmp_path):
    uri = str(tmp_path / "ds")
    lance.write_dataset(_table(), uri)

    def point_elsewhere(pb) -> None:
        pb.fragments[0].files[0].base_id = 7

    edit_manifest(uri, point_elsewhere)
    with pytest.raises(CorruptFileError, match="base path id 7"):
        Dataset.open(uri).to_table()


def test_relative_base_path_refused(clone):
    _, dst = clone

    def relative(pb) -> None:
        pb.base_paths[0].path = "../src"

    edit_manifest(dst, relative)
    with pytest.raises(CorruptFileError, match="not absolute"):
        Dataset.open(dst).to_table()


def test_absolute_and_url_data_paths_refused(tmp_path):
    uri = str(tmp_path / "ds")
    lance.write_dataset(_table(), uri)
    for bad in ("/etc/passwd", "file:///etc/passwd", "../x.lance"):
        def point(pb, bad=bad) -> None:
            pb.fragments[0].files[0].path = bad

        edit_manifest(uri, point)
        with pytest.raises(CorruptFileError, match="dataset root"):
            Dataset.open(uri).to_table()


def test_symlink_out_of_the_root_refused(tmp_path):
    uri = tmp_path / "ds"
    lance.write_dataset(_table(), str(uri))
    data = next((uri / "data").iterdir())
    outside = tmp_path / "outside.lance"
    data.rename(outside)
    data.symlink_to(outside)
    with pytest.raises(CorruptFileError, match="symbolic link"):
        Dataset.open(str(uri)).to_table()
