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
