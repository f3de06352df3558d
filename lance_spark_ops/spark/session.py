"""A SparkSession whose Python workers run this interpreter (so executors import the same
environment as the driver), and the facts about a session that jobs need without touching
``sparkContext`` (Spark Connect sessions have none): whether it is classic, its parallelism,
and the Spark job description (classic only)."""

from __future__ import annotations

import os
import sys
from typing import Any


def is_classic(spark: Any) -> bool:
    """True for a classic (py4j) session; False for None and for Spark Connect sessions.

    A Connect session is an instance of ``pyspark.sql.connect.session.SparkSession``; that
    module is looked up, not imported (nothing made a Connect session if it is not loaded)."""
    if spark is None:
        return False
    connect = sys.modules.get("pyspark.sql.connect.session")
    return not (connect is not None and isinstance(spark, connect.SparkSession))


def set_description(spark: Any, text: str | None) -> None:
    """The Spark job description of jobs started from now on (classic sessions only)."""
    if is_classic(spark):
        spark.sparkContext.setJobDescription(text)


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
    if master or "spark.master" not in (conf or {}):
        builder = builder.master(master or os.environ.get("SPARK_MASTER", "local[2]"))
    builder = builder.config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    # workers forked with our modules already imported (see spark.daemon)
    builder = builder.config("spark.python.daemon.module", "lance_spark_ops.spark.daemon")
    for k, v in (conf or {}).items():
        builder = builder.config(k, v)
    return builder.getOrCreate()
