"""Airflow 3 DAG ``lance_fleet_maintenance``: daily, ``jobs/maintain.py`` over the tables of a
Lance Namespace as one spark-submit task - each table measured, what the policy implies run
(compaction, deletion materialization, index remap / optimization, vacuum), several tables at
once in the one Spark application, a health report written.

Params: ``namespace_impl`` (dir, rest or a class path) and ``namespace_properties`` (an object
of strings, e.g. ``{"root": "s3://bucket/lake"}``; tokens do not belong here - DAG-run confs are
stored and shown in the UI: give them in a ``config`` file on the worker, as
``namespace_properties``), ``namespace`` / ``recursive``, ``policy`` (a TOML path on the
worker), ``dry_run``, ``max_concurrent_tables``, ``budget_seconds``, ``report`` (a directory on
the driver). Storage options: the worker's environment (``LSO_STORAGE_OPTIONS``), as the
``lance_maintenance`` DAG.

Exit codes as the jobs': 0 every table fine; 3 (every failed table had a commit conflict) is
left to the retries; 2, 4, 5 and 8 (the store refused access to every failed table) fail the
task without retrying; 1 (tables failed otherwise) is
retried once - a re-run measures again and does only what is left. Paths: ``LSO_JOBS_DIR``,
``LSO_CONF_DIR`` as in ``lance_maintenance``.
"""

from __future__ import annotations

import os
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Param

try:
    from airflow.sdk.exceptions import AirflowException, AirflowFailException
except ImportError:  # older task SDKs
    from airflow.exceptions import AirflowException, AirflowFailException

REPO = Path(__file__).resolve().parent.parent
JOBS_DIR = Path(os.environ.get("LSO_JOBS_DIR", REPO / "jobs"))
CONF_DIR = Path(os.environ.get("LSO_CONF_DIR", REPO / "conf"))
LOG4J2 = CONF_DIR / "log4j2.properties"
CONN_ID = "spark_default"
NO_RETRY = (2, 4, 5, 8)
EXIT_MEANINGS = {
    1: "tables failed (see the job's JSON line: one entry per table)",
    2: "bad usage, option values or policy",
    3: "commit conflicts: nothing changed on those tables, running again is safe",
    4: "incompatible concurrent changes: look at those tables first",
    5: "commit state unknown on a table: check its latest version before anything else",
    8: "the store refused access to the failed tables (credentials or policy): fix them, do not retry",
}


def maintain_args(params: dict[str, Any]) -> list[str]:
    """``jobs/maintain.py``'s command line from the run's params."""
    args = ["--namespace-impl", str(params["namespace_impl"])]
    for key, value in (params.get("namespace_properties") or {}).items():
        args += ["--namespace-prop", f"{key}={value}"]
    for name in ("namespace", "policy", "max_concurrent_tables", "budget_seconds", "report", "config"):
        if params.get(name) not in (None, ""):
            args += ["--" + name.replace("_", "-"), str(params[name])]
    for name in ("recursive", "dry_run"):
        if params.get(name):
            args.append("--" + name.replace("_", "-"))
    return args


class MaintainOperator(SparkSubmitOperator):
    """``spark-submit jobs/maintain.py`` with the run's params; exit codes logged with their meaning."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(
            task_id="maintain", application=str(JOBS_DIR / "maintain.py"), name="lance-maintain",
            conn_id=CONN_ID, properties_file=str(CONF_DIR / "spark-defaults.conf"),
            conf={"spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={LOG4J2}"}, **kwargs)

    def execute(self, context: Any) -> Any:
        self.application_args = maintain_args(context["params"])
        try:
            return super().execute(context)
        except AirflowException as e:
            found = re.search(r"Error code is: (\d+)", str(e))
            if found is None:
                raise
            code = int(found.group(1))
            message = f"lance maintain exited with code {code}: {EXIT_MEANINGS.get(code, 'failed')}"
            self.log.error(message)
            if code in NO_RETRY:
                raise AirflowFailException(message) from e
            raise AirflowException(message) from e


with DAG(
    dag_id="lance_fleet_maintenance",
    description="Measure every Lance table of a namespace and run what its policy implies, on Spark",
    schedule="@daily",
    catchup=False,
    params={
        "namespace_impl": Param("dir", type="string", minLength=1, description="dir, rest or a class path"),
        "namespace_properties": Param({}, type="object", description="namespace properties (no tokens)"),
        "namespace": Param(None, type=["null", "string"], description="a.b: its tables (null: the root)"),
        "recursive": Param(True, type="boolean", description="child namespaces' tables too"),
        "policy": Param(None, type=["null", "string"], description="policy TOML path on the worker"),
        "dry_run": Param(False, type="boolean", description="decide only"),
        "max_concurrent_tables": Param(2, type="integer", minimum=1, description="tables at once"),
        "budget_seconds": Param(None, type=["null", "number"], description="start no action after this"),
        "report": Param(None, type=["null", "string"], description="report directory on the driver"),
        "config": Param(None, type=["null", "string"], description="maintain options file on the worker"),
    },
    default_args={"retries": 1, "retry_delay": timedelta(minutes=10)},
    tags=["lance"],
) as dag:
    MaintainOperator()
