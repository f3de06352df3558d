"""Delta tables made with deltalake (delta-rs) for the import tests, and an inline deletion
vector written into a table's log by hand (delta-rs does not write deletion vectors)."""

from __future__ import annotations

import glob
import json
import struct
import time

import pyarrow as pa

Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
DV_MAGIC = 1681511377


def _z85(data: bytes) -> str:
    data += b"\0" * (-len(data) % 4)
    out = []
    for i in range(0, len(data), 4):
        v = int.from_bytes(data[i:i + 4], "big")
        out.append("".join(Z85[(v // 85 ** k) % 85] for k in (4, 3, 2, 1, 0)))
    return "".join(out)


def rows(start: int, n: int, k_values: tuple[int, ...] = (1, 2, 3)) -> pa.Table:
    return pa.table({
        "id": pa.array(range(start, start + n), pa.int64()),
        "k": pa.array([k_values[i % len(k_values)] for i in range(n)], pa.int32()),
        "s": pa.array([None if i % 11 == 0 else f"s{i}" for i in range(start, start + n)]),
    })


def history_table(uri: str) -> None:
    """Appends, deletes, an overwrite, a schema change (added column), partition column ``k``."""
    from deltalake import DeltaTable, write_deltalake

    write_deltalake(uri, rows(0, 300), partition_by=["k"])
    write_deltalake(uri, rows(300, 200), mode="append")
    DeltaTable(uri).delete("id % 7 = 0")
    write_deltalake(uri, rows(1000, 400, (4, 5)), mode="overwrite")
    write_deltalake(uri, rows(1400, 100).append_column("x", pa.array([i * 0.25 for i in range(100)])),
                    mode="append", schema_mode="merge")
    write_deltalake(uri, rows(1500, 50, (5, 6)), mode="append", schema_mode="merge")  # x: nulls
    DeltaTable(uri).delete("id % 5 = 1 AND k = 4")


def add_inline_deletion_vector(uri: str, deleted: dict[int, list[int]]) -> None:
    """Commit a new log entry giving the table's ``i``-th file (log order) a deletion vector."""
    from pyroaring import BitMap

    logs = sorted(glob.glob(f"{uri}/_delta_log/*.json"))
    adds = [json.loads(line)["add"] for p in logs for line in open(p) if '"add"' in line]
    now = int(time.time() * 1000)
    entries = []
    for i, offsets in deleted.items():
        a = adds[i]
        data = struct.pack("<iqi", DV_MAGIC, 1, 0) + BitMap(offsets).serialize()
        dv = {"storageType": "i", "pathOrInlineDv": _z85(data), "sizeInBytes": len(data),
              "cardinality": len(offsets)}
        entries.append({"remove": {"path": a["path"], "deletionTimestamp": now, "dataChange": True,
                                   "extendedFileMetadata": True, "partitionValues": a["partitionValues"],
                                   "size": a["size"]}})
        entries.append({"add": {**a, "modificationTime": now, "dataChange": True, "deletionVector": dv}})
    entries.append({"commitInfo": {"timestamp": now, "operation": "DELETE"}})
    with open(f"{uri}/_delta_log/{len(logs):020d}.json", "x") as f:
        f.write("".join(json.dumps(e) + "\n" for e in entries))
