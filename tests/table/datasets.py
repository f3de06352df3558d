"""Datasets written by pylance (the oracle) for the table tests: one builder per scenario,
each run for file versions 2.0, 2.1 and 2.2. Data stays small so the suite is fast; the
bitmap-deletion scenario needs one fragment with more than 5000 deleted rows."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

VERSIONS = ("2.0", "2.1", "2.2")


def _simple(n: int, start: int = 0) -> pa.Table:
    return pa.table({
        "a": pa.array(range(start, start + n), pa.int64()),
        "s": pa.array([f"s{i}" for i in range(start, start + n)]),
        "f": pa.array([i * 0.5 if i % 11 else None for i in range(start, start + n)], pa.float64()),
    })


def basic(uri: str, version: str) -> None:
    import lance

    lance.write_dataset(_simple(2500), uri, data_storage_version=version, max_rows_per_file=1000)
    lance.write_dataset(_simple(300, 2500), uri, mode="append", data_storage_version=version)


def deletions(uri: str, version: str) -> None:
    """Fragment 0: 10 deleted (Arrow file); fragment 1: 5500 deleted (roaring bitmap)."""
    import lance

    ds = lance.write_dataset(_simple(12000), uri, data_storage_version=version, max_rows_per_file=6000)
    ds.delete("a < 10")
    ds.delete("a >= 6000 AND a < 11500")
    ds.delete("a = 11999")


def _update_history(uri: str, version: str, **write_kw: object) -> None:
    """delete, update, merge_insert and compaction, then one more delete."""
    import lance

    ds = lance.write_dataset(_simple(3000), uri, data_storage_version=version, max_rows_per_file=1000,
                             **write_kw)
    ds.delete("a % 7 = 0")
    ds.update({"f": "f + 1"}, where="a % 5 = 0")
    ds = lance.dataset(uri)
    new = pa.table({"a": pa.array([1, 2, 5000], pa.int64()), "s": ["x", "y", "z"], "f": [9.0, 9.0, 9.0]})
    ds.merge_insert("a").when_matched_update_all().when_not_matched_insert_all().execute(new)
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=5000)
    lance.dataset(uri).delete("a >= 100 AND a < 120")


def stable_row_ids(uri: str, version: str) -> None:
    """Stable row ids through delete, update, merge_insert and compaction."""
    _update_history(uri, version, enable_stable_row_ids=True)


def updates_by_address(uri: str, version: str) -> None:
    """The same history without stable row ids (rows move; _rowid is the address), with V1
    manifest names."""
    _update_history(uri, version, enable_v2_manifest_paths=False)


def v1_names(uri: str, version: str) -> None:
    import lance

    ds = lance.write_dataset(_simple(1500), uri, data_storage_version=version, max_rows_per_file=700,
                             enable_v2_manifest_paths=False)
    ds.delete("a > 1200")
    lance.write_dataset(_simple(100, 1500), uri, mode="append", data_storage_version=version)


def schema_evolution(uri: str, version: str) -> None:
    """add_columns (SQL and all-null), merge, rename, drop, and a compaction over it all."""
    import lance

    ds = lance.write_dataset(_simple(900), uri, data_storage_version=version, max_rows_per_file=400)
    ds.add_columns({"c": "a * 2"})
    ds.add_columns(pa.field("n", pa.float32()))
    ds.delete("a % 9 = 0")
    ds.merge(pa.table({"a": pa.array(range(900), pa.int64()), "m": pa.array(range(900), pa.int32())}),
             left_on="a")
    ds = lance.dataset(uri)
    ds.alter_columns({"path": "s", "name": "s2"})
    ds.drop_columns(["f"])
    ds = lance.dataset(uri)
    ds.optimize.compact_files(target_rows_per_fragment=2000)


def nested(uri: str, version: str) -> None:
    """Struct and list columns; 2.0 cannot store a nullable struct, so its structs are never null."""
    import lance

    n = 600
    st = [{"x": i, "y": f"y{i}"} if (version == "2.0" or i % 4) else None for i in range(n)]
    t = pa.table({
        "id": pa.array(range(n), pa.int64()),
        "st": pa.array(st, pa.struct([("x", pa.int32()), ("y", pa.string())])),
        "l": pa.array([[i, i + 1] if i % 5 else [] for i in range(n)], pa.list_(pa.int64())),
    })
    ds = lance.write_dataset(t, uri, data_storage_version=version, max_rows_per_file=250)
    ds.delete("id % 13 = 0")
    ds.add_columns({"z": "id + 1"})
    if version != "2.0":
        lance.dataset(uri).drop_columns(["st.x"])


def data_replacement(uri: str, version: str) -> None:
    """Column ``f`` of fragment 0 replaced by a new data file: its old column becomes id -2."""
    import lance
    from lance.file import LanceFileWriter

    ds = lance.write_dataset(_simple(500), uri, data_storage_version=version, max_rows_per_file=300)
    schema = pa.schema([pa.field("f", pa.float64())])
    with LanceFileWriter(f"{uri}/data/new_f.lance", schema, version=version) as w:
        w.write_batch(pa.table({"f": pa.array([i * 100.0 for i in range(300)])}, schema=schema))
    major, minor = (int(x) for x in version.split("."))
    new_file = lance.fragment.DataFile("new_f.lance", fields=[2], column_indices=[0],
                                       file_major_version=major, file_minor_version=minor)
    group = lance.LanceOperation.DataReplacementGroup(fragment_id=0, new_file=new_file)
    lance.LanceDataset.commit(uri, lance.LanceOperation.DataReplacement([group]), read_version=ds.version)


SCENARIOS: dict[str, Callable[[str, str], None]] = {
    "basic": basic,
    "deletions": deletions,
    "stable_row_ids": stable_row_ids,
    "updates_by_address": updates_by_address,
    "v1_names": v1_names,
    "schema_evolution": schema_evolution,
    "nested": nested,
    "data_replacement": data_replacement,
}
