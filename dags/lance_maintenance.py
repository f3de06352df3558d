"""Airflow 3 DAG ``lance_maintenance``: maintenance of one Lance dataset as spark-submit tasks of
the jobs in ``jobs/`` - ``validate`` first (a table whose manifest contradicts itself or its
files fails it with exit 7, and nothing downstream runs), then compaction, then deletion
materialization, then ``optimize_indices`` (indexes the rows appended since the indices were
built), then the row-id index rebuild, then
``vacuum`` (once the others committed: it removes the versions they replaced, by default those
older than 14 days).

Trigger it with ``{"uri": "s3://bucket/table.lance", ...}``; every other param is a job
option (the job's flag in snake_case) and defaults to the job's own default. The master is
the ``spark_default`` connection (e.g. ``AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark",
"host": "yarn"}'``). Storage options (credentials) are not params - DAG-run confs are stored
and shown in the UI: give them to the worker's environment (``LSO_STORAGE_OPTIONS`` or
``LSO_STORAGE_OPTION_<KEY>``, inherited by spark-submit in client mode) or in a config file
named by the ``config_<job>`` param (a path on the worker, passed as ``--config``).

A failed job fails its task; the log says the job's exit code and what it means. Exit 3 (a
commit conflict: nothing changed) is left to the task's retries; 2, 4, 5, 6, 7 and 8 fail the
task without retrying (5: the commit may have landed - look before running again; 6: no dataset
at the URI; 7: the table is inconsistent - see the validate task's findings; 8: the store refused
the connection's credentials).

Paths, from the environment of the Airflow worker: ``LSO_JOBS_DIR`` (default: ``jobs/`` beside
this file's folder), ``LSO_CONF_DIR`` (default: ``conf/`` there; its ``spark-defaults.conf``
and ``log4j2.properties`` are passed to spark-submit).
"""

from __future__ import annotations

import os
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Param, chain

try:
    from airflow.sdk.exceptions import AirflowException, AirflowFailException
except ImportError:  # older task SDKs
    from airflow.exceptions import AirflowException, AirflowFailException

REPO = Path(__file__).resolve().parent.parent
JOBS_DIR = Path(os.environ.get("LSO_JOBS_DIR", REPO / "jobs"))
CONF_DIR = Path(os.environ.get("LSO_CONF_DIR", REPO / "conf"))
LOG4J2 = CONF_DIR / "log4j2.properties"
CONN_ID = "spark_default"
ROW_ID_JOB = "rebuild_row_id_index"

# job -> its options exposed as params: {name: (default, JSON-schema type, description)}.
# A None default leaves the flag out (the job's own default applies).
JOB_OPTIONS: dict[str, dict[str, tuple[Any, Any, str]]] = {
    "validate": {},
    "compact": {
        "target_rows_per_fragment": (1024 * 1024, "integer", "rows per output fragment"),
        "materialize_deletions_threshold": (0.1, "number", "deleted fraction above which a fragment is "
                                                           "rewritten"),
        "compaction_mode": ("reencode", "string", "reencode | try_binary_copy | force_binary_copy"),
        "max_source_fragments": (None, ["null", "integer"], "rewrite at most this many fragments a run"),
        "commit_every": (None, ["null", "integer"], "commit after every N task groups"),
        "dry_run": (False, "boolean", "plan only"),
    },
    "materialize_deletions": {
        "threshold": (0.0, "number", "rewrite fragments whose deleted fraction is above this"),
    },
    "optimize_indices": {
        "index_names": (None, ["null", "string"], "comma-separated indices to optimize (unset: all)"),
        "num_indices_to_merge": (None, ["null", "integer"], "newest segments merged with the new data "
                                                            "(unset: 1, as pylance; 0: a delta segment)"),
        "retrain": (False, "boolean", "rebuild the indices from the whole column"),
        "merge_policy": ("pylance", "string", "pylance | tiered (similar-size segments merged in rounds)"),
    },
    ROW_ID_JOB: {
        "rows_per_partition": (1 << 20, "integer", "rows per index partition"),
        "index": (True, "boolean", "write the row-id index (false: only compact the sequences)"),
    },
    "vacuum": {
        "older_than": (None, ["null", "string"], "remove versions older than this, e.g. 14d, 12h, 90s "
                                                 "(unset: 14d unless retain_versions is set)"),
        "retain_versions": (None, ["null", "integer"], "always keep this many of the newest versions"),
        "delete_unverified": (False, "boolean", "also delete unreferenced files younger than 7 days"),
        "error_if_tagged_old_versions": (True, "boolean", "fail when a tagged version is old enough to go"),
    },
}
EXIT_MEANINGS = {
    1: "failed (the dataset is left as it was)",
    2: "bad usage or option values",
    3: "commit conflict: nothing changed, running again is safe",
    4: "incompatible concurrent change: nothing changed, look at the dataset first",
    5: "commit state unknown: the commit may have landed and its files were kept; check the dataset's "
       "latest version before anything else",
    6: "no dataset at the URI, no such table or namespace root: fix the uri / table param",
    7: "the table is inconsistent (its manifest contradicts itself or its files): nothing was changed; "
       "see the validate task's findings",
    8: "the store refused access (credentials missing, invalid or expired, or not allowed): nothing was "
       "changed; fix the connection's credentials or the bucket's policy",
}
NO_RETRY = (2, 4, 5, 6, 7, 8)


def job_args(job: str, params: dict[str, Any]) -> list[str]:
    """The job's command line from the run's params: the URI, ``--config`` when given, and one
    flag per option param that is set (booleans as ``--flag`` / ``--no-flag``)."""
    args = [str(params["uri"])]
    if params.get(f"config_{job}"):
        args += ["--config", str(params[f"config_{job}"])]
    for name in JOB_OPTIONS[job]:
        value = params.get(name)
        flag = "--" + name.replace("_", "-")
        if value is None or value == "":
            continue
        if isinstance(value, bool):
            args.append(flag if value else "--no-" + flag[2:])
        else:
            args += [flag, str(value)]
    return args


class LanceJobOperator(SparkSubmitOperator):
    """``spark-submit jobs/<job>.py`` with the run's params as flags; the job's exit code is
    logged with its meaning, and codes that retrying cannot fix fail the task for good."""

    def __init__(self, *, job: str, **kwargs: Any) -> None:
        super().__init__(
            task_id=job, application=str(JOBS_DIR / f"{job}.py"), name=f"lance-{job}", conn_id=CONN_ID,
            properties_file=str(CONF_DIR / "spark-defaults.conf"),
            conf={"spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={LOG4J2}"},
            **kwargs)
        self.job = job

    def execute(self, context: Any) -> Any:
        self.application_args = job_args(self.job, context["params"])
        try:
            return super().execute(context)
        except AirflowException as e:
            found = re.search(r"Error code is: (\d+)", str(e))
            if found is None:
                raise
            code = int(found.group(1))
            message = f"lance job {self.job} exited with code {code}: {EXIT_MEANINGS.get(code, 'failed')}"
            self.log.error(message)
            if code in NO_RETRY:
                raise AirflowFailException(message) from e
            raise AirflowException(message) from e


def _params() -> dict[str, Param]:
    params = {"uri": Param(type="string", minLength=1, description="the Lance dataset's URI")}
    for job, options in JOB_OPTIONS.items():
        params[f"config_{job}"] = Param(None, type=["null", "string"],
                                        description=f"TOML/JSON options file for {job} (path on the worker)")
        for name, (default, kind, text) in options.items():
            params[name] = Param(default, type=kind, description=f"{job}: {text}")
    return params


with DAG(
    dag_id="lance_maintenance",
    description="Validate a Lance dataset, compact it, materialize its deletions, optimize its indices, "
                "rebuild its row-id index and vacuum it on Spark",
    schedule=None,
    catchup=False,
    params=_params(),
    default_args={"retries": 1, "retry_delay": timedelta(minutes=5)},
    tags=["lance"],
) as dag:
    # vacuum last, once the others committed
    chain(*(LanceJobOperator(job=job) for job in ("validate", "compact", "materialize_deletions",
                                                  "optimize_indices", ROW_ID_JOB, "vacuum")))
