"""Manifests whose file paths leave the dataset root are refused when read (and by vacuum,
see tests/vacuum): absolute paths, other schemes, ``..``, NUL bytes."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from lance_spark_ops.errors import CorruptFileError
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.format.fragment import ExternalFile
from lance_spark_ops.table.format.manifest import parse_manifest_file, serialize_manifest_file

lance = pytest.importorskip("lance")

BAD = ["/etc/passwd", "../outside.lance", "a/../../outside.lance", "s3://bucket/x.lance", "file:///etc/passwd",
       "C:\\x.lance", "\\\\host\\share\\x.lance", "x\x00.lance", "", "./x.lance", "a//b.lance"]


def _latest(root: Path) -> Path:
    return min(p for p in (root / "_versions").iterdir() if p.name.endswith(".manifest"))


def _rewrite(path: Path, edit) -> None:
    mf = parse_manifest_file(path.read_bytes())
    edit(mf.manifest)
    path.write_bytes(serialize_manifest_file(mf.manifest, mf.transaction_bytes, mf.index_section))


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    root = tmp_path / "ds.lance"
    lance.write_dataset(pa.table({"id": list(range(50))}), root, enable_stable_row_ids=True)
    (tmp_path / "outside.lance").write_bytes(b"not yours")
    return root


@pytest.mark.parametrize("bad", BAD)
def test_data_file_path_refused(dataset: Path, bad: str) -> None:
    def edit(m):
        m.fragments[0].files[0].path = bad

    _rewrite(_latest(dataset), edit)
    with pytest.raises(CorruptFileError, match="data file path") as e:
        Dataset.open(str(dataset)).to_table()
    assert e.value.path is not None


@pytest.mark.parametrize("bad", ["/etc/passwd", "../outside.lance", "s3://b/x", "x\x00y"])
def test_external_row_id_path_refused(dataset: Path, bad: str) -> None:
    def edit(m):
        m.fragments[0].row_id_meta = ExternalFile(bad, 0, 10)

    _rewrite(_latest(dataset), edit)
    with pytest.raises(CorruptFileError, match="dataset root"):
        Dataset.open(str(dataset)).to_table(with_row_id=True)
