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


def is_classic(spark: Any) -> bool:
    """Whether ``spark`` is a classic (JVM-backed) session, not a Spark Connect client."""
    return spark is not None and not type(spark).__module__.startswith("pyspark.sql.connect")


def set_job_description(spark: Any, text: str | None) -> None:
    """The Spark UI's job description on a classic session; Connect has none (no-op)."""
    if is_classic(spark):
        spark.sparkContext.setJobDescription(text)


def default_parallelism(spark: Any) -> int:
    """Task slots: the SparkContext's on a classic session; on Connect ``spark.default.parallelism``
    if set, else ``spark.sql.shuffle.partitions`` (the server's nearest published figure)."""
    if spark is None:
        return 1
    if is_classic(spark):
        return int(spark.sparkContext.defaultParallelism)
    value = (spark.conf.get("spark.default.parallelism", None)
             or spark.conf.get("spark.sql.shuffle.partitions"))
    return max(1, int(value))


def descriptor_frame(spark: Any, groups: list[list[int]]) -> Any:
    """``(part long, fragment_ids array<long>)`` with row ``i`` alone in partition ``i`` (the
    descriptor DataFrame of the scan-style tasks), built without an RDD so Connect can run it."""
    from pyspark.sql import functions as F

    n = len(groups)
    table = F.array(*[F.array(*[F.lit(int(i)) for i in g]).cast("array<long>") if g
                      else F.array().cast("array<long>") for g in groups])
    pick = F.element_at(table, (F.col("id") + 1).cast("int"))
    return spark.range(0, n, 1, n).select(F.col("id").alias("part"), pick.alias("fragment_ids"))
