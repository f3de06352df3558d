# Databricks notebook source
# MAGIC %md
# MAGIC # Rebuild the row-id index of a Lance dataset
# MAGIC
# MAGIC Compacts every fragment's row-id sequence (a new version when anything shrank) and writes
# MAGIC the row id -> row address index under `_lance_spark_ops/row_id_index/` (as the job
# MAGIC `jobs/rebuild_row_id_index.py`). A dataset without stable
# MAGIC row ids is left unchanged: its row id is the row address. Storage options come from the
# MAGIC cluster's environment.

# COMMAND ----------

# ruff: noqa: F821 - spark, dbutils and display are provided by the Databricks runtime
from lance_spark_ops.spark import rebuild_row_id_index
from lance_spark_ops.spark.runtime.cli import metric_rows
from lance_spark_ops.spark.runtime.config import parse_bool, storage_options_from_env

dbutils.widgets.text("uri", "", "Dataset URI")
dbutils.widgets.text("rows_per_partition", str(1 << 20), "rows_per_partition")
dbutils.widgets.text("fragments_per_task", "", "fragments_per_task (empty: automatic)")
dbutils.widgets.text("index", "true", "index: write the index (false: only compact the sequences)")
dbutils.widgets.text("index_file_version", "2.1", "index_file_version: 2.0 | 2.1 | 2.2")

# COMMAND ----------

uri = dbutils.widgets.get("uri").strip()
if not uri:
    raise ValueError("set the uri widget to the dataset's URI")
fragments_per_task = dbutils.widgets.get("fragments_per_task").strip()
metrics = rebuild_row_id_index(
    spark, uri, storage_options=storage_options_from_env(),
    rows_per_partition=int(dbutils.widgets.get("rows_per_partition")),
    fragments_per_task=int(fragments_per_task) if fragments_per_task else None,
    write_index=parse_bool(dbutils.widgets.get("index") or "true"),
    index_file_version=dbutils.widgets.get("index_file_version").strip() or "2.1")
print(metrics.message)

# COMMAND ----------

metrics_df = spark.createDataFrame(metric_rows(metrics), "metric string, value string")
try:
    display(metrics_df)
except NameError:  # outside Databricks
    metrics_df.show(100, truncate=False)
