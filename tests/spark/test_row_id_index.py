"""Row-id sequence compaction, the rebuild job and the persisted row-id index, checked against
pylance's ``to_table(with_row_id=True, with_row_address=True)`` on datasets pylance made
through deletes, updates and compactions."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lance_spark_ops import row_id_index
from lance_spark_ops.errors import CorruptFileError, NotFoundError
from lance_spark_ops.io.storage import ObjectStore
from lance_spark_ops.row_id_index import MISSING, IndexManifest, IndexPartition, lookup, lookup_in_index
from lance_spark_ops.spark.files.row_id_index_tasks import SequenceSpec, run_sequence_rebuild, write_part
from lance_spark_ops.spark.files.row_id_sequences import compact_sequence, fill_deleted
from lance_spark_ops.spark.runtime.runner import run_tasks_locally
from lance_spark_ops.table.format.rowids import (
    ArraySegment,
    RangeSegment,
    RangeWithBitmapSegment,
    RangeWithHolesSegment,
)
from lance_spark_ops.table.rowids import decode_row_ids, encode_row_ids
from tests.spark.datasets import before_commit


# -- the sequence re-encoding --------------------------------------------------------------------
def test_fill_continues_runs() -> None:
    ids = np.array([5, 6, 100, 101, 9, 10], dtype=np.uint64)
    dead = np.array([0, 0, 1, 1, 0, 0], dtype=bool)
    assert fill_deleted(ids, dead).tolist() == [5, 6, 7, 8, 9, 10]
    lead = np.array([40, 41, 12, 13], dtype=np.uint64)
    assert fill_deleted(lead, np.array([1, 1, 0, 0], bool)).tolist() == [10, 11, 12, 13]
    assert fill_deleted(ids, np.ones(6, bool)).tolist() == list(range(5, 11))


def test_intended_segments() -> None:
    ids = np.concatenate([np.arange(1000), np.arange(5000, 6000)]).astype(np.uint64)
    dead = np.zeros(ids.size, bool)
    dead[[3, 17, 1500, 1999]] = True
    seq = compact_sequence(ids, dead)
    assert seq.segments == [RangeSegment(0, 1000), RangeSegment(5000, 6000)]
    # what Lance itself writes for the live ids after a compaction: one 750-byte bitmap
    assert len(encode_row_ids(ids[~dead]).to_bytes()) > 700 > 40 > len(seq.to_bytes())
    # a real gap stays (bitmap or holes), the deleted positions do not add holes
    gappy = np.delete(np.arange(100, dtype=np.uint64), [10, 50])
    seq = compact_sequence(gappy, np.isin(np.arange(98), [20, 21, 22]))
    assert len(seq.segments) == 1
    assert isinstance(seq.segments[0], (RangeWithHolesSegment, RangeWithBitmapSegment))
    # an unsorted tail becomes its own array, the sorted head a range
    mixed = np.concatenate([np.arange(10_000), [70_003, 70_001, 70_002]]).astype(np.uint64)
    seq = compact_sequence(mixed, np.zeros(mixed.size, bool))
    assert seq.segments[0] == RangeSegment(0, 10_000)
    assert isinstance(seq.segments[-1], ArraySegment)


_pieces = st.lists(
    st.one_of(
        st.tuples(st.just("range"), st.integers(0, 5000), st.integers(1, 400)),
        st.tuples(st.just("sparse"), st.integers(0, 5000), st.integers(1, 60)),
        st.tuples(st.just("shuffled"), st.integers(0, 5000), st.integers(1, 40)),
    ),
    min_size=1, max_size=8)


@settings(max_examples=150, deadline=None)
@given(_pieces, st.integers(0, 2**32), st.floats(0.0, 0.9))
def test_compact_sequence_keeps_live_ids(pieces: list, seed: int, dead_fraction: float) -> None:
    rng = np.random.default_rng(seed)
    parts = []
    for kind, start, n in pieces:
        if kind == "range":
            parts.append(np.arange(start, start + n))
        elif kind == "sparse":
            parts.append(np.sort(rng.choice(np.arange(start, start + 10 * n), n, replace=False)))
        else:
            parts.append(rng.permutation(np.arange(start, start + n)))
    ids = np.concatenate(parts).astype(np.uint64)
    dead = rng.random(ids.size) < dead_fraction
    seq = compact_sequence(ids, dead)
    got = decode_row_ids(seq)
    assert got.size == ids.size
    assert np.array_equal(got[~dead], ids[~dead])
    assert len(seq.to_bytes()) <= len(encode_row_ids(fill_deleted(ids, dead)).to_bytes())


# -- datasets made by pylance -------------------------------------------------------------------------
def _stable(uri: str, version: str = "2.1") -> str:
    """Stable row ids through deletes, updates (rows move, keeping ids) and compactions."""
    import lance

    n = 6000
    tbl = pa.table({"a": pa.array(range(n), pa.int64()), "v": pa.array(np.zeros(n))})
    ds = lance.write_dataset(tbl, uri, max_rows_per_file=1500, enable_stable_row_ids=True,
                             data_storage_version=version)
    rng = np.random.default_rng(7)
    for _ in range(25):
        lo = int(rng.integers(0, n - 100))
        ds.update({"v": "v + 1"}, where=f"a >= {lo} AND a < {lo + 40}")
    lance.dataset(uri).delete("a % 11 = 0")
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=2500)
    for _ in range(5):
        lo = int(rng.integers(0, n - 100))
        lance.dataset(uri).update({"v": "v + 1"}, where=f"a >= {lo} AND a < {lo + 30}")
    lance.dataset(uri).delete("a % 13 = 0")
    return uri


@pytest.fixture(scope="module")
def stable_dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _stable(str(tmp_path_factory.mktemp("rowid") / "stable"))


@pytest.fixture
def stable_copy(stable_dataset: str, tmp_path: Path) -> str:
    dst = tmp_path / "copy"
    shutil.copytree(stable_dataset, dst)
    return str(dst)


def _mapping(uri: str) -> pa.Table:
    import lance

    return lance.dataset(uri).to_table(columns=["a"], with_row_id=True, with_row_address=True)


def test_sequence_task_without_spark(stable_dataset: str) -> None:
    import lance

    ds = lance.dataset(stable_dataset)
    ids = tuple(f.fragment_id for f in ds.get_fragments())
    out = run_tasks_locally("job", [SequenceSpec(stable_dataset, ds.version, ids)], run_sequence_rebuild)
    frags = out[0][1]
    assert [f.fragment_id for f in frags] == list(ids)
    assert sum(f.bytes_after for f in frags) < sum(f.bytes_before for f in frags)
    assert all((f.meta is None) == (f.bytes_after == f.bytes_before) for f in frags)


def test_rebuild_locally_keeps_every_row_id(stable_copy: str) -> None:
    import lance

    from lance_spark_ops.spark.files.row_id_index import rebuild_row_id_index

    before = _mapping(stable_copy)
    m = rebuild_row_id_index(None, stable_copy)
    assert m.new_version == m.read_version + 1 and m.fragments_rewritten > 0
    assert m.sequence_bytes_after < m.sequence_bytes_before
    assert _mapping(stable_copy).equals(before)
    ds = lance.dataset(stable_copy)
    sample = before.column("_rowid").to_pylist()[::97]
    taken = ds._take_rows(sample, columns=["a"]).column("a").to_pylist()  # by row id, through pylance's index
    assert taken == before.column("a").to_pylist()[::97]
    # pylance keeps working on the result: delete, update, compact
    ds.delete("a % 17 = 0")
    lance.dataset(stable_copy).update({"v": "v + 10"}, where="a < 200")
    lance.dataset(stable_copy).optimize.compact_files(target_rows_per_fragment=100_000)
    after = lance.dataset(stable_copy).to_table(columns=["a"], with_row_id=True)
    expected = before.filter(pa.compute.not_equal(pa.compute.modulo(before.column("a"), 17), 0))
    def pairs(t: pa.Table) -> list[tuple[int, int]]:
        return sorted(zip(t.column("a").to_pylist(), t.column("_rowid").to_pylist(), strict=True))

    assert pairs(after) == pairs(expected)
    # a second rebuild finds nothing left to improve (no commit)
    m2 = rebuild_row_id_index(None, stable_copy)
    assert m2.new_version is None or m2.sequence_bytes_after < m2.sequence_bytes_before


def test_rebuild_retries_over_a_concurrent_append(stable_copy: str) -> None:
    import lance

    from lance_spark_ops.spark.files.row_id_index import rebuild_row_id_index

    extra = pa.table({"a": pa.array(range(9000, 9100), pa.int64()), "v": pa.array(np.ones(100))})

    def concurrent(attempt: int) -> None:
        if attempt == 1:
            lance.write_dataset(extra, stable_copy, mode="append")

    before = _mapping(stable_copy)
    m = rebuild_row_id_index(None, stable_copy, tuning=before_commit(concurrent))
    assert m.attempts == 2 and m.new_version == m.read_version + 1
    after = _mapping(stable_copy)
    assert after.num_rows == before.num_rows + 100
    assert after.slice(0, before.num_rows).select(["a", "_rowid"]).equals(before.select(["a", "_rowid"]))


def test_not_stable_writes_nothing(tmp_path: Path) -> None:
    import lance

    from lance_spark_ops.spark.files.row_id_index import rebuild_row_id_index

    uri = str(tmp_path / "plain")
    lance.write_dataset(pa.table({"a": range(100)}), uri, max_rows_per_file=40).delete("a = 5")
    m = rebuild_row_id_index(None, uri)
    assert not m.stable_row_ids and "row address" in m.message
    assert not (tmp_path / "plain" / "_lance_spark_ops").exists()
    assert lance.dataset(uri).version == 2
    # lookup answers addresses directly, MISSING for deleted or absent rows
    got = lookup(uri, [0, 5, 45, (1 << 32) | 10, (7 << 32)])
    assert got.tolist() == [0, int(MISSING), int(MISSING), (1 << 32) | 10, int(MISSING)]


def test_index_parts_and_lookup_without_spark(tmp_path: Path) -> None:
    store = ObjectStore(str(tmp_path))
    ids = np.arange(0, 3000, 3, dtype=np.uint64)
    addrs = ids * np.uint64(7)
    parts = []
    for k, (s, e) in enumerate([(0, 400), (400, 1000)]):
        pairs = [pa.array(ids[s:e].view(np.int64)), pa.array(addrs[s:e].view(np.int64))]
        batches = iter([pa.record_batch(pairs, names=["row_id", "row_addr"])])
        info = write_part(store, f"_lance_spark_ops/row_id_index/v3/p{k}.lance", batches, "2.1")
        parts.append(IndexPartition(f"p{k}.lance", info.min_row_id, info.max_row_id, info.rows, info.size))
    manifest = IndexManifest(3, 1000, "2.1", parts)
    row_id_index._parts.clear()  # noqa: SLF001 - the per-process part cache shows what was read
    assert lookup_in_index(store, manifest, np.array([3, 6], dtype=np.uint64)).tolist() == [21, 42]
    assert [k[1].rsplit("/", 1)[-1] for k in row_id_index._parts] == ["p0.lance"]  # noqa: SLF001
    query = np.array([2997, 3, 4, 1200, 0, 10**9], dtype=np.uint64)
    got = lookup_in_index(store, manifest, query)
    assert got.tolist() == [2997 * 7, 21, int(MISSING), 8400, 0, int(MISSING)]
    assert IndexManifest.from_json(manifest.to_json(), "x") == manifest
    with pytest.raises(CorruptFileError):
        write_part(store, "bad.lance", iter([pa.record_batch([pa.array([5, 5]), pa.array([1, 2])],
                                                             names=["row_id", "row_addr"])]), "2.1")


def test_lookup_needs_an_index(stable_dataset: str) -> None:
    with pytest.raises(NotFoundError, match="rebuild_row_id_index"):
        lookup(stable_dataset, [1, 2])


@pytest.mark.spark
def test_rebuild_job_and_lookup(spark, stable_copy: str, capsys: pytest.CaptureFixture) -> None:
    import importlib.util
    import json

    import lance

    path = Path(__file__).resolve().parents[2] / "jobs" / "rebuild_row_id_index.py"
    spec = importlib.util.spec_from_file_location("job_rebuild_row_id_index", path)
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    before = _mapping(stable_copy)
    job.main([stable_copy, "--rows-per-partition", "2000"])
    m = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert m["index_version"] == lance.dataset(stable_copy).version == m["new_version"]
    assert m["index_partitions"] >= 2 and m["index_rows"] == before.num_rows
    assert m["sequence_bytes_after"] < m["sequence_bytes_before"]
    assert _mapping(stable_copy).equals(before)
    addrs = lookup(stable_copy, before.column("_rowid"))
    assert np.array_equal(addrs, before.column("_rowaddr").to_numpy())
    ghosts = lookup(stable_copy, [lance.dataset(stable_copy).to_table().num_rows * 100])
    assert ghosts.tolist() == [int(MISSING)]


@pytest.mark.parametrize("version", ["2.0", "2.2"])
def test_rebuild_and_lookup_other_versions(spark, tmp_path: Path, version: str) -> None:
    """The same history on 2.0 and 2.2 datasets: after a rebuild, lookup equals pylance's
    _rowid -> _rowaddr for every row, and pylance reads the same rows and ids."""
    from lance_spark_ops.spark.files.row_id_index import rebuild_row_id_index

    uri = _stable(str(tmp_path / f"ds_{version}"), version)
    before = _mapping(uri)
    m = rebuild_row_id_index(spark, uri, rows_per_partition=1500)
    assert m.sequence_bytes_after < m.sequence_bytes_before
    after = _mapping(uri)
    assert after.equals(before)
    assert np.array_equal(lookup(uri, after.column("_rowid")), after.column("_rowaddr").to_numpy())
