"""The invariant checker itself catches each kind of violation (a checker that cannot fail
would make every fault run pass)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from tests.faults.model import STATS, Expected, check, make_dataset


def _lose_row(root: str, exp: Expected) -> None:
    import lance

    lance.dataset(root).delete(f"id = {min(exp.rows)}")


def _duplicate_row(root: str, exp: Expected) -> None:
    import lance

    i = min(exp.rows)
    lance.write_dataset(pa.table({"id": np.array([i], np.int64), "val": np.array([exp.rows[i]], np.int64),
                                  "s": ["dup"]}), root, mode="append")


def _change_value(root: str, exp: Expected) -> None:
    import lance

    lance.dataset(root).update({"val": "val + 7"}, where=f"id = {min(exp.rows)}")


def _remove_old_file(root: str, exp: Expected) -> None:
    import lance

    lance.dataset(root).optimize.compact_files(target_rows_per_fragment=100_000)  # old files unreferenced now
    first = lance.dataset(root, version=2).get_fragments()[0].data_files()[0].path
    os.remove(os.path.join(root, "data", first))


@pytest.mark.parametrize(("corrupt", "finding"), [
    (_lose_row, "lost ids"), (_duplicate_row, "ids twice"), (_change_value, "values differ"),
    (_remove_old_file, "version 2"), (None, "reported version 999"),
])
def test_checker_finds(corrupt: Callable[[str, Expected], None] | None, finding: str, tmp_path: Path) -> None:
    root = str(tmp_path / "ds.lance")
    exp = make_dataset(root, 11, stable=False)
    before = len(STATS.violations), STATS.rows_checked, STATS.versions_checked
    assert check("clean", root, exp, []) == []
    if corrupt is not None:
        corrupt(root, exp)
    bad = check("corrupted", root, exp, [] if corrupt else [999])
    del STATS.violations[before[0]:]  # planted, not found by a fault run; not counted either
    STATS.rows_checked, STATS.versions_checked = before[1], before[2]
    assert any(finding in b for b in bad), bad
