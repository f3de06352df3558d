"""A task's share of a manifest (``Manifest.fragment_slice``, ``Dataset.open_slice`` /
``fragments_in_slice``): the manifest's fields and the named fragments, read from ranges of
the manifest file, are what opening the whole file gives, and what pylance records."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops.errors import UnsupportedError
from lance_spark_ops.table.dataset import Dataset


def _dataset(uri: str) -> None:
    import lance

    n = 50 * 3
    table = pa.table({"id": pa.array(np.arange(n, dtype=np.int64)),
                      "s": pa.array([f"r{i}" for i in range(n)])})
    lance.write_dataset(table, uri, data_storage_version="2.1", max_rows_per_file=3, max_rows_per_group=3)
    lance.dataset(uri).delete("id % 5 = 1")


def test_slice_reads_the_named_fragments(tmp_path: Path) -> None:
    import lance

    uri = str(tmp_path / "d")
    _dataset(uri)
    ds = Dataset.open(uri)
    ids = [3, 4, 5, 10, 11, 2, *range(40, 50)]
    slc = ds.fragment_slice(ids, 4)
    # runs of manifest neighbours, cut at 4: [3 4 5] [10 11] [2] [40..43] [44..47] [48 49]
    assert [n for _, _, n in slc.chunks] == [3, 2, 1, 4, 4, 2]
    view = Dataset.open_slice(uri, slc)
    assert view is not None
    assert (view.version, view.lance_schema, view.data_storage_version) == \
        (ds.version, ds.lance_schema, ds.data_storage_version)
    got = [f for chunk in view.fragments_in_slice(slc, ids) for f in chunk]
    assert [f.id for f in got] == ids
    theirs = {f.fragment_id: f for f in lance.dataset(uri).get_fragments()}
    for f in got:
        assert f.to_pb() == ds.fragment(f.id).to_pb()
        meta = theirs[f.id].metadata
        assert f.physical_rows == meta.physical_rows
        assert [d.path for d in f.files] == [d.path for d in meta.files]
        assert f.num_deleted_rows == meta.num_deletions
    with pytest.raises(UnsupportedError, match="no fragments"):
        view.fragments  # noqa: B018 - the view holds none
    assert ds.fragment_slice([3, 999], 4) is None  # an absent fragment: no slice


def test_slice_carries_its_bytes_and_the_task_reads_none(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from lance_spark_ops.io.storage import ObjectStore

    uri = str(tmp_path / "d")
    _dataset(uri)
    ds = Dataset.open(uri)
    ids = [3, 4, 5, 10, 11, 2, *range(40, 50)]
    plain = ds.fragment_slice(ids, 4)
    assert plain.inline is None and plain.inline_bytes() == 0
    slc = ds.fragment_slice(ids, 4, inline=1 << 20)
    assert (slc.path, slc.size, slc.head, slc.chunks) == (plain.path, plain.size, plain.head, plain.chunks)
    # the carried bytes are the file's own at the ranges the slice names
    raw = (Path(uri) / slc.path).read_bytes()
    ranges = [*slc.head, *((o, n) for o, n, _ in slc.chunks)]
    assert list(slc.inline) == [raw[o:o + n] for o, n in ranges]
    assert slc.inline_bytes() == sum(n for _, n in ranges)
    assert ds.fragment_slice(ids, 4, inline=slc.inline_bytes() - 1).inline is None  # over the limit: ranges

    def no_reads(*args, **kwargs):
        raise AssertionError("the task read the manifest file")

    monkeypatch.setattr(ObjectStore, "read_range", no_reads)
    monkeypatch.setattr(ObjectStore, "read_ranges", no_reads)
    view = Dataset.open_slice(uri, slc)
    assert view is not None and (view.version, view.lance_schema) == (ds.version, ds.lance_schema)
    got = [f for chunk in view.fragments_in_slice(slc, ids) for f in chunk]
    assert [f.to_pb() for f in got] == [ds.fragment(i).to_pb() for i in ids]


def test_a_large_head_is_not_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lance_spark_ops.table.format import manifest

    uri = str(tmp_path / "d")
    _dataset(uri)
    monkeypatch.setattr(manifest, "HEAD_KEPT", 8)  # below any manifest's schema and fields
    slc = Dataset.open(uri).fragment_slice([3, 4], 4, inline=1 << 20)
    assert slc is not None and slc.inline is None  # the ranges only: the task reads them

