"""``jobs/example_data/make_vector_example.py`` writes, with this library alone, a dataset
pylance reads as written: the columns the index jobs take, the rows and fragments asked for,
deterministic; bad sizes are refused."""

from __future__ import annotations

import runpy
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "jobs" / "example_data" / "make_vector_example.py"


def test_vector_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    module = runpy.run_path(str(SCRIPT))
    uri = str(tmp_path / "v.lance")
    assert module["main"]([uri, "--rows", "1000", "--dim", "16", "--fragments", "3"]) == 0
    out = capsys.readouterr().out
    assert "create_index.py" in out and "--type IVF_PQ" in out
    ds = lance.dataset(uri)
    assert ds.schema.field("vec").type == pa.list_(pa.float32(), 16)
    assert ds.count_rows() == 1000 and len(ds.get_fragments()) == 3
    table = ds.to_table()
    assert table.column("id").to_pylist() == list(range(1000))
    again = module["rows"](1000, 16)
    assert table.equals(again)  # seeded: the same rows every time
    vec = np.stack(table.column("vec").to_numpy(zero_copy_only=False))
    assert vec.std() > 1  # spread around the centres, not all alike
    with pytest.raises(SystemExit):
        module["main"]([str(tmp_path / "bad"), "--dim", "12"])
