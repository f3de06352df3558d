# Databricks notebook source
# MAGIC %md
# MAGIC # Add columns to a Lance dataset
# MAGIC
# MAGIC Adds columns computed by Spark SQL expressions (`jobs/add_columns.py`). In the `column`
# MAGIC widget give one `NAME=SQL_EXPRESSION` a line (or separated by `;`), e.g.
# MAGIC `total=price * quantity`. Each fragment gets one new data file with only the new columns;
# MAGIC deleted rows read as null. Storage options come from the cluster's environment.

# COMMAND ----------

# ruff: noqa: F821 - spark, dbutils and display are provided by the Databricks runtime
from lance_spark_ops.spark import add_columns
from lance_spark_ops.spark.runtime.cli import metric_rows
from lance_spark_ops.spark.runtime.config import storage_options_from_env

dbutils.widgets.text("uri", "", "Dataset URI")
dbutils.widgets.text("column", "", "column: NAME=SQL_EXPRESSION (one a line or ;-separated)")
dbutils.widgets.text("rows_per_task", "", "rows_per_task (empty: automatic)")
dbutils.widgets.text("sql_engine", "auto", "sql_engine: auto | arrow | spark")

# COMMAND ----------

uri = dbutils.widgets.get("uri").strip()
if not uri:
    raise ValueError("set the uri widget to the dataset's URI")
columns = {}
for item in dbutils.widgets.get("column").replace(";", "\n").splitlines():
    if item.strip():
        name, sep, expr = item.partition("=")
        if not sep or not name.strip() or not expr.strip():
            raise ValueError(f"column expects NAME=SQL_EXPRESSION, got {item!r}")
        columns[name.strip()] = expr.strip()
rows_per_task = dbutils.widgets.get("rows_per_task").strip()
rows_per_task = int(rows_per_task) if rows_per_task else None

metrics = add_columns(spark, uri, columns, rows_per_task=rows_per_task,
                      sql_engine=dbutils.widgets.get("sql_engine").strip() or "auto",
                      storage_options=storage_options_from_env())

# COMMAND ----------

metrics_df = spark.createDataFrame(metric_rows(metrics), "metric string, value string")
try:
    display(metrics_df)
except NameError:  # outside Databricks
    metrics_df.show(100, truncate=False)
