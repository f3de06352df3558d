"""The conflict matrix (checked against the table in ``conflict``'s docstring) and real races
between two writers that read the same version."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from pyroaring import BitMap

from lance_spark_ops._pb import table_pb2, transaction_pb2
from lance_spark_ops.errors import CommitConflict, IncompatibleTransaction
from lance_spark_ops.file.schema import schema_from_arrow
from lance_spark_ops.table.commit import conflict
from lance_spark_ops.table.commit.conflict import Compatible, Incompatible, Rebase, Retryable, check_txn
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.format.fragment import DataFile, DataFragment
from lance_spark_ops.table.format.transaction import (
    Append,
    CreateIndex,
    DataReplacement,
    DataReplacementGroup,
    Delete,
    Merge,
    Overwrite,
    Project,
    ReserveFragments,
    Restore,
    Rewrite,
    RewriteGroup,
    Transaction,
    UnknownOperation,
    Update,
    UpdateConfig,
)
from lance_spark_ops.table.paths import deletion_file_name
from lance_spark_ops.table.write import delete_rows, write_dataset
from tests.table.commit_helpers import (
    assert_every_version,
    assert_same_as_pylance,
    ids,
    pylance_fragment,
    table,
)

SCHEMA = schema_from_arrow(pa.schema([("a", pa.int64())]))
FILES = [DataFile("x.lance", [0], [0], 2, 1, 10)]


def _frag(fid: int, files: list[DataFile] = FILES) -> DataFragment:
    return DataFragment(fid, list(files), physical_rows=10)


_NAMES = itertools.count()


def _index(field: int, frags: list[int], name: str = "idx") -> table_pb2.IndexMetadata:
    bitmap = bytes(BitMap(frags).serialize())
    return table_pb2.IndexMetadata(name=name, fields=[field], fragment_bitmap=bitmap)


def _update_config() -> UpdateConfig:
    pb = transaction_pb2.Transaction.UpdateConfig(upsert_values={"k": "v"}, schema_metadata={"m": "1"})
    return UpdateConfig(pb)


REPRESENTATIVE = {
    "Append": lambda: Append([_frag(0)]),
    "Delete": lambda: Delete([_frag(1)], []),
    "Update": lambda: Update([], [_frag(1)], [_frag(0)]),
    "Overwr": lambda: Overwrite([_frag(0)], SCHEMA),
    "Rewrit": lambda: Rewrite([RewriteGroup([_frag(1)], [_frag(0)])]),
    "Merge": lambda: Merge([_frag(1)], SCHEMA),
    "DataRp": lambda: DataReplacement([DataReplacementGroup(1, DataFile("y.lance", [5], [0], 2, 1))]),
    # each call a new name: two CreateIndex of one name conflict (note 8, tested apart)
    "CrIdx": lambda: CreateIndex([_index(5, [1], name=f"idx{next(_NAMES)}")], []),
    "Projct": lambda: Project(SCHEMA),
    "Restor": lambda: Restore(1),
    "Reserv": lambda: ReserveFragments(2),
    "UpdCfg": _update_config,
    "Unknwn": lambda: UnknownOperation(b"\x08\x01"),
}
ROWS = {"Append": "Append", "Delete": "Delete", "Update": "Update", "Overwrite": "Overwr",
        "Rewrite": "Rewrit",
        "Merge": "Merge", "DataReplacement": "DataRp", "CreateIndex": "CrIdx", "Project": "Projct",
        "Restore": "Restor", "ReserveFragments": "Reserv", "UpdateConfig": "UpdCfg"}
LETTER = {Compatible: "C", Rebase: "B", Retryable: "R", Incompatible: "I"}


def _docstring_matrix() -> list[tuple[str, str, str]]:
    lines = [ln for ln in conflict.__doc__.splitlines() if ln.strip()]
    start = next(i for i, ln in enumerate(lines) if ln.startswith("ours \\"))
    header = lines[start].split()[3:]
    cells = []
    for ln in lines[start + 2:]:
        if ln.startswith("="):
            break
        row = ln[:17].strip()
        for j, col in enumerate(header):
            text = ln[17 + 7 * j: 17 + 7 * j + 6].strip()
            cells.append((row, col, text[0]))
    return cells


@pytest.mark.parametrize(("row", "col", "letter"), _docstring_matrix())
def test_matrix_matches_docstring(row: str, col: str, letter: str) -> None:
    ours = Transaction(1, "ours", REPRESENTATIVE[ROWS[row]]())
    theirs = Transaction(1, "theirs", REPRESENTATIVE[col]())
    verdict = check_txn(ours, theirs, 2)
    assert LETTER[type(verdict)] == letter, f"{row} vs {col}: {verdict}"


def test_starred_cells_need_a_common_fragment() -> None:
    ours = Transaction(1, "o", Delete([_frag(1)], []))
    assert check_txn(ours, Transaction(1, "t", Delete([_frag(2)], []))) == Compatible()
    assert check_txn(ours, Transaction(1, "t", Rewrite([RewriteGroup([_frag(2)], [])]))) == Compatible()
    changed = [DataFile("other.lance", [0], [0], 2, 1)]
    assert isinstance(check_txn(ours, Transaction(1, "t", Delete([_frag(1, changed)], []))), Retryable)
    assert check_txn(ours, Transaction(1, "t", Delete([], [1]))) == Rebase("merge_deletions", frozenset({1}))
    whole = Transaction(1, "o", Delete([], [1]))
    assert check_txn(whole, Transaction(1, "t", Delete([_frag(1)], []))) == Compatible()
    assert isinstance(check_txn(whole, Transaction(1, "t", Update([], [_frag(1)], []))), Retryable)
    assert isinstance(check_txn(ours, None, 3), Retryable)


# -- real races: two writers read version v, both commit ---------------------------------------
def _ds(tmp_path: Path, n: int = 3000, per_file: int = 1000, **kw) -> str:
    uri = str(tmp_path / "ds")
    write_dataset(table(n), uri, data_storage_version="2.0", max_rows_per_file=per_file, **kw)
    return uri


def test_two_appends_both_land(tmp_path: Path) -> None:
    uri = _ds(tmp_path)
    a = Dataset.open(uri)
    b = Dataset.open(uri)
    a.commit(Append([pylance_fragment(uri, table(5, 9000), "2.0")]))
    ds = b.commit(Append([pylance_fragment(uri, table(5, 9100), "2.0")]))
    assert ds.version == 3 and [f.id for f in ds.fragments] == [0, 1, 2, 3, 4]
    expected = list(range(3000)) + list(range(9000, 9005)) + list(range(9100, 9105))
    assert ids(assert_same_as_pylance(uri)) == expected
    assert len(os.listdir(Path(uri) / "_transactions")) == 3


@pytest.mark.parametrize("stable", [False, True])
def test_two_deletes_on_one_fragment_rebase(tmp_path: Path, stable: bool) -> None:
    uri = _ds(tmp_path, enable_stable_row_ids=stable)
    a = Dataset.open(uri)
    b = Dataset.open(uri)
    delete_rows(a, {0: [1, 2, 3], 1: [0]})
    ds = delete_rows(b, {0: [3, 4, 999], 2: np.arange(1000)})  # overlaps on row 3; fragment 2 whole
    assert ds.version == 3 and ds.transaction.read_version == 2  # rebased onto version 2
    frag0 = ds.fragments[0]
    assert frag0.deletion_file.read_version == 2 and frag0.deletion_file.num_deleted_rows == 5
    assert ds.deleted_offsets(frag0).tolist() == [1, 2, 3, 4, 999]
    assert [f.id for f in ds.fragments] == [0, 1]
    got = assert_same_as_pylance(uri)
    assert sorted(set(range(2000)) - set(ids(got))) == [1, 2, 3, 4, 999, 1000]
    assert_every_version(uri)
    referenced = {deletion_file_name(f.id, f.deletion_file)
                  for v in (2, 3) for f in Dataset.open(uri, v).fragments if f.deletion_file}
    assert set(os.listdir(Path(uri) / "_deletions")) == referenced  # b's pre-rebase file is gone


def test_delete_rebases_over_pylance_and_pylance_over_us(tmp_path: Path) -> None:
    import lance

    uri = _ds(tmp_path)
    ours = Dataset.open(uri)
    lance.dataset(uri).delete("id = 10")
    ds = delete_rows(ours, {0: [11]})  # our rebase reads pylance's transaction
    assert ds.version == 3
    stale = lance.dataset(uri, version=3)
    delete_rows(Dataset.open(uri), {0: [12]})  # version 4, ours
    stale.delete("id = 13")  # pylance rebases over our transaction
    got = assert_same_as_pylance(uri)
    assert [i for i in range(20) if i not in set(ids(got))] == [10, 11, 12, 13]


def test_delete_vs_pylance_update(tmp_path: Path) -> None:
    import lance

    uri = _ds(tmp_path)
    ours = Dataset.open(uri)
    lance.dataset(uri).update({"s": "'changed'"}, where="id = 5")
    with pytest.raises(CommitConflict, match="updated by a concurrent commit"):
        delete_rows(ours, {0: [5]})
    ds = delete_rows(ours, {0: [6]})  # other rows of that fragment rebase fine
    got = assert_same_as_pylance(uri)
    assert 5 in ids(got) and 6 not in ids(got) and ds.version == 3


def test_overwrite_makes_others_incompatible(tmp_path: Path) -> None:
    uri = _ds(tmp_path)
    stale = Dataset.open(uri)
    write_dataset(table(10), uri, mode="overwrite")
    frag = pylance_fragment(uri, table(5, 9000), "2.0")
    with pytest.raises(IncompatibleTransaction, match="Overwrite"):
        stale.commit(Append([frag]))
    with pytest.raises(IncompatibleTransaction):
        delete_rows(stale, {0: [1]})
    ds = stale.commit(Overwrite([frag], stale.lance_schema))  # overwrite vs overwrite: last one wins
    assert ids(assert_same_as_pylance(uri)) == list(range(9000, 9005)) and ds.version == 3
    assert os.listdir(Path(uri) / "_deletions") == []  # the failed delete cleaned up after itself


def test_rewrite_vs_delete(tmp_path: Path) -> None:
    uri = _ds(tmp_path)
    stale = Dataset.open(uri)
    delete_rows(Dataset.open(uri), {1: [5]})
    live = stale.to_table(fragment_ids=[0])
    rewrite = Rewrite([RewriteGroup([stale.fragments[0]], [pylance_fragment(uri, live, "2.0")])])
    ds = stale.commit(rewrite)  # fragment 1 was touched, not 0: compatible
    assert [f.id for f in ds.fragments] == [1, 2, 3]
    stale = Dataset.open(uri)
    delete_rows(Dataset.open(uri), {3: [0]})
    rewrite = Rewrite([RewriteGroup([stale.manifest.fragment(3)], [pylance_fragment(uri, live, "2.0")])])
    n = len(os.listdir(Path(uri) / "_transactions"))
    # The deletion could be carried onto the new fragment (tests/spark/test_compact_conflicts.py),
    # but only once it has its final id: an unreserved new fragment must retry.
    with pytest.raises(CommitConflict, match="reserve fragment ids"):
        stale.commit(rewrite)
    assert len(os.listdir(Path(uri) / "_transactions")) == n  # its transaction file was removed
    assert_every_version(uri)


def test_missing_or_unknown_transaction_is_a_conflict(tmp_path: Path) -> None:
    from lance_spark_ops.table.commit import commit_transaction
    from lance_spark_ops.table.format.manifest import parse_manifest_file, serialize_manifest_file

    uri = _ds(tmp_path)
    stale = Dataset.open(uri)
    ds = write_dataset(table(5, 9000), uri, mode="append")
    path = ds.store.full_path(ds.manifest_path)
    mf = parse_manifest_file(open(path, "rb").read())
    open(path, "wb").write(serialize_manifest_file(mf.manifest, None, mf.index_section))
    os.remove(Path(uri) / "_transactions" / mf.manifest.transaction_file)
    frag = pylance_fragment(uri, table(5, 9100), "2.0")
    with pytest.raises(CommitConflict, match="missing"):
        stale.commit(Append([frag]))
    unknown = transaction_pb2.Transaction(read_version=2, uuid="u")
    ds = commit_transaction(uri, Append([frag]), 2)
    mf = parse_manifest_file(open(ds.store.full_path(ds.manifest_path), "rb").read())
    open(ds.store.full_path(ds.manifest_path), "wb").write(
        serialize_manifest_file(mf.manifest, unknown.SerializeToString() + b"\x82\x07\x00", mf.index_section))
    with pytest.raises(CommitConflict, match="does not know"):
        Dataset.open(uri, 2).commit(Append([frag]))


def test_create_index_of_a_name_theirs_created_retries() -> None:
    """A delta segment re-lists its siblings: committed over a concurrent optimize of the same
    index it would drop that optimize's new segment."""
    ours = Transaction(1, "ours", CreateIndex([_index(5, [1], "same"), _index(5, [2], "same")], []))
    theirs = Transaction(1, "theirs", CreateIndex([_index(5, [1, 2], "same")], []))
    assert isinstance(check_txn(ours, theirs, 2), Retryable)
