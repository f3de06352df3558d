"""The scaffold every Spark job of this library runs in: a job id, timed phases, Spark job tags
and descriptions, a progress line per phase, cleanup of the job's own files, final metrics.

* **Job id** ``lso-<12 hex>``: files a job writes carry it in their names, so one listing finds
  them (``delete_unreferenced``); it is also the job's Spark tag.
* **Phases** (``with job.phase("rewrite", tasks=n) as ph:``) are timed into
  ``metrics.seconds[name]`` (summed when a phase runs again). While a phase runs, the Spark
  jobs it starts carry the tags ``<job id>`` and ``<job id>-<phase>`` (``spark.addTag``, which
  classic and Connect sessions both have; on classic sessions also the SparkContext's job
  tag), so ``job.interrupt()`` or ``interrupt_tag(spark, tag)`` cancels the job from another
  thread. On classic sessions the phase is also the Spark job description (the UI's job
  list); Connect sessions have no ``sparkContext``, so no description is set there.
* **Progress**: a line per phase on the ``lance_spark_ops`` logger (stderr unless logging is
  configured otherwise) when it starts and ends - phase, and what is known: tasks done out of
  the planned total (or the count run, when none was planned), rows and bytes once counted.
* **Cleanup** with one contract: on failure, delete the files of this job (names holding the
  job id under a directory) that are not referenced any more - ``referenced`` says which are
  (by default: the data files of the dataset's latest version, which holds the files of every
  commit of the job that landed). Never after ``CommitStateUnknown``: the commit may have
  landed, so its files stay. Cleanup errors never replace the job's own error.
* **Metrics**: ``seconds["total"]`` and ``job_tag`` are filled when the job ends.

Example (a new job that writes files and commits them; see ``spark/files/delta_import.py``)::

    from lance_spark_ops.spark.runtime.job import Job, referenced_data_files
    from lance_spark_ops.table.dataset import Dataset

    def rewrite_something(spark, uri, *, storage_options=None, tuning=None) -> MyMetrics:
        metrics = MyMetrics(uri=uri)
        with Job(spark, "rewrite_something", uri, metrics, tuning) as job:
            with job.phase("plan"):
                ds = Dataset.open(uri, storage_options=storage_options)
                tasks = plan(ds)                        # small picklable descriptors
            with job.cleanup_on_failure(ds.store):     # our files, unless a commit referenced them
                with job.phase("write", tasks=len(tasks)) as ph:
                    results = job.run_tasks(tasks, write_task)  # TaskContext.file_prefix names files
                    ph.add(rows=sum(r.rows for r in results), bytes=sum(r.size for r in results))
                with job.phase("commit"):
                    job.before_commit(1)          # tests inject concurrent writers here (tuning=)
                    new = ds.commit(make_operation(results))
            metrics.orphan_files_deleted = job.delete_other_attempts(new.store, referenced_data_files(new))
        return metrics
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from lance_spark_ops.errors import CommitStateUnknown, NotFoundError
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.spark.runtime.logs import CurrentStderr
from lance_spark_ops.spark.runtime.runner import (
    TaskContext,
    run_tasks,
    run_tasks_in_driver,
    run_tasks_locally,
)
from lance_spark_ops.spark.runtime.scan_tasks import ShippedManifest, ship
from lance_spark_ops.spark.runtime.session import is_classic, set_description
from lance_spark_ops.spark.runtime.tuning import DEFAULT_TUNING, Tuning
from lance_spark_ops.table.commit.retry import retry_on_conflict
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.format.fragment import all_data_file_paths
from lance_spark_ops.table.paths import DATA_DIR

__all__ = ["Job", "Phase", "Tuning", "interrupt_tag", "latest_data_files", "logger", "referenced_data_files"]

logger = logging.getLogger("lance_spark_ops")
TaskT = TypeVar("TaskT")
ResultT = TypeVar("ResultT")


def _ensure_progress_output() -> None:
    """Progress lines go to stderr unless the application configured logging itself."""
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    if not logger.handlers and not logging.getLogger().handlers:
        handler = CurrentStderr()
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
        logger.addHandler(handler)


def referenced_data_files(ds: Dataset) -> set[str]:
    """Names (relative to ``data/``) of every data file of ``ds``'s version."""
    return all_data_file_paths(ds.fragments)


def latest_data_files(store: ObjectStore, manifest_store: Any = None) -> set[str]:
    """``referenced_data_files`` of the latest version (found through ``manifest_store`` when
    given); empty when the dataset has no version yet (a job creating it failed)."""
    try:
        ds = Dataset.open(store, manifest_store=manifest_store)
    except NotFoundError:
        return set()
    return referenced_data_files(ds)


@dataclass
class Phase:
    """Progress of one phase: tasks done out of the planned total, rows and bytes so far."""

    name: str
    tasks_total: int = 0  # 0: not known up front
    tasks_done: int = 0
    rows: int = 0
    bytes: int = 0
    counted: frozenset[str] = frozenset()  # "rows" / "bytes" once the phase counted them

    def add(self, tasks: int = 0, rows: int | None = None, bytes: int | None = None) -> None:  # noqa: A002
        self.tasks_done += tasks
        if rows is not None:
            self.rows += rows
            self.counted |= {"rows"}
        if bytes is not None:
            self.bytes += bytes
            self.counted |= {"bytes"}

    def line(self, ended: bool = True) -> str:
        """What is known, nothing else: ``tasks 3/4`` (done of planned), ``3 tasks`` (no plan,
        or more ran than planned), ``4 tasks`` planned at the start; rows and bytes once
        counted. Empty when nothing is."""
        parts = []
        if not ended:
            parts += [_tasks(self.tasks_total)] if self.tasks_total else []
        elif self.tasks_done and 0 < self.tasks_total and self.tasks_done <= self.tasks_total:
            parts.append(f"tasks {self.tasks_done}/{self.tasks_total}")
        elif self.tasks_done:
            parts.append(_tasks(self.tasks_done))
        parts += [f"{what} {getattr(self, what)}" for what in ("rows", "bytes") if what in self.counted]
        return ", ".join(parts)


def _tasks(n: int) -> str:
    return f"{n} task" if n == 1 else f"{n} tasks"


def first_attempt(attempt: str) -> bool:
    """Whether a result's attempt id (``runner``: ``stage.attemptNumber.taskAttemptId`` in
    Spark, ``driver.N`` in this process, ``local``) is its task's first attempt: Spark numbers
    a task's attempts (retries and speculative copies) from 0, so a result of attempt 0 means
    no earlier attempt of that task ran."""
    if attempt == "local":
        return True
    parts = attempt.split(".")
    if parts[0] == "driver":
        return parts[1:] == ["0"]
    return len(parts) == 3 and parts[1] == "0"


def speculation_on(spark: Any) -> bool:
    """Whether Spark may run speculative copies of a task (``spark.speculation``): a copy that
    lost the race to attempt 0 may have written a file. Unknown (the setting unreadable) counts
    as on."""
    try:
        value = spark.conf.get("spark.speculation", "false")
    except Exception:  # noqa: BLE001 - any failure to read it: assume copies may run
        return True
    return str(value).strip().lower() == "true"


class Job:
    """One run of a maintenance operation; use as a context manager (see the module doc)."""

    def __init__(self, spark: Any, kind: str, uri: str, metrics: Any = None,
                 tuning: Tuning | None = None) -> None:
        self.spark = spark
        self.kind = kind
        self.uri = uri
        self.metrics = metrics
        self.tuning = DEFAULT_TUNING if tuning is None else tuning  # task shapes, the commit hook
        self.job_id = f"lso-{uuid.uuid4().hex[:12]}"
        self._phases: list[Phase] = []
        self._started = time.perf_counter()
        self._opened: dict[tuple[str, int], Dataset] = {}
        # whether an attempt whose result was not taken may have run (files to sweep): a task
        # whose result came from a later attempt (retried), or any Spark job under speculation
        self.stray_attempts = False
        _ensure_progress_output()

    def opened(self, ds: Dataset) -> Dataset:
        """Note ``ds`` as this job's open of its version (``dataset`` hands it out again, and
        ``run_tasks`` ships its manifest to the tasks when small)."""
        self._opened[(ds.uri, ds.version)] = ds
        return ds

    def dataset(self, uri: str, version: int, storage_options: dict[str, Any] | None = None) -> Dataset:
        """``version`` of ``uri`` as this job opened it already (a committed version's manifest
        never changes: on an object store a round trip or two saved per step), else opened."""
        for (u, v), ds in self._opened.items():
            if v == version and u.rstrip("/") == uri.rstrip("/"):
                return ds
        return self.opened(Dataset.open(uri, version, storage_options=storage_options))

    @property
    def tag(self) -> str:
        """The Spark tag on every Spark job this job starts (``spark.interruptTag(job.tag)``)."""
        return self.job_id

    # -- lifecycle -------------------------------------------------------------------------------
    def __enter__(self) -> Job:
        self._started = time.perf_counter()
        self._add_tag(self.tag)
        logger.info("%s %s %s: started (Spark tag %s)", self.kind, self.uri, self.job_id, self.tag)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._remove_tag(self.tag)
        seconds = self._record("total", time.perf_counter() - self._started, add=False)
        if self.metrics is not None and hasattr(self.metrics, "job_tag"):
            self.metrics.job_tag = self.tag
        outcome = "done" if exc_type is None else f"failed ({exc_type.__name__})"
        logger.info("%s %s %s: %s in %.2f s", self.kind, self.uri, self.job_id, outcome, seconds)

    # -- phases ----------------------------------------------------------------------------------
    @contextmanager
    def phase(self, name: str, tasks: int = 0, detail: str = "") -> Iterator[Phase]:
        """Time, tag, describe and report one phase; yields its ``Phase`` to count progress."""
        ph = Phase(name, tasks_total=tasks)
        tag = f"{self.job_id}-{name}"
        self._phases.append(ph)
        self._add_tag(tag)
        set_description(self.spark, f"{self.kind} {self.uri}: {name}" + (f" {detail}" if detail else ""))
        planned = ph.line(ended=False)
        logger.info("%s %s: %s started%s", self.kind, self.job_id, name, f", {planned}" if planned else "")
        t0 = time.perf_counter()
        try:
            yield ph
        finally:
            self._record(name, time.perf_counter() - t0)
            self._phases.pop()
            self._remove_tag(tag)
            outer = self._phases[-1].name if self._phases else None
            set_description(self.spark, f"{self.kind} {self.uri}: {outer}" if outer else None)
            progress = ph.line()
            logger.info("%s %s: %s ended in %.2f s%s", self.kind, self.job_id, name,
                        time.perf_counter() - t0, f", {progress}" if progress else "")

    def plan_more(self, tasks: int) -> None:
        """Count ``tasks`` more in the innermost phase's planned total (work found mid-phase)."""
        if self._phases:
            self._phases[-1].tasks_total += tasks

    def run_tasks(self, tasks: Sequence[TaskT], fn: Callable[[TaskT, TaskContext], ResultT],
                  costs: Sequence[float] | None = None, in_driver: bool = False) -> list[ResultT]:
        """``fn(task, ctx)`` for every task, on executors (in this process without Spark, or
        with ``in_driver``: work too small for a Spark job, ``runner.run_tasks_in_driver``);
        results in task order. Counts the tasks as done in the innermost phase.

        With ``costs`` (one estimate per task) the tasks are handed to Spark costliest first:
        slots take tasks in that order, so the long ones do not start last and leave the
        other slots idle at the end (longest-processing-time-first scheduling)."""
        order = list(range(len(tasks)))
        if costs is not None:
            order.sort(key=lambda i: -costs[i])
        submitted = [tasks[i] for i in order]
        budget = self.tuning.cache_bytes
        shipped = self._shipped()
        if self.spark is None:
            out = run_tasks_locally(self.job_id, submitted, fn, budget, shipped)
        elif in_driver:
            out = run_tasks_in_driver(self.job_id, submitted, fn, budget, shipped=shipped)
        else:
            out = run_tasks(self.spark, self.job_id, submitted, fn, cache_bytes=budget,
                            inline_bytes=self.tuning.task_inline_bytes, shipped=shipped)
            self.stray_attempts |= speculation_on(self.spark)
        self.stray_attempts |= not all(first_attempt(attempt) for attempt, _ in out.values())
        if self._phases:
            self._phases[-1].add(tasks=len(tasks))
        results: list[ResultT | None] = [None] * len(tasks)
        for j, i in enumerate(order):
            results[i] = out[j][1]
        return results  # type: ignore[return-value] - every slot filled above

    def _shipped(self) -> list[ShippedManifest]:
        """The manifests of the versions this job opened, for its tasks' ``open_dataset``: those
        that kept their bytes, newest first, up to ``Tuning.slice_inline_job_bytes`` in all (every
        task's closure carries them)."""
        out, left = [], self.tuning.slice_inline_job_bytes
        for ds in sorted(self._opened.values(), key=lambda d: -d.version):
            s = ship(ds)
            if s is not None and len(s.data) <= left:
                out.append(s)
                left -= len(s.data)
        return out

    def retrying(self, attempt: Callable[[int], Any], *, retries: int, what: str | None = None,
                 on_conflict: Callable[[int, Any], None] | None = None) -> Any:
        """Run ``attempt(n)`` (plan on the latest version, build, commit) under the one commit-retry
        loop (``table.commit.retry``): a ``CommitConflict`` plans again after a backoff, up to
        ``retries`` times; ``on_conflict`` prepares the next attempt. Every job retries through here."""
        return retry_on_conflict(attempt, retries=retries, what=what or self.kind, on_conflict=on_conflict)

    def before_commit(self, attempt: int) -> None:
        """Called right before each commit attempt (runs ``tuning.before_commit``, if any)."""
        if self.tuning.before_commit is not None:
            self.tuning.before_commit(self.kind, attempt)

    # -- files -----------------------------------------------------------------------------------
    def delete_unreferenced(self, store: ObjectStore, referenced: Iterable[str],
                            directory: str = DATA_DIR) -> int:
        """Delete this job's files in ``directory`` (names holding the job id) that are not in
        ``referenced``; returns how many."""
        keep = set(referenced)
        keep |= {n[: -len(".lance")] for n in keep if n.endswith(".lance")}  # blob v2 sidecar dirs
        mine = {n for n in store.list(directory) if self.job_id in n and n not in keep}
        if not mine:
            return 0
        if store.is_local:
            for n in sorted(mine):
                store.delete_tree(f"{directory}/{n}")
        else:  # files and sidecar directories alike: one recursive listing, batched deletes
            base = directory.rstrip("/") + "/"
            store.delete_many(p for p in store.find_rel(directory)
                              if p.startswith(base) and p[len(base):].split("/", 1)[0] in mine)
        return len(mine)

    def delete_other_attempts(self, store: ObjectStore, referenced: Iterable[str],
                              directory: str = DATA_DIR) -> int:
        """After success: ``delete_unreferenced`` when an attempt whose result was not taken may
        have written files (``stray_attempts``), else nothing - every file the job wrote is
        committed, and a listing of ``directory`` costs a request per 1 000 files on S3."""
        return self.delete_unreferenced(store, referenced, directory) if self.stray_attempts else 0

    @contextmanager
    def cleanup_on_failure(self, store: ObjectStore, referenced: Callable[[], Iterable[str]] | None = None,
                           directory: str = DATA_DIR) -> Iterator[None]:
        """On failure delete this job's unreferenced files (``referenced()``, default: the data
        files of the latest version); after ``CommitStateUnknown`` delete nothing."""
        try:
            yield
        except CommitStateUnknown:
            raise
        except BaseException:
            try:
                keep = referenced() if referenced is not None else latest_data_files(store)
                self.delete_unreferenced(store, keep, directory)
            except Exception:  # noqa: BLE001 - keep the job's own error; the files are named by job id
                logger.warning("%s %s: could not delete the job's files", self.kind, self.job_id,
                               exc_info=True)
            raise

    # -- internals -------------------------------------------------------------------------------
    def _record(self, name: str, seconds: float, add: bool = True) -> float:
        if self.metrics is not None:
            times = self.metrics.seconds
            times[name] = (times.get(name, 0.0) if add else 0.0) + seconds
        return seconds

    def _add_tag(self, tag: str) -> None:
        if self.spark is not None:
            self.spark.addTag(tag)
            if is_classic(self.spark):
                self.spark.sparkContext.addJobTag(tag)

    def _remove_tag(self, tag: str) -> None:
        if self.spark is not None:
            self.spark.removeTag(tag)
            if is_classic(self.spark):
                self.spark.sparkContext.removeJobTag(tag)

    def interrupt(self) -> None:
        """Cancel the Spark jobs this job is running (from any thread); see ``interrupt_tag``."""
        interrupt_tag(self.spark, self.tag)


def interrupt_tag(spark: Any, tag: str) -> None:
    """Cancel the running Spark jobs of the job whose tag is ``tag`` (logged when it starts,
    ``metrics.job_tag``). Connect: ``spark.interruptTag``. Classic: the SparkContext's job
    tag, because a classic session's ``interruptTag`` does not reach jobs PySpark starts
    (observed with PySpark 4: it returns no operation and the job runs on)."""
    if is_classic(spark):
        spark.sparkContext.cancelJobsWithTag(tag)
    else:
        spark.interruptTag(tag)
