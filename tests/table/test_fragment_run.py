"""Commits on the manifest's fragment bytes (``FragmentRun``): a ReserveFragments, CreateIndex or
Rewrite built from a manifest whose fragments were never built gives byte for byte the manifest
the fragment-object path gives, the Rewrite transaction with ``RunFragments`` groups the bytes of
one with fragment lists; a compaction commit builds no object per old fragment and pylance 14
reads its result."""

from __future__ import annotations

import pickle
from dataclasses import replace

import lance
import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops.spark.files.compaction import compact
from lance_spark_ops.spark.runtime.tuning import Tuning
from lance_spark_ops.table.commit.operations import BuildOptions, build_manifest
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.format.fragment import DataFragment
from lance_spark_ops.table.format.fragment_run import RunFragments, fragment_ids
from lance_spark_ops.table.format.manifest import parse_manifest_file, serialize_manifest_file
from lance_spark_ops.table.format.transaction import (
    CreateIndex,
    ReserveFragments,
    Rewrite,
    RewriteGroup,
    Transaction,
)

SCENARIOS = ["deletions", "stable_row_ids", "schema_evolution", "data_replacement", "v1_names"]


def _manifests(uri: str):
    """The latest manifest parsed twice: fragments left as bytes, and built as objects."""
    ds = Dataset.open(uri)
    data = ds.store.read(ds.manifest_path)
    run_side = parse_manifest_file(data).manifest
    objects = parse_manifest_file(data).manifest
    assert run_side.fragment_run() is not None
    objects.fragments  # noqa: B018 - building them is the point
    assert objects.fragment_run() is None
    return run_side, objects


def _rewrite(m, first: DataFragment) -> Rewrite:
    """Rewrite the first two fragments (one if there is one) into one made from ``first``."""
    run = m.fragment_run()
    k = min(2, len(m.fragment_columns()))
    old = RunFragments(run.take(np.arange(k))) if run is not None else m.fragments[:k]
    return Rewrite([RewriteGroup(old, [replace(first, id=0, deletion_file=None)])])


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("kind", ["reserve", "create_index", "rewrite"])
def test_run_path_equals_object_path(pylance_dataset, scenario: str, kind: str) -> None:
    run_side, objects = _manifests(pylance_dataset(scenario, "2.2"))
    first = Dataset.open(pylance_dataset(scenario, "2.2")).manifest.fragments[0]
    out = []
    for m in (run_side, objects):
        op = {"reserve": lambda: ReserveFragments(3), "create_index": lambda: CreateIndex([], []),
              "rewrite": lambda: _rewrite(m, first)}[kind]()  # noqa: B023 - called at once
        txn = Transaction(m.version, "00000000-0000-0000-0000-000000000000", op)
        new, _ = build_manifest(m, [], txn, "x.txn", BuildOptions(timestamp_nanos=1_700_000_000_000_000_000))
        assert (new.fragment_run() is not None) == (m is run_side)
        out.append((serialize_manifest_file(new, txn.to_bytes()), txn.to_bytes()))
    assert out[0] == out[1]
    # the manifest written from the run reads back with the fragments a whole parse gives
    again = parse_manifest_file(out[0][0]).manifest
    assert again.fragments == parse_manifest_file(out[1][0]).manifest.fragments


def test_run_fragments_behave_as_a_list(pylance_dataset) -> None:
    m, objects = _manifests(pylance_dataset("deletions", "2.2"))
    run = m.fragment_run()
    assert len(run) >= 2
    at = np.array([len(run) - 1, 0])
    frags = RunFragments(run.take(at))
    expected = [objects.fragments[i] for i in at.tolist()]
    assert fragment_ids(frags).tolist() == [f.id for f in expected]
    assert len(frags) == 2 and frags == expected and list(frags) == expected
    copied = pickle.loads(pickle.dumps(frags))
    assert type(copied) is list and copied == expected
    assert Transaction(1, "u", Rewrite([RewriteGroup(frags, [])])).to_bytes() == \
        Transaction(1, "u", Rewrite([RewriteGroup(expected, [])])).to_bytes()


def test_compaction_commit_builds_no_old_fragment(tmp_path, monkeypatch) -> None:
    uri = str(tmp_path / "ds")
    n = 3000
    table = pa.table({"id": np.arange(n * 2, dtype=np.int64), "x": np.arange(n * 2, dtype=np.float64)})
    lance.write_dataset(table, uri, data_storage_version="2.2", max_rows_per_file=2, max_rows_per_group=2)
    built: list[int] = []
    committing: list[bool] = []
    original = DataFragment.lazy_bytes.__func__

    def counting(cls, ids, *rest):
        if committing:
            built.append(len(ids))
        return original(cls, ids, *rest)

    monkeypatch.setattr(DataFragment, "lazy_bytes", classmethod(counting))
    hook = Tuning(before_commit=lambda kind, attempt: committing.append(True))
    m = compact(None, uri, target_rows_per_fragment=4000, tuning=hook)
    assert committing and m.fragments_removed == n and m.fragments_added >= 1
    assert sum(built) <= m.fragments_added  # only the new version's fragments, none of the 3000
    assert (m.read_version, m.reservation_versions, m.new_version) == (1, [], 2)  # no index: no reservation
    ds = lance.dataset(uri)
    assert ds.version == 2 and len(ds.get_fragments()) == m.fragments_added
    assert ds.to_table().sort_by("id").equals(table)
    # the ids the Rewrite gave them, after the dataset's highest
    assert [f.fragment_id for f in ds.get_fragments()] == list(range(n, n + m.fragments_added))
