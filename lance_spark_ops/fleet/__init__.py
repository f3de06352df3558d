"""Fleet maintenance without Spark: a table's health (``health``: measured from its
manifests), the policy that turns health into actions (``policy``: pure decisions), and the
health report (``report``: report.json + a static index.html). ``spark.fleet.maintenance`` runs them."""
