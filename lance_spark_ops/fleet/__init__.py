"""Fleet maintenance without Spark: a table's health (``health``: measured from its
manifests), the policy's thresholds (``policy``; ``policy_file`` reads one), the actions they
imply (``decisions``: one pure rule per action), and the health report (``report``:
report.json + a static index.html). ``spark.fleet.maintenance`` runs them."""
