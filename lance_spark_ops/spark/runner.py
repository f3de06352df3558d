"""Run picklable task descriptors on executors and gather their small results.

Each task becomes one row of a DataFrame with one partition per task; ``mapInArrow`` calls
the task function on the executor that holds the row. Only descriptors and results (a few
KB of fragment metadata) travel through Spark; data moves executor <-> storage directly.

Every result carries the attempt that produced it: with speculation or lost executors a
task may run more than once, and Spark returns exactly one successful attempt per task.
Operations name their output files with the job id, task id and attempt, so the driver can
delete the files of every other attempt (see ``orphans``).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

RESULT_SCHEMA = "task_id long, attempt string, result binary"


@dataclass(frozen=True)
class TaskContext:
    """Where a task attempt runs; ``attempt`` is unique per attempt within the job."""

    job_id: str
    task_id: int
    attempt: str

    @property
    def file_prefix(self) -> str:
        """Prefix for the names of files this attempt writes (for orphan cleanup)."""
        return f"{self.job_id}-t{self.task_id}-a{self.attempt}"


def _attempt_id() -> str:
    try:
        from pyspark import TaskContext as SparkTaskContext

        ctx = SparkTaskContext.get()
        if ctx is not None:
            return f"{ctx.stageId()}.{ctx.attemptNumber()}.{ctx.taskAttemptId()}"
    except ImportError:  # pragma: no cover - pyspark is a dependency
        pass
    return "local"


def _make_mapper(job_id: str, fn: Callable[[Any, TaskContext], Any]) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def mapper(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        attempt = _attempt_id()
        for batch in batches:
            ids = batch.column("task_id").to_pylist()
            payloads = batch.column("payload").to_pylist()
            out_ids, out_results = [], []
            for task_id, payload in zip(ids, payloads):
                result = fn(pickle.loads(payload), TaskContext(job_id, task_id, attempt))
                out_ids.append(task_id)
                out_results.append(pickle.dumps(result))
            yield pa.RecordBatch.from_arrays(
                [pa.array(out_ids, pa.int64()), pa.array([attempt] * len(out_ids), pa.string()),
                 pa.array(out_results, pa.binary())],
                names=["task_id", "attempt", "result"],
            )

    return mapper


def run_tasks(spark: Any, job_id: str, tasks: Sequence[Any], fn: Callable[[Any, TaskContext], Any],
              description: str = "") -> dict[int, tuple[str, Any]]:
    """Run ``fn(task, ctx)`` for each task on executors; returns ``{task_id: (attempt, result)}``."""
    if not tasks:
        return {}
    sc = spark.sparkContext
    if description:
        sc.setJobDescription(description)
    rows = [(i, pickle.dumps(t)) for i, t in enumerate(tasks)]
    rdd = sc.parallelize(rows, len(rows))
    df = spark.createDataFrame(rdd, "task_id long, payload binary")
    try:
        collected = df.mapInArrow(_make_mapper(job_id, fn), RESULT_SCHEMA).collect()
    finally:
        if description:
            sc.setJobDescription(None)
    out: dict[int, tuple[str, Any]] = {}
    for row in collected:
        out.setdefault(int(row["task_id"]), (row["attempt"], pickle.loads(row["result"])))
    return out


def run_tasks_locally(job_id: str, tasks: Sequence[Any], fn: Callable[[Any, TaskContext], Any]) -> dict[int, tuple[str, Any]]:
    """Same contract as ``run_tasks`` without Spark (tests, dry runs, tiny datasets)."""
    return {i: ("local", fn(t, TaskContext(job_id, i, "local"))) for i, t in enumerate(tasks)}
