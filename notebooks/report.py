# Databricks notebook source
# MAGIC %md
# MAGIC # Health report of a fleet of Lance tables
# MAGIC
# MAGIC Measures every table of a Lance Namespace (or the URIs given) and shows what a policy would
# MAGIC decide for each (`lance_spark_ops.spark.report`, as `jobs/report.py`): nothing is committed
# MAGIC or deleted. Writes `report.json` and `index.html` to `report` (a local or `/dbfs/...`
# MAGIC directory). `namespace_properties` is `key=value` pairs separated by `;`; tokens belong in
# MAGIC `dbutils.secrets`, not in a widget. Storage options come from the cluster's environment.

# COMMAND ----------

# ruff: noqa: F821 - spark, dbutils and display are provided by the Databricks runtime
from lance_spark_ops.namespace.target import namespace_properties
from lance_spark_ops.spark import FleetTarget, report
from lance_spark_ops.spark.fleet.maintenance import summary_lines
from lance_spark_ops.spark.runtime.config import parse_bool, storage_options_from_env

dbutils.widgets.text("uris", "", "Dataset URIs (comma-separated; or a namespace below)")
dbutils.widgets.text("namespace_impl", "", "namespace_impl (dir, rest or a class path)")
dbutils.widgets.text("namespace_properties", "", "namespace_properties (key=value; ...)")
dbutils.widgets.text("namespace", "", "namespace (a.b; empty: the root)")
dbutils.widgets.text("recursive", "false", "recursive")
dbutils.widgets.text("policy", "", "policy TOML path (empty: the defaults)")
dbutils.widgets.text("report", "/tmp/lance-health", "report directory")

# COMMAND ----------

impl = dbutils.widgets.get("namespace_impl").strip()
uris = [u.strip() for u in dbutils.widgets.get("uris").split(",") if u.strip()]
if impl:
    props = namespace_properties([p.strip() for p in dbutils.widgets.get("namespace_properties").split(";")
                                  if p.strip()])
    targets = [FleetTarget((impl, props), dbutils.widgets.get("namespace").strip() or None,
                           parse_bool(dbutils.widgets.get("recursive") or "false"))]
elif uris:
    targets = uris
else:
    raise ValueError("set the uris widget, or namespace_impl and namespace_properties")
result = report(spark, targets, dbutils.widgets.get("report").strip(),
                dbutils.widgets.get("policy").strip() or None, storage_options=storage_options_from_env())
for line in summary_lines(result):
    print(line)

# COMMAND ----------

rows = [(t.table, t.status, ", ".join(d["action"] for d in t.decisions),
         t.error["type"] + ": " + t.error["message"] if t.error else "") for t in result.tables]
tables_df = spark.createDataFrame(rows, "table string, status string, would_run string, error string")
try:
    display(tables_df)
except NameError:  # outside Databricks
    tables_df.show(100, truncate=False)
