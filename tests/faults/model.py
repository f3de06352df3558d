"""Fault-test datasets (made by pylance), the expected live rows, concurrent pylance writers,
the invariant checker and the run counters.

Rows carry a unique ``id``; ``val`` starts as ``id * 10``. Concurrent writers touch disjoint
ids (append: fresh ids; delete / update / merge_insert: their own slice of the initial ids), so
their effects commute and the expected rows are the initial ones with every op that pylance
reported committed applied, in any order.
"""

from __future__ import annotations

import os
import random
import threading
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

FRESH_IDS = 10_000_000  # ids of appended / inserted rows start here
VEC = "vec"  # the vector column the vector-index runners add (a function of id: ``vectors``)
VEC_DIM = 16
GEO = "geo"  # the GeoArrow point column the RTREE runners add (a function of id: ``points``)
POINT = pa.struct([pa.field("x", pa.float64(), nullable=False), pa.field("y", pa.float64(), nullable=False)])
GEO_FIELD = pa.field(GEO, POINT, metadata={"ARROW:extension:name": "geoarrow.point"})


def vectors(ids: np.ndarray) -> pa.FixedSizeListArray:
    """The ``vec`` value of each id: distinct, deterministic, in a few loose clusters."""
    ids = np.asarray(ids, dtype=np.int64)
    h = ids.astype(np.uint64)[:, None] * np.uint64(VEC_DIM) + np.arange(VEC_DIM, dtype=np.uint64)
    for shift, mul in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB)):  # splitmix64's mix
        h = (h ^ (h >> np.uint64(shift))) * np.uint64(mul)
    h ^= h >> np.uint64(31)
    x = (h >> np.uint64(11)).astype(np.float64) / float(1 << 53) + (ids % 5)[:, None] * 0.5
    return pa.FixedSizeListArray.from_arrays(pa.array(x.astype(np.float32).ravel()), VEC_DIM)


def points(ids: np.ndarray) -> pa.StructArray:
    """The ``geo`` value of each id: a point on a 0.1 grid of [0, 100) x [0, 100)."""
    ids = np.asarray(ids, dtype=np.int64)
    return pa.StructArray.from_arrays([pa.array((ids % 997) * 0.1), pa.array((ids % 991) * 0.1)],
                                      fields=list(POINT))


def _with_vec(t: pa.Table, names: list[str]) -> pa.Table:
    """``t`` with the dataset's columns (``vec`` and ``geo`` computed from id when the dataset
    has them)."""
    if VEC in names:
        t = t.append_column(VEC, vectors(t["id"].to_numpy()))
    if GEO in names:
        t = t.append_column(GEO_FIELD, points(t["id"].to_numpy()))
    return t.select([c for c in names if c in t.column_names])


@dataclass
class Stats:
    """What the fault runs did, for the summary line."""

    runs: Counter = field(default_factory=Counter)  # per job
    faults: Counter = field(default_factory=Counter)  # per kind: driver_kill, worker_kill, transient ...
    outcomes: Counter = field(default_factory=Counter)  # ok / CommitStateUnknown / OSError ...
    writer_ops: Counter = field(default_factory=Counter)  # committed concurrent pylance ops per kind
    rows_checked: int = 0
    versions_checked: int = 0
    violations: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (f"FAULTS SUMMARY runs={sum(self.runs.values())} {dict(self.runs)} "
                f"faults={sum(self.faults.values())} {dict(self.faults)} outcomes={dict(self.outcomes)} "
                f"concurrent_ops={sum(self.writer_ops.values())} {dict(self.writer_ops)} "
                f"versions_checked={self.versions_checked} rows_checked={self.rows_checked} "
                f"violations={len(self.violations)}")


STATS = Stats()


@dataclass
class Expected:
    """The live rows the dataset must hold: id -> val."""

    rows: dict[int, int]
    pools: dict[str, list[int]]  # initial ids each writer kind may touch (disjoint)
    next_id: int = FRESH_IDS
    touched: set[int] = field(default_factory=set)  # ids concurrent writers changed
    log: list[str] = field(default_factory=list)  # committed concurrent ops, in completion order
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, pool: str, n: int) -> list[int]:
        with self.lock:
            ids, self.pools[pool] = self.pools[pool][:n], self.pools[pool][n:]
            return ids

    def fresh(self, n: int) -> list[int]:
        with self.lock:
            ids = list(range(self.next_id, self.next_id + n))
            self.next_id += n
            return ids


def make_dataset(uri: str, seed: int, *, stable: bool) -> Expected:
    """A pylance dataset of 4-7 fragments with deletions; returns its expected rows."""
    import lance

    rng = random.Random(seed)
    version = rng.choice(["2.0", "2.1"])
    start = 0
    for i in range(rng.randint(4, 7)):
        n = rng.randint(150, 400)
        ids = np.arange(start, start + n, dtype=np.int64)
        start += n
        t = pa.table({"id": ids, "val": ids * 10, "s": pa.array([f"r{j}" for j in ids.tolist()])})
        lance.write_dataset(t, uri, mode="append" if i else "create", data_storage_version=version,
                            enable_stable_row_ids=stable)
    lance.dataset(uri).delete(f"id % 7 = {rng.randint(0, 6)}")
    live = lance.dataset(uri).to_table(columns=["id", "val"])
    rows = dict(zip(live["id"].to_pylist(), live["val"].to_pylist(), strict=True))
    ids = sorted(rows)
    rng.shuffle(ids)
    pools = {kind: ids[i::4] for i, kind in enumerate(["keep", "delete", "update", "merge"])}
    return Expected(rows, pools)


# -- concurrent pylance writers ---------------------------------------------------------------------

def _in(ids: list[int]) -> str:
    return f"id IN ({', '.join(map(str, ids))})"


def writer_op(uri: str, kind: str, exp: Expected, rng: random.Random) -> bool:
    """One pylance write of ``kind``; applies it to ``exp`` when pylance says it committed."""
    import lance

    n = rng.randint(5, 40)
    ds = lance.dataset(uri)
    if kind == "append":
        ids = exp.fresh(n)
        arr = np.array(ids, dtype=np.int64)
        t = pa.table({"id": arr, "val": arr * 10, "s": pa.array([f"a{i}" for i in ids])})
        t = _with_vec(t, ds.schema.names)
        lance.write_dataset(t, uri, mode="append")
        changes: dict[int, int | None] = dict(zip(ids, (arr * 10).tolist(), strict=True))
    elif kind == "delete":
        ids = exp.take("delete", n)
        if not ids:
            return False
        ds.delete(_in(ids))
        changes = dict.fromkeys(ids)
    elif kind == "update":
        ids = exp.take("update", n)
        if not ids:
            return False
        ds.update({"val": "val + 1"}, where=_in(ids))
        changes = {i: exp.rows[i] + 1 for i in ids}
    elif kind == "merge_insert":
        old, new = exp.take("merge", n // 2), exp.fresh(n - n // 2)
        ids = old + new
        arr = np.array(ids, dtype=np.int64)
        t = _with_vec(pa.table({"id": arr, "val": -arr, "s": pa.array([f"m{i}" for i in ids])}),
                      ds.schema.names)
        ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(t)
        changes = dict(zip(ids, (-arr).tolist(), strict=True))
    elif kind == "create_index":
        ds.create_scalar_index("id", "BTREE", replace=True)
        changes = {}
    elif kind == "optimize_indices":
        ds.optimize.optimize_indices()
        changes = {}
    elif kind == "compaction":
        ds.optimize.compact_files(target_rows_per_fragment=rng.choice([300, 1000, 5000]))
        changes = {}
    else:
        raise ValueError(kind)
    with exp.lock:
        exp.log.append(f"{kind}(v{lance.dataset(uri).version}, ids {min(changes, default='-')}.."
                       f"{max(changes, default='-')} x{len(changes)})")
        for i, v in changes.items():
            exp.touched.add(i)
            if v is None:
                exp.rows.pop(i, None)
            else:
                exp.rows[i] = v
    return True


WRITER_KINDS = ("append", "delete", "update", "merge_insert", "create_index", "compaction")


class Writers:
    """Concurrent pylance writers: a thread that waits at ``start`` then runs ``ops`` writes."""

    def __init__(self, uri: str, exp: Expected, rng: random.Random, ops: int,
                 kinds: tuple[str, ...] = WRITER_KINDS) -> None:
        self.uri, self.exp, self.ops = uri, exp, [rng.choice(kinds) for _ in range(ops)]
        self.rng = random.Random(rng.random())
        self.start = threading.Event()
        self.done: Counter = Counter()
        self.failed: Counter = Counter()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        if not self.start.wait(300):
            return
        for kind in self.ops:
            try:
                ok = writer_op(self.uri, kind, self.exp, self.rng)
            except Exception:  # noqa: BLE001 - a pylance commit that lost a conflict did not happen
                self.failed[kind] += 1
                continue
            if ok:
                self.done[kind] += 1

    def join(self) -> None:
        self.start.set()
        self.thread.join(300)
        assert not self.thread.is_alive(), "concurrent writers hung"
        STATS.writer_ops.update(self.done)


# -- invariants ------------------------------------------------------------------------------------

def _local(uri: str) -> str:
    return uri.split("://", 1)[1] if "://" in uri else uri


def check(label: str, uri: str, exp: Expected, reported: list[int], *, column: str | None = None,
          column_must_exist: bool = False, row_ids: dict[int, int] | None = None,
          readable_from: int = 0) -> list[str]:
    """Every invariant; returns the violations (also recorded in STATS).

    * every version opens and reads whole (so every data / deletion file it references exists);
    * the live rows are exactly ``exp.rows`` (no id lost, none twice, values as expected);
    * every version a job reported committing is listed;
    * ``column`` (added by add_columns as ``id * 2``), where present, is right, and is present
      when the job reported success;
    * ``row_ids`` (stable row ids before the job) are unchanged for ids no writer touched.

    ``readable_from``: versions below it are not read (a failed vacuum may have half-removed them).
    """
    import lance

    bad: list[str] = []
    root = _local(uri)
    ds = lance.dataset(root)
    versions = [v["version"] for v in ds.versions()]
    for v in versions:
        if v < readable_from:
            continue
        try:
            dv = lance.dataset(root, version=v)
            for frag in dv.get_fragments():
                for f in frag.data_files():
                    if not os.path.exists(os.path.join(root, "data", f.path)):
                        bad.append(f"version {v}: data file {f.path} missing")
            STATS.rows_checked += dv.to_table().num_rows
        except Exception as e:  # noqa: BLE001 - any failure to read a version is the finding
            bad.append(f"version {v} does not read: {e!r}"[:400])
    STATS.versions_checked += len(versions)
    bad += [f"reported version {v} not in {versions}" for v in reported if v not in versions]
    cols = ["id", "val"] + ([column] if column and column in ds.schema.names else [])
    t = ds.to_table(columns=cols, with_row_id=row_ids is not None)
    ids = t["id"].to_numpy()
    uniq, counts = np.unique(ids, return_counts=True)
    if (counts > 1).any():
        bad.append(f"ids twice: {uniq[counts > 1][:10].tolist()}")
    want = np.array(sorted(exp.rows), dtype=np.int64)
    lost, extra = np.setdiff1d(want, uniq), np.setdiff1d(uniq, want)
    if len(lost) or len(extra):
        bad.append(f"lost ids {lost[:10].tolist()} ({len(lost)}), unexpected ids {extra[:10].tolist()} "
                   f"({len(extra)})")
    order = np.argsort(ids, kind="stable")
    if not bad or not any(b.startswith(("lost", "ids twice")) for b in bad):
        got_val = t["val"].to_numpy()[order]
        want_val = np.array([exp.rows[i] for i in ids[order].tolist()], dtype=np.int64)
        if not np.array_equal(got_val, want_val):
            bad.append(f"values differ at ids {ids[order][got_val != want_val][:10].tolist()}")
    if column_must_exist and column not in ds.schema.names:
        bad.append(f"column {column} reported added but missing from version {ds.version}")
    if column and column in ds.schema.names:
        c = t[column].to_numpy(zero_copy_only=False)
        present = ~np.isnan(c.astype(float)) if c.dtype.kind == "f" else np.ones(len(c), bool)
        if not np.array_equal(c[present].astype(np.int64), ids[present] * 2):
            bad.append(f"column {column} is not id * 2")
    if row_ids is not None:
        now = dict(zip(ids.tolist(), t["_rowid"].to_pylist(), strict=True))
        moved = [i for i, r in row_ids.items() if i in now and i not in exp.touched and now[i] != r]
        if moved:
            bad.append(f"stable row ids changed for ids {moved[:10]}")
    if bad and exp.log:
        bad.append(f"concurrent ops committed: {exp.log}")
    bad = [f"{label}: {b}" for b in bad]
    STATS.violations.extend(bad)
    return bad


def stable_row_ids(uri: str) -> dict[int, int]:
    import lance

    t = lance.dataset(_local(uri)).to_table(columns=["id"], with_row_id=True)
    return dict(zip(t["id"].to_pylist(), t["_rowid"].to_pylist(), strict=True))
