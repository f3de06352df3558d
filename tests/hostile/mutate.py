"""Deterministic mutations of dataset files and the readers that must survive them.

``make_corpus`` writes small pylance datasets covering every file kind (manifests,
transaction files, Arrow and roaring deletion files, row-id sequences, index files, data
files of formats 2.0 / 2.1 / 2.2). ``cases(seed, n)`` draws mutations: bit flips, truncation,
huge u32 / u64 values (lengths, counts, offsets) written over random or footer positions,
zeroed spans. ``run_case`` applies one mutation to a fresh copy and runs the reader for that
file kind; the only acceptable failure is a ``LanceError``.
"""

from __future__ import annotations

import os
import random
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

KINDS = ("manifest", "transaction", "deletion_arrow", "deletion_bitmap", "row_ids", "index", "data")
HUGE = (0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, 1 << 40, (1 << 63) - 1, (1 << 64) - 1, 1 << 32, 0x10000)


@dataclass(frozen=True)
class Case:
    dataset: str
    target: str  # path relative to the dataset root ("" + kind row_ids: the manifest's inline ids)
    kind: str
    op: str
    pos: int
    arg: int


def make_corpus(root: Path) -> dict[str, list[tuple[str, str]]]:
    """Write the datasets; returns ``{dataset: [(relative path, kind), ...]}``."""
    import lance

    n = 12000
    t = pa.table({"id": pa.array(range(n), pa.int64()),
                  "s": pa.array([f"v{i % 97}" * (i % 5) for i in range(n)]),
                  "f": pa.array([float(i) / 3 for i in range(n)], pa.float32()),
                  "l": pa.array([[i, i + 1][: i % 3] for i in range(n)], pa.list_(pa.int32())),
                  "st": pa.array([{"a": i % 7, "b": str(i % 11)} for i in range(n)])})
    out = {}
    for name, version, stable in (("v20", "2.0", False), ("v21", "2.1", True), ("v22", "2.2", True)):
        ds_root = root / name
        lance.write_dataset(t, ds_root, data_storage_version=version, max_rows_per_file=6000,
                            enable_stable_row_ids=stable)
        ds = lance.dataset(ds_root)
        ds.delete("id >= 10 and id < 5200")  # > 5000 in fragment 0: roaring bitmap
        lance.dataset(ds_root).delete("id >= 7000 and id < 7040")  # arrow
        lance.dataset(ds_root).create_scalar_index("id", "BTREE")
        out[name] = _classify(ds_root, stable)
    return out


def _classify(root: Path, stable: bool) -> list[tuple[str, str]]:
    found = []
    for d, _dirs, names in os.walk(root):
        for name in sorted(names):
            rel = os.path.relpath(os.path.join(d, name), root)
            kind = None
            if rel.startswith("_versions/") and rel.endswith(".manifest"):
                kind = "manifest"
            elif rel.endswith(".txn"):
                kind = "transaction"
            elif rel.endswith(".arrow"):
                kind = "deletion_arrow"
            elif rel.endswith(".bin"):
                kind = "deletion_bitmap"
            elif rel.startswith("_indices/"):
                kind = "index"
            elif rel.startswith("data/"):
                kind = "data"
            if kind:
                found.append((rel, kind))
    latest = min(r for r, k in found if k == "manifest")  # v2 naming: smallest name is newest
    found = [(r, k) for r, k in found if k != "manifest" or r == latest]
    if stable:
        found.append((latest, "row_ids"))
    return sorted(found)


def cases(corpus: dict[str, list[tuple[str, str]]], sizes: dict[tuple[str, str], int], seed: int, n: int
          ) -> list[Case]:
    rng = random.Random(seed)
    targets = sorted({(ds, rel, kind) for ds, items in corpus.items() for rel, kind in items})
    out = []
    for _ in range(n):
        ds, rel, kind = rng.choice(targets)
        size = sizes[(ds, rel)] if kind != "row_ids" else 64
        op = rng.choice(("flip", "flip", "truncate", "huge32", "huge64", "zero", "huge32"))
        # half the positions in the last 64 bytes: footers, offsets and lengths live there
        if rng.random() < 0.5:
            pos = rng.randrange(max(1, size))
        else:
            pos = max(0, size - 1 - rng.randrange(min(64, size)))
        arg = rng.randrange(1 << 30)
        out.append(Case(ds, rel, kind, op, pos, arg))
    return out


def mutate(data: bytes, op: str, pos: int, arg: int) -> bytes:
    b = bytearray(data)
    if not b:
        return bytes(b)
    pos %= len(b)
    if op == "flip":
        for k in range(1 + arg % 3):
            p = (pos + k * 7919 * (arg % 13)) % len(b)
            b[p] ^= 1 << ((arg >> (4 * k)) % 8)
    elif op == "truncate":
        return bytes(b[:pos])
    elif op in ("huge32", "huge64"):
        value = HUGE[arg % len(HUGE)]
        fmt = "<I" if op == "huge32" else "<Q"
        value &= 0xFFFFFFFF if op == "huge32" else (1 << 64) - 1
        raw = struct.pack(fmt, value)
        p = min(pos, max(0, len(b) - len(raw)))
        b[p : p + len(raw)] = raw[: len(b) - p]
    elif op == "zero":
        span = 1 + arg % 16
        b[pos : pos + span] = bytes(len(b[pos : pos + span]))
    return bytes(b)


def run_case(case: Case, corpus_root: Path, work: Path) -> None:
    """Apply ``case`` to a fresh copy of its dataset and read through the affected path."""
    from lance_spark_ops import LanceFileReader
    from lance_spark_ops.table.dataset import Dataset

    src = corpus_root / case.dataset
    dst = work / case.dataset
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    path = dst / case.target
    if case.kind == "row_ids":
        _mutate_row_ids(path, case)
    else:
        path.write_bytes(mutate(path.read_bytes(), case.op, case.pos, case.arg))
    if case.kind in ("data", "index"):
        LanceFileReader(str(path)).read()
    if case.kind == "transaction":
        from lance_spark_ops.table.format.transaction import Transaction

        Transaction.from_bytes(path.read_bytes(), str(path))
    if case.kind != "index":
        ds = Dataset.open(str(dst))
        ds.to_table(with_row_id=True)
        ds.count_rows()


def _mutate_row_ids(manifest_path: Path, case: Case) -> None:
    """Mutate the inline row-id sequence of one fragment and write the manifest back."""
    from lance_spark_ops.table.format.manifest import parse_manifest_file, serialize_manifest_file

    mf = parse_manifest_file(manifest_path.read_bytes())
    frags = [f for f in mf.manifest.fragments if isinstance(f.row_id_meta, bytes)]
    frag = frags[case.arg % len(frags)]
    frag.row_id_meta = mutate(frag.row_id_meta, case.op, case.pos, case.arg)
    manifest_path.write_bytes(serialize_manifest_file(mf.manifest, mf.transaction_bytes,
                                                      mf.index_section))
