"""What old writers left behind, pinned on datasets pylance 14 writes and edits as old releases
did: data file version 0.0, the default / a blob ``storage_class`` on schema fields, missing
``physical_rows`` / ``num_deleted_rows`` and ``file_size_bytes`` (filled in on commit), index
bitmaps an old writer left missing, overlapping or untrustworthy (recomputed from the index
files, as pylance 14's commit does), and, on the 0.10.5 time-machine dataset,
duplicate field ids (read as pylance 14 reads them, repaired on commit as pylance 14 repairs
them)."""

from __future__ import annotations

import shutil
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops._pb import index_pb2
from lance_spark_ops.errors import CorruptFileError, UnsupportedError
from lance_spark_ops.file.reader import LanceFileReader
from lance_spark_ops.index.kinds import uuid_str
from lance_spark_ops.index.vector.ivf import without_partition_ids
from lance_spark_ops.spark.files.compaction import compact
from lance_spark_ops.table.commit.indices import fragment_bitmap
from lance_spark_ops.table.commit.migrate import untrusted_bitmaps
from lance_spark_ops.table.dataset import Dataset
from lance_spark_ops.table.format.transaction import Delete
from tests.support.pylance_indices import index_segments
from tests.table.test_refusals import edit_manifest
from tests.timemachine import make_envs


def _string_field(number: int, value: str) -> bytes:
    raw = value.encode()
    return bytes([number << 3 | 2, len(raw)]) + raw


def _same(uri: str) -> None:
    theirs = lance.dataset(uri).to_table(with_row_id=True, with_row_address=True)
    assert Dataset.open(uri).to_table(with_row_id=True, with_row_address=True).equals(theirs)


def _legacy(tmp_path: Path) -> str:
    uri = str(tmp_path / "ds")
    t = pa.table({"id": pa.array(range(40), pa.int64()), "s": [f"v{i}" for i in range(40)]})
    lance.write_dataset(t, uri, data_storage_version="legacy", max_rows_per_file=10)
    lance.dataset(uri).delete("id % 4 = 1")
    return uri


def _noop_commit(uri: str) -> Dataset:
    ds = Dataset.open(uri)
    return ds.commit(Delete([], [], "false"))


def test_file_version_0_0_reads_as_v1(tmp_path):
    uri = _legacy(tmp_path)

    def to_0_0(pb):
        for f in pb.fragments:
            for d in f.files:
                d.file_major_version = d.file_minor_version = 0
    edit_manifest(uri, to_0_0)
    _same(uri)


def test_default_storage_class_is_accepted(tmp_path):
    uri = _legacy(tmp_path)
    edit_manifest(uri, lambda pb: [f.MergeFromString(_string_field(11, "default")) for f in pb.fields])
    _same(uri)
    _noop_commit(uri)  # written again without field 11; pylance reads it the same
    _same(uri)


def test_blob_storage_class_is_refused(tmp_path):
    uri = _legacy(tmp_path)
    edit_manifest(uri, lambda pb: pb.fields[1].MergeFromString(_string_field(11, "blob")))
    with pytest.raises(UnsupportedError, match="storage class 'blob'"):
        Dataset.open(uri)


def test_missing_counts_are_read_and_written_on_commit(tmp_path):
    uri = _legacy(tmp_path)
    want = lance.dataset(uri).to_table(with_row_id=True)

    def drop_counts(pb):
        for f in pb.fragments:
            f.physical_rows = 0
            if f.HasField("deletion_file"):
                f.deletion_file.num_deleted_rows = 0
    edit_manifest(uri, drop_counts)
    _same(uri)
    ds = _noop_commit(uri)
    counts = [(f.physical_rows, f.deletion_file.num_deleted_rows if f.deletion_file else None)
              for f in ds.fragments]
    assert counts == [(10, 3), (10, 2), (10, 3), (10, 2)]
    frags = lance.dataset(uri).get_fragments()
    assert [(f.metadata.physical_rows, f.metadata.deletion_file.num_deleted_rows) for f in frags] == \
        [(10, 3), (10, 2), (10, 3), (10, 2)]
    assert lance.dataset(uri).to_table(with_row_id=True).equals(want)


def test_counts_are_recounted_without_a_writer_version(tmp_path):
    """Releases before writer versions sometimes wrote wrong ``physical_rows`` (lance#1531):
    after a version without one, Lance's commit counts every fragment again; so does ours."""
    uri = _legacy(tmp_path / "src")

    def no_writer_wrong_counts(pb):
        pb.ClearField("writer_version")
        pb.fragments[1].physical_rows = 7
        pb.fragments[2].deletion_file.num_deleted_rows = 1
    edit_manifest(uri, no_writer_wrong_counts)
    ours, theirs = _ours_and_pylances(tmp_path, uri)
    def counts(uri: str) -> list[tuple[int, int]]:
        return [(f.physical_rows, f.deletion_file.num_deleted_rows) for f in Dataset.open(uri).fragments]
    assert counts(ours) == counts(theirs) == [(10, 3), (10, 2), (10, 3), (10, 2)]
    _same(ours)


def _bitmaps(uri: str) -> dict[str, list[list[int]]]:
    """index name -> the fragment ids of each of its segments (in manifest order)."""
    section = Dataset.open(uri).manifest_file.index_section
    out: dict[str, list[list[int]]] = {}
    for i in section.indices if section is not None else []:
        out.setdefault(i.name, []).append(sorted(fragment_bitmap(i) or []))
    return out


_STATS = ("num_indexed_fragments", "num_unindexed_fragments", "num_indexed_rows", "num_unindexed_rows")


def _index_answers(uri: str) -> dict:
    """pylance 14's view of every index: its stats and what its query answers."""
    ds = lance.dataset(uri)
    out = {}
    for idx in index_segments(ds):
        name = idx["name"]
        if name.startswith("__"):
            continue  # the fragment reuse index answers no query
        stats = ds.stats.index_stats(name)
        out[name] = {k: stats.get(k) for k in _STATS}
        if idx["fields"] == ["vec"]:
            q = np.linspace(-1, 1, 8, dtype=np.float32)
            got = ds.to_table(nearest={"column": "vec", "q": q, "k": 10, "nprobes": 2}, columns=["id"])
            out[name]["query"] = sorted(got["id"].to_pylist())
        elif idx["fields"] == ["id"]:
            out[name]["query"] = sorted(ds.to_table(filter="id < 120", columns=["id"])["id"].to_pylist())
    return out


def _ours_and_pylances(tmp_path: Path, src: Path | str) -> tuple[str, str]:
    """Two copies of ``src``: ours after a no-op commit of this library, theirs after
    pylance 14's (``delete('false')``, which runs Lance's migrations)."""
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    shutil.copytree(src, ours)
    shutil.copytree(src, theirs)
    _noop_commit(ours)
    lance.dataset(theirs).delete("false")
    return ours, theirs


def _same_as_pylances_commit(ours: str, theirs: str) -> None:
    assert _bitmaps(ours) == _bitmaps(theirs)
    mine, pylances = lance.dataset(ours), lance.dataset(theirs)
    assert mine.to_table(with_row_id=True).equals(pylances.to_table(with_row_id=True))
    assert _index_answers(ours) == _index_answers(theirs)
    _same(ours)


def test_index_bitmaps_of_an_old_writer_are_recomputed(tmp_path):
    """A manifest of pylance < 0.8.15: Lance recomputes every index's bitmap on commit; ours
    commits and leaves what pylance 14's commit leaves."""
    uri = _legacy(tmp_path / "src")
    lance.dataset(uri).create_scalar_index("id", "BTREE")

    def old_writer(pb):
        pb.writer_version.library, pb.writer_version.version = "lance", "0.8.14"
    edit_manifest(uri, old_writer)
    assert untrusted_bitmaps(Dataset.open(uri).manifest, _section(uri)) == [0]
    ours, theirs = _ours_and_pylances(tmp_path, uri)
    _same_as_pylances_commit(ours, theirs)
    assert _bitmaps(ours) == {"id_idx": [[0, 1, 2, 3]]}
    assert untrusted_bitmaps(Dataset.open(ours).manifest, _section(ours)) == []


def _section(uri: str) -> list:
    section = Dataset.open(uri).manifest_file.index_section
    return list(section.indices) if section is not None else []


def _release(release: str) -> Path:
    try:
        root, manifest = make_envs.ensure(release)
    except make_envs.ReleaseUnavailable as e:
        pytest.skip(f"pylance {release} cannot be installed here: {e}")
    return root


def test_overlapping_bitmaps_of_0_10_18_are_recomputed(tmp_path):
    """pylance 0.10 - 0.21 gave a delta vector index a bitmap overlapping the first segment's
    (Lance's test_data/v0.21.0): recomputed from the v1 IVF_PQ file's row ids as pylance 14
    does."""
    src = _release("0.10.18") / "quirk-bitmap"
    assert _bitmaps(str(src)) == {"vec_idx": [[0], [0, 1]]}
    ours, theirs = _ours_and_pylances(tmp_path, src)
    assert _bitmaps(theirs) == {"vec_idx": [[0], [1]]}
    _same_as_pylances_commit(ours, theirs)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["indexed-default", "quirk-bitmap"])
def test_missing_bitmaps_of_0_6_5_are_recomputed(tmp_path, name):
    """pylance 0.6's indices record no fragment bitmap and its manifests no writer version
    (pylance 14 cannot even list them before a commit): our commit recomputes the bitmaps
    from the v1 IVF_PQ file as pylance 14's does; on the indexed dataset (fragments the index
    covers, with deletions) compaction and migration to 2.2 then leave pylance's answers as
    after its own commit."""
    src = _release("0.6.5") / name
    assert all(b == [[]] for b in _bitmaps(str(src)).values())
    ours, theirs = _ours_and_pylances(tmp_path, src)
    _same_as_pylances_commit(ours, theirs)
    assert _bitmaps(ours)["vec_idx"] != [[]]
    if name != "indexed-default":
        return
    want = {n: a["query"] for n, a in _index_answers(theirs).items()}
    assert want["vec_idx"]
    rows = lance.dataset(theirs).to_table().sort_by("id")
    for kwargs in ({}, {"data_storage_version": "2.2", "migrate_legacy": True}):
        job = str(tmp_path / f"job{len(kwargs)}")
        shutil.copytree(src, job)
        compact(None, job, target_rows_per_fragment=10_000, **kwargs)
        assert len(lance.dataset(job).get_fragments()) == 2  # indexed, unindexed
        assert lance.dataset(job).to_table().sort_by("id").equals(rows)
        assert {n: a["query"] for n, a in _index_answers(job).items()} == want
        _same(job)


def test_file_sizes_are_filled_on_commit(tmp_path):
    """Writers before pylance 0.2x recorded no ``file_size_bytes``; Lance's commit fills them
    in (``migrate_fragments``), and so does ours."""
    src = _release("0.10.18") / "basic-default"
    assert all(d.file_size_bytes is None for f in Dataset.open(str(src)).fragments for d in f.files)
    ours, theirs = _ours_and_pylances(tmp_path, src)
    mine = [[d.file_size_bytes for d in f.files] for f in Dataset.open(ours).fragments]
    pylances = [[d.file_size_bytes for d in f.files] for f in Dataset.open(theirs).fragments]
    assert mine == pylances
    assert all(n and n > 0 for sizes in mine for n in sizes)
    _same(ours)


def test_duplicate_field_ids_of_0_10_5(tmp_path):
    """pylance 0.10.5's add / drop columns (the sequence of Lance's test_data/v0.10.5): read
    as pylance 14 reads it (the first file holding an id), and after a commit of ours the
    schema and files are pylance 14's after its own commit."""
    root = _release("0.10.5")
    assert (root / "quirk-schema").is_dir()
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    shutil.copytree(root / "quirk-schema", ours)
    shutil.copytree(root / "quirk-schema", theirs)
    _same(ours)
    assert Dataset.open(ours).to_table()["b"].to_pylist() == [0, 3, 6, 9]  # z's values, as pylance 14
    _noop_commit(ours)
    lance.dataset(theirs).delete("false")
    _same(ours)
    assert lance.dataset(ours).to_table().equals(lance.dataset(theirs).to_table())
    assert lance.dataset(ours).to_table()["b"].to_pylist() == [0, 4, 8, 12]
    mine, pylance = Dataset.open(ours), Dataset.open(theirs)
    assert [(n.name, n.id) for n in mine.lance_schema.walk()] == \
        [(n.name, n.id) for n in pylance.lance_schema.walk()]
    assert [[d.fields for d in f.files] for f in mine.fragments] == \
        [[d.fields for d in f.files] for f in pylance.fragments]



def test_ivf_partition_id_column_is_dropped():
    """pylance 0.20's auxiliary.idx carried ``__ivf_part_id``; a rewrite drops it (as pylance
    14's), after checking it agrees with the partition lengths."""
    ivf = index_pb2.IVF(lengths=[2, 0, 3], offsets=[0, 2, 2])
    table = pa.table({"_rowid": pa.array(range(5), pa.uint64()),
                      "__ivf_part_id": pa.array([0, 0, 2, 2, 2], pa.uint32()),
                      "__sq_code": pa.array([[1]] * 5, pa.list_(pa.uint8(), 1))})
    assert without_partition_ids(table, ivf).schema.names == ["_rowid", "__sq_code"]
    assert without_partition_ids(table.drop_columns(["__ivf_part_id"]), ivf).num_columns == 2
    bad = table.set_column(1, "__ivf_part_id", pa.array([0, 1, 2, 2, 2], pa.uint32()))
    with pytest.raises(CorruptFileError, match="__ivf_part_id"):
        without_partition_ids(bad, ivf)


@pytest.mark.slow
def test_hnsw_of_0_20_is_compacted_as_pylance_does(tmp_path):
    """pylance 0.20's IVF_HNSW_SQ (``__ivf_part_id`` in its storage) after deletions: pylance 14
    compacts it (remapping the index); so do we, with the same answers and storage columns."""
    src = _release("0.20.0") / "hnsw-default"
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    shutil.copytree(src, ours)
    shutil.copytree(src, theirs)
    want = _index_answers(theirs)["vec_idx"]["query"]
    lance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=10_000)
    compact(None, ours, target_rows_per_fragment=10_000)
    assert _index_answers(ours)["vec_idx"]["query"] == _index_answers(theirs)["vec_idx"]["query"] == want
    assert lance.dataset(ours).to_table().sort_by("id").equals(lance.dataset(theirs).to_table().sort_by("id"))

    def storage_columns(uri: str) -> list[str]:
        idx = next(i for i in _section(uri) if i.name == "vec_idx")
        rel = f"_indices/{uuid_str(idx.uuid.uuid)}/auxiliary.idx"
        return LanceFileReader(rel, store=Dataset.open(uri).store).schema.names
    assert storage_columns(ours) == storage_columns(theirs) == ["_rowid", "__sq_code"]
    _same(ours)
