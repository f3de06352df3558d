"""``Dataset.scan_fragment(keep_dictionaries=True)`` (a re-encode's read): dictionary-encoded
string leaves come back as marked dictionary arrays standing for the dataset's types; the
rows are pylance's, deleted rows dropped, dictionary-typed fields untouched."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops.encoding.carried_dictionary import TWIN_BITMAP, plain_type
from lance_spark_ops.table.dataset import Dataset

pytest.importorskip("lance")

WORDS = np.array(["lance", "spark", "page", "zip"])


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_kept_dictionaries_read_as_pylance(tmp_path: Path, version: str) -> None:
    import lance

    rng = np.random.default_rng(2)
    n = 30_000
    lens = rng.integers(0, 5, n)
    offs = pa.array(np.concatenate([[0], np.cumsum(lens)]).astype(np.int32))
    table = pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "tags": pa.ListArray.from_arrays(offs, pa.array(WORDS[rng.integers(0, 4, int(lens.sum()))])),
        "s": pa.array(WORDS[rng.integers(0, 4, n)]),
        "d": pa.array(WORDS[rng.integers(0, 4, n)]).dictionary_encode(),
        "st": pa.StructArray.from_arrays([pa.array(WORDS[rng.integers(0, 4, n)]),
                                          pa.array(rng.random(n))], names=["name", "x"]),
    })
    uri = str(tmp_path / "ds")
    lance.write_dataset(table, uri, data_storage_version=version)
    lance.dataset(uri).delete("id % 10 = 3")
    expected = lance.dataset(uri).to_table()

    ds = Dataset.open(uri)
    batches = list(ds.scan_fragment(ds.fragments[0], batch_rows=8_000, keep_dictionaries=True))
    schema = batches[0].schema
    marked = {f.name for f in schema if TWIN_BITMAP in (f.metadata or {})}
    assert {"tags", "s"} <= marked
    assert "d" not in marked and schema.field("d").type == expected.schema.field("d").type
    for f in schema:
        want = expected.schema.field(f.name).type
        assert (plain_type(f.type) if f.name in marked else f.type) == want
    got = pa.Table.from_batches([b.cast(expected.schema) for b in batches])
    assert got.equals(expected)
