"""Maintain a fleet of Lance tables on Spark: measure each, decide by a policy, run what it needs.

    spark-submit jobs/maintain.py (URI ... | --namespace-impl dir|rest|CLASS --namespace-prop K=V ...
        [--namespace a.b] [--recursive] [--table a.b.t]) [--policy FILE] [--dry-run]
        [--max-concurrent-tables N] [--budget-seconds S] [--report DIR] [--config FILE] ...

Prints one line per table and decision (``--dry-run``: the decisions and their reasons;
nothing changes), then the result as one JSON line (per table: status, decisions, actions and
their metrics, health before/after without the chart series). ``--report DIR`` writes
``report.json`` and ``index.html`` (``jobs/report.py`` is the report-only job). Exit
code: 0 when every table is fine; when tables failed, the code their errors share (3 retry,
4 incompatible, 5 unknown, as the other jobs), else 1.
"""

# no `from __future__ import annotations`: the options dataclass must also build when this file
# is loaded by path without being registered in sys.modules

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lance_spark_ops.spark.fleet.fleet_job import fleet_main, printable
from lance_spark_ops.spark.runtime.cli import EXIT_FAILED, Job


@dataclass(frozen=True)
class MaintainOptions:
    """Options of ``jobs/maintain.py``.

    Attributes:
        namespace: with --namespace-impl: maintain the tables of this namespace (a.b; none: the root).
        recursive: with --namespace-impl: the tables of its child namespaces too.
        policy: the policy TOML file (none: the documented defaults; see
            conf/examples/maintain_policy.toml).
        dry_run: measure and decide only; print the decisions and their reasons, change nothing.
        max_concurrent_tables: tables maintained at once, each on its own thread in this Spark
            application.
        budget_seconds: start no action after this many seconds (none: no budget); running ones finish.
        report: write report.json and index.html into this directory (a local path).
        scheduler_pool: FAIR scheduler pool of the tables' Spark jobs (classic sessions; the FAIR
            scheduler itself is your Spark config).
    """

    namespace: str | None = None
    recursive: bool = False
    policy: str | None = None
    dry_run: bool = False
    max_concurrent_tables: int = 2
    budget_seconds: float | None = None
    report: str | None = None
    scheduler_pool: str | None = None


def _run(spark: Any, uri: str, storage_options: dict[str, Any], opts: MaintainOptions) -> dict[str, Any]:
    """One table through the shared scaffold (``run_job(JOB)``: a URI or ``--table``); ``main``
    below is the fleet entry (several URIs, a whole namespace, the report)."""
    from lance_spark_ops.spark.fleet.maintenance import maintain

    result = maintain(spark, [uri], opts.policy, dry_run=opts.dry_run,
                      max_concurrent_tables=opts.max_concurrent_tables, budget_seconds=opts.budget_seconds,
                      storage_options=storage_options, scheduler_pool=opts.scheduler_pool)
    return printable(result.to_dict())


def _status(metrics: dict[str, Any]) -> int:
    return EXIT_FAILED if any(t["status"] == "failed" for t in metrics["tables"]) else 0


JOB = Job("maintain", _run, MaintainOptions, __doc__.split("\n\n")[0],
          uri_help="dataset URIs (several allowed), or the tables of a namespace (--namespace-impl)",
          spark=lambda opts: not opts.dry_run, status=_status)


def parse(argv: Sequence[str] | None, environ: Mapping[str, str] | None) -> tuple[list[Any], Any, dict, dict]:
    """(targets, options, storage options, secret namespace properties); flags over --config."""
    from lance_spark_ops.spark.fleet.fleet_job import parse as parse_fleet

    return parse_fleet(JOB, argv, environ)


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    return fleet_main(JOB, argv, environ)


if __name__ == "__main__":
    sys.exit(main())
