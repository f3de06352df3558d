"""A nullable struct over a list keeps one validity layer kind on every page.

pylance 14 fails to read a column whose pages mix an ALL_VALID and a NULLABLE struct layer
over a list ("Incorrect number of nulls for StructArray"). Our writer chose the cheapest kind
per page, so a struct<list> column with nulls on some pages only was unreadable by pylance
after a compaction; a binary copy that moved pylance's ALL_VALID pages beside NULLABLE ones
was too (pylance's own ``try_binary_copy`` writes the same unreadable file). Found by
``tests/spark/test_random_datasets.py`` (seed 129 of the long run).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from lance_spark_ops.encoding.layers import NULLABLE_ITEM, all_valid_struct_over_list
from lance_spark_ops.file.columns import page_layout
from lance_spark_ops.file.metadata import load_metadata
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
