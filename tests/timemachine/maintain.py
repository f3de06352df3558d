"""Run every maintenance job on a copy of a time-machine dataset and check, after each, that
pylance 14 reads it as before (rows and index answers) and that our reads equal pylance's."""

from __future__ import annotations

import functools
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute

from lance_spark_ops.errors import CorruptFileError, LanceError
from lance_spark_ops.spark.files.columns import ColumnFunction, add_columns
from lance_spark_ops.spark.files.compaction import compact, materialize_deletions
from lance_spark_ops.spark.files.row_id_index import rebuild_row_id_index
from lance_spark_ops.spark.files.vacuuming import vacuum
from lance_spark_ops.spark.indices.index_remap import remap_indices
from lance_spark_ops.table.dataset import Dataset
from tests.timemachine.oracle import PylanceCannotRead, answers, read_mismatches, same_answers


def times_three(batch: pa.RecordBatch, column: str = "id") -> pa.RecordBatch:
    """The column pylance adds as ``{"z": "<column> * 3"}``."""
    return pa.record_batch([pa.compute.multiply(batch.column(column), 3)], names=["z"])


def copy(src: Path, dst: Path) -> str:
    shutil.copytree(src, dst)
    return str(dst)


def _check(uri: str, before: dict, step: str) -> list[str]:
    return [f"{step}: {m}" for m in same_answers(before, uri) + read_mismatches(uri)]


def maintain(spark: Any, src: Path, work: Path) -> dict[str, str]:
    """step -> "ok" or what went wrong, for: materialize deletions, compact, add a column,
    rebuild row ids, remap indices, vacuum (on one copy, in that order), and migration to 2.2
    (on a second copy)."""
    results: dict[str, str] = {}
    uri = copy(src, work / "m")
    try:
        before = answers(uri)
    except PylanceCannotRead as e:
        return {"all": f"not maintained: pylance 14 cannot read it ({e})"}

    try:  # a dataset pylance 14 cannot scan with row ids (an old writer's corrupt sequences)
        lance.dataset(uri).to_table(with_row_id=True)
        corrupt_for_pylance = False
    except Exception:  # noqa: BLE001
        corrupt_for_pylance = True

    def step(name: str, fn: Any, expect: dict | None = None) -> None:
        try:
            fn()
        except LanceError as e:
            shared = corrupt_for_pylance and isinstance(e, CorruptFileError)
            both = " (pylance 14 fails too)" if shared else ""
            results[name] = f"refused{both}: {type(e).__name__}: {e}"
            return
        problems = _check(uri, before if expect is None else expect, name)
        results[name] = "ok" if not problems else "; ".join(problems[:3])

    step("materialize_deletions", lambda: materialize_deletions(spark, uri, 0.0))
    step("compact", lambda: compact(spark, uri, target_rows_per_fragment=10_000))
    # add_columns changes the rows: pylance's expected answer is its own add of the same column
    try:
        twin = copy(Path(uri), work / "twin")
        col = "id" if "id" in lance.dataset(twin).schema.names else lance.dataset(twin).schema.names[0]
        lance.dataset(twin).add_columns({"z": f"{col} * 3"})
        expect = answers(twin)
        fn = ColumnFunction(functools.partial(times_three, column=col),
                            pa.schema([pa.field("z", pa.int64())]), (col,))
        step("add_columns", lambda: add_columns(spark, uri, fn), expect)
        if not results["add_columns"].startswith("refused"):
            before = expect
    except Exception as e:  # noqa: BLE001 - pylance 14 itself cannot: nothing to compare with
        results["add_columns"] = f"not compared (pylance 14 refuses: {type(e).__name__}: {str(e)[:120]})"
    if Dataset.open(uri).uses_stable_row_ids:
        step("rebuild_row_id_index", lambda: rebuild_row_id_index(spark, uri))
    step("remap_indices", lambda: remap_indices(spark, uri))
    step("vacuum", lambda: vacuum(spark, uri, older_than=timedelta(0), delete_unverified=True,
                                         error_if_tagged_old_versions=False))

    mig = copy(src, work / "mig")
    before_mig = answers(mig)
    try:
        compact(spark, mig, data_storage_version="2.2", migrate_legacy=True)
        problems = _check(mig, before_mig, "migrate")
        ds = lance.dataset(mig)
        if ds.data_storage_version != "2.2":
            problems.append(f"migrate: storage version is {ds.data_storage_version}")
        results["migrate_2.2"] = "ok" if not problems else "; ".join(problems[:3])
    except LanceError as e:
        both = " (pylance 14 fails too)" if corrupt_for_pylance and isinstance(e, CorruptFileError) else ""
        results["migrate_2.2"] = f"refused{both}: {type(e).__name__}: {e}"
    return results


