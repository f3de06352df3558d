"""A synthetic ``maintain`` result of a large fleet (the shapes the drivers return), for the
report's layout tests: a few failed tables, some maintained, the rest healthy."""

from __future__ import annotations

from typing import Any

T0 = 1.7e9


def _health(i: int, *, small: int = 0, deleted: float = 0.0, unindexed: int = 0, versions: int = 3) -> dict:
    fragments = 4 + small
    return {"uri": f"s3://lake/t{i:03d}.lance", "version": versions, "fragments": fragments,
            "rows": 10_000 * (i + 1), "deleted_rows": int(10_000 * (i + 1) * deleted),
            "deleted_fraction": deleted, "data_bytes": 1_000_000 * (i + 1), "small_fragments": small,
            "fragments_over_deleted_threshold": 4 if deleted > 0.1 else 0,
            "indices": [{"name": "id_idx", "kind": "BTREE", "segments": 1, "unindexed_rows": unindexed}],
            "reuse_versions": 0, "reuse_versions_behind": 0, "versions": versions,
            "versions_old": versions - 1,
            "bytes_old": 12_345 * versions, "unreferenced_bytes": 0,
            "fragment_rows_histogram": [[64, small], [8192, 4]] if small else [[8192, 4]],
            "version_times": [T0 + 60.0 * v for v in range(versions)]}


COMPACT = {"new_version": 8, "read_version": 6, "commits": 1, "fragments_removed": 13, "fragments_added": 1,
           "rows_written": 1300, "bytes_written": 5845, "indices_remapped": {"BTREE": 1}}
OPTIMIZE = {"new_version": 13, "read_version": 12, "commits": 1,
            "indices": {"vec_idx": {"type": "IVF_PQ", "segments_before": 6, "segments_built": 1,
                                    "rows_indexed": 1000, "fragments_indexed": 1, "bytes_written": 37349,
                                    "segments_after": 1, "partitions_before": 16, "partitions_after": 4}}}
VACUUM = {"bytes_removed": 36737, "old_versions": 7, "data_files_removed": 13, "failed_deletes": 0}


def fleet_result(n: int = 200, failed: int = 3, acting: int = 24, mode: str = "maintain") -> dict[str, Any]:
    """``n`` tables: ``failed`` failed, ``acting`` compacted / optimized / vacuumed, the rest healthy."""
    ran = mode == "maintain"
    tables = []
    for i in range(n):
        name = f"prod.events_{i:03d}"
        if i < failed:
            tables.append({"table": name, "uri": f"s3://lake/t{i:03d}.lance", "status": "failed",
                           "decisions": [], "actions": [], "before": None, "after": None, "seconds": 0.1,
                           "error": {"type": "CorruptFileError",
                                     "message": f"s3://lake/t{i:03d}.lance/_versions/1.manifest: bad magic"}})
            continue
        if i < failed + acting:
            before = _health(i, small=12, deleted=0.05 * (i % 7), unindexed=100 * i, versions=9)
            after = {**before, "fragments": 5, "small_fragments": 0, "versions": 1, "versions_old": 0,
                     "bytes_old": 0, "indices": [{**before["indices"][0], "unindexed_rows": 0}]}
            actions = [("compact", "12 of 16 fragments below 500 rows (>= 4 and >= 20%)", COMPACT),
                       ("optimize_indices", "vec_idx: 6 delta segments (> 4)", OPTIMIZE),
                       ("vacuum", "8 versions older than 14d (>= 5)", VACUUM)]
            tables.append({"table": name, "uri": before["uri"], "status": "ok", "error": None, "seconds": 3.2,
                           "decisions": [{"action": a, "reason": r, "options": {}, "priority": 1.0}
                                         for a, r, _ in actions],
                           "actions": [{"action": a, "reason": r, "status": "ok" if ran else "would run",
                                        **({"metrics": m, "seconds": 1.1} if ran else {})}
                                       for a, r, m in actions],
                           "before": before, "after": after if ran else before})
            continue
        h = _health(i, deleted=0.002 * (i % 5))  # a little deleted: below any threshold
        tables.append({"table": name, "uri": h["uri"], "status": "ok", "error": None, "seconds": 0.05,
                       "decisions": [], "actions": [], "before": h, "after": h})
    tables = tables[failed:] + tables[:failed]  # failed ones last in the result: the page puts them first
    return {"dry_run": not ran, "mode": mode, "tables": tables, "tables_ok": n - failed,
            "tables_failed": failed,
            "actions_run": 3 * acting if ran else 0, "actions_skipped": 0, "seconds": 812.5,
            "budget_seconds": None}
