"""Run picklable task descriptors on executors and gather their small results.

Each task is one row of ``spark.range(n)`` split into one partition per task; ``mapInArrow``
calls the task function on the executor that holds the row, which finds its pickled
descriptor by task id in the mapper's closure. Only descriptors and results (a few KB of
fragment metadata) travel through Spark; data moves executor <-> storage directly. (A
DataFrame built from a Python RDD of descriptors costs a second Python stage per task,
~0.1 s a job; PySpark broadcasts a closure over 1 MB by itself.)

The closure also carries the small manifest files the driver read (``scan_tasks.ship``): a
task's ``open_dataset`` of one parses it rather than reading it from the store.

The closure is unpickled whole by every task, and over Spark Connect it travels in the plan
(gRPC's message limit is 128 MiB by default). So a job whose descriptors exceed
``Tuning.task_inline_bytes`` in all (a vacuum deleting millions of files) runs as consecutive
Spark jobs ("waves") of tasks whose descriptors fit in it; task ids stay the job's.

Every result carries the attempt that produced it: with speculation or lost executors a
task may run more than once, and Spark returns exactly one successful attempt per task.
Operations name their output files with the job id, task id and attempt, so the driver can
delete the files of every other attempt (see ``orphans``).
"""

from __future__ import annotations

import functools
import pickle
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from lance_spark_ops.cache import configure as configure_cache
from lance_spark_ops.errors import LanceError
from lance_spark_ops.spark.runtime.scan_tasks import ShippedManifest, receive
from lance_spark_ops.spark.runtime.session import set_description
from lance_spark_ops.spark.runtime.task_common import attempt_id
from lance_spark_ops.spark.runtime.tuning import TASK_INLINE_BYTES
from lance_spark_ops.spark.runtime.worker_gc import freeze_imported

RESULT_SCHEMA = "task_id long, attempt string, result binary"


@functools.cache
def result_schema() -> Any:
    """``RESULT_SCHEMA`` as a StructType, built once: a DDL string is parsed by the JVM at every
    ``mapInArrow`` call (0.1-0.2 s each, a tiered merge makes one job per round and phase)."""
    from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

    return StructType([StructField("task_id", LongType()), StructField("attempt", StringType()),
                       StructField("result", BinaryType())])


@dataclass(frozen=True)
class TaskContext:
    """Where a task attempt runs; ``attempt`` is unique per attempt within the job.
    ``cache_bytes``: the byte budget of the process's cache (``lance_spark_ops.cache``) the
    job hands its tasks (None: the process's own)."""

    job_id: str
    task_id: int
    attempt: str
    cache_bytes: int | None = None

    @property
    def file_prefix(self) -> str:
        """Prefix for the names of files this attempt writes (for orphan cleanup)."""
        return f"{self.job_id}-t{self.task_id}-a{self.attempt}"


@dataclass(frozen=True)
class TaskFailed:
    """A task's ``LanceError``, returned as its result (see ``run_tasks``)."""

    error: LanceError


def _outcome(fn: Callable[[Any, TaskContext], Any], task: Any, ctx: TaskContext) -> Any:
    configure_cache(ctx.cache_bytes)
    try:
        return fn(task, ctx)
    except LanceError as e:
        return TaskFailed(e)


def _make_mapper(job_id: str, fn: Callable[[Any, TaskContext], Any], payloads: dict[int, bytes],
                 cache_bytes: int | None = None, shipped: Sequence[ShippedManifest] = ()
                 ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function over rows of task ids; ``payloads``: their descriptors."""
    def mapper(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        freeze_imported()  # keep modules out of the worker's per-task gc.collect()
        receive(shipped)
        attempt = attempt_id()
        for batch in batches:
            ids = batch.column(0).to_pylist()
            out_results = [
                pickle.dumps(_outcome(fn, pickle.loads(payloads[i]),
                                      TaskContext(job_id, i, attempt, cache_bytes)))
                for i in ids]
            yield pa.RecordBatch.from_arrays(
                [pa.array(ids, pa.int64()), pa.array([attempt] * len(ids), pa.string()),
                 pa.array(out_results, pa.binary())],
                names=["task_id", "attempt", "result"],
            )

    return mapper


def waves(sizes: Sequence[int], limit: int) -> list[range]:
    """Consecutive runs of task ids whose descriptor ``sizes`` come to at most ``limit`` bytes
    each (a larger descriptor alone); one run when all fit."""
    out, start, held = [], 0, 0
    for i, size in enumerate(sizes):
        if i > start and held + size > limit:
            out.append(range(start, i))
            start, held = i, 0
        held += size
    if start < len(sizes):
        out.append(range(start, len(sizes)))
    return out


def run_tasks(spark: Any, job_id: str, tasks: Sequence[Any], fn: Callable[[Any, TaskContext], Any],
              description: str = "", cache_bytes: int | None = None,
              inline_bytes: int = TASK_INLINE_BYTES,
              shipped: Sequence[ShippedManifest] = ()) -> dict[int, tuple[str, Any]]:
    """Run ``fn(task, ctx)`` for each task on executors; returns ``{task_id: (attempt, result)}``.
    ``cache_bytes``: the process cache's budget in the tasks' processes (None: theirs);
    ``inline_bytes``: the most descriptor bytes one Spark job's closure carries (see the
    module); ``shipped``: manifests for the tasks' ``open_dataset``. A task's ``LanceError``
    is raised once its wave is done; later waves do not run."""
    if not tasks:
        return {}
    payloads = [pickle.dumps(t) for t in tasks]
    out: dict[int, tuple[str, Any]] = {}
    if description:
        set_description(spark, description)
    try:
        for wave in waves([len(p) for p in payloads], inline_bytes):
            rows = spark.range(wave.start, wave.stop, 1, len(wave))  # task i alone in its partition
            mapper = _make_mapper(job_id, fn, {i: payloads[i] for i in wave}, cache_bytes, shipped)
            for row in rows.mapInArrow(mapper, result_schema()).collect():
                out.setdefault(int(row["task_id"]), (row["attempt"], pickle.loads(row["result"])))
            failed = [i for i in wave if isinstance(out[i][1], TaskFailed)]  # earlier waves had none
            if failed:
                raise out[failed[0]][1].error
    finally:
        if description:
            set_description(spark, None)
    return out


def run_tasks_locally(job_id: str, tasks: Sequence[Any], fn: Callable[[Any, TaskContext], Any],
                      cache_bytes: int | None = None,
                      shipped: Sequence[ShippedManifest] = ()) -> dict[int, tuple[str, Any]]:
    """Same contract as ``run_tasks`` without Spark (tests, dry runs, tiny datasets)."""
    configure_cache(cache_bytes)
    receive(shipped)
    return {i: ("local", fn(t, TaskContext(job_id, i, "local", cache_bytes)))
            for i, t in enumerate(tasks)}


def run_tasks_in_driver(job_id: str, tasks: Sequence[Any], fn: Callable[[Any, TaskContext], Any],
                        cache_bytes: int | None = None, attempts: int = 4,
                        shipped: Sequence[ShippedManifest] = ()) -> dict[int, tuple[str, Any]]:
    """``run_tasks``' contract in this (the driver's) process, for a job too small to be worth
    a Spark job: an attempt that fails with anything but a ``LanceError`` is run again under a
    new attempt id, up to ``attempts`` in all (Spark's ``spark.task.maxFailures`` default), so
    its files never collide with a later attempt's; a ``LanceError`` is raised at once, as
    ``run_tasks`` raises a task's. No Spark call is made (Spark Connect sessions work alike)."""
    configure_cache(cache_bytes)
    receive(shipped)
    out: dict[int, tuple[str, Any]] = {}
    for i, task in enumerate(tasks):
        for n in range(attempts):
            attempt = f"driver.{n}"
            try:
                out[i] = (attempt, fn(task, TaskContext(job_id, i, attempt, cache_bytes)))
                break
            except LanceError:
                raise
            except Exception:
                if n + 1 == attempts:
                    raise
    return out


_WORKER_ERROR = re.compile(r"lance_spark_ops\.errors\.(\w+): (.*)")


def typed_worker_error(exc: BaseException) -> LanceError | None:
    """The LanceError a Python worker raised inside a Spark action of our own (a mapInArrow
    stage that is not a ``run_tasks`` task), rebuilt from the text Spark reports it with (the
    last one named); None when the failure is not one of ours."""
    from lance_spark_ops import errors

    found = _WORKER_ERROR.findall(str(exc))
    if not found:
        return None
    name, message = found[-1]
    cls = getattr(errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, LanceError)):
        return None
    return cls(message.strip())

