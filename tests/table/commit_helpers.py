"""Helpers for the commit tests: pylance as the oracle for every version we commit."""

from __future__ import annotations

import pyarrow as pa

from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.format.fragment import DataFile, DataFragment

VERSIONS = ("2.0", "2.1", "2.2")


def table(n: int, start: int = 0) -> pa.Table:
    return pa.table({
        "id": pa.array(range(start, start + n), pa.int64()),
        "s": pa.array([f"s{i}" for i in range(start, start + n)]),
        "f": pa.array([i * 0.5 if i % 7 else None for i in range(start, start + n)], pa.float64()),
    })


def pylance_fragment(uri: str, data: pa.Table, version: str, schema: pa.Schema | None = None) -> DataFragment:
    """Data file written by pylance into ``uri``/data, described as an uncommitted fragment."""
    from lance.fragment import LanceFragment

    meta = LanceFragment.create(uri, data, schema=schema, data_storage_version=version).to_json()
    files = [DataFile(f["path"], list(f["fields"]), list(f["column_indices"]), f["file_major_version"],
                      f["file_minor_version"], f["file_size_bytes"]) for f in meta["files"]]
    return DataFragment(0, files, physical_rows=meta["physical_rows"])


def pylance_rows(uri: str, version: int | None = None) -> pa.Table:
    import lance

    return lance.dataset(uri, version=version).to_table(with_row_id=True, with_row_address=True)


def our_rows(uri: str, version: int | None = None) -> pa.Table:
    return Dataset.open(uri, version).to_table(with_row_id=True, with_row_address=True)


def assert_same_as_pylance(uri: str, version: int | None = None) -> pa.Table:
    """pylance opens the version and returns exactly our rows (with _rowid and _rowaddr)."""
    theirs = pylance_rows(uri, version)
    ours = our_rows(uri, version)
    assert ours.schema.equals(theirs.schema), \
        f"{uri}@{version}: schemas differ:\n{ours.schema}\n{theirs.schema}"
    assert ours.equals(theirs), f"{uri}@{version}: rows differ"
    return ours


def assert_every_version(uri: str) -> None:
    for v in Dataset.open(uri).versions():
        assert_same_as_pylance(uri, v)


def ids(t: pa.Table) -> list[int]:
    return sorted(t.column("id").to_pylist())
