"""A nullable struct over a list keeps one validity layer kind on every page.

pylance 14 fails to read a column whose pages mix an ALL_VALID and a NULLABLE struct layer
over a list ("Incorrect number of nulls for StructArray"). Our writer chose the cheapest kind
per page, so a struct<list> column with nulls on some pages only was unreadable by pylance
after a compaction; a binary copy that moved pylance's ALL_VALID pages beside NULLABLE ones
was too (pylance's own ``try_binary_copy`` writes the same unreadable file). Found by
``tests/spark/test_random_datasets.py`` (seed 129 of the long run).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pyarrow as pa
import pytest

from lance_spark_ops.encoding.layers import NULLABLE_ITEM, all_valid_struct_over_list
from lance_spark_ops.file.columns import page_layout
from lance_spark_ops.file.metadata import load_metadata
from lance_spark_ops.file.pylance_quirks import page_layers, struct_validity_mixes
from lance_spark_ops.file.writer import LanceFileWriter
from lance_spark_ops.io import ObjectStore
from tests.conftest import pylance_read

STRUCT_LIST = pa.struct([("c", pa.list_(pa.int8()))])
N = 1500


def _with_nulls() -> pa.Array:
    return pa.array([None if i % 3 == 0 else {"c": [i % 7, 1] if i % 5 else None} for i in range(N)],
                    STRUCT_LIST)


def _all_valid() -> pa.Array:
    return pa.array([{"c": [i % 7]} for i in range(N)], STRUCT_LIST)


def _layers(path: Path) -> set[tuple[int, ...]]:
    store = ObjectStore(str(path.parent))
    meta = load_metadata(store, path.name)
    out = set()
    for page in meta.column(0).pages:
        layout = page_layout(page, str(path), "test")
        which = layout.WhichOneof("layout")
        out.add(tuple(getattr(layout, which).layers))
    return out


@pytest.mark.parametrize("version", ["2.1", "2.2"])
@pytest.mark.parametrize("nulls_first", [True, False])
def test_pages_with_and_without_struct_nulls_read_by_pylance(tmp_path: Path, version: str,
                                                           nulls_first: bool) -> None:
    parts = [_with_nulls(), _all_valid()] if nulls_first else [_all_valid(), _with_nulls()]
    schema = pa.schema([pa.field("k", STRUCT_LIST)])
    w = LanceFileWriter("f.lance", schema, version=version, store=ObjectStore(str(tmp_path)), page_bytes=512)
    for a in parts:
        w.write_batch(pa.record_batch([a], schema=schema))
    w.close()
    layers = _layers(tmp_path / "f.lance")  # innermost first: item, list, struct
    # the list layer may differ from page to page (pylance reads that); the struct's may not
    assert len(layers) > 1 and {x[2] for x in layers} == {NULLABLE_ITEM}, layers
    got = pylance_read(tmp_path / "f.lance").column("k").combine_chunks()
    assert got.equals(pa.concat_arrays(parts))


def test_non_nullable_struct_stays_all_valid(tmp_path: Path) -> None:
    """Only a nullable struct takes the NULLABLE layer: a non-nullable one has no nulls to mix."""
    schema = pa.schema([pa.field("k", STRUCT_LIST, nullable=False)])
    w = LanceFileWriter("f.lance", schema, version="2.1", store=ObjectStore(str(tmp_path)))
    w.write_batch(pa.record_batch([_all_valid()], schema=schema))
    w.close()
    (layers,) = _layers(tmp_path / "f.lance")
    assert all_valid_struct_over_list(list(layers))
    assert pylance_read(tmp_path / "f.lance").column("k").combine_chunks().equals(_all_valid())


def test_layer_check() -> None:
    from lance_spark_ops.encoding.layers import ALL_VALID_ITEM, NULLABLE_LIST

    assert all_valid_struct_over_list([ALL_VALID_ITEM, NULLABLE_LIST, ALL_VALID_ITEM])
    assert not all_valid_struct_over_list([ALL_VALID_ITEM, NULLABLE_LIST, NULLABLE_ITEM])
    assert not all_valid_struct_over_list([ALL_VALID_ITEM, NULLABLE_LIST])  # the item below the list
    assert not all_valid_struct_over_list([NULLABLE_ITEM, ALL_VALID_ITEM])  # a struct without a list


# -- files pylance itself writes that pylance cannot read: found by validate ---------------------
# Fragments pylance writes with different struct / list validity; its own try_binary_copy moves
# their pages into one file. Whether pylance 14 reads that file is the oracle for
# ``struct_validity_mixes`` (and ``layers.struct_validity_conflict``).
ONE = pa.struct([("c", pa.list_(pa.int8()))])
TWO = pa.struct([("s", ONE)])
KINDS_ONE = {  # struct nulls / null lists / empty lists / null items
    "A": [None if i % 3 == 0 else {"c": [i % 7, 1] if i % 5 else None} for i in range(200)],
    "B": [{"c": [i % 7, 1] if i % 5 else None} for i in range(200)],
    "B1": [{"c": None}],  # one row: a constant page
    "C": [{"c": [i % 7]} for i in range(200)],
    "E": [None if i % 3 == 0 else {"c": [i % 7, 1] if i % 5 else []} for i in range(200)],
    "F": [{"c": [i % 7, 1] if i % 5 else []} for i in range(200)],
    "I": [{"c": [i % 7, None]} for i in range(200)],
}
KINDS_TWO = {  # outer struct nulls, inner struct nulls, null lists
    f"{o}{s}{n}": [None if o and i % 3 == 0 else
                   {"s": None if s and i % 4 == 1 else {"c": None if n and i % 5 == 2 else [i % 7, 1]}}
                   for i in range(120)]
    for o in (0, 1) for s in (0, 1) for n in (0, 1)}
# the kinds whose pages read beside NULLABLE struct pages in pylance 14 (the matrix above: struct
# NULLABLE, or no def levels at all with only the top-level struct ALL_VALID)
MOVABLE = {"A", "C", "E", "100", "101", "110", "111"}
CASES = ([(ONE, k) for k in itertools.permutations(KINDS_ONE, 2)] + [(ONE, ("A", "B1", "C"))]
         + [(TWO, k) for k in itertools.combinations(KINDS_TWO, 2)])


def _pylance_fragments(uri: str, t: pa.DataType, kinds: tuple[str, ...], version: str) -> None:
    import lance

    rows = {**KINDS_ONE, **KINDS_TWO}
    for k, name in enumerate(kinds):
        lance.write_dataset(pa.table({"id": pa.array(range(k * 1000, k * 1000 + len(rows[name])), pa.int64()),
                                      "k": pa.array(rows[name], t)}),
                            uri, mode="append" if k else "create", data_storage_version=version)


def _pylance_binary_copy(uri: str, t: pa.DataType, kinds: tuple[str, ...], version: str) -> None:
    import lance

    _pylance_fragments(uri, t, kinds, version)
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=10_000,
                                              compaction_mode="try_binary_copy")


@pytest.mark.parametrize(("t", "kinds"), [pytest.param(t, k, id="-".join(k)) for t, k in CASES])
def test_mixes_found_exactly_where_pylance_fails(tmp_path: Path, t: pa.DataType,
                                                 kinds: tuple[str, ...]) -> None:
    import lance

    uri = str(tmp_path / "ds")
    _pylance_binary_copy(uri, t, kinds, "2.1")
    ds = lance.dataset(uri)
    (frag,) = ds.get_fragments()
    path = Path(uri) / "data" / frag.data_files()[0].path
    try:
        ds.to_table()
        pylance_fails = False
    except pa.ArrowInvalid as e:  # pylance's reader
        assert "Incorrect number of nulls for StructArray" in str(e)
        pylance_fails = True
    meta = load_metadata(ObjectStore(str(path.parent)), path.name)
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("k", t)])
    found = struct_validity_mixes(meta, schema)
    assert found == ([(1, "k")] if pylance_fails else []), (kinds, _layers_of(path))
    # whatever pylance makes of it, this library reads the rows pylance wrote
    want = pa.concat_arrays([pa.array({**KINDS_ONE, **KINDS_TWO}[k], t) for k in kinds])
    from lance_spark_ops.file.reader import LanceFileReader

    assert LanceFileReader(str(path)).read(columns=["k"]).column("k").combine_chunks().equals(want)


def _layers_of(path: Path) -> list[tuple[int, ...]]:
    return page_layers(load_metadata(ObjectStore(str(path.parent)), path.name), 1)


@pytest.mark.parametrize(("t", "kinds"), [pytest.param(t, k, id="-".join(k)) for t, k in CASES])
def test_our_binary_copy_of_the_same_fragments_reads_in_pylance(tmp_path: Path, t: pa.DataType,
                                                               kinds: tuple[str, ...]) -> None:
    """Our try_binary_copy of the fragments above: pylance reads every row, and the pages that
    read beside any are moved (a check that re-encoded everything would pass the first part)."""
    import lance

    from lance_spark_ops.spark.files.compaction import compact

    uri = str(tmp_path / "ds")
    _pylance_fragments(uri, t, kinds, "2.1")
    before = lance.dataset(uri).to_table()
    m = compact(None, uri, target_rows_per_fragment=10_000, compaction_mode="try_binary_copy")
    assert m.fragments_added == 1 and lance.dataset(uri).to_table().equals(before)
    assert m.fragments_binary_copied == sum(k in MOVABLE for k in kinds), (kinds, m.fragments_binary_copied)


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_validate_reports_the_file_and_a_rewrite_repairs_it(tmp_path: Path, version: str) -> None:
    """validate names the fragment, file and field pylance cannot read (nothing else); after the
    table grows, our compaction re-encodes the file with the new rows and pylance reads every row."""
    import lance

    from lance_spark_ops.spark.files.compaction import compact
    from lance_spark_ops.spark.files.validation import validate

    uri = str(tmp_path / "ds")
    _pylance_binary_copy(uri, ONE, ("A", "B1", "C"), version)
    with pytest.raises(pa.ArrowInvalid, match="Incorrect number of nulls"):
        lance.dataset(uri).to_table()
    (frag,) = lance.dataset(uri).get_fragments()
    m = validate(None, uri)
    assert [(f["check"], f["fragment"], f["file"]) for f in m.findings] == [
        ("pylance_unreadable", frag.fragment_id, frag.data_files()[0].path)]
    assert "'k'" in m.findings[0]["detail"] and m.refusing == 0 and not m.consistent
    from lance_spark_ops.table.dataset import Dataset

    ours = Dataset.open(uri).to_table()
    extra = pa.table({"id": pa.array([5000], pa.int64()), "k": pa.array([{"c": [9]}], ONE)})
    lance.write_dataset(extra, uri, mode="append")
    compact(None, uri, target_rows_per_fragment=10_000)
    assert validate(None, uri).findings == []
    got = lance.dataset(uri).to_table()
    assert got.equals(pa.concat_tables([ours, extra]).cast(got.schema))
