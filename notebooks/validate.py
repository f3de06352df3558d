# Databricks notebook source
# MAGIC %md
# MAGIC # Validate a Lance dataset
# MAGIC
# MAGIC Checks one version (the latest, or `version`) of a dataset against itself and its files on
# MAGIC this cluster's Spark (`lance_spark_ops.spark.validate`, as `jobs/validate.py`; pylance's
# MAGIC `LanceDataset.validate()`): duplicate fragment ids, fragments without files, file versions,
# MAGIC sizes and footers, deletion counts, row ids, index files. Nothing is written. Shows one row
# MAGIC per finding (table, version, fragment, file, check, detail) and fails the run when there is
# MAGIC any. Storage options come from the cluster's environment (`LSO_STORAGE_OPTIONS`,
# MAGIC `LSO_STORAGE_OPTION_<KEY>`).

# COMMAND ----------

# ruff: noqa: F821 - spark, dbutils and display are provided by the Databricks runtime
from lance_spark_ops.spark import validate
from lance_spark_ops.spark.runtime.config import storage_options_from_env

dbutils.widgets.text("uri", "", "Dataset URI")
dbutils.widgets.text("version", "", "version (empty: the latest)")

# COMMAND ----------

uri = dbutils.widgets.get("uri").strip()
if not uri:
    raise ValueError("set the uri widget to the dataset's URI")
version = dbutils.widgets.get("version").strip()
storage_options = storage_options_from_env()
# e.g. storage_options["aws_secret_access_key"] = dbutils.secrets.get("lance", "aws-secret-access-key")

metrics = validate(spark, uri, version=int(version) if version else None, storage_options=storage_options)
print(f"version {metrics.version}: {'consistent' if metrics.consistent else 'INCONSISTENT'} "
      f"({len(metrics.findings)} findings, {metrics.fragments} fragments, {metrics.files_checked} files)")

# COMMAND ----------

findings_df = spark.createDataFrame(
    [(str(f["table"]), int(f["version"]), f["fragment"], f["file"], f["check"], f["detail"])
     for f in metrics.findings],
    "table string, version long, fragment long, file string, check string, detail string")
try:
    display(findings_df)
except NameError:  # outside Databricks
    findings_df.show(100, truncate=False)
if not metrics.consistent:
    raise RuntimeError(f"{uri}: {len(metrics.findings)} inconsistencies found (see the table above)")
