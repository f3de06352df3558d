# Databricks notebook source
# MAGIC %md
# MAGIC # Inspect a Lance data file
# MAGIC
# MAGIC Version, schema, page encodings and the first rows of one `.lance` file (as
# MAGIC `jobs/inspect_file.py`); runs on the driver only. Storage options come from the cluster's
# MAGIC environment.

# COMMAND ----------

# ruff: noqa: F821 - spark, dbutils and display are provided by the Databricks runtime
from lance_spark_ops import LanceFileReader
from lance_spark_ops.file.inspect import summarize
from lance_spark_ops.spark.runtime.cli import metric_rows
from lance_spark_ops.spark.runtime.config import storage_options_from_env

dbutils.widgets.text("uri", "", "Lance file path or URI")
dbutils.widgets.text("rows", "5", "rows: how many of the first rows to show")

# COMMAND ----------

uri = dbutils.widgets.get("uri").strip()
if not uri:
    raise ValueError("set the uri widget to the file's path or URI")
reader = LanceFileReader(uri, storage_options=storage_options_from_env())
print(summarize(reader.metadata))
print(reader.schema)
head = reader.read().slice(0, int(dbutils.widgets.get("rows") or 5))
metrics = {"version": reader.version, "rows": reader.num_rows, "columns": reader.schema.names}

# COMMAND ----------

rows_df = spark.createDataFrame(head.to_pandas()) if head.num_rows else None
metrics_df = spark.createDataFrame(metric_rows(metrics), "metric string, value string")
try:
    display(metrics_df)
    if rows_df is not None:
        display(rows_df)
except NameError:  # outside Databricks
    metrics_df.show(100, truncate=False)
    if rows_df is not None:
        rows_df.show(truncate=False)
