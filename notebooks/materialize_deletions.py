# Databricks notebook source
# MAGIC %md
# MAGIC # Materialize the deletions of a Lance dataset
# MAGIC
# MAGIC Rewrites every fragment whose deleted fraction is above `threshold` (one fragment in, one
# MAGIC out), so no deletion file remains on it (`jobs/materialize_deletions.py`). Row ids are kept
# MAGIC under stable row ids. Storage options come from the cluster's environment
# MAGIC (`LSO_STORAGE_OPTIONS`, `LSO_STORAGE_OPTION_<KEY>`).

# COMMAND ----------

# ruff: noqa: F821 - spark, dbutils and display are provided by the Databricks runtime
from lance_spark_ops.spark import materialize_deletions
from lance_spark_ops.spark.runtime.cli import metric_rows
from lance_spark_ops.spark.runtime.config import storage_options_from_env

dbutils.widgets.text("uri", "", "Dataset URI")
dbutils.widgets.text("threshold", "0.0", "threshold (deleted fraction, 0 to 1)")
dbutils.widgets.text("data_storage_version", "", "data_storage_version (empty: the dataset's)")

# COMMAND ----------

uri = dbutils.widgets.get("uri").strip()
if not uri:
    raise ValueError("set the uri widget to the dataset's URI")
threshold = float(dbutils.widgets.get("threshold") or 0.0)
data_storage_version = dbutils.widgets.get("data_storage_version").strip() or None

metrics = materialize_deletions(spark, uri, threshold, storage_options=storage_options_from_env(),
                                data_storage_version=data_storage_version)

# COMMAND ----------

metrics_df = spark.createDataFrame(metric_rows(metrics), "metric string, value string")
try:
    display(metrics_df)
except NameError:  # outside Databricks
    metrics_df.show(100, truncate=False)
