"""Regenerate the bundled examples with pylance (the oracle): jobs/example_data/sample-2.2.lance
(one data file) and jobs/example_data/example.lance (a dataset of 24 small fragments with
deleted rows, the quick start's compaction input).

    python tests/data/make_sample.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
from lance.file import LanceFileWriter

OUT = Path(__file__).resolve().parents[2] / "jobs" / "example_data" / "sample-2.2.lance"


def sample_table(n: int = 4_000) -> pa.Table:
    rng = np.random.default_rng(7)
    return pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "price": pa.array(np.round(rng.uniform(1, 500, n), 2)),
        "city": pa.array(rng.choice(["Oslo", "Lima", "Pune", "Kyiv", None], n)),
        "ts": pa.array(1_700_000_000_000_000 + np.arange(n) * 1_000_000, pa.timestamp("us", tz="UTC")),
        "tags": pa.array([[f"t{j}" for j in range(i % 4)] if i % 9 else None for i in range(n)],
                         pa.list_(pa.string())),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 8, dtype=np.float32)), 8),
    })


DATASET = OUT.parent / "example.lance"


def example_dataset(fragments: int = 24, rows: int = 500) -> None:
    import shutil

    import lance

    shutil.rmtree(DATASET, ignore_errors=True)
    for i in range(fragments):
        t = sample_table(rows)
        t = t.set_column(0, "id", pa.array(np.arange(i * rows, (i + 1) * rows, dtype=np.int64)))
        lance.write_dataset(t, str(DATASET), mode="append" if i else "create", data_storage_version="2.2")
    lance.dataset(str(DATASET)).delete("id % 10 = 0")


def main() -> None:
    example_dataset()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    t = sample_table()
    with LanceFileWriter(str(OUT), t.schema, version="2.2") as w:
        w.write_batch(t)
    print(OUT, OUT.stat().st_size)


if __name__ == "__main__":
    main()
