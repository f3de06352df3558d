"""Maintain a fleet of Lance tables on Spark: measure each, decide by a policy, run what it needs.

    spark-submit jobs/maintain.py (URI ... | --namespace-impl dir|rest|CLASS --namespace-prop K=V ...
        [--namespace a.b] [--recursive] [--table a.b.t]) [--policy FILE] [--dry-run]
        [--max-concurrent-tables N] [--budget-seconds S] [--report DIR] [--config FILE] ...

Prints one line per table and decision (``--dry-run``: the decisions and their reasons;
nothing changes), then the result as one JSON line (per table: status, decisions, actions and
their metrics, health before/after without the chart series). ``--report DIR`` writes
``report.json`` and ``index.html`` (``--dry-run --report DIR`` is the report-only job). Exit
code: 0 when every table is fine; when tables failed, the code their errors share (3 retry,
4 incompatible, 5 unknown, as the other jobs), else 1.
"""

# no `from __future__ import annotations`: the options dataclass must also build when this file
# is loaded by path without being registered in sys.modules

import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lance_spark_ops.spark.cli import (
    EXIT_FAILED,
    Job,
    UsageError,
    build_parser,
    exit_code,
    print_metrics,
    setup_logging,
)
from lance_spark_ops.spark.config import (
    load_config,
    option_specs,
    parse_key_values,
    redact,
    secret_values,
    storage_options_from_env,
    typed_options,
)

CHART_SERIES = ("fragment_rows_histogram", "version_times")


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
    from lance_spark_ops.spark.maintenance import maintain

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
    from lance_spark_ops.namespace.target import namespace_properties, secret_properties
    from lance_spark_ops.spark.maintenance import FleetTarget

    parser = build_parser(JOB)
    next(a for a in parser._actions if a.dest == "uri").nargs = "*"  # several URIs
    ns = parser.parse_args(argv)
    config = load_config(ns.config) if ns.config else {}
    storage = {**(config.pop("storage_options", {}) or {}), **storage_options_from_env(environ),
               **parse_key_values(ns.storage_option)}
    uris = list(ns.uri or []) or [u for u in (config.pop("uri", None),) if u] + list(config.pop("uris", []))
    config.pop("uri", None), config.pop("uris", None)
    impl = ns.namespace_impl or config.pop("namespace_impl", None)
    props = {**namespace_properties(config.pop("namespace_properties", {}) or {}),
             **namespace_properties(ns.namespace_prop)}
    table = ns.table or config.pop("table", None)
    config.pop("log_level", None)
    values = typed_options(MaintainOptions, config, source=ns.config)
    for spec in option_specs(MaintainOptions):
        if getattr(ns, spec.name) is not None:
            values[spec.name] = getattr(ns, spec.name)
    opts = MaintainOptions(**values)
    if impl is None:
        if props or table or opts.namespace or opts.recursive:
            raise UsageError("--namespace-prop, --table, --namespace and --recursive need --namespace-impl")
        if not uris:
            raise UsageError("give dataset URIs or --namespace-impl")
        return uris, opts, storage, {}
    if uris:
        raise UsageError("give dataset URIs or a namespace, not both")
    secrets = secret_properties(props)
    if table:
        return [((impl, props), table)], opts, storage, secrets
    return [FleetTarget((impl, props), opts.namespace, opts.recursive)], opts, storage, secrets


def printable(result: Mapping[str, Any]) -> dict[str, Any]:
    """The result without the report's chart series (the JSON line stays short)."""
    def strip(h: Any) -> Any:
        return None if h is None else {k: v for k, v in h.items() if k not in CHART_SERIES}

    return {**result, "tables": [{**t, "before": strip(t.get("before")), "after": strip(t.get("after"))}
                                 for t in result["tables"]]}


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    from lance_spark_ops.namespace.resolve import LiveSecrets

    setup_logging()
    secrets: Any = ()
    try:
        targets, opts, storage, ns_secrets = parse(argv, environ)
        # what namespaces vend (and refresh) during the run is hidden as soon as it arrives
        secrets = LiveSecrets(secret_values({**storage, **ns_secrets}))
        setup_logging("INFO", secrets)
        from lance_spark_ops.fleet.policy import load_policy
        from lance_spark_ops.spark.maintenance import exit_status, maintain, summary_lines

        policy = load_policy(opts.policy)  # a bad policy is a usage error before Spark starts
        spark = None
        if not opts.dry_run:
            from lance_spark_ops.spark.daemon import unship_pyspark

            unship_pyspark()
            from lance_spark_ops.spark.session import get_spark

            spark = get_spark("lance-spark-ops maintain")
        t0 = time.perf_counter()
        result = maintain(spark, targets, policy, dry_run=opts.dry_run,
                          max_concurrent_tables=opts.max_concurrent_tables,
                          budget_seconds=opts.budget_seconds,
                          storage_options=storage, scheduler_pool=opts.scheduler_pool)
        for line in summary_lines(result):
            sys.stdout.write(redact(line, secrets) + "\n")
        data = json.loads(redact(json.dumps(result.to_dict(), default=str), secrets))
        if opts.report:
            from lance_spark_ops.fleet.report import write_report

            write_report(data, opts.report)
        code = exit_status(result, exit_code, EXIT_FAILED)
        print_metrics({**printable(data), "exit_code": code, "job": JOB.name,
                       "wall_seconds": round(time.perf_counter() - t0, 3)}, secrets)
        return code
    except SystemExit as e:  # --help
        return e.code if isinstance(e.code, int) else 0
    except Exception as e:  # noqa: BLE001 - every failure ends in an exit code and a JSON line
        code = exit_code(e)
        sys.stderr.write(redact(f"{JOB.name}: error: {type(e).__name__}: {e}\n", secrets))
        print_metrics({"error": {"type": type(e).__name__, "message": str(e)[:2000]}, "exit_code": code,
                       "job": JOB.name}, secrets)
        return code


if __name__ == "__main__":
    sys.exit(main())
