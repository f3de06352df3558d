"""pylance-made datasets for the Spark job tests (pylance is the oracle)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa

from lance_spark_ops.spark.runtime.tuning import Tuning


def small_fragments(uri: str, version: str, *, stable: bool = False, fragments: int = 8, rows: int = 300,
                    big_delete: bool = False, extra_column: bool = False) -> None:
    """``fragments`` appends of ``rows`` rows (ints, floats, strings, lists, vectors), then
    deletions: ~10% everywhere (Arrow deletion files) or, with ``big_delete``, > 5000 rows in
    one fragment (a roaring bitmap); optionally a column added with add_columns (a second data
    file per fragment)."""
    import lance

    rng = np.random.default_rng(5)
    for i in range(fragments):
        n = rows if not big_delete or i else 12_000
        base = i * 100_000
        t = pa.table({
            "id": pa.array(np.arange(base, base + n, dtype=np.int64)),
            "f": pa.array(rng.random(n)),
            "s": pa.array([f"row-{base + j}" if j % 11 else None for j in range(n)]),
            "l": pa.array([[j, j + 1] if j % 5 else [] for j in range(n)], pa.list_(pa.int32())),
            "v": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 4).astype(np.float32)), 4),
        })
        lance.write_dataset(t, uri, mode="append" if i else "create", data_storage_version=version,
                            enable_stable_row_ids=stable)
    ds = lance.dataset(uri)
    ds.delete("id % 10 = 3")
    if big_delete:
        ds.delete("id < 6000")
    if extra_column:
        ds.add_columns({"twice": "id * 2"})


def rows_multiset(table: pa.Table, columns: list[str]) -> list[tuple]:
    return sorted(zip(*(table.column(c).to_pylist() for c in columns), strict=True))


def before_commit(fn: Callable[[int], None]) -> Tuning:
    """The tuning that runs ``fn(attempt)`` right before each commit attempt of the job given it
    (``tuning=``; a concurrent writer goes here)."""
    return Tuning(before_commit=lambda kind, attempt: fn(attempt))


def data_file_names(uri: str) -> set[str]:
    """Names of the files under ``uri``'s ``data/`` directory."""
    from pathlib import Path

    return {p.name for p in (Path(uri) / "data").iterdir()}


def new_file_hashes(uri: str, before: set[str]) -> list[str]:
    """sha256 of each file under ``data/`` not in ``before`` (sorted): the files a job wrote."""
    import hashlib
    from pathlib import Path

    data = Path(uri) / "data"
    return sorted(hashlib.sha256((data / n).read_bytes()).hexdigest() for n in data_file_names(uri) - before)


def compacted_copy(src: str, dst: str, target_rows: int) -> str:
    """A copy of the dataset ``src`` at ``dst``, re-encode compacted in this process."""
    import shutil

    from lance_spark_ops.spark.files.compaction import compact

    shutil.copytree(src, dst)
    compact(None, dst, target_rows_per_fragment=target_rows)
    return dst


def source_dataset(path: str, make: Callable[..., None], *args: object) -> tuple[str, pa.Table, set[str]]:
    """``make(path, *args)``, then (path, its rows sorted by ``id`` as pylance reads them, its
    data file names): a source for tests that compact copies of it."""
    import lance

    make(path, *args)
    return path, lance.dataset(path).to_table().sort_by("id"), data_file_names(path)
