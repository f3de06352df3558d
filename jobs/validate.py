"""Validate Lance tables on Spark: every manifest against itself and its files (pylance's validate()).

    spark-submit jobs/validate.py (URI ... | --namespace-impl dir|rest|CLASS --namespace-prop K=V ...
        [--namespace a.b] [--recursive] [--table a.b.t]) [--version N] [--config FILE] ...

Checks the latest version (or --version) of each table: duplicate fragment ids, fragments
without data files, data files shared between fragments, file versions, max_fragment_id, row-id
overlaps and index coverage from the manifest; on executors, every data, deletion, row-id and
index file exists with its recorded size and each footer agrees with the manifest (rows,
version), each deletion file with its count. Nothing is written. Prints one JSON line per
finding ({"table", "version", "fragment", "file", "check", "detail"}), one summary line per
table, then the result as one JSON line. Exit code: 0 when every table is consistent, 7 when a
table has findings, else the code a failure gives (6: no dataset, 2: usage).
"""

# no `from __future__ import annotations`: the options dataclass must also build when this file
# is loaded by path without being registered in sys.modules

import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lance_spark_ops.spark.runtime.cli import EXIT_FAILED, EXIT_INCONSISTENT, EXIT_OK, Job


@dataclass(frozen=True)
class ValidateOptions:
    """Options of ``jobs/validate.py``.

    Attributes:
        version: check this version of every table (none: the latest).
        namespace: with --namespace-impl: the tables of this namespace (a.b; none: the root).
        recursive: with --namespace-impl: the tables of its child namespaces too.
    """

    version: int | None = None
    namespace: str | None = None
    recursive: bool = False


def _run(spark: Any, uri: str, storage_options: dict[str, Any], opts: ValidateOptions) -> Any:
    from lance_spark_ops.spark import validate

    return validate(spark, uri, version=opts.version, storage_options=storage_options)


JOB = Job("validate", _run, ValidateOptions, __doc__.split("\n\n")[0],
          uri_help="dataset URIs (several allowed), or the tables of a namespace (--namespace-impl)")


def _table_lines(name: str, m: Any) -> list[str]:
    rows = [json.dumps(f, default=str) for f in m.findings]
    state = "consistent" if m.consistent else f"INCONSISTENT: {len(m.findings)} finding(s), {m.refusing} " \
                                              "refused by rewrites"
    return [*rows, f"{name} version {m.version}: {state} ({m.fragments} fragments, {m.files_checked} files, "
                   f"{m.indices} index entries checked)"]


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    from lance_spark_ops.spark.fleet.fleet_job import fleet_command

    return fleet_command(JOB, argv, environ, _validate_tables)


def _validate_tables(targets: Any, opts: ValidateOptions, storage: dict[str, Any], secrets: Any) -> int:
    """Every table of the command line checked in turn; one table's failure never stops the others."""
    from lance_spark_ops.spark import validate
    from lance_spark_ops.spark.fleet.maintenance import targets_of
    from lance_spark_ops.spark.runtime import cli
    from lance_spark_ops.spark.runtime.cli import exit_code, print_metrics
    from lance_spark_ops.spark.runtime.config import redact

    for uri in (t for t in targets if isinstance(t, str)):  # before Spark starts: exit 6
        try:
            cli._require_dataset(uri, storage)  # noqa: SLF001 - the jobs' shared check
        except cli.DatasetNotFound as e:
            return cli._fail(JOB, uri, e, secrets)  # noqa: SLF001
    # tables resolved on the driver before Spark starts: when none of them exists, exit 6 now
    resolved = targets_of(targets, storage)
    missing = [t.error for t in resolved if isinstance(t.error, cli.DatasetNotFound)]
    if missing and len(missing) == len(resolved):
        raise missing[0]
    spark = cli._session(JOB)  # noqa: SLF001
    t0 = time.perf_counter()
    tables: list[dict[str, Any]] = []
    codes: set[int] = set()
    for table in resolved:
        entry: dict[str, Any] = {"table": table.name}
        try:
            if table.error is not None:
                raise table.error
            uri, so = table.location()
            m = validate(spark, uri, version=opts.version, table=table.name, storage_options=so)
            for line in _table_lines(table.name, m):
                sys.stdout.write(redact(line, secrets) + "\n")
            entry.update(uri=uri, version=m.version, consistent=m.consistent, findings=len(m.findings),
                         refusing=m.refusing, fragments=m.fragments, files_checked=m.files_checked)
            codes.add(EXIT_OK if m.consistent else EXIT_INCONSISTENT)
        except Exception as e:  # noqa: BLE001 - one table's failure never stops the others
            codes.add(exit_code(e))
            entry["error"] = {"type": type(e).__name__, "message": str(e)[:2000]}
            sys.stdout.write(redact(f"{table.name}: failed: {type(e).__name__}: {e}", secrets) + "\n")
        tables.append(entry)
    failures = codes - {EXIT_OK, EXIT_INCONSISTENT}
    code = (failures.pop() if len(failures) == 1 else EXIT_FAILED) if failures else \
        EXIT_INCONSISTENT if EXIT_INCONSISTENT in codes else EXIT_OK
    print_metrics({"job": "validate", "tables": tables, "tables_consistent": sum(
        bool(t.get("consistent")) for t in tables), "tables_inconsistent": sum(
        t.get("consistent") is False for t in tables), "exit_code": code,
        "wall_seconds": round(time.perf_counter() - t0, 3)}, secrets)
    return code


if __name__ == "__main__":
    sys.exit(main())
