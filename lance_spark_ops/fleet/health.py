"""A table's health, measured on the driver from its manifests (no Spark job, no commit).

* fragments: count, live rows, deleted fraction, fragments below the policy's small size
  (physical rows) and above its deleted fraction - from the manifest's fragment columns;
* indices (user indices, grouped by name; each delta is one more segment): live rows of
  fragments their bitmaps do not cover, read through the fragment reuse index as pylance reads
  them; fragment reuse index versions that some index has not caught up with;
* versions: how many, how many older than the retention and the bytes only those use, bytes of
  files no version references - from one read of the manifests and one listing in this
  process (``table.cleanup_scan.cleanup_figures``: the vacuum's own decisions), so the figures are
  what a vacuum would remove.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from lance_spark_ops.errors import UnsupportedError
from lance_spark_ops.fleet.policy import Policy

__all__ = ["IndexHealth", "TableHealth", "measure"]

VERSION_TIMES = 100  # the newest versions' commit times kept for the report's chart


@dataclass
class IndexHealth:
    name: str
    kind: str
    segments: int
    unindexed_rows: int


@dataclass
class TableHealth:
    uri: str
    version: int
    fragments: int
    rows: int  # live
    deleted_rows: int
    deleted_fraction: float
    data_bytes: int
    small_fragments: int
    fragments_over_deleted_threshold: int
    indices: list[IndexHealth] = field(default_factory=list)
    reuse_versions: int = 0
    reuse_versions_behind: int = 0
    versions: int = 0
    versions_old: int = 0
    bytes_old: int = 0
    unreferenced_bytes: int = 0
    # for the report's charts: fragment physical rows (log2 bins), version timestamps (epoch s)
    fragment_rows_histogram: list[tuple[int, int]] = field(default_factory=list)
    version_times: list[float] = field(default_factory=list)
    # the manifest's inconsistencies (``table.validate``: check, fragment, file, detail, refuse);
    # a refusing one makes maintain rewrite nothing
    findings: list[dict[str, Any]] = field(default_factory=list)

    @property
    def inconsistent(self) -> bool:
        return any(f.get("refuse") for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


DEEP_CHECK_FRAGMENTS = 50_000


def _histogram(rows: np.ndarray) -> list[tuple[int, int]]:
    """(lower bound of a power-of-two bin, fragments in it)."""
    if rows.size == 0:
        return []
    bins = np.floor(np.log2(np.maximum(rows, 1))).astype(np.int64)
    values, counts = np.unique(bins, return_counts=True)
    return [(int(2 ** v), int(c)) for v, c in zip(values, counts, strict=True)]


def _indices(ds: Any, live: np.ndarray, ids: np.ndarray) -> tuple[list[IndexHealth], int, int]:
    from lance_spark_ops.index.frag_reuse import caught_up
    from lance_spark_ops.index.kinds import SUMMARY_KINDS, index_kind
    from lance_spark_ops.table.index_entries import effective_bitmaps, index_entries, reuse_versions

    try:
        entries, bitmaps = index_entries(ds), effective_bitmaps(ds)
    except UnsupportedError:  # bitmaps a commit must recompute and cannot: report them as stored
        entries, bitmaps = index_entries(ds, False), effective_bitmaps(ds, False)
    versions = reuse_versions(ds)
    groups: dict[str, list[tuple[Any, Any]]] = {}
    for entry, bm in zip(entries, bitmaps, strict=True):
        if not entry.name.startswith("__lance_"):
            groups.setdefault(entry.name, []).append((entry, bm))
    out = []
    for name, members in sorted(groups.items()):
        covered = set()
        for _, bm in members:
            if bm is not None:
                covered.update(int(i) for i in bm)
        unindexed = int(live[~np.isin(ids, np.fromiter(covered, np.int64, len(covered)))].sum())
        out.append(IndexHealth(name, index_kind(members[0][0]), len(members), unindexed))
    user = [e for e in entries if not e.name.startswith("__lance_") and index_kind(e) not in SUMMARY_KINDS]
    behind = sum(1 for v in versions if not all(caught_up(v, e) for e in user))
    return out, len(versions), behind


def measure(uri: str, policy: Policy, storage_options: dict[str, Any] | None = None) -> TableHealth:
    """Health of the latest version of ``uri`` under ``policy``'s thresholds."""
    from lance_spark_ops.table.dataset import Dataset

    so = dict(storage_options or {})
    ds = Dataset.open(uri, storage_options=so)
    cols = ds.manifest.fragment_columns()
    physical = np.array(cols.physical_rows, np.int64)
    deleted = np.array(cols.deleted_rows, np.int64)
    # counts not recorded (pylance <= 0.7) or not trusted (no writer version: Dataset leaves them
    # out, lance#1531) come from the files, as the reads and the commit count them
    unknown = np.flatnonzero((physical == 0) | (np.asarray(cols.has_deletion) & (deleted == 0)))
    if len(unknown):
        frags = ds.fragments
        for k in unknown.tolist():
            physical[k] = ds.physical_rows(frags[k])
            if frags[k].deletion_file is not None:
                deleted[k] = len(ds.deleted_offsets(frags[k]))
    ids = np.asarray(cols.id, np.int64)
    live = physical - deleted
    total = int(physical.sum())
    frac = np.divide(deleted, physical, out=np.zeros(len(physical)), where=physical > 0)
    # the file lists too unless there are very many fragments (their objects would be built)
    deep = len(cols) <= DEEP_CHECK_FRAGMENTS
    findings = [{**asdict(f), "refuse": f.refuse} for f in ds.findings(deep=deep)]
    indices, reuse, behind = _indices(ds, live, ids)
    health = TableHealth(
        uri=ds.uri, version=ds.version, fragments=len(ids), rows=int(live.sum()),
        deleted_rows=int(deleted.sum()), deleted_fraction=float(deleted.sum() / total) if total else 0.0,
        data_bytes=int(np.asarray(cols.data_bytes, np.int64).sum()),
        small_fragments=int((physical < policy.small_rows).sum()),
        fragments_over_deleted_threshold=int((frac > policy.materialize_deleted_fraction).sum()),
        indices=indices, reuse_versions=reuse, reuse_versions_behind=behind,
        fragment_rows_histogram=_histogram(physical), findings=findings)
    from lance_spark_ops.table.cleanup_scan import cleanup_figures

    figures = cleanup_figures(ds.uri, older_than=policy.retention, storage_options=so)
    health.versions, health.versions_old = figures.versions, figures.old_versions
    health.bytes_old, health.unreferenced_bytes = figures.old_bytes, figures.unreferenced_bytes
    health.version_times = figures.version_times[-VERSION_TIMES:]
    return health
