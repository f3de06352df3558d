# Databricks notebook source
# MAGIC %md
# MAGIC # Vacuum a Lance dataset
# MAGIC
# MAGIC Removes old versions and the files only they referenced, on this cluster's Spark
# MAGIC (`lance_spark_ops.spark.vacuum`, as `jobs/vacuum.py`; pylance's `cleanup_old_versions`).
# MAGIC Durations are a number and a unit: `90s`, `30m`, `12h`, `14d`, `2w`; an empty `older_than`
# MAGIC means 14 days, or only `retain_versions` when that is set. Set `dry_run` = `true` first to
# MAGIC list what would go. Storage options come from the cluster's environment
# MAGIC (`LSO_STORAGE_OPTIONS`, `LSO_STORAGE_OPTION_<KEY>`).

# COMMAND ----------

# ruff: noqa: F821 - spark, dbutils and display are provided by the Databricks runtime
from lance_spark_ops.spark import vacuum
from lance_spark_ops.spark.files.vacuuming import parse_duration
from lance_spark_ops.spark.runtime.cli import metric_rows
from lance_spark_ops.spark.runtime.config import parse_bool, storage_options_from_env

dbutils.widgets.text("uri", "", "Dataset URI")
dbutils.widgets.text("older_than", "", "older_than (e.g. 14d; empty: 14d unless retain_versions)")
dbutils.widgets.text("retain_versions", "", "retain_versions (empty: no count)")
dbutils.widgets.text("delete_unverified", "false", "delete_unverified")
dbutils.widgets.text("unverified_older_than", "7d", "unverified_older_than")
dbutils.widgets.text("error_if_tagged_old_versions", "true", "error_if_tagged_old_versions")
dbutils.widgets.text("dry_run", "false", "dry_run (true: list, delete nothing)")

# COMMAND ----------

uri = dbutils.widgets.get("uri").strip()
if not uri:
    raise ValueError("set the uri widget to the dataset's URI")
older_than = dbutils.widgets.get("older_than").strip()
retain_versions = dbutils.widgets.get("retain_versions").strip()
storage_options = storage_options_from_env()
# e.g. storage_options["aws_secret_access_key"] = dbutils.secrets.get("lance", "aws-secret-access-key")

metrics = vacuum(
    spark, uri, older_than=parse_duration(older_than) if older_than else None,
    retain_versions=int(retain_versions) if retain_versions else None,
    delete_unverified=parse_bool(dbutils.widgets.get("delete_unverified") or "false"),
    unverified_older_than=parse_duration(dbutils.widgets.get("unverified_older_than").strip() or "7d"),
    error_if_tagged_old_versions=parse_bool(dbutils.widgets.get("error_if_tagged_old_versions") or "true"),
    dry_run=parse_bool(dbutils.widgets.get("dry_run") or "false"), storage_options=storage_options)
if metrics.dry_run:
    for path in metrics.removed_paths:
        print(f"would remove {path}")
if metrics.failed_deletes:
    print(f"{metrics.failed_deletes} deletes failed, e.g. {metrics.failures[:10]}")

# COMMAND ----------

summary = {k: v for k, v in vars(metrics).items() if k not in ("removed_paths", "failures")}
summary["failures"] = metrics.failures[:100]
metrics_df = spark.createDataFrame(metric_rows(summary), "metric string, value string")
try:
    display(metrics_df)
except NameError:  # outside Databricks
    metrics_df.show(100, truncate=False)
