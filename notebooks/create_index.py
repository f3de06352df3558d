# Databricks notebook source
# MAGIC %md
# MAGIC # Build an index on a Lance dataset
# MAGIC
# MAGIC Builds an index on one column on this cluster's Spark (`lance_spark_ops.spark.create_index`,
# MAGIC as `jobs/create_index.py`): executors read the column and write the index files, the driver
# MAGIC commits one CreateIndex. Parameters take pylance's names, one `key=value` per line in the
# MAGIC `params` widget (JSON values: numbers, true/false, lists). Storage options come from the
# MAGIC cluster's environment (`LSO_STORAGE_OPTIONS`, `LSO_STORAGE_OPTION_<KEY>`).

# COMMAND ----------

# ruff: noqa: F821 - spark, dbutils and display are provided by the Databricks runtime
from lance_spark_ops.spark.indices.indexing import create_index
from lance_spark_ops.spark.runtime.cli import metric_rows
from lance_spark_ops.spark.runtime.config import parse_bool, parse_param_values, storage_options_from_env

dbutils.widgets.text("uri", "", "Dataset URI")
dbutils.widgets.text("column", "", "Column")
dbutils.widgets.text("type", "BTREE",
                     "Index type (BTREE, BITMAP, RTREE, MINHASHLSH, INVERTED, IVF_PQ, IVF_RQ, ...)")
dbutils.widgets.text("name", "", "Index name (empty: COLUMN_idx)")
dbutils.widgets.text("replace", "", "replace (empty: pylance's default for the type)")
dbutils.widgets.text("params", "", "Parameters, key=value per line")

# COMMAND ----------

uri = dbutils.widgets.get("uri").strip()
column = dbutils.widgets.get("column").strip()
if not uri or not column:
    raise ValueError("set the uri and column widgets")
replace_text = dbutils.widgets.get("replace").strip()
params = parse_param_values([p.strip() for p in dbutils.widgets.get("params").splitlines() if p.strip()])
metrics = create_index(spark, uri, column, dbutils.widgets.get("type").strip(),
                       name=dbutils.widgets.get("name").strip() or None,
                       replace=parse_bool(replace_text) if replace_text else None,
                       storage_options=storage_options_from_env(), **params)

# COMMAND ----------

metrics_df = spark.createDataFrame(metric_rows(metrics), "metric string, value string")
try:
    display(metrics_df)
except NameError:  # outside Databricks
    metrics_df.show(100, truncate=False)
