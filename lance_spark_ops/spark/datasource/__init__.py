"""The ``lance`` Python data source (``pyspark.sql.datasource``, pyspark >= 4.1).

    register_data_source(spark)
    df = spark.read.format("lance").option("columns", "a,b").load(uri)
    df.write.format("lance").mode("append").save(uri)        # or "overwrite"

Read options: ``version``, ``columns`` (JSON list or comma-separated), ``with_row_id``,
``with_row_address`` (``_rowid`` / ``_rowaddr`` as Spark ``long``), ``batch_rows``,
``max_bytes_per_partition`` (neighbouring fragments share a partition up to this many bytes of
data files, default 128 MiB; 0: a partition per fragment), ``max_rows_per_partition`` (split
fragments into row ranges of at most that many rows and pack small neighbours by rows instead),
``split_fragments`` (false: a fragment is never split), ``fragment_ids``
(JSON list). Write options: ``max_rows_per_file``, ``data_storage_version`` (new datasets /
overwrite; default 2.2), ``enable_stable_row_ids`` (new datasets). Both: ``storage.<key>`` per
storage option, or ``storage_options`` as one JSON object (keeps key case).

The schema is the dataset's, mapped as ``spark.runtime.spark_types`` says; the version is pinned when the
DataFrame is created, so every task reads the same manifest. Filters Spark pushes are
evaluated in the reader when ``datasource.filters`` can do so exactly (needs
``spark.sql.python.filterPushdown.enabled``, which ``register_data_source`` sets). A JVM data
source of the same name (lance-spark's JAR on the classpath) takes precedence over this one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource

if TYPE_CHECKING:
    from lance_spark_ops.spark.datasource.reader import LanceReader
    from lance_spark_ops.spark.datasource.writer import LanceWriter

__all__ = ["LanceDataSource", "LanceDataSourceNoPushdown", "register_data_source"]

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"

# The reading and writing machinery is imported where it is used, not here: Spark instantiates
# this class in Python planner processes of its own (``pyspark.daemon``, which preloads nothing
# of ours), one after another on a session's first read; the one that only makes the source
# (``create_data_source``: ``read_lance`` gives the schema, so nothing else is asked of it) then
# imports this module alone, not the table and file layers (~0.35 s a fresh process).


class LanceDataSource(DataSource):
    """The ``lance`` source with filter pushdown (the session must enable it, see PUSHDOWN_CONF)."""

    pushdown = True

    @classmethod
    def name(cls) -> str:
        return "lance"

    def schema(self) -> Any:
        """The dataset's columns as Spark types; pins the version it read for ``reader``."""
        from lance_spark_ops.spark.datasource.options import ReadOptions
        from lance_spark_ops.spark.datasource.reader import open_pinned, scan_arrow_schema
        from lance_spark_ops.spark.runtime.scan_tasks import ship
        from lance_spark_ops.spark.runtime.spark_types import spark_schema

        opts = ReadOptions.parse(self.options)
        ds = open_pinned(opts)
        self.options["version"] = str(ds.version)
        self.options["version_timestamp"] = ds.timestamp.isoformat()
        # Spark pickles this source after asking it for the schema and hands it to the worker
        # that plans the read: the reader there parses this manifest instead of reading it
        self.shipped = ship(ds)
        return spark_schema(scan_arrow_schema(ds, opts))

    def writer(self, schema: Any, overwrite: bool) -> LanceWriter:
        from lance_spark_ops.spark.datasource.options import WriteOptions
        from lance_spark_ops.spark.datasource.writer import LanceWriter

        return LanceWriter(WriteOptions.parse(self.options), schema, overwrite)


    def reader(self, schema: Any) -> LanceReader:
        from lance_spark_ops.spark.datasource.options import ReadOptions
        from lance_spark_ops.spark.datasource.reader import LanceReader, ReaderNoPushdown

        cls = LanceReader if self.pushdown else ReaderNoPushdown
        return cls(ReadOptions.parse(self.options), schema, getattr(self, "shipped", None))


class LanceDataSourceNoPushdown(LanceDataSource):
    """The ``lance`` source for sessions that keep Python filter pushdown off."""

    pushdown = False


def register_data_source(spark: Any, filter_pushdown: bool = True) -> None:
    """Register the ``lance`` format with ``spark`` (classic or Connect).

    ``filter_pushdown``: set ``spark.sql.python.filterPushdown.enabled`` and register the
    source that evaluates the filters it can; False registers one that leaves them all to
    Spark (reads then work whatever that setting is)."""
    if filter_pushdown:
        spark.conf.set(PUSHDOWN_CONF, "true")
        spark.dataSource.register(LanceDataSource)
    else:
        spark.dataSource.register(LanceDataSourceNoPushdown)
