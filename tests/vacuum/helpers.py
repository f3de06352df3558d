"""Datasets for vacuum tests, written by pylance, and file-set snapshots."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pyarrow as pa

DAY = 86400.0


def table(n: int = 600, start: int = 0) -> pa.Table:
    ids = pa.array(range(start, start + n), pa.int64())
    return pa.table({"id": ids, "s": pa.array([f"row{i}" for i in range(start, start + n)])})


def files(root: str | Path) -> dict[str, int]:
    """``{relative path: size}`` of every file under ``root``."""
    out = {}
    for d, _dirs, names in os.walk(root):
        for name in names:
            full = os.path.join(d, name)
            out[os.path.relpath(full, root)] = os.path.getsize(full)
    return out


def touch(path: Path, data: bytes = b"junk", age_days: float = 0.0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if age_days:
        t = time.time() - age_days * DAY
        os.utime(path, (t, t))


def history_dataset(root: Path, tag: int | None = 3) -> None:
    """Appends, deletes (arrow and roaring deletion files), an index created then replaced,
    an overwrite, a tag, and unverified files old and fresh of every kind."""
    import lance

    lance.write_dataset(table(), root, max_rows_per_file=200)
    lance.write_dataset(table(start=600), root, mode="append")
    ds = lance.dataset(root)
    ds.delete("id < 10")
    ds.create_scalar_index("id", "BTREE")
    if tag is not None:
        lance.dataset(root).tags.create("t1", tag)
    ds = lance.dataset(root)
    ds.create_scalar_index("id", "BTREE", replace=True)
    lance.dataset(root).delete("id >= 100 and id < 150")
    lance.write_dataset(table(9000, 100), root, mode="overwrite", max_rows_per_file=6000)
    lance.dataset(root).delete("id >= 100 and id < 5200")  # >= 5000 rows in one fragment: .bin
    lance.dataset(root).delete("id >= 8000 and id < 8010")  # .arrow
    lance.dataset(root).delete("id >= 5200 and id < 5300")  # replaces the .bin
    ds = lance.dataset(root)
    ds.create_scalar_index("id", "BTREE", name="idx2")
    add_unverified(root)


def add_unverified(root: Path) -> None:
    for age, tag in ((30.0, "old"), (0.0, "new")):
        touch(root / "data" / f"junk-{tag}.lance", age_days=age)
        touch(root / "_deletions" / f"9-9-{tag}.arrow", age_days=age)
        touch(root / "_transactions" / f"9-{tag}.txn", age_days=age)
        touch(root / "_indices" / f"00000000-0000-0000-0000-0000000000{'01' if tag == 'old' else '02'}"
              / "index.idx", age_days=age)
        touch(root / "_versions" / f".tmp-{tag}", age_days=age)
        touch(root / "data" / f"other-{tag}.txt", age_days=age)  # not a data file: stays


def twin(src: Path, dst: Path) -> Path:
    """An identical copy, mtimes preserved (they decide which unverified files go)."""
    shutil.copytree(src, dst, copy_function=shutil.copy2)
    return dst
