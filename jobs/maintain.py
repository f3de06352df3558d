"""Maintain a fleet of Lance tables on Spark: measure each, decide by a policy, run what it needs.

    spark-submit jobs/maintain.py (URI ... | --namespace-impl dir|rest|CLASS --namespace-prop K=V ...
        [--namespace a.b] [--recursive] [--table a.b.t ...]) [--policy FILE] [--dry-run]
        [--max-concurrent-tables N] [--budget-seconds S] [--report DIR] [--scheduler-pool NAME]

Prints one line per table and decision (``--dry-run``: decisions and reasons only, nothing
changes), then the result as one JSON line (per table: status, decisions, actions and their
metrics, health before/after without the chart series). ``--report DIR`` writes
``report.json`` and ``index.html``. Exit code: 0 when every table is fine; when tables failed,
the code their errors share (see the other jobs: 3 retry, 4 incompatible, 5 unknown), else 1.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from lance_spark_ops.spark.cli import (
    EPILOG,
    EXIT_FAILED,
    JobArgumentParser,
    UsageError,
    exit_code,
    print_metrics,
    setup_logging,
)
from lance_spark_ops.spark.config import parse_key_values, secret_values, storage_options_from_env

NAME = "maintain"
CHART_SERIES = ("fragment_rows_histogram", "version_times")


def build_parser() -> JobArgumentParser:
    p = JobArgumentParser(prog="maintain.py", description=__doc__.split("\n\n")[0], epilog=EPILOG)
    p.add_argument("uris", nargs="*", metavar="URI", help="dataset URIs (or tables of a namespace, below)")
    g = p.add_argument_group("tables of a Lance Namespace")
    g.add_argument("--namespace-impl", metavar="IMPL", help="dir, rest, or a LanceNamespace class path")
    g.add_argument("--namespace-prop", action="append", default=[], metavar="KEY=VALUE",
                   help="a namespace property, e.g. root=s3://bucket/lake (repeatable)")
    g.add_argument("--namespace", metavar="A.B", help="maintain the tables of this namespace (default: root)")
    g.add_argument("--recursive", action="store_true", help="... and of its child namespaces")
    g.add_argument("--table", action="append", default=[], metavar="A.B.T",
                   help="only these tables of the namespace (repeatable)")
    p.add_argument("--policy", metavar="FILE", help="policy TOML (default: the documented defaults; "
                   "see conf/examples/maintain_policy.toml)")
    p.add_argument("--dry-run", action="store_true", help="measure and decide only; change nothing")
    p.add_argument("--max-concurrent-tables", type=int, default=2, metavar="N",
                   help="tables maintained at once (default: 2)")
    p.add_argument("--budget-seconds", type=float, default=None, metavar="S",
                   help="start no action after this many seconds (default: no budget)")
    p.add_argument("--report", metavar="DIR", help="write report.json and index.html into DIR")
    p.add_argument("--scheduler-pool", metavar="NAME",
                   help="FAIR scheduler pool of the tables' Spark jobs (classic sessions)")
    p.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE",
                   help="a storage option for every table (repeatable; prefer the environment)")
    p.add_argument("--log-level", choices=("DEBUG", "INFO", "WARNING", "ERROR"), default="INFO")
    return p


def targets(args: Any) -> list[Any]:
    from lance_spark_ops.namespace.target import namespace_properties
    from lance_spark_ops.spark.maintain import FleetTarget

    if args.namespace_impl is None:
        if args.namespace_prop or args.namespace or args.recursive or args.table:
            raise UsageError("--namespace-prop, --namespace, --recursive and --table need --namespace-impl")
        if not args.uris:
            raise UsageError("give dataset URIs or --namespace-impl")
        return list(args.uris)
    if args.uris:
        raise UsageError("give dataset URIs or a namespace, not both")
    ns = (args.namespace_impl, namespace_properties(args.namespace_prop))
    if args.table:
        return [(ns, t) for t in args.table]
    return [FleetTarget(ns, args.namespace, args.recursive)]


def printable(result: Mapping[str, Any]) -> dict[str, Any]:
    """The result without the report's chart series (the JSON line stays short)."""
    out = dict(result)
    out["tables"] = [{**t, **{k: _strip(t.get(k)) for k in ("before", "after")}} for t in result["tables"]]
    return out


def _strip(health: Mapping[str, Any] | None) -> Any:
    return None if health is None else {k: v for k, v in health.items() if k not in CHART_SERIES}


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    setup_logging()
    secrets: tuple[str, ...] = ()
    try:
        args = build_parser().parse_args(argv)
        storage = {**storage_options_from_env(environ), **parse_key_values(args.storage_option)}
        from lance_spark_ops.namespace.target import namespace_properties, secret_properties

        secrets = secret_values({**storage, **secret_properties(namespace_properties(args.namespace_prop))})
        setup_logging(args.log_level, secrets)
        todo = targets(args)
        from lance_spark_ops.fleet.policy import load_policy

        policy = load_policy(args.policy)  # a bad policy is a usage error before Spark starts
        spark = None
        if not args.dry_run:
            from lance_spark_ops.spark.daemon import unship_pyspark

            unship_pyspark()
            from lance_spark_ops.spark.session import get_spark

            spark = get_spark("lance-spark-ops maintain")
        from lance_spark_ops.spark.maintain import exit_status, maintain, summary_lines

        t0 = time.perf_counter()
        result = maintain(spark, todo, policy, dry_run=args.dry_run,
                          max_concurrent_tables=args.max_concurrent_tables,
                          budget_seconds=args.budget_seconds, storage_options=storage,
                          scheduler_pool=args.scheduler_pool)
        from lance_spark_ops.spark.config import redact

        for line in summary_lines(result):
            sys.stdout.write(redact(line, secrets) + "\n")
        data = result.to_dict()
        if args.report:
            import json

            from lance_spark_ops.fleet.report import write_report

            write_report(json.loads(redact(json.dumps(data, default=str), secrets)), args.report)
        code = exit_status(result, exit_code, EXIT_FAILED)
        print_metrics({**printable(data), "exit_code": code, "job": NAME,
                       "wall_seconds": round(time.perf_counter() - t0, 3)}, secrets)
        return code
    except SystemExit as e:  # --help
        return e.code if isinstance(e.code, int) else 0
    except Exception as e:  # noqa: BLE001 - every failure ends in an exit code and a JSON line
        code = exit_code(e)
        from lance_spark_ops.spark.config import redact

        sys.stderr.write(redact(f"{NAME}: error: {type(e).__name__}: {e}\n", secrets))
        print_metrics({"error": {"type": type(e).__name__, "message": str(e)[:2000]}, "exit_code": code,
                       "job": NAME}, secrets)
        return code


if __name__ == "__main__":
    sys.exit(main())
