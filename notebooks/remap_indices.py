# Databricks notebook source
# MAGIC %md
# MAGIC # Remap the indices of a Lance dataset
# MAGIC
# MAGIC After compaction with `defer_index_remap`, rewrites on this cluster's Spark every index still
# MAGIC behind the fragment reuse index and trims the reuse versions all indices have caught up with
# MAGIC (`lance_spark_ops.spark.indices.index_remap.remap_indices`, as `jobs/remap_indices.py`). Storage
# MAGIC options come from the cluster's environment (`LSO_STORAGE_OPTIONS`, `LSO_STORAGE_OPTION_<KEY>`).

# COMMAND ----------

# ruff: noqa: F821 - spark, dbutils and display are provided by the Databricks runtime
from lance_spark_ops.spark.indices.index_remap import MAX_INDEX_RETRIES, remap_indices
from lance_spark_ops.spark.runtime.cli import metric_rows
from lance_spark_ops.spark.runtime.config import storage_options_from_env

dbutils.widgets.text("uri", "", "Dataset URI")
dbutils.widgets.text("max_retries", str(MAX_INDEX_RETRIES), "max_retries (after a commit conflict)")

# COMMAND ----------

uri = dbutils.widgets.get("uri").strip()
if not uri:
    raise ValueError("set the uri widget to the dataset's URI")
max_retries = int(dbutils.widgets.get("max_retries").strip() or MAX_INDEX_RETRIES)
metrics = remap_indices(spark, uri, storage_options=storage_options_from_env(), max_retries=max_retries)

# COMMAND ----------

metrics_df = spark.createDataFrame(metric_rows(metrics), "metric string, value string")
try:
    display(metrics_df)
except NameError:  # outside Databricks
    metrics_df.show(100, truncate=False)
