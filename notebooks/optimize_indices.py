# Databricks notebook source
# MAGIC %md
# MAGIC # Bring a Lance dataset's indices up to date
# MAGIC
# MAGIC Indexes the fragments added since the indices were built, merging segments as pylance's
# MAGIC `optimize_indices` does (or in size tiers), on this cluster's Spark
# MAGIC (`lance_spark_ops.spark.optimize_indices`, as `jobs/optimize_indices.py`). Storage options
# MAGIC come from the cluster's environment (`LSO_STORAGE_OPTIONS`, `LSO_STORAGE_OPTION_<KEY>`).

# COMMAND ----------

# ruff: noqa: F821 - spark, dbutils and display are provided by the Databricks runtime
from lance_spark_ops.spark.indices.indexing import optimize_indices
from lance_spark_ops.spark.runtime.cli import metric_rows
from lance_spark_ops.spark.runtime.config import parse_bool, storage_options_from_env

dbutils.widgets.text("uri", "", "Dataset URI")
dbutils.widgets.text("index_names", "", "Index names, comma-separated (empty: all)")
dbutils.widgets.text("num_indices_to_merge", "", "num_indices_to_merge (empty: 1, as pylance)")
dbutils.widgets.text("retrain", "false", "retrain (true: rebuild from the whole column)")
dbutils.widgets.text("merge_policy", "pylance", "merge_policy: pylance or tiered")

# COMMAND ----------

uri = dbutils.widgets.get("uri").strip()
if not uri:
    raise ValueError("set the uri widget to the dataset's URI")
names = [n.strip() for n in dbutils.widgets.get("index_names").split(",") if n.strip()] or None
merge_text = dbutils.widgets.get("num_indices_to_merge").strip()
metrics = optimize_indices(spark, uri, index_names=names,
                           num_indices_to_merge=int(merge_text) if merge_text else None,
                           retrain=parse_bool(dbutils.widgets.get("retrain")),
                           merge_policy=dbutils.widgets.get("merge_policy").strip(),
                           storage_options=storage_options_from_env())

# COMMAND ----------

metrics_df = spark.createDataFrame(metric_rows(metrics), "metric string, value string")
try:
    display(metrics_df)
except NameError:  # outside Databricks
    metrics_df.show(100, truncate=False)
