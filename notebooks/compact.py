# Databricks notebook source
# MAGIC %md
# MAGIC # Compact a Lance dataset
# MAGIC
# MAGIC Merges small neighbouring fragments and drops deleted rows, on this cluster's Spark
# MAGIC (`lance_spark_ops.spark.compact`, as `jobs/compact.py`). Needs `lance-spark-ops` installed on
# MAGIC the cluster (driver and workers). Set the widgets above and run all: `uri` is required; an
# MAGIC empty widget means the option's default. Start with `dry_run` = `true` to see the plan.
# MAGIC
# MAGIC Storage options (credentials) are read from the cluster's environment (`LSO_STORAGE_OPTIONS`
# MAGIC as a JSON object, or `LSO_STORAGE_OPTION_<KEY>`); on Databricks, add them from a secret scope
# MAGIC in the cell below instead of typing them into a widget.

# COMMAND ----------

# ruff: noqa: F821 - spark, dbutils and display are provided by the Databricks runtime
from lance_spark_ops.spark import compact
from lance_spark_ops.spark.files.compaction_options import COMPACTION_MODES, CompactionOptions
from lance_spark_ops.spark.runtime.cli import metric_rows
from lance_spark_ops.spark.runtime.config import option_specs, storage_options_from_env, typed_options

CHOICES = {"compaction_mode": COMPACTION_MODES}
dbutils.widgets.text("uri", "", "Dataset URI")
for spec in option_specs(CompactionOptions, CHOICES):  # one widget per option, named as the job's flags
    shown = "" if spec.default is None or spec.multiple else str(spec.default).lower()
    dbutils.widgets.text(spec.name, shown, spec.name)

# COMMAND ----------

uri = dbutils.widgets.get("uri").strip()
if not uri:
    raise ValueError("set the uri widget to the dataset's URI")
options = typed_options(CompactionOptions, {spec.name: dbutils.widgets.get(spec.name)
                                            for spec in option_specs(CompactionOptions, CHOICES)},
                        choices=CHOICES, source="widgets")
storage_options = storage_options_from_env()
# e.g. storage_options["aws_secret_access_key"] = dbutils.secrets.get("lance", "aws-secret-access-key")

# COMMAND ----------

metrics = compact(spark, uri, storage_options=storage_options, **options)
if metrics.dry_run:
    for i, group in enumerate(metrics.plan):
        print(f"task {i}: fragments {group}")

# COMMAND ----------

metrics_df = spark.createDataFrame(metric_rows(metrics), "metric string, value string")
try:
    display(metrics_df)
except NameError:  # outside Databricks
    metrics_df.show(100, truncate=False)
