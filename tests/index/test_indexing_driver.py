"""The index driver (``spark.indices.indexing``): which segments ``optimize_indices`` builds, merges and
keeps, with which fragment bitmaps and dataset versions, against pylance's own
``optimize_indices`` on a twin copy; the checks ``create_index`` makes before any work; the
tiered policy's rounds. A recording builder stands in for the real ones (their files are
tested in the per-type modules), so these run without Spark."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from pyroaring import BitMap

from lance_spark_ops.errors import InvalidInputError, UnsupportedError
from lance_spark_ops.index.kinds import uuid_str
from lance_spark_ops.index.params import NoParams
from lance_spark_ops.spark.indices import index_registry
from lance_spark_ops.spark.indices.index_segment import BuiltSegment, SegmentBuilder, SegmentRequest
from lance_spark_ops.spark.indices.indexing import (
    check_create_index,
    create_index,
    optimize_indices,
    tier_groups,
    unindexed_rows,
    user_segments,
)
from lance_spark_ops.table.dataset import Dataset

lance = pytest.importorskip("lance")


class RecordingBuilder(SegmentBuilder):
    """Writes one small file per segment and records the requests (BTREE details as pylance)."""

    kinds = frozenset({"BTREE"})

    def __init__(self) -> None:
        self.requests: list[SegmentRequest] = []

    def check_params(self, kind: str, field: pa.Field, params: Mapping[str, Any]) -> NoParams:
        if params:
            raise InvalidInputError(f"unknown parameter {sorted(params)[0]!r}")
        return NoParams()

    def params_of(self, kind: str, index: Any) -> NoParams:
        return NoParams()

    def build(self, job: Any, req: SegmentRequest) -> BuiltSegment:
        from google.protobuf import any_pb2

        from lance_spark_ops.table.dataset import Dataset

        self.requests.append(req)
        ds = Dataset.open(req.uri, req.read_version)
        ds.store.write(f"_indices/{uuid_str(req.new_uuid)}/seg.bin", b"x" * 10)
        details = any_pb2.Any(type_url="/lance.table.BTreeIndexDetails", value=b"")
        return BuiltSegment((("seg.bin", 10),), details.SerializeToString(), 0, -1)


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> RecordingBuilder:
    rec = RecordingBuilder()
    monkeypatch.setitem(index_registry._OVERRIDES, "BTREE", rec)
    return rec


def _make(uri: str, stable: bool = False) -> None:
    """Fragments 0-1 indexed; fragment 0 then deleted whole, a row of 1; fragments 2-3 appended."""
    shutil.rmtree(uri, ignore_errors=True)
    ds = lance.write_dataset(pa.table({"x": np.arange(1000)}), uri, max_rows_per_file=500,
                             enable_stable_row_ids=stable)
    ds.create_scalar_index("x", "BTREE")
    ds.delete("x < 500 OR x = 600")
    for k in range(2):
        lance.write_dataset(pa.table({"x": np.arange(1000) + 1000 * (k + 1)}), uri, mode="append")


def _append(uri: str, start: int) -> None:
    lance.write_dataset(pa.table({"x": np.arange(10) + start}), uri, mode="append")


def _shape(uri: str, old: set[bytes]) -> list[tuple[Any, ...]]:
    """Per segment, in manifest order: kept uuid (or "new"), fragment ids, dataset version."""
    ds = Dataset.open(uri)
    return [(uuid_str(s.uuid.uuid) if bytes(s.uuid.uuid) in old else "new",
             sorted(BitMap.deserialize(s.fragment_bitmap)), int(s.dataset_version))
            for s in user_segments(ds)["x_idx"]]


def _uuids(uri: str) -> set[bytes]:
    return {bytes(s.uuid.uuid) for s in user_segments(Dataset.open(uri))["x_idx"]}


STEPS = [
    [{}],
    [{"num_indices_to_merge": 0}],
    [{"num_indices_to_merge": 0}, "append", {}],
    [{"num_indices_to_merge": 0}, "append", {"num_indices_to_merge": 2}],
    [{"num_indices_to_merge": 0}, {"num_indices_to_merge": 2}, {"num_indices_to_merge": 2}],
    [{"num_indices_to_merge": 0}, "append", {"retrain": True}],
    [{}, {}],
    [{"num_indices_to_merge": 0}, "append", {"num_indices_to_merge": 0}, {"num_indices_to_merge": 5}],
]


@pytest.mark.parametrize("stable", [False, True], ids=["addresses", "stable"])
@pytest.mark.parametrize("steps", STEPS, ids=lambda s: "-".join(str(x) for x in s))
def test_optimize_segments_as_pylance(tmp_path: Any, recorder: RecordingBuilder, steps: list[Any],
                                      stable: bool) -> None:
    """Stable row ids: older segments covering fragments with deleted rows are merged too."""
    ours, twin = str(tmp_path / "ours"), str(tmp_path / "twin")
    _make(ours, stable)
    shutil.copytree(ours, twin)
    for k, step in enumerate(steps):
        old_ours, old_twin = _uuids(ours), _uuids(twin)
        v_ours, v_twin = Dataset.open(ours).version, Dataset.open(twin).version
        if step == "append":
            _append(ours, 9000 + k * 10)
            _append(twin, 9000 + k * 10)
            continue
        optimize_indices(None, ours, **step)
        lance.dataset(twin).optimize.optimize_indices(**step)
        got, want = _shape(ours, old_ours), _shape(twin, old_twin)
        # the same segments kept (in place), built, with the same bitmaps and versions
        assert [(u if u == "new" else "kept", f, v) for u, f, v in got] == \
            [(u if u == "new" else "kept", f, v) for u, f, v in want]
        # nothing to do: neither commits
        assert (Dataset.open(ours).version == v_ours) == (lance.dataset(twin).version == v_twin)
        assert unindexed_rows(Dataset.open(ours), "x_idx") == \
            lance.dataset(twin).stats.index_stats("x_idx")["num_unindexed_rows"]


def test_optimize_requests(tmp_path: Any, recorder: RecordingBuilder) -> None:
    """The builder is asked for the unindexed fragments, with the merged segments to fold in."""
    uri = str(tmp_path / "ds")
    _make(uri)
    before = user_segments(Dataset.open(uri))["x_idx"]
    m = optimize_indices(None, uri)
    (req,) = recorder.requests
    assert req.fragment_ids == (2, 3)
    assert len(req.merge_with) == 1 and req.merge_with[0] == before[0].SerializeToString()
    assert req.column == "x" and req.kind == "BTREE" and not req.row_ids
    assert m.indices["x_idx"]["segments_before"] == 1 and m.indices["x_idx"]["segments_after"] == 1
    assert m.commits == 1 and m.new_version == Dataset.open(uri).version


def test_create_index_checks(tmp_path: Any, recorder: RecordingBuilder) -> None:
    uri = str(tmp_path / "ds")
    _make(uri)
    ds = Dataset.open(uri)
    with pytest.raises(InvalidInputError, match="'nope' does not exist"):
        check_create_index(ds, "nope", "BTREE")
    with pytest.raises(InvalidInputError, match="unknown index type 'BTREEE'"):
        check_create_index(ds, "x", "BTREEE")
    with pytest.raises(InvalidInputError, match="RTREE index column 'x' must be a GeoArrow"):
        check_create_index(ds, "x", "rtree")
    with pytest.raises(InvalidInputError, match="MINHASHLSH index column 'x' must be a string"):
        check_create_index(ds, "x", "minhashlsh")
    with pytest.raises(InvalidInputError, match="vector index needs a fixed_size_list of floats"):
        check_create_index(ds, "x", "ivf_rq")  # IVF_RQ is built now: the type problem is named
    with pytest.raises(InvalidInputError, match="unknown parameter 'zone'"):
        check_create_index(ds, "x", "BTREE", params={"zone": 3})
    with pytest.raises(InvalidInputError, match="already exists"):
        check_create_index(ds, "x", "BTREE", replace=False)
    assert check_create_index(ds, "x", "btree").replace  # scalar types replace by default
    v = ds.version
    m = create_index(None, uri, "x", "BTREE")
    after = Dataset.open(uri)
    assert after.version == v + 1 and m.indices["x_idx"]["segments_after"] == 1
    (seg,) = user_segments(after)["x_idx"]
    assert sorted(BitMap.deserialize(seg.fragment_bitmap)) == [1, 2, 3]
    assert seg.dataset_version == v and seg.created_at > 0
    assert [(f.path, f.size_bytes) for f in seg.files] == [("seg.bin", 10)]


def test_failed_build_leaves_nothing(tmp_path: Any, recorder: RecordingBuilder,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    uri = str(tmp_path / "ds")
    _make(uri)
    from lance_spark_ops.spark.indices import indexing

    def boom(*a: Any, **k: Any) -> Any:
        raise RuntimeError("commit failed")

    monkeypatch.setattr(indexing, "commit_plans", boom)
    before = sorted(p.name for p in (tmp_path / "ds" / "_indices").iterdir())
    v = Dataset.open(uri).version
    with pytest.raises(RuntimeError):
        optimize_indices(None, uri)
    assert sorted(p.name for p in (tmp_path / "ds" / "_indices").iterdir()) == before
    assert Dataset.open(uri).version == v


def test_optimize_unknown_index(tmp_path: Any, recorder: RecordingBuilder) -> None:
    uri = str(tmp_path / "ds")
    _make(uri)
    with pytest.raises(InvalidInputError, match="no index named 'y_idx'"):
        optimize_indices(None, uri, index_names=["y_idx"])
    with pytest.raises(InvalidInputError, match="merge_policy"):
        optimize_indices(None, uri, merge_policy="greedy")


def test_tier_groups_shrink_geometrically() -> None:
    sizes = list(range(1000))
    rounds, n = 0, len(sizes)
    while n > 1:
        groups = tier_groups([1] * n, 10)
        assert all(2 <= len(g) <= 11 for g in groups)
        n = n - sum(len(g) for g in groups) + len(groups)
        rounds += 1
    assert rounds == 3
    assert tier_groups([5, 1, 100, 2, 90], 2) == [[1, 3], [0, 2, 4]]
    with pytest.raises(InvalidInputError):
        tier_groups(sizes, 1)


def test_tiered_merges_deltas(tmp_path: Any, recorder: RecordingBuilder) -> None:
    """25 delta segments -> one, in rounds, every fragment still covered once."""
    uri = str(tmp_path / "ds")
    lance.write_dataset(pa.table({"x": np.arange(10)}), uri).create_scalar_index("x", "BTREE")
    for k in range(24):
        _append(uri, 100 + 10 * k)
        lance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=0)
    assert len(user_segments(Dataset.open(uri))["x_idx"]) == 25
    _append(uri, 5000)
    m = optimize_indices(None, uri, merge_policy="tiered", tier_fanout=4)
    ds = Dataset.open(uri)
    segs = user_segments(ds)["x_idx"]
    assert len(segs) == 1 and m.rounds >= 2 and m.commits == m.rounds
    assert sorted(BitMap.deserialize(segs[0].fragment_bitmap)) == [f.id for f in ds.fragments]
    assert segs[0].dataset_version == 1
    assert unindexed_rows(ds, "x_idx") == 0


def test_optimize_all_skips_types_it_cannot_build(tmp_path: Any, recorder: RecordingBuilder,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Optimizing every index leaves one of a type without a builder as it is (and says so);
    naming it is refused."""
    uri = str(tmp_path / "ds")
    _make(uri)
    lance.dataset(uri).create_scalar_index("x", "ZONEMAP", name="x_zm")
    monkeypatch.setitem(index_registry._MODULES, "ZONEMAP", ("lance_spark_ops.no_such_module", "X"))
    m = optimize_indices(None, uri)
    assert m.indices["x_zm"]["type"] == "ZONEMAP" and "not supported" in m.indices["x_zm"]["skipped"]
    assert m.indices["x_idx"]["segments_after"] == 1 and m.commits == 1
    with pytest.raises(UnsupportedError, match="ZONEMAP"):
        optimize_indices(None, uri, index_names=["x_zm"])


def test_concurrent_append_stays_unindexed(tmp_path: Any, recorder: RecordingBuilder) -> None:
    """An append landing between plan and commit: ours commits; the new fragment is left for the
    next run (pylance counts its rows as unindexed)."""
    from tests.spark.datasets import before_commit

    uri = str(tmp_path / "ds")
    _make(uri)
    optimize_indices(None, uri,
                     tuning=before_commit(lambda attempt: _append(uri, 7000) if attempt == 0 else None))
    ds = Dataset.open(uri)
    (seg,) = user_segments(ds)["x_idx"]
    assert sorted(BitMap.deserialize(seg.fragment_bitmap)) == [1, 2, 3]
    assert unindexed_rows(ds, "x_idx") == 10  # the appended rows


def test_concurrent_optimize_of_the_same_index(tmp_path: Any, recorder: RecordingBuilder) -> None:
    """pylance's own optimize_indices commits first: ours retries from the new version, finds
    nothing left to do, and never puts its segment over pylance's."""
    from tests.spark.datasets import before_commit

    uri = str(tmp_path / "ds")
    _make(uri)
    calls = []

    def theirs(attempt: int) -> None:
        calls.append(attempt)
        if attempt == 0 and len(calls) == 1:
            lance.dataset(uri).optimize.optimize_indices()

    m = optimize_indices(None, uri, tuning=before_commit(theirs))
    ds = Dataset.open(uri)
    (seg,) = user_segments(ds)["x_idx"]
    assert m.commits == 0 and len(recorder.requests) == 1
    assert sorted(BitMap.deserialize(seg.fragment_bitmap)) == [1, 2, 3]
    # the segment pylance wrote is the one in the manifest, and our directory is gone
    assert {p.name for p in (tmp_path / "ds" / "_indices").iterdir()} >= {uuid_str(seg.uuid.uuid)}
    left = {p.name for p in (tmp_path / "ds" / "_indices").iterdir()}
    assert uuid_str(recorder.requests[0].new_uuid) not in left


def test_builders_declare_their_capabilities() -> None:
    """Every registered builder implements the whole contract; the driver probes none of them."""
    import inspect

    from lance_spark_ops.spark.indices import index_registry, indexing

    for kind in (*index_registry.SCALAR_TYPES, *index_registry.VECTOR_KINDS):
        b = index_registry.builder_for(kind)
        assert isinstance(b, SegmentBuilder) and kind in b.kinds and isinstance(b.batches, bool), kind
        for name in ("check_params", "params_of", "build", "build_many"):
            assert callable(getattr(b, name)), (kind, name)
    assert "hasattr(" not in inspect.getsource(indexing)
