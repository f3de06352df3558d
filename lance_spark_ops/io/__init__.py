"""Storage layer: every byte the library reads or writes goes through ``ObjectStore``."""

from lance_spark_ops.io.storage import ObjectStore, coalesce_ranges

__all__ = ["ObjectStore", "coalesce_ranges"]
