"""A directory namespace of small pylance tables, each needing different maintenance."""

from __future__ import annotations

import os

import lance
import lance.namespace
import pyarrow as pa
from lance_namespace import CreateNamespaceRequest

ROWS = 1000  # the test policy's target rows per fragment

POLICY = {
    "target_rows_per_fragment": ROWS,
    "compact_min_small_fragments": 4,
    "vacuum_retention": "0s",
    "vacuum_min_old_versions": 5,
    "vacuum_min_old_bytes": 1 << 40,
    "vacuum_min_unreferenced_bytes": 1 << 40,
    "optimize_min_unindexed_rows": 1 << 40,
    "namespaces": {"staging": {"optimize_min_unindexed_fraction": 0.2}},
}

# table -> the actions POLICY implies for it
EXPECTED = {
    "small": ["compact"],
    "deletes": ["materialize_deletions"],
    "old": ["vacuum"],
    "healthy": [],
    "remap": ["remap_indices"],
    "staging.indexed": ["optimize_indices"],
    "deltas": ["optimize_indices", "vacuum"],
    "mixed": ["compact", "vacuum"],
}


def _table(n: int, start: int = 0) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "s": pa.array([f"v{i % 97}" for i in range(start, start + n)])})


def make_lake(root: str) -> dict[str, str]:
    """Tables of the namespace at ``root`` (manifest mode); returns name -> location."""
    ns = lance.namespace.DirectoryNamespace(root=root)
    ns.create_namespace(CreateNamespaceRequest(id=["staging"]))

    def write(tid, data, **kw):
        return lance.write_dataset(data, namespace_client=ns, table_id=tid, **kw)

    write(["small"], _table(1200), max_rows_per_file=100)
    ds = write(["deletes"], _table(4 * ROWS), max_rows_per_file=ROWS)
    ds.delete("id % 5 < 2")  # 40% of every fragment
    for i in range(6):
        write(["old"], _table(ROWS, i), mode="create" if i == 0 else "overwrite")
    write(["healthy"], _table(2 * ROWS), max_rows_per_file=ROWS)
    ds = write(["remap"], _table(2 * ROWS), max_rows_per_file=ROWS // 4)
    ds.create_scalar_index("id", "BTREE")
    ds.optimize.compact_files(target_rows_per_fragment=ROWS, defer_index_remap=True)
    ds = write(["staging", "indexed"], _table(2 * ROWS), max_rows_per_file=ROWS)
    ds.create_scalar_index("id", "BTREE")
    lance.write_dataset(_table(ROWS, 2 * ROWS), ds.uri, mode="append")
    ds = write(["deltas"], _table(ROWS))  # 6 index segments (> 4), every row indexed; 12 versions
    ds.create_scalar_index("id", "BTREE")
    for i in range(1, 6):
        ds = lance.write_dataset(_table(ROWS, i * ROWS), ds.uri, mode="append")
        ds.optimize.optimize_indices(num_indices_to_merge=0)
    ds = write(["mixed"], _table(800), max_rows_per_file=100)  # small fragments and old versions
    for i in range(5):
        ds = lance.write_dataset(_table(100, 800 + 100 * i), ds.uri, mode="append")
    ds = write(["broken"], _table(ROWS))
    out = {}
    from lance_namespace import DescribeTableRequest, ListTablesRequest

    for nsid in ([], ["staging"]):
        for t in ns.list_tables(ListTablesRequest(id=nsid)).tables:
            out[".".join([*nsid, t])] = ns.describe_table(DescribeTableRequest(id=[*nsid, t])).location
    # the broken table's latest manifest is garbage: opening it fails, the others carry on
    vdir = out["broken"].removeprefix("file://") + "/_versions"
    for name in os.listdir(vdir):
        with open(os.path.join(vdir, name), "wb") as f:
            f.write(b"not a manifest")
    return out
