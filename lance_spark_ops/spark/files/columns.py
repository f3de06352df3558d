"""Add columns to a Lance dataset with Spark: compute per fragment on executors, write data
files holding only the new columns, commit one ``Merge`` on the driver.

``columns`` is one of

* ``{"name": "SQL expression", ...}`` - Spark SQL over the existing columns (as ``read_lance``
  types them). Only the columns the expressions reference are read (Spark's analyzer says
  which). When ``spark.files.sql_arrow`` can translate the analysed expressions, each task scans,
  evaluates them with Arrow and writes, as the function mode does (no value crosses into the
  JVM). Otherwise: ``read_lance(refs + _rowaddr)`` -> ``selectExpr`` -> ``mapInArrow`` writer;
  every step is narrow, so each partition still holds its fragments' live rows in physical
  order when it reaches the writer.
* ``ColumnFunction(fn, output_schema, read_columns=None)`` (or any callable with an
  ``output_schema`` attribute, like pylance's ``BatchUDF``, or a ``(fn, schema)`` pair) - a
  Python function from an Arrow record batch of the read columns (Lance types, deleted rows
  already dropped) to a batch / table / dict of the new columns; runs as ``spark.runtime.runner``
  tasks, and in-process when ``spark`` is None.
* a Spark ``DataFrame`` holding ``on`` plus the new columns - a backfill of values computed
  elsewhere, joined by ``_rowaddr`` (``on="_rowaddr"``, the default when the frame has it) or
  by a key column of the dataset (inner join on the key; each key may match one row). Rows
  are shuffled to one partition per fragment group and sorted by address before writing.
* a ``pa.Schema`` / ``pa.Field`` / list of fields - all-null columns: metadata only, no file
  is written (Lance reads a field that no data file holds as nulls).

Executors write one file per fragment in the dataset's data storage version with exactly
``physical_rows`` rows (``spark.files.columns_tasks``: deleted rows and unmatched rows are
null). The driver commits ``Merge(fragments with one more DataFile, schema + new fields)``;
new field ids continue after the largest one, and each ``DataFile`` records them as pylance
does (2.0: every field; 2.1+: fields that own a column). No existing data file is touched.

Conflicts, beyond Lance (whose Merge gives up on any concurrent change): when the commit
loses to another writer, the driver reads the latest version and keeps the files of every
fragment that is still there with the same data files; fragments that are new (appends) or
were rewritten (compaction, updates) get their columns computed on that version, and the
Merge is committed on top of it. A concurrent schema change, overwrite or restore aborts.
Files of attempts that did not land are deleted at once.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import pyarrow as pa

from lance_spark_ops.errors import (
    IncompatibleTransaction,
    InvalidInputError,
    UnsupportedError,
)
from lance_spark_ops.file.columns import data_file_field_ids
from lance_spark_ops.file.schema import LanceSchema, schema_from_arrow, schema_to_pb
from lance_spark_ops.namespace.target import with_table_target
from lance_spark_ops.spark.files.columns_tasks import (
    RESULT_SCHEMA,
    ROW_ADDR,
    BatchFunction,
    ColumnWriteSpec,
    FunctionTask,
    WrittenFile,
    make_writer_mapper,
    run_function_task,
)
from lance_spark_ops.spark.files.sql_arrow import SqlColumns, compile_frame
from lance_spark_ops.spark.runtime.job import Job
from lance_spark_ops.spark.runtime.scan_tasks import ScanSpec, group_fragments
from lance_spark_ops.spark.runtime.session import default_parallelism, is_classic
from lance_spark_ops.spark.runtime.spark_types import lance_schema_of_spark, spark_schema
from lance_spark_ops.spark.runtime.task_common import file_version_numbers
from lance_spark_ops.spark.runtime.tuning import Tuning
from lance_spark_ops.table.dataset import DEFAULT_BATCH_ROWS, Dataset
from lance_spark_ops.table.format.fragment import DataFragment
from lance_spark_ops.table.format.transaction import Merge
from lance_spark_ops.table.paths import DATA_DIR

__all__ = ["AddColumnsMetrics", "ColumnFunction", "add_columns"]

DEFAULT_ROWS_PER_TASK = 4 << 20
ARROW_BATCH_CONF = "spark.sql.execution.arrow.maxRecordsPerBatch"


@dataclass(frozen=True)
class ColumnFunction:
    """A Python function over record batches and the schema of the columns it returns."""

    fn: BatchFunction
    output_schema: pa.Schema
    read_columns: tuple[str, ...] | None = None


@dataclass
class AddColumnsMetrics:
    uri: str
    read_version: int
    mode: str = ""
    columns: list[str] = field(default_factory=list)
    new_version: int | None = None
    fragments: int = 0
    files_written: int = 0
    rows_written: int = 0
    bytes_written: int = 0
    rounds: int = 0
    fragments_recomputed: int = 0  # appended / rewritten by concurrent writers, computed again
    orphan_files_deleted: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    engine: str = ""  # where values were computed: "arrow" (in our tasks) or "spark" (the JVM)
    job_tag: str = ""  # the Spark tag of the job's Spark jobs (``spark.interruptTag``)


@dataclass
class _Plan:
    mode: str  # sql | function | join | nulls
    schema: pa.Schema  # new columns as stored (nullable)
    sql: dict[str, str] = field(default_factory=dict)
    read_columns: tuple[str, ...] | None = None
    fn: BatchFunction | None = None
    frame: Any = None
    on: str = ROW_ADDR


# -- planning on the driver -----------------------------------------------------------------------
def _empty_frame(spark: Any, ds: Dataset) -> Any:
    """A zero-row DataFrame typed like ``read_lance`` types the dataset (to analyse SQL)."""
    fields = []
    for f in ds.schema:
        try:
            spark_schema(pa.schema([f]))
            fields.append(f)
        except UnsupportedError:
            continue  # a column Spark cannot hold cannot be referenced either
    return spark.createDataFrame([], spark_schema(pa.schema(fields)))


def _referenced(spark: Any, frame: Any, names: Sequence[str], exprs: Sequence[str]) -> list[str]:
    """Top-level columns the analysed projection reads (regex fallback off the JVM)."""
    try:
        if not is_classic(spark):
            raise LookupError("no JVM plan under Spark Connect")
        refs = frame._jdf.queryExecution().analyzed().references().toSeq()  # noqa: SLF001 - py4j
        it = refs.iterator()
        found = set()
        while it.hasNext():
            found.add(it.next().name())
        return [n for n in names if n in found]
    except Exception:  # noqa: BLE001 - any JVM access problem: be conservative
        text = " ".join(exprs)
        return [n for n in names if re.search(rf"(?<![\w]){re.escape(n)}(?![\w])", text, re.IGNORECASE)]


def _arrow_sql(spark: Any, ds: Dataset, projected: Any, sql: Mapping[str, str], schema: pa.Schema
               ) -> SqlColumns | None:
    """The projection translated for in-task Arrow evaluation, or None (see ``sql_arrow``)."""
    from lance_spark_ops.spark.runtime.spark_types import spark_arrow_type

    columns = {}
    for f in ds.schema:
        try:
            if spark_arrow_type(f.type, f.name) == f.type or pa.types.is_large_string(f.type):
                columns[f.name] = spark_schema(pa.schema([f])).fields[0].dataType.typeName()
        except UnsupportedError:
            continue  # widened / converted on read, or not readable by Spark: Spark evaluates
    return compile_frame(spark, projected, list(sql.values()), columns, schema)


def _sql_plan(spark: Any, ds: Dataset, sql: Mapping[str, str], engine: str) -> _Plan:
    if spark is None:
        raise InvalidInputError("SQL expressions need a SparkSession")
    if engine not in ("auto", "arrow", "spark"):
        raise InvalidInputError(f"sql_engine must be 'auto', 'arrow' or 'spark', got {engine!r}")
    exprs = [f"{expr} AS `{name}`" for name, expr in sql.items()]
    try:
        projected = _empty_frame(spark, ds).selectExpr(*exprs)
    except Exception as e:  # pyspark's AnalysisException / ParseException
        raise InvalidInputError(f"cannot evaluate the column expressions {dict(sql)}: {e}") from e
    refs = _referenced(spark, projected, ds.schema.names, list(sql.values()))
    schema = lance_schema_of_spark(projected.schema)
    plan = _Plan("sql", schema, sql=dict(sql), read_columns=tuple(refs))
    if engine != "spark":
        plan.fn = _arrow_sql(spark, ds, projected, sql, schema)
        if plan.fn is None and engine == "arrow":
            raise UnsupportedError(f"the expressions {dict(sql)} need Spark's evaluation "
                                   "(sql_engine='arrow' covers the subset listed in spark.files.sql_arrow)")
    return plan


def _function_plan(columns: Any) -> _Plan:
    if isinstance(columns, ColumnFunction):
        fn, schema, read = columns.fn, columns.output_schema, columns.read_columns
    elif isinstance(columns, tuple) and len(columns) == 2:
        fn, schema, read = columns[0], columns[1], None
    else:
        fn, schema, read = columns, columns.output_schema, getattr(columns, "read_columns", None)
    if not isinstance(schema, pa.Schema):
        raise InvalidInputError(f"a column function needs an output pa.Schema, got {type(schema).__name__}")
    return _Plan("function", schema, fn=fn, read_columns=tuple(read) if read is not None else None)


def _join_plan(frame: Any, on: str | None, ds: Dataset) -> _Plan:
    key = on or (ROW_ADDR if ROW_ADDR in frame.columns else None)
    if key is None or key not in frame.columns:
        raise InvalidInputError(f"the DataFrame needs the join column {on or ROW_ADDR!r} "
                                f"(has {frame.columns})")
    if key != ROW_ADDR and key not in ds.schema.names:
        raise InvalidInputError(f"join key {key!r} is not a column of the dataset")
    values = frame.drop(key)
    return _Plan("join", lance_schema_of_spark(values.schema), frame=frame, on=key)


def _plan(spark: Any, ds: Dataset, columns: Any, on: str | None, sql_engine: str = "auto") -> _Plan:
    if isinstance(columns, Mapping):
        if not columns or not all(isinstance(k, str) and isinstance(v, str) for k, v in columns.items()):
            raise InvalidInputError("a column mapping must map new names to SQL expression strings")
        return _sql_plan(spark, ds, columns, sql_engine)
    if isinstance(columns, pa.Field):
        columns = [columns]
    if isinstance(columns, pa.Schema) or (isinstance(columns, list) and columns
                                          and all(isinstance(f, pa.Field) for f in columns)):
        return _Plan("nulls", pa.schema(columns))
    if hasattr(columns, "sparkSession") and hasattr(columns, "columns"):
        return _join_plan(columns, on, ds)
    if isinstance(columns, ColumnFunction) or isinstance(columns, tuple) or hasattr(columns, "output_schema"):
        return _function_plan(columns)
    raise InvalidInputError(f"cannot add columns from a {type(columns).__name__}: give SQL expressions, a "
                            "ColumnFunction, a DataFrame or a pa.Schema")


def _new_schema(ds: Dataset, plan: _Plan) -> LanceSchema:
    """The dataset schema with the new fields appended (ids after the largest)."""
    from lance_spark_ops.encoding.support import check_field_supported

    existing = set(ds.schema.names)
    names = plan.schema.names
    bad = [n for n in names if n in existing or n in ("_rowid", "_rowaddr") or names.count(n) > 1]
    if bad or not names:
        raise InvalidInputError("new column names must be new, unique and not _rowid/_rowaddr: "
                                f"{bad or names}")
    plan.schema = pa.schema([f.with_nullable(True) for f in plan.schema])
    for f in plan.schema:
        check_field_supported(f, ds.data_storage_version)
    added = schema_from_arrow(plan.schema, ds.manifest.max_field_id() + 1)
    return LanceSchema([*ds.lance_schema.fields, *added.fields], dict(ds.lance_schema.metadata))


def _spec(ds: Dataset, plan: _Plan, schema: LanceSchema, job_id: str,
          frags: Sequence[DataFragment]) -> ColumnWriteSpec:
    version = ds.data_storage_version
    added = schema.fields[len(ds.lance_schema.fields):]
    if version == "0.1":  # v1 files list every field, pre-order, and no column indices (as pylance 14)
        ids, cols = [n.id for f in added for n in f.walk()], []
    else:
        ids, cols = data_file_field_ids(added, version)
    return ColumnWriteSpec(ds.uri, ds.version, job_id, plan.schema, LanceSchema(list(added), {}), tuple(ids),
                           tuple(cols), version, file_version_numbers(version),
                           {f.id: ds.physical_rows(f) for f in frags}, dict(ds.store.storage_options),
                           ds.timestamp)


# -- computing on executors ----------------------------------------------------------------------
def _task_rows(spark: Any, frags: Sequence[DataFragment], requested: int | None) -> int:
    """Rows per task: as asked, else at most 4 Mi with a whole number of waves of tasks.

    A Spark task with a Python worker costs ~0.1 s on top of its work, and a fragment of the
    new column ~5 ms, so few large tasks win; one wave per slot at least keeps every core busy."""
    if requested is not None:
        if requested <= 0:
            raise InvalidInputError(f"rows_per_task must be positive, got {requested}")
        return requested
    slots = default_parallelism(spark)
    total = sum(int(f.physical_rows or 0) for f in frags)
    tasks = max(slots, math.ceil(total / DEFAULT_ROWS_PER_TASK))
    tasks = math.ceil(tasks / slots) * slots
    return max(1, math.ceil(total / tasks))


def _compute(job: Job, ds: Dataset, plan: _Plan, spec: ColumnWriteSpec, frags: Sequence[DataFragment],
             rows_per_task: int | None, batch_rows: int, phase: str = "compute") -> list[WrittenFile]:
    if not frags:
        return []
    sizes = [(f.id, int(f.physical_rows or 0)) for f in frags]
    rows_per_task = _task_rows(job.spark, frags, rows_per_task)
    groups = group_fragments(sizes, rows_per_task)
    detail = f"{plan.schema.names} on v{ds.version}, {len(frags)} fragments"
    with job.phase(phase, tasks=len(groups), detail=detail) as ph:
        if plan.fn is not None:  # function mode, and SQL translated for Arrow (sql_arrow)
            tasks = [FunctionTask(tuple(g), plan.read_columns, batch_rows) for g in groups]
            written = [w for r in job.run_tasks(tasks, partial(run_function_task, spec, plan.fn)) for w in r]
        else:
            written = _spark_compute(job.spark, ds, plan, spec, frags, rows_per_task, batch_rows)
            ph.add(tasks=len(groups))
        ph.add(rows=sum(w.rows for w in written), bytes=sum(w.size for w in written))
    return written


def _spark_compute(spark: Any, ds: Dataset, plan: _Plan, spec: ColumnWriteSpec, frags: Sequence[DataFragment],
                   rows_per_task: int, batch_rows: int) -> list[WrittenFile]:
    """Spark evaluates the values (SQL it must evaluate, or a backfill join); our writer tasks
    write them."""
    previous = spark.conf.get(ARROW_BATCH_CONF, None)
    if previous is None or int(previous) < batch_rows:
        spark.conf.set(ARROW_BATCH_CONF, str(batch_rows))  # Spark's default, 10000, triples the cost
    try:
        rows = _spark_values(spark, ds, plan, frags, rows_per_task, batch_rows).mapInArrow(
            make_writer_mapper(spec), RESULT_SCHEMA).collect()
    finally:
        if previous is None:
            spark.conf.unset(ARROW_BATCH_CONF)
        else:
            spark.conf.set(ARROW_BATCH_CONF, previous)
    return [WrittenFile(int(r["fragment_id"]), r["path"], int(r["rows"]), int(r["size"])) for r in rows]


def _spark_values(spark: Any, ds: Dataset, plan: _Plan, frags: Sequence[DataFragment], rows_per_task: int,
                  batch_rows: int) -> Any:
    """DataFrame of ``_rowaddr`` + new values, ordered by address within each partition."""
    from pyspark.sql import functions as F

    from lance_spark_ops.spark.datasource.read import scan_dataframe

    ids = [f.id for f in frags]
    so = dict(ds.store.storage_options)
    if plan.mode == "sql":
        spec = ScanSpec(ds.uri, ds.version, plan.read_columns, False, True, batch_rows, so, ds.timestamp)
        df = scan_dataframe(spark, ds, spec, ids, rows_per_task)
        return df.selectExpr(ROW_ADDR, *[f"{e} AS `{n}`" for n, e in plan.sql.items()])
    names = plan.schema.names
    if plan.on == ROW_ADDR:
        values = plan.frame.select(F.col(ROW_ADDR).cast("long").alias(ROW_ADDR), *names)
        values = values.where(F.shiftright(F.col(ROW_ADDR), 32).isin(ids))
    else:
        key_scan = ScanSpec(ds.uri, ds.version, (plan.on,), False, True, batch_rows, so, ds.timestamp)
        keys = scan_dataframe(spark, ds, key_scan, ids)
        values = keys.join(plan.frame.select(plan.on, *names), on=plan.on, how="inner")
        values = values.select(ROW_ADDR, *names)
    parts = max(1, min(len(ids), 4 * default_parallelism(spark)))
    return values.repartition(parts, F.shiftright(F.col(ROW_ADDR), 32)).sortWithinPartitions(ROW_ADDR)


# -- committing -----------------------------------------------------------------------------------
def _same_files(a: DataFragment, b: DataFragment) -> bool:
    return a.physical_rows == b.physical_rows and [d.path for d in a.files] == [d.path for d in b.files]


def _delete_files(ds: Dataset, written: Sequence[WrittenFile]) -> None:
    ds.store.delete_many(f"{DATA_DIR}/{w.path}" for w in written)


def _rebase(ds: Dataset, latest: Dataset, schema: LanceSchema, files: dict[int, WrittenFile]
            ) -> tuple[list[DataFragment], list[WrittenFile]]:
    """Fragments of ``latest`` still needing values, and our files that became useless."""
    if schema_to_pb(latest.lance_schema) != schema_to_pb(ds.lance_schema):
        raise IncompatibleTransaction("the schema changed concurrently (columns added, dropped or altered); "
                                      "run add_columns again", path=ds.uri)
    before = {f.id: f for f in ds.fragments}
    todo = [f for f in latest.fragments if f.id not in before or not _same_files(before[f.id], f)]
    keep_ids = {f.id for f in latest.fragments} - {f.id for f in todo}
    stale = [w for fid, w in files.items() if fid not in keep_ids]
    return todo, stale


def _commit_loop(job: Job, ds: Dataset, plan: _Plan, schema: LanceSchema, files: dict[int, WrittenFile],
                 metrics: AddColumnsMetrics, max_rounds: int, rows_per_task: int | None,
                 batch_rows: int) -> Dataset:
    state = {"ds": ds, "schema": schema}  # what the next round commits from

    def attempt(rnd: int) -> Dataset:
        ds, schema = state["ds"], state["schema"]
        metrics.rounds = rnd
        job.before_commit(rnd)
        spec = _spec(ds, plan, schema, job.job_id, ds.fragments)
        # a Merge records every fragment's physical_rows (pylance <= 0.7 left them out)
        frags = [replace(f, files=[*f.files, files[f.id].data_file(spec)] if f.id in files else f.files,
                         physical_rows=spec.physical_rows[f.id]) for f in ds.fragments]
        # on top of the version read (opened at plan or rebase) without listing _versions/ first
        # (taken meanwhile: one failed put, then listed and checked as usual)
        return ds.commit(Merge(frags, schema), ds.version, expected_latest=ds.version)

    def on_conflict(_rnd: int, _error: Exception) -> None:
        """Rebase onto the latest version: recompute the fragments that changed meanwhile."""
        ds = state["ds"]
        latest = Dataset.open(ds.store)
        todo, stale = _rebase(ds, latest, state["schema"], files)
        _delete_files(ds, stale)
        for w in stale:
            files.pop(w.fragment_id, None)
        schema = _new_schema(latest, plan)  # same ids: the schema did not change
        if plan.mode != "nulls":  # all-null columns need no file on any fragment
            spec = _spec(latest, plan, schema, job.job_id, todo)
            written = _compute(job, latest, plan, spec, todo, rows_per_task, batch_rows, phase="recompute")
            files.update({w.fragment_id: w for w in written})
            metrics.fragments_recomputed += len(todo)
        state["ds"], state["schema"] = latest, schema

    return job.retrying(attempt, retries=max_rounds - 1, what="add_columns commit", on_conflict=on_conflict)


@with_table_target
def add_columns(spark: Any, uri: str, columns: Any, *, on: str | None = None,
                storage_options: dict[str, Any] | None = None,
                tuning: Tuning | None = None, rows_per_task: int | None = None,
                batch_rows: int = DEFAULT_BATCH_ROWS, max_rounds: int = 5,
                sql_engine: str = "auto") -> AddColumnsMetrics:
    """Add ``columns`` to the dataset at ``uri`` (see the module doc for the four kinds).

    ``rows_per_task`` packs neighbouring small fragments into one task (default: at most 4 Mi
    rows, tasks a multiple of the session's parallelism, at least one per slot); ``max_rounds``
    bounds the commit retries over concurrent writers. ``sql_engine``: ``auto`` evaluates SQL
    expressions with Arrow inside our tasks when ``spark.files.sql_arrow`` can translate them and
    with Spark otherwise; ``spark`` / ``arrow`` force one."""
    metrics = AddColumnsMetrics(uri, 0)
    with Job(spark, "add_columns", uri, metrics, tuning) as job:
        with job.phase("plan"):
            ds = job.opened(Dataset.open(uri, storage_options=storage_options))  # shipped to the tasks
            ds.check_writable()
            ds.check_consistent("add_columns")
            plan = _plan(spark, ds, columns, on, sql_engine)
            schema = _new_schema(ds, plan)
            metrics.read_version, metrics.mode, metrics.columns = ds.version, plan.mode, plan.schema.names
            metrics.fragments = len(ds.fragments)
            metrics.engine = "spark" if plan.mode == "sql" and plan.fn is None else "arrow"
        files: dict[int, WrittenFile] = {}
        with job.cleanup_on_failure(ds.store):
            if plan.mode != "nulls":
                written = _compute(job, ds, plan, _spec(ds, plan, schema, job.job_id, ds.fragments),
                                   ds.fragments, rows_per_task, batch_rows)
                files = {w.fragment_id: w for w in written}
            with job.phase("commit"):
                new_ds = _commit_loop(job, ds, plan, schema, files, metrics, max_rounds, rows_per_task,
                                      batch_rows)
        metrics.new_version = new_ds.version
        metrics.files_written = len(files)
        metrics.rows_written = sum(w.rows for w in files.values())
        metrics.bytes_written = sum(w.size for w in files.values())
        if plan.mode != "nulls":
            committed = {w.path for w in files.values()}
            metrics.orphan_files_deleted = job.delete_other_attempts(ds.store, committed)
    return metrics
