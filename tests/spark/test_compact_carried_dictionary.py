"""Re-encode compaction carries dictionary-encoded strings undecoded
(``encoding.carried_dictionary``): pylance must read the compacted dataset as it read the
source, and the files must be the bytes the decoding path writes (pages cut at the same rows,
the same dictionaries)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_spark_ops.encoding.plan as plan
import lance_spark_ops.io.budget as budget
from lance_spark_ops.spark.files import rewrite_tasks as rewrite
from tests.spark.datasets import compacted_copy, new_file_hashes, source_dataset

WORDS = np.array(["lance", "spark", "column", "page", "block", "zip", "row", "data"])


def _dataset(uri: str, version: str, small: bool) -> None:
    import lance

    rng = np.random.default_rng(11)
    base = 0
    # 70k and 150k rows: several scan batches, some cutting pages; 5k + 3k: a run of small
    # fragments read together (decoded) between carried batches in the same file
    for i, n in enumerate((70_000, 5_000, 3_000, 150_000) if small else (70_000, 150_000)):
        lens = rng.integers(0, 12, n)
        offs = pa.array(np.concatenate([[0], np.cumsum(lens)]).astype(np.int32))
        total = int(lens.sum())
        cols = {
            "id": pa.array(np.arange(base, base + n, dtype=np.int64)),
            "tags": pa.ListArray.from_arrays(offs, pa.array(WORDS[rng.integers(0, 8, total)])),
            "s": pa.array(WORDS[rng.integers(0, 4, n)]),
            "ints": pa.ListArray.from_arrays(offs, pa.array(rng.integers(0, 1000, total, dtype=np.int32))),
        }
        base += n
        lance.write_dataset(pa.table(cols), uri, mode="append" if i else "create",
                            data_storage_version=version)
    ds = lance.dataset(uri)
    ds.delete("id % 7 = 3 and id < 70000")  # first fragment: some rows deleted
    ds.delete("id >= 78000 and id % 5 = 1")  # the last fragment too


@pytest.mark.parametrize("version", ["2.1", "2.2"])
@pytest.mark.parametrize("small", [False, True])
@pytest.mark.parametrize("wide_share", [False, True])
def test_compaction_carries_dictionaries(tmp_path: Path, version: str, small: bool, wide_share: bool,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """``small``: decoded batches of a small-fragment run share the writer's page buffers
    with carried ones; such a page is decoded as a whole (``writer._concat``). ``wide_share``:
    pages cut as under a 16 MiB writer share (the local budget's half), for which the dataset
    was shaped - with ``small`` every page of the strings then mixes the run's decoded batches
    with carried ones; the default 8 MiB share also cuts pages of carried batches alone."""
    import lance

    src, expected, names = source_dataset(str(tmp_path / "src"), _dataset, version, small)
    if wide_share:
        monkeypatch.setattr(budget, "WRITER_SHARE_MAX", 16 << 20)

    fast: list[bool] = []
    real_plan = plan._plan_carried
    monkeypatch.setattr(plan, "_plan_carried",
                        lambda *a, **k: (r := real_plan(*a, **k), fast.append(r is not None))[0])
    carried = compacted_copy(src, str(tmp_path / "carried"), 1 << 20)
    # the strings reached the writer's plan as dictionaries (all pages mixed: never)
    assert any(fast) != (small and wide_share)
    got = lance.dataset(carried)
    assert len(got.get_fragments()) == 1
    assert got.to_table().sort_by("id").equals(expected)

    real_init = rewrite._FragmentSink.__init__

    def decoding_sink(self, *a, **k) -> None:  # noqa: ANN001, ANN002, ANN003
        real_init(self, *a, **k)
        self.keep_dictionaries = False

    monkeypatch.setattr(rewrite._FragmentSink, "__init__", decoding_sink)
    decoded = compacted_copy(src, str(tmp_path / "decoded"), 1 << 20)
    assert new_file_hashes(carried, names) == new_file_hashes(decoded, names)
