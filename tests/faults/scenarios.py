"""One randomized fault run = make a dataset, run a job under one fault, check every invariant.

Kinds of fault: ``transient`` / ``ambiguous`` (the ``faulty://`` store, in-process),
``concurrent`` (pylance writers racing the in-process job, plus one write right before its
first commit), ``driver_kill`` / ``worker_kill`` (spark-submit, optionally with writers).
Every run is seeded from ``(job, fault, seed)`` so a failure replays from its label.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Any

from lance_spark_ops.errors import InvalidInputError, LanceError, UnsupportedError
from lance_spark_ops.spark.runtime.tuning import Tuning
from tests.faults import faulty_fs
from tests.faults.driver import run_job
from tests.faults.model import (
    STATS,
    WRITER_KINDS,
    Expected,
    Writers,
    check,
    make_dataset,
    stable_row_ids,
    writer_op,
)
from tests.faults.runners import RUNNERS, JobRunner

IN_PROCESS = ("transient", "ambiguous", "concurrent")
SPARK_SUBMIT = ("driver_kill", "worker_kill")


def _before_first_commit(fn: Any, base: Tuning | None = None) -> Tuning:
    """``base`` (default: the defaults) with a hook that runs ``fn()`` right before a job's first
    commit attempt."""
    pending = [fn]

    def hook(kind: str, attempt: int) -> None:
        if pending:
            pending.pop()()

    return replace(base or Tuning(), before_commit=hook)


def _outcome(exc: BaseException | None) -> str:
    return "ok" if exc is None else type(exc).__name__


def _partial(metrics: Any) -> bool:
    """The job finished but reported work it could not do (vacuum's failed deletes)."""
    v = metrics.get("failed_deletes") if isinstance(metrics, dict) else getattr(metrics, "failed_deletes", 0)
    return bool(v)


def _reported(metrics: Any) -> list[int]:
    v = metrics.get("new_version") if isinstance(metrics, dict) else getattr(metrics, "new_version", None)
    return [v] if v else []


def run_scenario(job: str, fault: str, seed: int, tmp: Path, tuning: Tuning | None = None) -> list[str]:
    """One run; returns the invariant violations (empty: all held). ``tuning``: the in-process
    jobs' (the faulted run and its rerun)."""
    runner = RUNNERS[job]
    label = f"job={job} fault={fault} seed={seed}"
    rng = random.Random(f"{job}/{fault}/{seed}")
    root = str(tmp / "ds.lance")
    exp = make_dataset(root, rng.randrange(1 << 30), stable=runner.stable)
    if runner.prepare:
        runner.prepare(root, rng)
    ids_before = stable_row_ids(root) if runner.stable else None
    latest_before = _latest(root)
    job_seed = rng.random()  # the job's own choices (options), the same again in the rerun
    rows = runner.rows(random.Random(rng.random())) if runner.rows else None
    STATS.runs[job] += 1
    if fault in SPARK_SUBMIT:
        reported, ok = _spark_submit(runner, fault, root, exp, rng, label, rows, job_seed)
    else:
        reported, ok = _in_process(runner, fault, root, exp, rng, label, rows, job_seed, tuning)
    if rows is not None:
        _expect_written(root, exp, rows, ok)
    bad = check(label, root, exp, reported, column=runner.column,
                column_must_exist=ok and bool(runner.column), row_ids=ids_before,
                readable_from=latest_before if runner.may_break_old_versions and not ok else 0)
    if runner.post_check:
        extra = [f"{label}: {b}" for b in runner.post_check(root, ok, job_seed)]
        STATS.violations.extend(extra)
        bad += extra
    if not bad and fault != "concurrent":
        bad = _recover(runner, label, root, exp, random.Random(job_seed), ids_before, tuning)
    return bad


def _latest(root: str) -> int:
    import lance

    return lance.dataset(root).version


def _expect_written(root: str, exp: Expected, rows: Any, ok: bool) -> None:
    """The job's rows are expected when it succeeded or when any of them is there (then all)."""
    import lance
    import numpy as np

    ids = rows["id"].to_numpy()
    live = lance.dataset(root).to_table(columns=["id"])["id"].to_numpy()
    if ok or np.isin(ids, live).any():
        exp.rows.update(zip(ids.tolist(), rows["val"].to_pylist(), strict=True))


def _in_process(runner: JobRunner, fault: str, root: str, exp: Expected, rng: random.Random,
                label: str, rows: Any, job_seed: float, tuning: Tuning | None = None
                ) -> tuple[list[int], bool]:
    uri, so, plan_name = root, {}, None
    if fault in ("transient", "ambiguous"):
        plan_name = label
        plan = (faulty_fs.FaultPlan(rng.randrange(1 << 30), transient=rng.choice([0.005, 0.02, 0.05]))
                if fault == "transient" else
                faulty_fs.FaultPlan(rng.randrange(1 << 30), ambiguous=rng.choice([0.3, 0.7, 1.0]),
                                    manifest_only=rng.random() < 0.7, blind=rng.choice([0, 0, 2, 50])))
        so = faulty_fs.install(plan_name, plan)
        uri = f"{faulty_fs.PROTOCOL}://{root}"
    with_writers = fault == "concurrent" or rng.random() < 0.25
    kinds = runner.writer_kinds or WRITER_KINDS
    writers = Writers(root, exp, rng, rng.randint(3, 6), kinds) if with_writers else None
    hook_rng = random.Random(rng.random())
    with_hook = fault == "concurrent" and rng.random() < 0.6
    hook = (lambda: _hook_write(root, exp, hook_rng, kinds)) if with_hook else None
    metrics, exc = None, None
    try:
        if writers:
            writers.start.set()  # the writers and the job start together
        if hook:
            tuning = _before_first_commit(hook, tuning)
        metrics = runner.local(uri, so, random.Random(job_seed), rows, tuning)
    except Exception as e:  # noqa: BLE001 - any outcome is allowed; the invariants are checked after
        exc = e
    finally:
        if writers:
            writers.join()
        if plan_name:
            STATS.faults[fault] += faulty_fs._PLANS[plan_name].faults
            faulty_fs.uninstall(plan_name)
    if fault == "concurrent":
        STATS.faults["concurrent"] += 1
    STATS.outcomes[_outcome(exc)] += 1
    if isinstance(exc, InvalidInputError | UnsupportedError):  # not a fault: the harness is broken
        STATS.violations.append(f"{label}: the job refused its input: {exc!r}")
        raise AssertionError(f"{label}: the job refused its input") from exc
    if exc is not None and not isinstance(exc, LanceError):  # e.g. the fault's OSError, raw
        STATS.violations.append(f"{label}: the job failed with an untyped error: {exc!r:.500}")
        raise AssertionError(f"{label}: the job failed with an untyped error") from exc
    return _reported(metrics), exc is None and not _partial(metrics)


def _hook_write(root: str, exp: Expected, rng: random.Random, kinds: tuple[str, ...]) -> None:
    kind = rng.choice([k for k in ("append", "delete", "update", "merge_insert", "compaction") if k in kinds])
    try:
        if writer_op(root, kind, exp, rng):
            STATS.writer_ops[kind] += 1
    except Exception:  # noqa: BLE001 - pylance refused: nothing committed
        pass


def _spark_submit(runner: JobRunner, fault: str, root: str, exp: Expected, rng: random.Random,
                  label: str, rows: Any, job_seed: float) -> tuple[list[int], bool]:
    phase = rng.choice(runner.phases if fault == "driver_kill" else runner.work_phases)
    delay = rng.uniform(0.0, 1.5)
    writers = (Writers(root, exp, rng, rng.randint(2, 5), runner.writer_kinds or WRITER_KINDS)
               if rng.random() < 0.3 else None)
    master = "local[2]" if fault == "driver_kill" else "local[2,4]"  # local[N,F]: a task retried F-1 times
    run = run_job(runner.script, runner.args(root, random.Random(job_seed), rows), fault=fault, phase=phase,
                  kind=runner.kind, delay=delay, master=master, on_marker=writers.start if writers else None)
    if writers:
        writers.join()
    if run.killed:
        STATS.faults[fault] += 1
    outcome = "ok" if run.returncode == 0 else ("killed" if run.killed and fault == "driver_kill"
                                                 else f"exit {run.returncode}")
    STATS.outcomes[outcome] += 1
    bad = []
    if fault == "worker_kill" and run.returncode != 0 and not writers and not runner.worker_kill_may_fail:
        bad.append(f"{label}: the job failed after {run.workers_killed} worker kill(s) (Spark retries "
                   f"tasks): {run.tail()}")
    if not run.killed and run.returncode != 0 and not writers:
        bad.append(f"{label}: the job failed without a fault: {run.tail()}")
    STATS.violations.extend(bad)
    assert not bad, bad
    return _reported(run.metrics), run.returncode == 0 and not _partial(run.metrics)


def _recover(runner: JobRunner, label: str, root: str, exp: Expected, rng: random.Random,
             ids_before: dict[int, int] | None, tuning: Tuning | None = None) -> list[str]:
    """After a fault the job runs again cleanly (in-process) and must succeed."""
    import lance

    if runner.rows or (runner.column and runner.column in lance.dataset(root).schema.names):
        return []  # a writer would write again; a column is there already
    try:
        metrics = runner.local(root, {}, rng, None, tuning)
    except Exception as e:  # noqa: BLE001 - the finding
        bad = [f"{label}: the clean rerun after the fault failed: {e!r}"[:600]]
        STATS.violations.extend(bad)
        return bad
    STATS.outcomes["rerun ok"] += 1
    return check(f"{label} (rerun)", root, exp, _reported(metrics), column=runner.column,
                 column_must_exist=bool(runner.column), row_ids=ids_before)
