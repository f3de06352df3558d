"""A compaction whose commit is rebased twice over concurrent pylance updates (a found fault):
the second rebase must map deletions through the rewrite's original address map and keep the
deletions the first one carried (found by the concurrent-writer fault runs: ids twice and lost)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.faults import faulty_fs
from tests.faults.model import check, make_dataset, writer_op
from tests.faults.scenarios import _before_first_commit


@pytest.mark.parametrize("kind", ["merge_insert", "update", "delete"])
@pytest.mark.parametrize("job", ["compact", "materialize_deletions"])
def test_rewrite_rebased_in_two_rounds(job: str, kind: str, tmp_path: Path) -> None:
    from lance_spark_ops.spark import compact
    from lance_spark_ops.spark.files.compaction import materialize_deletions

    root = str(tmp_path / "ds.lance")
    exp = make_dataset(root, 3, stable=False)
    rng = random.Random(3)
    done: list[str] = []

    def write() -> None:  # a pylance commit; it takes the version our next put wants
        assert writer_op(root, kind, exp, rng)
        done.append(kind)

    # put 1 is the ReserveFragments (left alone); before put 2 - the Rewrite, already rebased once
    # over the write before the commit - another write takes its version: a second rebase round.
    so = faulty_fs.install(f"rounds-{job}-{kind}", faulty_fs.FaultPlan(0, before_manifest_put=[None, write]))
    uri = f"{faulty_fs.PROTOCOL}://{root}"
    try:
        hook = _before_first_commit(write)
        if job == "compact":
            m = compact(None, uri, {"target_rows_per_fragment": 4000}, storage_options=so, tuning=hook)
        else:
            m = materialize_deletions(None, uri, 0.0, storage_options=so, tuning=hook)
    finally:
        faulty_fs.uninstall(f"rounds-{job}-{kind}")
    assert done == [kind, kind]
    assert m.commits == 1 and m.new_version is not None
    assert check(f"job={job} two rebase rounds over {kind}", root, exp, [m.new_version]) == []
