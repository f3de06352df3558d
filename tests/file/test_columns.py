"""Field ids and column indices recorded for a data file match what pylance records."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from lance_spark_ops.file.columns import data_file_field_ids
from lance_spark_ops.table.dataset import Dataset


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_data_file_field_ids_match_pylance(tmp_path: Path, version: str) -> None:
    import lance

    cols = {
        "a": pa.array([1, 2]),
        "s": pa.array([{"x": 1, "y": [1, 2]}, {"x": 2, "y": []}]),
        "p": pa.array([["1"], ["2", "3"]], pa.list_(pa.string())),
        "v": pa.FixedSizeListArray.from_arrays(pa.array([1.0, 2.0, 3.0, 4.0], pa.float32()), 2),
    }
    if version == "2.2":
        cols["m"] = pa.array([[("k", 1)], []], pa.map_(pa.string(), pa.int32()))
    packed = pa.StructArray.from_arrays(
        [pa.array([1, 2], pa.int32()), pa.array([3, 4], pa.int32())], ["i", "j"]
    )
    packed_field = pa.field("pk", packed.type, True, {"lance-encoding:packed": "true"})
    table = pa.table(cols).append_column(packed_field, packed)
    uri = str(tmp_path / "ds")
    ds = lance.write_dataset(table, uri, data_storage_version=version)
    data_file = ds.get_fragments()[0].metadata.files[0]
    ids, cols_idx = data_file_field_ids(Dataset.open(uri).lance_schema.fields, version)
    assert (ids, cols_idx) == (list(data_file.fields), list(data_file.column_indices))
