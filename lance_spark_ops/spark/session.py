"""A SparkSession whose Python workers run this interpreter (so executors import the same
environment as the driver)."""

from __future__ import annotations

import os
import sys
from typing import Any


def get_spark(app_name: str = "lance-spark-ops", master: str | None = None, conf: dict[str, str] | None = None) -> Any:
    """The active SparkSession, or a new one (``local[2]`` when no master is configured).

    A new session's Python workers fork from ``lance_spark_ops.spark.daemon`` (``conf`` may
    set ``spark.python.daemon.module`` back to ``pyspark.daemon``)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    # spark-submit starts the JVM first (PYSPARK_GATEWAY_PORT) with its --master: keep that one
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    if master or ("spark.master" not in (conf or {}) and not submitted):
        builder = builder.master(master or os.environ.get("SPARK_MASTER", "local[2]"))
    builder = builder.config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    # workers forked with our modules already imported (see spark.daemon)
    builder = builder.config("spark.python.daemon.module", "lance_spark_ops.spark.daemon")
    for k, v in (conf or {}).items():
        builder = builder.config(k, v)
    return builder.getOrCreate()
