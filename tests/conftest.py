"""Shared fixtures: files written by pylance (the oracle) and, for Spark tests, one
session-scoped local SparkSession. ``@pytest.mark.slow`` tests run only with ``-m slow`` (or
``LSO_RUN_SLOW=1``); the default run deselects them (they are long counts of tests that also
run, in smaller counts, unmarked)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import settings

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# A compaction planned as one task of at most 128 MiB runs in the driver by default
# (Tuning.driver_rewrite_bytes); the suite's datasets are all that small, so its Spark tests would
# never run a rewrite on an executor. Off here; tests/spark/test_compact_in_driver.py and
# tests/s3/test_compact_in_driver.py turn it on explicitly (tuning=).
os.environ.setdefault("LSO_DRIVER_REWRITE_BYTES", "0")

# Property tests draw the same examples on every run by default, so CI's verdict does not depend
# on luck; `HYPOTHESIS_PROFILE=explore` draws fresh ones (run it when changing a codec).
settings.register_profile("repeatable", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect ``slow`` tests unless ``-m`` names them or ``LSO_RUN_SLOW=1``."""
    if os.environ.get("LSO_RUN_SLOW") == "1" or "slow" in (config.getoption("-m") or ""):
        return
    slow = [item for item in items if "slow" in item.keywords]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if "slow" not in item.keywords]


def pylance_write(path: str | Path, table: pa.Table | pa.RecordBatch | list, version: str = "2.2",
                  schema: pa.Schema | None = None) -> str:
    """Write ``table`` (or a list of batches/tables) as one Lance data file with pylance."""
    from lance.file import LanceFileWriter

    parts = table if isinstance(table, list) else [table]
    schema = schema or parts[0].schema
    with LanceFileWriter(str(path), schema, version=version) as w:
        for part in parts:
            w.write_batch(part)
    return str(path)


def pylance_read(path: str | Path) -> pa.Table:
    from lance.file import LanceFileReader

    return LanceFileReader(str(path)).read_all().to_table()


@pytest.fixture
def lance_file(tmp_path: Path) -> Callable[..., str]:
    """Factory: ``lance_file(table, version="2.2", name=None) -> path`` written by pylance."""
    counter = [0]

    def make(table: pa.Table, version: str = "2.2", name: str | None = None, **kw: object) -> str:
        counter[0] += 1
        return pylance_write(tmp_path / (name or f"f{counter[0]}_{version}.lance"), table, version, **kw)

    return make


@pytest.fixture(scope="session")
def spark():
    """One local[2] SparkSession for the whole test session (UI off)."""
    pyspark = pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    del pyspark
    from lance_spark_ops.spark.runtime.session import WORKER_SETTINGS

    session = (
        SparkSession.builder.master("local[2,2]")  # 2 threads; a failed attempt is retried once
        .appName("lance-spark-ops-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "2g")
        .config(map=WORKER_SETTINGS)  # as get_spark
        .getOrCreate()
    )
    yield session
    session.stop()
