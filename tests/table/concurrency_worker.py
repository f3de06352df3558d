"""Worker processes for the concurrency test (module-level so that ``spawn`` can import them).

Each worker performs ``n_ops`` random operations (mostly appends, some deletes, at most one
overwrite) either through this library or through pylance, and reports every outcome:
``(op, status, version, read_version, ids, error)``. Row ids are unique per worker and op:
``worker * 1_000_000 + seq * 1_000 + i``.

Every worker's first operation is a delete that opens the dataset, waits at the shared barrier
and only then commits, so the first commits always race (all read version 1) instead of relying
on timing.
"""

from __future__ import annotations

import random
import traceback
from typing import Any

import pyarrow as pa


def _rows(worker: int, seq: int, n: int) -> pa.Table:
    base = worker * 1_000_000 + seq * 1_000
    return pa.table({"id": pa.array(range(base, base + n), pa.int64()),
                     "w": pa.array([worker] * n, pa.int32())})


def _pick(table: pa.Table, rng: random.Random, k: int) -> pa.Table:
    """Up to ``k`` rows from the first ~60 (so that deletes collide on fragments)."""
    head = table.slice(0, 60)
    if head.num_rows == 0:
        return head
    idx = sorted(rng.sample(range(head.num_rows), min(k, head.num_rows)))
    return head.take(idx)


def _ours(uri: str, op: str, worker: int, seq: int, rng: random.Random,
          rec: dict[str, Any], race: Any) -> dict[str, Any]:
    from lance_spark_ops.table.dataset import Dataset
    from lance_spark_ops.table.write import delete_rows, write_dataset

    ds = Dataset.open(uri)
    rec["read_version"] = ds.version  # a lower bound of the version the operation reads
    if op in ("append", "overwrite"):
        new = write_dataset(_rows(worker, seq, 7), uri, mode=op, max_retries=200)
        return {"version": new.version, "ids": list(range(worker * 1_000_000 + seq * 1_000,
                                                          worker * 1_000_000 + seq * 1_000 + 7))}
    chosen = _pick(ds.to_table(columns=["id"], with_row_address=True), rng, 3)
    if race is not None:
        race.wait(timeout=30)
    offsets: dict[int, list[int]] = {}
    for addr in chosen.column("_rowaddr").to_pylist():
        offsets.setdefault(addr >> 32, []).append(addr & 0xFFFFFFFF)
    new = delete_rows(ds, offsets, predicate="concurrency test", max_retries=200)
    return {"version": new.version, "ids": chosen.column("id").to_pylist(),
            "rebased_to": new.transaction.read_version}


def _pylance(uri: str, op: str, worker: int, seq: int, rng: random.Random,
             rec: dict[str, Any], race: Any) -> dict[str, Any]:
    import lance

    ds = lance.dataset(uri)
    rec["read_version"] = ds.version
    if op in ("append", "overwrite"):
        out = lance.write_dataset(_rows(worker, seq, 7), uri, mode=op)
        return {"version": out.version,
                "ids": list(range(worker * 1_000_000 + seq * 1_000, worker * 1_000_000 + seq * 1_000 + 7))}
    chosen = _pick(ds.to_table(columns=["id"]), rng, 3)
    ids = chosen.column("id").to_pylist()
    if race is not None:
        race.wait(timeout=30)
    if not ids:
        return {"version": None, "ids": []}
    ds.delete(f"id IN ({', '.join(str(i) for i in ids)})")
    return {"version": ds.version, "ids": ids}


def run(uri: str, worker: int, library: str, n_ops: int, overwrite_at: int | None, seed: int,
        barrier: Any, results: Any) -> None:
    rng = random.Random(seed)
    if library == "ours":  # import before the start line, so both libraries begin together
        import lance_spark_ops.table.write  # noqa: F401
    else:
        import lance  # noqa: F401
    barrier.wait()
    for seq in range(n_ops):
        if seq == 0:
            op = "delete"
        else:
            op = "overwrite" if seq == overwrite_at else rng.choice(["append", "append", "delete"])
        rec: dict[str, Any] = {"worker": worker, "library": library, "seq": seq, "op": op}
        try:
            race = barrier if seq == 0 else None
            rec.update((_ours if library == "ours" else _pylance)(uri, op, worker, seq, rng, rec, race))
            rec["status"] = "ok" if rec.get("version") is not None else "noop"
        except Exception as e:  # noqa: BLE001 - reported to the parent
            rec.update(status="error", error=type(e).__name__, message=str(e)[:300],
                       trace=traceback.format_exc()[-1500:])
        results.put(rec)
