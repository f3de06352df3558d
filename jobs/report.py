"""Write the health report of a fleet of Lance tables: measure each, show what the policy would decide.

    spark-submit jobs/report.py (URI ... | --namespace-impl dir|rest|CLASS --namespace-prop K=V ...
        [--namespace a.b] [--recursive] [--table a.b.t]) --report DIR [--policy FILE]
        [--max-concurrent-tables N] [--config FILE] ...

Only measures: nothing is committed or deleted, and no Spark job runs (the figures come from
the manifests, read on the driver). Writes ``report.json`` and ``index.html`` into DIR, prints
one line per table and what ``jobs/maintain.py`` would run on it and why, then the result as
one JSON line. Exit code: 0 when every table was measured; when tables failed, the code their
errors share (as ``jobs/maintain.py``), else 1; 2 for a usage error.
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
class ReportOptions:
    """Options of ``jobs/report.py``.

    Attributes:
        report: write report.json and index.html into this directory (a local path).
        namespace: with --namespace-impl: the tables of this namespace (a.b; none: the root).
        recursive: with --namespace-impl: the tables of its child namespaces too.
        policy: the policy TOML file whose decisions the report shows (none: the documented
            defaults; see conf/examples/maintain_policy.toml).
        max_concurrent_tables: tables measured at once, each on its own thread.
    """

    report: str
    namespace: str | None = None
    recursive: bool = False
    policy: str | None = None
    max_concurrent_tables: int = 2


def _run(spark: Any, uri: str, storage_options: dict[str, Any], opts: ReportOptions) -> dict[str, Any]:
    """One table through the shared scaffold (a URI or ``--table``); ``main`` is the fleet entry."""
    from lance_spark_ops.spark.fleet.maintenance import report

    result = report(spark, [uri], opts.report, opts.policy, max_concurrent_tables=opts.max_concurrent_tables,
                    storage_options=storage_options)
    return printable(result.to_dict())


def _status(metrics: dict[str, Any]) -> int:
    return EXIT_FAILED if any(t["status"] == "failed" for t in metrics["tables"]) else 0


JOB = Job("report", _run, ReportOptions, __doc__.split("\n\n")[0],
          uri_help="dataset URIs (several allowed), or the tables of a namespace (--namespace-impl)",
          spark=False, status=_status)


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    return fleet_main(JOB, argv, environ, measure_only=True)


if __name__ == "__main__":
    sys.exit(main())
