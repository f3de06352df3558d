"""A version's index entries as the next commit and pylance see them: bitmaps an old writer
left missing or overlapping recomputed from the index files (``table.commit.migrate``), the
fragment reuse index's versions, and each index's fragments through them. Read by the index
jobs (``spark.indices``) and by fleet health."""

from __future__ import annotations

from typing import Any

from pyroaring import BitMap

from lance_spark_ops.index.actions import effective_bitmap
from lance_spark_ops.index.frag_reuse import load_versions
from lance_spark_ops.index.kinds import FRAG_REUSE_INDEX_NAME
from lance_spark_ops.table.commit.migrate import trusted_indices
from lance_spark_ops.table.dataset import Dataset


def index_entries(ds: Dataset, recompute: bool = True) -> list[Any]:
    """The version's index entries, bitmaps an old writer left missing or overlapping
    recomputed from the index files as the commit will (``trusted_indices``; UnsupportedError
    when it cannot) unless ``recompute`` is off (as stored)."""
    section = ds.manifest_file.index_section
    entries = list(section.indices) if section is not None else []
    return trusted_indices(ds.store, ds.manifest, entries, ds.uri) if recompute else entries


def frag_reuse_entry(ds: Dataset) -> Any | None:
    return next((i for i in index_entries(ds) if i.name == FRAG_REUSE_INDEX_NAME), None)


def reuse_versions(ds: Dataset) -> list[Any]:
    """Versions of the dataset's fragment reuse index, oldest first (none: [])."""
    fri = frag_reuse_entry(ds)
    return load_versions(fri, ds.store.read) if fri is not None else []


def effective_bitmaps(ds: Dataset, recompute: bool = True) -> list[BitMap | None]:
    """Each index's fragments as pylance sees them (through the fragment reuse index)."""
    versions = reuse_versions(ds)
    return [effective_bitmap(i, versions) for i in index_entries(ds, recompute)]
