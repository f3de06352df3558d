"""Re-encode compaction of many small fragments reads runs of them together
(``spark.files.rewrite_tasks._SmallFragments``); the files it writes must be the bytes the fragment-by-
fragment path writes, and the rows pylance's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_spark_ops.file.read_together as read_together
from lance_spark_ops.spark.files import rewrite_tasks as rewrite
from tests.spark.datasets import compacted_copy, new_file_hashes, source_dataset


def _dataset(uri: str, version: str, lists: bool) -> None:
    import lance

    rng = np.random.default_rng(7)
    words = np.array(["lance", "spark", "page", "zip"])
    for i in range(12):
        n = int(rng.integers(150, 400))
        base = i * 10_000
        cols = {
            "id": pa.array(np.arange(base, base + n, dtype=np.int64)),
            "x": pa.array(rng.random(n)),
            "ts": pa.array(1_700_000_000_000_000 + np.arange(base, base + n) * 1000, pa.timestamp("us")),
            "s": pa.array([" ".join(r) for r in words[rng.integers(0, 4, (n, 2))]]),
            "v": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 8, dtype=np.float32)), 8),
        }
        if lists:
            lens = rng.integers(0, 4, n)
            offsets = pa.array(np.concatenate([[0], np.cumsum(lens)]).astype(np.int32))
            cols["l"] = pa.ListArray.from_arrays(offsets, pa.array(rng.integers(0, 99, int(lens.sum()),
                                                                               dtype=np.int32)))
        lance.write_dataset(pa.table(cols), uri, mode="append" if i else "create",
                            data_storage_version=version)
    ds = lance.dataset(uri)
    ds.delete("id % 9 = 4 and id < 60000")  # some fragments with deletions, some without
    ds.delete("id >= 30000 and id < 40000")  # one fragment entirely deleted


@pytest.mark.parametrize("version", ["2.1", "2.2"])
@pytest.mark.parametrize("lists", [False, True])
def test_small_runs_write_the_same_bytes(tmp_path: Path, version: str, lists: bool,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import lance

    src, expected, names = source_dataset(str(tmp_path / "src"), _dataset, version, lists)

    runs: list[int] = []
    real = read_together.read_files_together
    monkeypatch.setattr(read_together, "read_files_together",
                        lambda readers, cols: runs.append(len(readers)) or real(readers, cols))
    together = compacted_copy(src, str(tmp_path / "together"), 1500)
    assert runs and max(runs) > 1  # the runs were read together

    monkeypatch.setattr(rewrite._SmallFragments, "add", lambda self, frag, keep: False)
    alone = compacted_copy(src, str(tmp_path / "alone"), 1500)

    assert new_file_hashes(together, names) == new_file_hashes(alone, names)
    got = lance.dataset(together).to_table().sort_by("id")
    assert got.equals(expected)


def _twins(uri: str) -> None:
    """Equal fragments of one writer (a streaming ingest's): their files are twins."""
    import lance

    n = 3000
    rng = np.random.default_rng(5)
    lance.write_dataset(pa.table({"id": pa.array(np.arange(n, dtype=np.int64)), "x": pa.array(rng.random(n)),
                                  "s": pa.array(np.array(["ab", "cd", "ef"])[np.arange(n) % 3])}),
                        uri, data_storage_version="2.2", max_rows_per_file=20, max_rows_per_group=20)
    lance.dataset(uri).delete("id % 97 = 3")


def test_twin_fragments_write_the_same_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import lance

    from lance_spark_ops.file.metadata import FileMetadata

    src, expected, names = source_dataset(str(tmp_path / "src"), _twins)
    twins = []
    real = FileMetadata.twin
    monkeypatch.setattr(FileMetadata, "twin", lambda self, *a: twins.append(1) or real(self, *a))
    together = compacted_copy(src, str(tmp_path / "together"), 1000)
    assert len(twins) > 100  # most files were opened as twins
    monkeypatch.setattr(rewrite._SmallFragments, "add", lambda self, frag, keep: False)
    alone = compacted_copy(src, str(tmp_path / "alone"), 1000)
    assert new_file_hashes(together, names) == new_file_hashes(alone, names)
    assert lance.dataset(together).to_table().sort_by("id").equals(expected)
