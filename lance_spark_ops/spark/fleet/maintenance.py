"""``maintain``: measure every table of a fleet, decide by a policy what each needs, run it.

Per table (``fleet.health.measure`` -> ``fleet.decisions.decide``) the actions run in their fixed
order (``fleet.policy``), each through this library's own driver (``compact``,
``materialize_deletions``, ``remap_indices``, ``optimize_indices``, ``vacuum``), then the table
is measured again (before/after in the result). Tables go highest priority first (the sum of
their decisions' benefit-per-cost estimates), ``max_concurrent_tables`` at a time, one thread
each in one Spark application: each thread tags its Spark jobs ``lso-maintain-<n>``
(``spark.addTag``: thread-local on classic and Connect sessions; the jobs' own tags come on
top), and on a classic session with ``scheduler_pool`` set it also names that FAIR scheduler
pool for its jobs (Connect has no API for pools; a FAIR scheduler is the user's Spark config).

``report``: the same measuring and deciding with nothing run (a dry run), written as the
health report (``fleet.report``: report.json + index.html) - it never commits or deletes.

A table's failure (measuring or an action) is recorded with its typed error and skips that
table's remaining actions; the other tables carry on. ``budget_seconds``: no action starts
once the budget is spent (recorded as skipped: ``budget``); running ones finish. A re-run
measures again, so it does only what is still needed.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from lance_spark_ops.errors import InvalidInputError, UnsupportedError
from lance_spark_ops.fleet.decisions import (
    CompactOptions,
    Decision,
    MaterializeOptions,
    OptimizeOptions,
    RemapOptions,
    VacuumOptions,
    decide,
    table_priority,
)
from lance_spark_ops.fleet.health import TableHealth, measure
from lance_spark_ops.fleet.policy import PolicySet, parse_duration
from lance_spark_ops.fleet.policy_file import load_policy
from lance_spark_ops.spark.runtime.job import logger
from lance_spark_ops.spark.runtime.session import is_classic
from lance_spark_ops.spark.runtime.tuning import Tuning

__all__ = ["FleetTarget", "MaintainResult", "TableResult", "maintain", "report", "targets_of"]

DEFAULT_MAX_CONCURRENT_TABLES = 2


@dataclass(frozen=True)
class FleetTarget:
    """The tables of a namespace (``namespace``: a LanceNamespace or ``(impl, properties)``),
    under ``namespace_id`` (``"a.b"``; None: the root), its child namespaces too if ``recursive``."""

    namespace: Any
    namespace_id: str | None = None
    recursive: bool = False


@dataclass
class _Table:
    """One table to maintain: its name (dotted id, or the URI) and how to reach it."""

    name: str
    uri: str | None = None
    resolved: Any = None  # namespace.resolve.ResolvedTable
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)
    error: BaseException | None = None  # the namespace could not resolve it

    def location(self) -> tuple[str, dict[str, Any]]:
        if self.resolved is not None:
            opts = self.resolved.options()  # first: a refresh may move the location
            return self.resolved.uri, opts
        return self.uri or "", dict(self.storage_options)


@dataclass
class TableResult:
    table: str
    uri: str = ""
    status: str = "ok"  # ok | failed | skipped
    decisions: list[dict[str, Any]] = field(default_factory=list)
    actions: list[dict[str, Any]] = field(default_factory=list)
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    error: dict[str, str] | None = None
    seconds: float = 0.0


@dataclass
class MaintainResult:
    dry_run: bool
    mode: str = "maintain"  # maintain | dry run | report (measured only, nothing run)
    tables: list[TableResult] = field(default_factory=list)
    tables_ok: int = 0
    tables_failed: int = 0
    actions_run: int = 0
    actions_skipped: int = 0
    seconds: float = 0.0
    budget_seconds: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# -- targets ------------------------------------------------------------------------------------
def targets_of(targets: Any, storage_options: Mapping[str, Any] | None = None) -> list[_Table]:
    """URIs, ``FleetTarget`` s and ``(namespace, "a.b.t")`` pairs -> the tables they name."""
    from lance_spark_ops.namespace.resolve import iter_tables, namespace_of, resolve_table

    items = [targets] if isinstance(targets, str | FleetTarget) else list(targets)
    out: list[_Table] = []
    for item in items:
        if isinstance(item, str):
            out.append(_Table(item, uri=item, storage_options=dict(storage_options or {})))
        elif isinstance(item, FleetTarget):
            ns = namespace_of(item.namespace)
            for tid in iter_tables(ns, item.namespace_id, item.recursive):
                out.append(_namespace_table(ns, tid, storage_options, resolve_table))
        elif isinstance(item, tuple) and len(item) == 2:
            ns = namespace_of(item[0])
            out.append(_namespace_table(ns, item[1], storage_options, resolve_table))
        else:
            raise InvalidInputError("a maintain target is a URI, a FleetTarget or (namespace, table id), got "
                                    f"{type(item).__name__}")
    names = [t.name for t in out]
    if len(set(names)) != len(names):
        raise InvalidInputError(f"a table is named twice among the targets: {sorted(names)}")
    return out


def _namespace_table(ns: Any, tid: Any, storage_options: Mapping[str, Any] | None,
                     resolve: Callable) -> _Table:
    name = ".".join(tid) if not isinstance(tid, str) else tid
    try:
        return _Table(name, resolved=resolve(ns, tid, storage_options))
    except Exception as e:  # noqa: BLE001 - reported on the table; the fleet carries on
        return _Table(name, error=e)


# -- actions ------------------------------------------------------------------------------------
def _optimize_indices() -> Callable[..., Any]:
    try:
        module = importlib.import_module("lance_spark_ops.spark.indices.indexing")
        return module.optimize_indices
    except (ImportError, AttributeError) as e:
        raise UnsupportedError("optimize_indices is not available in this build "
                               "(lance_spark_ops.spark.indices.indexing)") from e


def _run_action(spark: Any, d: Decision, uri: str, so: dict[str, Any], table: _Table,
                tuning: Tuning | None = None) -> Any:
    from lance_spark_ops.spark.files.compaction import compact, materialize_deletions
    from lance_spark_ops.spark.files.vacuuming import vacuum
    from lance_spark_ops.spark.indices.index_remap import remap_indices

    o = d.options
    if isinstance(o, CompactOptions):
        return compact(spark, uri, storage_options=so, tuning=tuning,
                       target_rows_per_fragment=o.target_rows_per_fragment,
                       materialize_deletions_threshold=o.materialize_deletions_threshold)
    if isinstance(o, MaterializeOptions):
        return materialize_deletions(spark, uri, o.threshold, storage_options=so, tuning=tuning)
    if isinstance(o, RemapOptions):
        return remap_indices(spark, uri, storage_options=so, tuning=tuning)
    if isinstance(o, OptimizeOptions):
        return _optimize_indices()(spark, uri, storage_options=so, tuning=tuning,
                                   num_indices_to_merge=o.num_indices_to_merge)
    if isinstance(o, VacuumOptions):
        return vacuum(spark, uri, older_than=parse_duration(o.older_than), storage_options=so, tuning=tuning)
    raise InvalidInputError(f"unknown action {d.action!r}")


_SUMMARY = ("new_version", "read_version", "commits", "fragments_removed", "fragments_added", "rows_written",
            "bytes_written", "bytes_removed", "old_versions", "data_files_removed", "failed_deletes",
            "indices_remapped", "reuse_versions_trimmed", "indices")


def _summary(metrics: Any) -> dict[str, Any]:
    values = dataclasses.asdict(metrics) if dataclasses.is_dataclass(metrics) else dict(metrics or {})
    return {k: values[k] for k in _SUMMARY if k in values}


def _status(metrics: dict[str, Any]) -> str:
    """``ok``, or ``skipped: ...`` when every index an index job looked at was skipped (a type
    this library does not build yet): nothing changed, the table is not failed."""
    per_index = metrics.get("indices")
    if isinstance(per_index, dict) and per_index and all(
            isinstance(v, dict) and v.get("skipped") for v in per_index.values()):
        return "skipped: " + "; ".join(f"{k}: {v['skipped']}" for k, v in sorted(per_index.items()))
    return "ok"


def _error(e: BaseException) -> dict[str, str]:
    return {"type": type(e).__name__, "message": str(e)[:2000]}


# -- the fleet ----------------------------------------------------------------------------------
class _Clock:
    def __init__(self, budget: float | None) -> None:
        self.start = time.perf_counter()
        self.budget = budget

    def spent(self) -> bool:
        return self.budget is not None and time.perf_counter() - self.start >= self.budget


def _plan(table: _Table, policies: PolicySet) -> tuple[TableResult, TableHealth | None, list[Decision]]:
    result = TableResult(table.name)
    if table.error is not None:
        result.status, result.error = "failed", _error(table.error)
        return result, None, []
    try:
        uri, so = table.location()
        result.uri = uri
        health = measure(uri, policies.for_table(table.name), so)
    except Exception as e:  # noqa: BLE001 - one table's failure never stops the others
        logger.warning("maintain %s: measuring failed: %s: %s", table.name, type(e).__name__, e)
        result.status, result.error = "failed", _error(e)
        return result, None, []
    result.before = health.to_dict()
    if health.inconsistent:  # checked first: no rewrite (nor vacuum) of a table that contradicts itself
        bad = [f for f in health.findings if f["refuse"]]
        text = "; ".join(f"{f['check']} (fragment {f['fragment']}): {f['detail']}" for f in bad[:3])
        result.status = "failed"
        result.error = {"type": "InconsistentDatasetError",
                        "message": f"not maintained: the manifest contradicts itself or its files: {text}"
                                   + (f" (and {len(bad) - 3} more)" if len(bad) > 3 else "")
                                   + "; run jobs/validate.py on it"}
        logger.warning("maintain %s: %s", table.name, result.error["message"])
        return result, health, []
    decisions = decide(health, policies.for_table(table.name))
    result.decisions = [d.as_dict() for d in decisions]
    return result, health, decisions


def _execute(spark: Any, table: _Table, result: TableResult, decisions: list[Decision], policies: PolicySet,
             clock: _Clock, tag: str, pool: str | None, tuning: Tuning | None = None) -> None:
    t0 = time.perf_counter()
    if spark is not None:
        spark.addTag(tag)
        if pool is not None and is_classic(spark):
            spark.sparkContext.setLocalProperty("spark.scheduler.pool", pool)
    try:
        ran = False
        for d in decisions:
            entry: dict[str, Any] = {"action": d.action, "reason": d.reason}
            result.actions.append(entry)
            if result.status == "failed":
                entry["status"] = "skipped: an earlier action failed"
                continue
            if clock.spent():
                entry["status"] = "skipped: budget"
                continue
            a0 = time.perf_counter()
            try:
                uri, so = table.location()
                logger.info("maintain %s: %s (%s)", table.name, d.action, d.reason)
                entry["metrics"] = _summary(_run_action(spark, d, uri, so, table, tuning))
                entry["status"] = _status(entry["metrics"])
                ran = True
            except Exception as e:  # noqa: BLE001 - recorded; the table's other actions are skipped
                logger.warning("maintain %s: %s failed: %s: %s", table.name, d.action, type(e).__name__, e)
                entry["status"], entry["error"] = "failed", _error(e)
                result.status, result.error = "failed", _error(e)
            entry["seconds"] = round(time.perf_counter() - a0, 3)
        if ran:
            try:
                uri, so = table.location()
                result.after = measure(uri, policies.for_table(table.name), so).to_dict()
            except Exception as e:  # noqa: BLE001
                logger.warning("maintain %s: measuring after failed: %s", table.name, e)
        else:
            result.after = result.before
    finally:
        if spark is not None:
            spark.removeTag(tag)
            if pool is not None and is_classic(spark):
                spark.sparkContext.setLocalProperty("spark.scheduler.pool", None)
        result.seconds = round(result.seconds + time.perf_counter() - t0, 3)


def maintain(spark: Any, targets: Any, policy: Any = None, *, dry_run: bool = False,
             max_concurrent_tables: int = DEFAULT_MAX_CONCURRENT_TABLES, budget_seconds: float | None = None,
             storage_options: Mapping[str, Any] | None = None, scheduler_pool: str | None = None,
             tuning: Tuning | None = None) -> MaintainResult:
    """Maintain ``targets`` (URIs, ``FleetTarget`` s, ``(namespace, table id)`` pairs) by
    ``policy`` (a TOML path, a mapping, a ``Policy`` / ``PolicySet``; None: the defaults).
    ``dry_run``: measure and decide only; ``tuning``: every job's. Returns one ``TableResult``
    per table."""
    if max_concurrent_tables < 1:
        raise InvalidInputError(f"max_concurrent_tables must be at least 1, got {max_concurrent_tables}")
    if budget_seconds is not None and budget_seconds <= 0:
        raise InvalidInputError(f"budget_seconds must be positive, got {budget_seconds}")
    policies = load_policy(policy)
    clock = _Clock(budget_seconds)
    tables = targets_of(targets, storage_options)
    out = MaintainResult(dry_run=dry_run, mode="dry run" if dry_run else "maintain",
                         budget_seconds=budget_seconds)
    with ThreadPoolExecutor(max_concurrent_tables, thread_name_prefix="lso-maintain") as pool:
        planned = list(pool.map(lambda t: _plan(t, policies), tables))  # measuring: driver only
        order = sorted(range(len(tables)), key=lambda i: -table_priority(planned[i][2]))
        if not dry_run:
            runs = [pool.submit(_execute, spark, tables[i], planned[i][0], planned[i][2], policies, clock,
                                f"lso-maintain-{_slug(tables[i].name)}", scheduler_pool, tuning)
                    for i in order if planned[i][0].status == "ok" and planned[i][2]]
            for r in runs:
                r.result()
    for i in order:
        result, _, decisions = planned[i]
        if dry_run or not decisions:
            result.after = result.before
            result.actions = [{"action": d.action, "reason": d.reason, "status": "dry run" if dry_run else ""}
                              for d in decisions]
        out.tables.append(result)
    _count(out, clock)
    return out


def report(spark: Any, targets: Any, report_dir: str, policy: Any = None, *,
           max_concurrent_tables: int = DEFAULT_MAX_CONCURRENT_TABLES,
           storage_options: Mapping[str, Any] | None = None, secrets: Iterable[str] = ()) -> MaintainResult:
    """Measure ``targets`` and decide by ``policy`` what maintenance *would* run (``maintain``'s
    dry run: nothing is committed or deleted), and write ``report.json`` + ``index.html`` into
    ``report_dir``. Storage option values, vended ones and ``secrets`` are hidden in the files.
    ``spark`` is unused (measuring reads manifests on the driver) and may be None."""
    from lance_spark_ops.fleet.report import write_report
    from lance_spark_ops.namespace.resolve import LiveSecrets
    from lance_spark_ops.spark.runtime.config import redact, secret_values

    result = maintain(spark, targets, policy, dry_run=True, max_concurrent_tables=max_concurrent_tables,
                      storage_options=storage_options)
    result.mode = "report"
    for t in result.tables:
        for a in t.actions:
            a["status"] = "would run"
    hidden = LiveSecrets([*secret_values(dict(storage_options or {})), *secrets])
    write_report(json.loads(redact(json.dumps(result.to_dict(), default=str), hidden)), report_dir)
    return result


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[-80:]


def _count(out: MaintainResult, clock: _Clock) -> None:
    out.tables_ok = sum(t.status == "ok" for t in out.tables)
    out.tables_failed = sum(t.status == "failed" for t in out.tables)
    out.actions_run = sum(a.get("status") == "ok" for t in out.tables for a in t.actions)
    out.actions_skipped = sum(str(a.get("status", "")).startswith("skipped")
                              for t in out.tables for a in t.actions)
    out.seconds = round(time.perf_counter() - clock.start, 3)


def summary_lines(result: MaintainResult) -> Iterable[str]:
    """Human-readable lines: one per table, one per decision (dry run) or action."""
    for t in result.tables:
        head = f"{t.table}: {t.status}" + (f" ({t.error['type']}: {t.error['message']})" if t.error else "")
        yield head if t.decisions or t.error else f"{t.table}: healthy, nothing to do"
        for a in t.actions:
            status = a.get("status") or ""
            yield f"  {a['action']}: {status} - {a['reason']}"


def exit_status(result: MaintainResult, code_of: Callable[[BaseException], int], failed: int = 1) -> int:
    """0 when every table is fine; the code every failure shares; else ``failed``."""
    from lance_spark_ops import errors

    codes = set()
    for t in result.tables:
        if t.status == "failed" and t.error:
            cls = getattr(errors, t.error["type"], None)
            codes.add(code_of(cls(t.error["message"])) if isinstance(cls, type) else failed)
    if not codes:
        return 0
    return codes.pop() if len(codes) == 1 else failed
