"""The command line of the fleet jobs (``jobs/maintain.py``, ``jobs/report.py``): targets are
dataset URIs or the tables of a namespace (``--namespace-impl`` ... ``[--namespace a.b]
[--recursive]``, or one ``--table``), then ``maintain`` (or, measure-only, ``report``) over them.

Output as every job's: human-readable lines, then the result as one JSON line, last (without
the report's chart series). Everything printed or written to the report goes through the
secrets filter, including what namespaces vend during the run (``LiveSecrets``). Exit codes:
0 when every table is fine; when tables failed, the code their errors share, else 1; a usage
error 2, before any table is touched.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lance_spark_ops.config_file import load_config
from lance_spark_ops.spark.runtime.cli import (
    EXIT_FAILED,
    Job,
    UsageError,
    build_parser,
    exit_code,
    print_metrics,
    setup_logging,
)
from lance_spark_ops.spark.runtime.config import (
    option_specs,
    parse_key_values,
    redact,
    secret_values,
    storage_options_from_env,
    typed_options,
)

__all__ = ["CHART_SERIES", "fleet_command", "fleet_main", "parse", "printable"]

CHART_SERIES = ("fragment_rows_histogram", "version_times")


def parse(job: Job, argv: Sequence[str] | None, environ: Mapping[str, str] | None
          ) -> tuple[list[Any], Any, dict, dict]:
    """(targets, options, storage options, secret namespace properties); flags over --config."""
    from lance_spark_ops.namespace.target import namespace_properties, secret_properties
    from lance_spark_ops.spark.fleet.maintenance import FleetTarget

    parser = build_parser(job)
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
    values = typed_options(job.options, config, source=ns.config)
    for spec in option_specs(job.options):
        if getattr(ns, spec.name) is not None:
            values[spec.name] = getattr(ns, spec.name)
        elif spec.required and spec.name not in values:
            raise UsageError(f"{spec.flag} is required (or `{spec.name}` in --config)")
    opts = job.options(**values)
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


def fleet_command(job: Job, argv: Sequence[str] | None, environ: Mapping[str, str] | None,
                  body: Callable[[Any, Any, dict[str, Any], Any], int]) -> int:
    """The fleet jobs' command-line frame: parse the targets and options, hide every secret (what
    namespaces vend during the run too), then ``body(targets, options, storage, secrets)``; ``--help``
    returns its code and any error ends in one error line and the JSON line."""
    from lance_spark_ops.namespace.resolve import LiveSecrets

    setup_logging()
    secrets: Any = ()
    try:
        targets, opts, storage, ns_secrets = parse(job, argv, environ)
        # what namespaces vend (and refresh) during the run is hidden as soon as it arrives
        secrets = LiveSecrets(secret_values({**storage, **ns_secrets}))
        setup_logging("INFO", secrets)
        return body(targets, opts, storage, secrets)
    except SystemExit as e:  # --help
        return e.code if isinstance(e.code, int) else 0
    except Exception as e:  # noqa: BLE001 - every failure ends in an exit code and a JSON line
        code = exit_code(e)
        sys.stderr.write(redact(f"{job.name}: error: {type(e).__name__}: {e}\n", secrets))
        print_metrics({"error": {"type": type(e).__name__, "message": str(e)[:2000]}, "exit_code": code,
                       "job": job.name}, secrets)
        return code


def fleet_main(job: Job, argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None,
               measure_only: bool = False) -> int:
    """Run ``job``'s command line: ``maintain`` (honouring ``dry_run``, ``budget_seconds``,
    ``scheduler_pool`` when its options have them), or with ``measure_only`` the ``report``."""

    def body(targets: Any, opts: Any, storage: dict[str, Any], secrets: Any) -> int:
        from lance_spark_ops.fleet.policy_file import load_policy
        from lance_spark_ops.spark.fleet.maintenance import exit_status, maintain, report, summary_lines

        policy = load_policy(opts.policy)  # a bad policy is a usage error before Spark starts
        dry_run = measure_only or getattr(opts, "dry_run", False)
        spark = None
        if not dry_run:
            from lance_spark_ops.spark.runtime.cli import start_session

            spark = start_session(job.name)
        t0 = time.perf_counter()
        if measure_only:
            result = report(spark, targets, opts.report, policy, storage_options=storage, secrets=secrets,
                            max_concurrent_tables=opts.max_concurrent_tables)
        else:
            result = maintain(spark, targets, policy, dry_run=dry_run,
                              max_concurrent_tables=opts.max_concurrent_tables,
                              budget_seconds=getattr(opts, "budget_seconds", None),
                              storage_options=storage, scheduler_pool=getattr(opts, "scheduler_pool", None))
        for line in summary_lines(result):
            sys.stdout.write(redact(line, secrets) + "\n")
        data = json.loads(redact(json.dumps(result.to_dict(), default=str), secrets))
        if opts.report and not measure_only:
            from lance_spark_ops.fleet.report import write_report

            write_report(data, opts.report)
        code = exit_status(result, exit_code, EXIT_FAILED)
        print_metrics({**printable(data), "exit_code": code, "job": job.name,
                       "wall_seconds": round(time.perf_counter() - t0, 3)}, secrets)
        return code

    return fleet_command(job, argv, environ, body)
