# Databricks notebook source
# MAGIC %md
# MAGIC # Import a Delta Lake table into a Lance dataset
# MAGIC
# MAGIC Converts the Delta table's snapshot (its latest version, or `delta_version`) into Lance files
# MAGIC on this cluster's Spark and commits them as one version (`lance_spark_ops.spark.import_delta`,
# MAGIC as `jobs/import_delta.py`). `mode`: `create` (fails if the dataset exists), `append` (creates
# MAGIC it when absent) or `overwrite`. Storage options come from the cluster's environment
# MAGIC (`LSO_STORAGE_OPTIONS`, `LSO_STORAGE_OPTION_<KEY>`, pylance's names); the Delta side uses the
# MAGIC same unless set in the cell below.

# COMMAND ----------

# ruff: noqa: F821 - spark, dbutils and display are provided by the Databricks runtime
from lance_spark_ops.spark import import_delta
from lance_spark_ops.spark.files.delta_import import DEFAULT_MAX_ROWS_PER_FILE
from lance_spark_ops.spark.runtime.cli import metric_rows
from lance_spark_ops.spark.runtime.config import storage_options_from_env

dbutils.widgets.text("delta_uri", "", "Delta table URI")
dbutils.widgets.text("uri", "", "Lance dataset URI")
dbutils.widgets.text("mode", "create", "mode: create | append | overwrite")
dbutils.widgets.text("data_storage_version", "", "data_storage_version (empty: 2.2; append: the dataset's)")
dbutils.widgets.text("delta_version", "", "delta_version (empty: the latest)")
dbutils.widgets.text("max_rows_per_file", str(DEFAULT_MAX_ROWS_PER_FILE), "max_rows_per_file")

# COMMAND ----------

delta_uri = dbutils.widgets.get("delta_uri").strip()
uri = dbutils.widgets.get("uri").strip()
if not delta_uri or not uri:
    raise ValueError("set the delta_uri and uri widgets")
delta_version = dbutils.widgets.get("delta_version").strip()
storage_options = storage_options_from_env()
delta_storage_options = None  # None: the same as storage_options
# e.g. delta_storage_options = {"aws_secret_access_key": dbutils.secrets.get("delta", "aws-secret-key")}

metrics = import_delta(
    spark, delta_uri, uri, dbutils.widgets.get("mode").strip() or "create", storage_options=storage_options,
    delta_storage_options=delta_storage_options,
    data_storage_version=dbutils.widgets.get("data_storage_version").strip() or None,
    delta_version=int(delta_version) if delta_version else None,
    max_rows_per_file=int(dbutils.widgets.get("max_rows_per_file").strip() or DEFAULT_MAX_ROWS_PER_FILE))

# COMMAND ----------

metrics_df = spark.createDataFrame(metric_rows(metrics), "metric string, value string")
try:
    display(metrics_df)
except NameError:  # outside Databricks
    metrics_df.show(100, truncate=False)
