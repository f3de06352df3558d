# Databricks notebook source
# MAGIC %md
# MAGIC # Maintain a fleet of Lance tables
# MAGIC
# MAGIC Measures every table of a Lance Namespace (or the URIs given), decides by a policy what
# MAGIC each needs (compact, materialize deletions, remap / optimize indices, vacuum) and runs it on
# MAGIC this cluster's Spark (`lance_spark_ops.spark.maintain`, as `jobs/maintain.py`). Set
# MAGIC `dry_run` = `true` first to see the decisions and their reasons. `namespace_properties` is
# MAGIC `key=value` pairs separated by `;` (e.g. `root=s3://bucket/lake`); tokens belong in
# MAGIC `dbutils.secrets`, not in a widget. Storage options come from the cluster's environment
# MAGIC (`LSO_STORAGE_OPTIONS`, `LSO_STORAGE_OPTION_<KEY>`). `report` writes `report.json` and
# MAGIC `index.html` to a local or `/dbfs/...` directory.

# COMMAND ----------

# ruff: noqa: F821 - spark, dbutils and display are provided by the Databricks runtime
from lance_spark_ops.namespace.target import namespace_properties
from lance_spark_ops.spark import FleetTarget, maintain
from lance_spark_ops.spark.fleet.maintenance import summary_lines
from lance_spark_ops.spark.runtime.config import parse_bool, storage_options_from_env

dbutils.widgets.text("uris", "", "Dataset URIs (comma-separated; or a namespace below)")
dbutils.widgets.text("namespace_impl", "", "namespace_impl (dir, rest or a class path)")
dbutils.widgets.text("namespace_properties", "", "namespace_properties (key=value; ...)")
dbutils.widgets.text("namespace", "", "namespace (a.b; empty: the root)")
dbutils.widgets.text("recursive", "false", "recursive")
dbutils.widgets.text("policy", "", "policy TOML path (empty: the defaults)")
dbutils.widgets.text("dry_run", "true", "dry_run (true: decide only)")
dbutils.widgets.text("max_concurrent_tables", "2", "max_concurrent_tables")
dbutils.widgets.text("budget_seconds", "", "budget_seconds (empty: none)")
dbutils.widgets.text("report", "", "report directory (empty: none)")

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
budget = dbutils.widgets.get("budget_seconds").strip()
result = maintain(spark, targets, dbutils.widgets.get("policy").strip() or None,
                  dry_run=parse_bool(dbutils.widgets.get("dry_run") or "true"),
                  max_concurrent_tables=int(dbutils.widgets.get("max_concurrent_tables") or "2"),
                  budget_seconds=float(budget) if budget else None,
                  storage_options=storage_options_from_env())
for line in summary_lines(result):
    print(line)
if dbutils.widgets.get("report").strip():
    from lance_spark_ops.fleet.report import write_report

    write_report(result.to_dict(), dbutils.widgets.get("report").strip())

# COMMAND ----------

rows = [(t.table, t.status, ", ".join(d["action"] for d in t.decisions),
         ", ".join(f"{a['action']}: {a.get('status', '')}" for a in t.actions),
         t.error["type"] + ": " + t.error["message"] if t.error else "") for t in result.tables]
schema = "table string, status string, decided string, ran string, error string"
tables_df = spark.createDataFrame(rows, schema)
try:
    display(tables_df)
except NameError:  # outside Databricks
    tables_df.show(100, truncate=False)
