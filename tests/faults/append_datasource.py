"""spark-submit script for the fault suite: append ids LO..LO+N (val = id * 10, s = "w<id>") to
the Lance dataset URI with the ``lance`` data source, in PARTS tasks.

    spark-submit tests/faults/append_datasource.py URI LO N PARTS
"""

import json
import sys

from pyspark.sql import SparkSession

from lance_spark_ops.spark import register_data_source


def main(argv: list[str]) -> int:
    uri, lo, n, parts = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    spark = SparkSession.builder.appName("faults-append-datasource").getOrCreate()
    register_data_source(spark)
    df = spark.range(lo, lo + n, 1, parts).selectExpr("id", "id * 10 AS val",
                                                      "concat('w', CAST(id AS STRING)) AS s")
    print("datasource lso-0: write started", flush=True)  # the marker driver.run_job waits for
    df.write.format("lance").mode("append").save(uri)
    print(json.dumps({"rows": n}), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
