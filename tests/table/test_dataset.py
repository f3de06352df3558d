"""Datasets pylance wrote read back by ``Dataset`` exactly as pylance reads them: every version
of every scenario, file versions 2.0 / 2.1 / 2.2, ``_rowid`` and ``_rowaddr`` included.
Rows come in the same order as pylance's (no sorting needed)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops import Dataset
from lance_spark_ops.errors import NotFoundError
from lance_spark_ops.table.format.feature_flags import FLAG_DELETION_FILES, FLAG_STABLE_ROW_IDS
from lance_spark_ops.table.format.fragment import DeletionFileType
from lance_spark_ops.table.paths import ManifestNamingScheme
from tests.table.datasets import SCENARIOS, VERSIONS

PARAMS = [pytest.param(s, v, id=f"{s}-{v}") for s in SCENARIOS for v in VERSIONS]


def _diff(ours: pa.Table, theirs: pa.Table) -> str:
    if not ours.schema.equals(theirs.schema, check_metadata=True):
        return f"schema differs:\nours:   {ours.schema}\ntheirs: {theirs.schema}"
    if ours.num_rows != theirs.num_rows:
        return f"{ours.num_rows} rows, pylance has {theirs.num_rows}"
    for name in theirs.column_names:
        a, b = ours.column(name).to_pylist(), theirs.column(name).to_pylist()
        i = next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), None)
        if i is not None:
            return f"column {name!r} first differs at row {i}: ours {a[i]!r} pylance {b[i]!r}"
    return "tables differ"


def assert_same(ours: pa.Table, theirs: pa.Table) -> None:
    same = ours.schema.equals(theirs.schema, check_metadata=True) and ours.equals(theirs)
    assert same, _diff(ours, theirs)


@pytest.mark.parametrize("scenario,version", PARAMS)
def test_every_version_matches_pylance(pylance_dataset, scenario: str, version: str) -> None:
    import lance

    uri = pylance_dataset(scenario, version)
    for v in [x["version"] for x in lance.dataset(uri).versions()]:
        ours = Dataset.open(uri, version=v).to_table(with_row_id=True, with_row_address=True)
        theirs = lance.dataset(uri, version=v).to_table(with_row_id=True, with_row_address=True)
        assert_same(ours, theirs)


@pytest.mark.parametrize("scenario,version", PARAMS)
def test_metadata_matches_pylance(pylance_dataset, scenario: str, version: str) -> None:
    import lance

    uri = pylance_dataset(scenario, version)
    ours, theirs = Dataset.open(uri), lance.dataset(uri)
    assert ours.version == theirs.version == ours.latest_version()
    assert ours.versions() == [x["version"] for x in theirs.versions()]
    assert ours.schema.equals(theirs.schema, check_metadata=True)
    assert ours.data_storage_version == theirs.data_storage_version == version
    assert [f.id for f in ours.fragments] == [f.fragment_id for f in theirs.get_fragments()]
    for mine, frag in zip(ours.fragments, theirs.get_fragments(), strict=True):
        assert mine.physical_rows == frag.physical_rows
        assert [f.path for f in mine.files] == [f.path for f in frag.data_files()]
        assert mine.num_rows == frag.count_rows()
    assert ours.count_rows() == theirs.count_rows()
    assert ours.uses_stable_row_ids == (scenario == "stable_row_ids")
    v1 = scenario in ("v1_names", "updates_by_address")
    expected_scheme = ManifestNamingScheme.V1 if v1 else ManifestNamingScheme.V2
    assert ours.naming_scheme is expected_scheme
    assert ours.timestamp.timestamp() == pytest.approx(theirs.versions()[-1]["timestamp"].timestamp(), abs=1)
    assert ours.max_fragment_id == max(f.id for f in ours.fragments)
    txn = ours.transaction  # compaction reads an older version (fragment ids were reserved since)
    assert txn is not None and txn.read_version < ours.version
    assert ours.manifest.transaction_file == txn.file_name


@pytest.mark.parametrize("version", VERSIONS)
def test_projection_batches_and_fragment_selection(pylance_dataset, version: str) -> None:
    import lance

    uri = pylance_dataset("deletions", version)
    ours, theirs = Dataset.open(uri), lance.dataset(uri)
    assert_same(ours.to_table(columns=["s", "a"], with_row_address=True),
                theirs.to_table(columns=["s", "a"], with_row_address=True))
    assert_same(ours.to_table(columns=[], with_row_id=True), theirs.to_table(columns=[], with_row_id=True))
    assert ours.to_table(columns=[]).num_rows == theirs.count_rows()
    whole = ours.to_table(with_row_id=True)
    batches = list(ours.iter_fragment_batches(with_row_id=True, batch_rows=1000))
    assert all(b.num_rows <= 1000 for b in batches)
    assert_same(pa.Table.from_batches(batches, schema=whole.schema), whole)
    frags = [theirs.get_fragment(1), theirs.get_fragment(0)]
    assert_same(ours.to_table(fragment_ids=[1, 0], with_row_address=True),
                theirs.scanner(fragments=frags, with_row_address=True).to_table())


@pytest.mark.parametrize("version", VERSIONS)
def test_deletion_files_of_both_kinds(pylance_dataset, version: str) -> None:
    ds = Dataset.open(pylance_dataset("deletions", version))
    kinds = {f.id: f.deletion_file.file_type for f in ds.fragments if f.deletion_file}
    assert kinds == {0: DeletionFileType.ARROW_ARRAY, 1: DeletionFileType.BITMAP}
    assert ds.reader_feature_flags == FLAG_DELETION_FILES
    assert [len(ds.deleted_offsets(f)) for f in ds.fragments] == [10, 5501]


@pytest.mark.parametrize("version", ["2.0", "2.2"])
def test_physical_rows_and_live_mask(pylance_dataset, version: str) -> None:
    """``include_deleted`` yields every physical row in order; ``live_mask`` marks the rows the
    normal scan keeps, so filtering the one by the other is the normal scan."""
    import lance

    uri = pylance_dataset("deletions", version)
    ds = Dataset.open(uri)
    theirs = lance.dataset(uri)
    for frag in ds.fragments:
        assert ds.fragment(frag.id) is frag
        phys = pa.Table.from_batches(list(ds.scan_fragment(frag.id, batch_rows=4000, include_deleted=True)))
        keep = ds.live_mask(frag)
        assert phys.num_rows == frag.physical_rows and keep is not None and keep.size == frag.physical_rows
        assert int((~keep).sum()) == len(ds.deleted_offsets(frag))
        assert phys.filter(pa.array(keep)).equals(
            theirs.get_fragment(frag.id).to_table().cast(phys.schema))
    with pytest.raises(NotFoundError, match="no fragment"):
        ds.fragment(999)


@pytest.mark.parametrize("scenario", ["deletions", "basic"])
def test_live_rows_and_dense_live_mask(pylance_dataset, scenario: str) -> None:
    """``live_rows`` is pylance's row count of each fragment (without the manifest's count too:
    then the deletion file's rows are counted); ``dense_live_mask`` is ``live_mask`` or all
    True, one flag per physical row."""
    import dataclasses

    import lance

    uri = pylance_dataset(scenario, "2.1")
    ds = Dataset.open(uri)
    theirs = lance.dataset(uri)
    for frag in ds.fragments:
        want = theirs.get_fragment(frag.id).count_rows()
        assert ds.live_rows(frag) == want
        mask = ds.dense_live_mask(frag)
        assert mask.dtype == bool and mask.size == frag.physical_rows and int(mask.sum()) == want
        if frag.deletion_file is not None:  # a count the manifest lacks: the deletion file's
            unknown = dataclasses.replace(frag.deletion_file, num_deleted_rows=None)
            assert ds.live_rows(dataclasses.replace(frag, deletion_file=unknown)) == want


@pytest.mark.parametrize("version", VERSIONS)
def test_row_versions_match_pylance(pylance_dataset, version: str) -> None:
    """Created-at / last-updated-at sequences decode to pylance's version columns."""
    import lance

    uri = pylance_dataset("stable_row_ids", version)
    ds = Dataset.open(uri)
    assert ds.reader_feature_flags == FLAG_DELETION_FILES | FLAG_STABLE_ROW_IDS
    assert ds.next_row_id == lance.dataset(uri).to_table(with_row_id=True)["_rowid"].to_numpy().max() + 1
    cols = ["_row_created_at_version", "_row_last_updated_at_version"]
    theirs = lance.dataset(uri).to_table(columns=cols)
    created, updated = [], []
    for frag in ds.fragments:
        keep = np.ones(frag.physical_rows, dtype=bool)
        keep[ds.deleted_offsets(frag)] = False
        created.append(ds.created_at_versions(frag)[keep])
        updated.append(ds.last_updated_at_versions(frag)[keep])
    assert np.array_equal(np.concatenate(created), theirs[cols[0]].to_numpy())
    assert np.array_equal(np.concatenate(updated), theirs[cols[1]].to_numpy())


def test_tombstoned_column_is_skipped(pylance_dataset) -> None:
    ds = Dataset.open(pylance_dataset("data_replacement", "2.2"))
    assert -2 in ds.fragments[0].files[0].fields
    assert ds.to_table(columns=["f"], fragment_ids=[0])["f"].to_pylist()[:3] == [0.0, 100.0, 200.0]


def test_fsspec_memory_store(pylance_dataset) -> None:
    """Any fsspec filesystem works: the same dataset copied into ``memory://``."""
    import os

    import fsspec

    src = pylance_dataset("deletions", "2.2")
    fs = fsspec.filesystem("memory")
    for root, _, files in os.walk(src):
        for name in files:
            rel = os.path.relpath(os.path.join(root, name), src)
            with open(os.path.join(root, name), "rb") as f:
                fs.pipe_file(f"/table_tests/deletions/{rel}", f.read())
    try:
        mem = Dataset.open("memory://table_tests/deletions")
        ours = mem.to_table(with_row_id=True, with_row_address=True)
        assert_same(ours, Dataset.open(src).to_table(with_row_id=True, with_row_address=True))
    finally:
        fs.rm("/table_tests", recursive=True)
