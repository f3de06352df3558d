"""The legacy (file format 0.1, "v1") container and its reader."""

from lance_spark_ops.file.legacy.container import LegacyFileMetadata, is_legacy_footer, load_legacy_metadata
from lance_spark_ops.file.legacy.reader import LegacyFileReader

__all__ = ["LegacyFileMetadata", "LegacyFileReader", "is_legacy_footer", "load_legacy_metadata"]
