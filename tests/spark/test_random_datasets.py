"""Randomized compatibility: pylance writes a random table (``random_tables``: every stored
Arrow type, nested, nulls, NaNs, encodings' patterns; file versions 2.0 / 2.1 / 2.2; one to
three writes; deletes), then one of our rewrites - compaction (re-encode or binary copy, to a
random target) or materialize_deletions - runs and pylance must read the same rows as before;
and the ``lance`` data source reads what pylance reads. Each seed draws its own case, so a
failure names a seed that reproduces it. ``RANDOM_SEEDS`` cases run by default and
``RANDOM_SLOW_SEEDS`` more with ``-m slow``."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops.errors import LanceError
from tests.spark.random_tables import random_table, same_rows

SEEDS = int(os.environ.get("RANDOM_SEEDS", "8"))
SLOW_SEEDS = int(os.environ.get("RANDOM_SLOW_SEEDS", "300"))
ROWS_PER_FILE = [96, 1000, 1 << 20]


def _write_random(uri: str, seed: int) -> tuple[str, pa.Table]:
    """pylance writes seed's table in one to three appends, then deletes some rows; the rows
    pylance reads back (by id) and the file version. A table pylance 14 itself fails to write
    (its struct encoder's "null_bit_buffer size too small" on some structs holding booleans)
    is drawn again from the next sub-seed: the case is about what pylance wrote."""
    for attempt in range(5):
        try:
            return _write_drawn(uri, seed * 8 + attempt)
        except OSError as e:
            if "null_bit_buffer size too small" not in str(e):
                raise
            shutil.rmtree(uri, ignore_errors=True)
    raise AssertionError(f"seed {seed}: pylance failed to write five draws")


def _write_drawn(uri: str, draw: int) -> tuple[str, pa.Table]:
    import lance

    rng = np.random.default_rng(draw)
    version = str(rng.choice(["2.0", "2.1", "2.2"]))
    sizes = [int(rng.choice([1, 7, 300, 3000, 9000])) for _ in range(int(rng.integers(1, 4)))]
    table = random_table(int(rng.integers(1 << 30)), sum(sizes), int(rng.integers(1, 5)),
                         float(rng.choice([0, 0, 0.1, 0.5])), struct_nulls=version != "2.0")
    start = 0
    for i, n in enumerate(sizes):
        part = table.take(pa.array(np.arange(start, start + n)))
        lance.write_dataset(part, uri, mode="append" if i else "create", data_storage_version=version,
                            max_rows_per_file=int(rng.choice(ROWS_PER_FILE)))
        start += n
    if rng.random() < 0.7 and start > 1:
        ids = rng.choice(start, int(rng.integers(1, 1 + max(1, start // 3))), replace=False)
        lance.dataset(uri).delete(f"id IN ({','.join(map(str, ids.tolist()))})")
    return version, lance.dataset(uri).to_table().sort_by("id")


def _rewrite_case(tmp_path: Path, seed: int) -> None:
    import lance

    from lance_spark_ops.spark import compact, materialize_deletions

    uri = str(tmp_path / "ds.lance")
    version, before = _write_random(uri, seed)
    rng = np.random.default_rng(seed + 1)
    op = int(rng.choice([0, 0, 1, 2]))  # re-encode, binary copy, materialize_deletions
    target = int(rng.choice([50, 1000, 1 << 20]))
    try:
        if op == 0:
            compact(None, uri, target_rows_per_fragment=target)
        elif op == 1:
            compact(None, uri, compaction_mode="try_binary_copy", target_rows_per_fragment=target)
        else:
            materialize_deletions(None, uri)
    except LanceError as e:  # a refusal must leave the table as it was
        problem = same_rows(before, lance.dataset(uri).to_table().sort_by("id"))
        assert problem is None, f"seed {seed} ({version}, op {op}): refused ({e}) and {problem}"
        raise AssertionError(f"seed {seed} ({version}, op {op}) refused: {e}") from e
    after = lance.dataset(uri)
    problem = same_rows(before, after.to_table().sort_by("id"))
    assert problem is None, f"seed {seed} ({version}, op {op}, target {target}): {problem}"
    assert after.data_storage_version == lance.dataset(uri, version=1).data_storage_version


@pytest.mark.parametrize("seed", range(SEEDS))
def test_rewrite_keeps_random_tables(tmp_path: Path, seed: int) -> None:
    _rewrite_case(tmp_path, seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(SEEDS, SEEDS + SLOW_SEEDS))
def test_rewrite_keeps_random_tables_long(tmp_path: Path, seed: int) -> None:
    _rewrite_case(tmp_path, seed)


def _read_case(spark, tmp_path: Path, seed: int) -> None:
    from lance_spark_ops.spark import read_lance

    uri = str(tmp_path / "ds.lance")
    version, want = _write_random(uri, seed)
    got = read_lance(spark, uri).toArrow().sort_by("id")
    # Spark has no unsigned, time-of-day or fixed-width binary types: the source maps them to
    # Spark's (wider ints, ...); pylance's values cast to what Spark returned must be equal
    cast = pa.table([want.column(n).cast(got.schema.field(n).type) for n in want.column_names],
                    schema=got.schema)
    problem = same_rows(cast, got)
    assert problem is None, f"seed {seed} ({version}): {problem}"


@pytest.mark.spark
@pytest.mark.parametrize("seed", range(SEEDS // 2))
def test_data_source_reads_random_tables(spark, tmp_path: Path, seed: int) -> None:
    _read_case(spark, tmp_path, 10_000 + seed)


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.parametrize("seed", range(SEEDS // 2, SEEDS // 2 + SLOW_SEEDS // 2))
def test_data_source_reads_random_tables_long(spark, tmp_path: Path, seed: int) -> None:
    _read_case(spark, tmp_path, 10_000 + seed)
