"""Index files and the fragment reuse index we write, compared with pylance's own output for an
identical copy compacted by pylance (same plan, same reserved fragment ids)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from lance_spark_ops.file.reader import LanceFileReader
from lance_spark_ops.index import frag_reuse
from lance_spark_ops.index.address_map import RowAddressMap
from lance_spark_ops.index.kinds import uuid_str
from lance_spark_ops.index.scalar.bitmap import decode_tree_map, null_list_buffer
from lance_spark_ops.spark.files.compaction import compact
from lance_spark_ops.spark.indices.index_remap import frag_reuse_entry, index_entries, reuse_versions
from lance_spark_ops.spark.runtime.tuning import Tuning
from lance_spark_ops.table.dataset import Dataset
from tests.index.helpers import build, queries, unindexed

SCALARS = (("id", "BTREE", None), ("cat", "BITMAP", None), ("labels", "LABEL_LIST", None))
VECTORS = (("IVF_PQ", "vec_pq"), ("IVF_FLAT", "vec_flat"))


def _twins(tmp_path: Path, version: str, defer: bool, rows: int = 10_000,
           stable: bool = False) -> tuple[str, str]:
    import lance

    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    build(ours, version, stable, rows=rows, fragments=5, scalar=SCALARS, vector=VECTORS)
    shutil.copytree(ours, theirs)
    lance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=rows, defer_index_remap=defer)
    compact(None, ours, target_rows_per_fragment=rows, defer_index_remap=defer)
    return ours, theirs


def _files(uri: str) -> dict[str, tuple]:
    """name -> (file name -> (table, file version, extra global buffers decoded))."""
    out = {}
    for idx in index_entries(Dataset.open(uri)):
        if idx.name.startswith("__"):
            continue
        d = Path(uri) / "_indices" / uuid_str(idx.uuid.uuid)
        files = {}
        for f in sorted(d.iterdir()):
            r = LanceFileReader(str(f))
            if f.name == "index.idx":  # centroids; byte order of its metadata map varies
                gb = r.metadata.global_buffers.tolist()[1:]
                raw = r.read_raw_ranges([tuple(x) for x in gb])
                files[f.name] = (r.schema.metadata, [bytes(b) for b in raw])
                continue
            t = r.read()
            if "bitmaps" in t.schema.names:
                decoded = [decode_tree_map(b).tolist() for b in t.column(1).to_pylist()]
                t = t.set_column(1, "bitmaps", [decoded])
            nulls = null_list_buffer(r.schema)
            extra = None
            if nulls is not None:
                p, n = r.metadata.global_buffers.tolist()[nulls]
                extra = decode_tree_map(bytes(r.read_raw_ranges([(p, n)])[0])).tolist()
            if f.name == "auxiliary.idx":  # the IVF partition table and the PQ codebook
                gb = r.metadata.global_buffers.tolist()[1:]
                extra = [bytes(b) for b in r.read_raw_ranges([tuple(x) for x in gb])]
            files[f.name] = (t.to_pydict(), r.schema.metadata, r.version, extra)
        out[idx.name] = (files, list(idx.fields), idx.index_version, idx.index_details.type_url,
                         sorted(f.path for f in idx.files))
    return out


@pytest.mark.parametrize(("version", "stable"), [("2.0", False), ("2.2", False), ("2.1", True)])
def test_remapped_files_match_pylance(tmp_path: Path, version: str, stable: bool) -> None:
    """Stable row ids: only the BTREE (index_version 1, row addresses) is rewritten."""
    ours, theirs = _twins(tmp_path, version, defer=False, stable=stable)
    mine, pylance = _files(ours), _files(theirs)
    assert mine.keys() == pylance.keys() == {"id_idx", "cat_idx", "labels_idx", "vec_pq", "vec_flat"}
    for name in mine:
        assert mine[name] == pylance[name], name
    lookup = mine["id_idx"][0]["page_lookup.lance"][0]
    assert lookup["page_idx"] == [0, 1, 2]  # 9000 live rows re-cut into pages of 4096
    # the manifest entries record the same file sizes as the files on disk
    for idx in index_entries(Dataset.open(ours)):
        for f in idx.files:
            assert (Path(ours) / "_indices" / uuid_str(idx.uuid.uuid) / f.path).stat().st_size == f.size_bytes


def test_frag_reuse_index_matches_pylance(tmp_path: Path) -> None:
    ours, theirs = _twins(tmp_path, "2.2", defer=True, rows=4000)
    a, b = frag_reuse_entry(Dataset.open(ours)), frag_reuse_entry(Dataset.open(theirs))
    assert a is not None and b is not None
    for field in ("name", "dataset_version", "fragment_bitmap", "index_version"):
        assert getattr(a, field) == getattr(b, field), field
    assert list(a.fields) == list(b.fields) == [] and not a.files
    va, vb = reuse_versions(Dataset.open(ours)), reuse_versions(Dataset.open(theirs))
    assert [v.SerializeToString() for v in va] == [v.SerializeToString() for v in vb]
    # the address map it records sends every surviving row to its row in the new fragment
    m = frag_reuse.version_map(va[0])
    assert m.old.size == 3600 and int(m.new[0]) == (5 << 32)


def test_frag_reuse_details_external(tmp_path: Path) -> None:
    """Details over the inline limit go to _indices/<uuid>/details.binpb, which pylance reads."""
    import lance

    uri = str(tmp_path / "ds")
    before = queries(build(uri, "2.2", False, vector=VECTORS))
    compact(None, uri, target_rows_per_fragment=1000, defer_index_remap=True,
            tuning=Tuning(reuse_inline_bytes=64))
    entry = frag_reuse_entry(Dataset.open(uri))
    assert (Path(uri) / frag_reuse.details_path(entry)).is_file()
    assert len(reuse_versions(Dataset.open(uri))) == 1
    ds = lance.dataset(uri)
    assert queries(ds) == before
    assert all(v == 0 for k, v in unindexed(ds).items() if k != "id_zm")


def test_address_map() -> None:
    old = np.array([(3 << 32) | 1, (3 << 32) | 4, (5 << 32)], dtype=np.uint64)
    new = np.array([(9 << 32), (9 << 32) | 1, (9 << 32) | 2], dtype=np.uint64)
    m = RowAddressMap.from_pairs(old, new, [3, 5])
    probe = np.array([(5 << 32), (3 << 32) | 2, (3 << 32) | 4, (7 << 32) | 8], dtype=np.uint64)
    keep, out = m.apply(probe)
    assert keep.tolist() == [True, False, True, True]  # (3, 2) was deleted; fragment 7 untouched
    assert out.tolist() == [(9 << 32) | 2, (9 << 32) | 1, (7 << 32) | 8]


def _nan_safe(x: object) -> object:
    if isinstance(x, float) and x != x:
        return "NaN"
    if isinstance(x, dict):
        return {k: _nan_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_nan_safe(v) for v in x)
    return x


@pytest.mark.parametrize("stream_rows", [1 << 20, 777])
def test_btree_lookup_nulls_nan_strings_bools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              stream_rows: int) -> None:
    """Pages starting with nulls / ending with NaN: min / max as pylance writes them, whether
    page_data streams through the remap in one chunk or in chunks crossing page boundaries."""
    import lance
    import pyarrow as pa

    n = 10_000
    f = np.random.default_rng(0).random(n)
    f[::97] = np.nan
    t = pa.table({"id": pa.array(np.arange(n)),
                  "s": pa.array([None if i % 13 == 0 else f"k{i % 501:04d}" for i in range(n)]),
                  "f": pa.array(f), "b": pa.array([None if i % 11 == 0 else bool(i % 2) for i in range(n)])})
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    ds = lance.write_dataset(t, ours, max_rows_per_file=2000)
    for c in ("s", "f", "b"):
        ds.create_scalar_index(c, "BTREE", name=f"{c}_bt")
    lance.dataset(ours).delete("id % 10 = 3")
    shutil.copytree(ours, theirs)
    lance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=n)
    compact(None, ours, target_rows_per_fragment=n, tuning=Tuning(btree_stream_rows=stream_rows))
    mine, pylance = _files(ours), _files(theirs)
    assert mine.keys() == {"s_bt", "f_bt", "b_bt"}
    for name in mine:
        assert _nan_safe(mine[name]) == _nan_safe(pylance[name]), name
    assert mine["s_bt"][0]["page_lookup.lance"][0]["min"][0] is None


def test_page_cutter_equals_whole_lookup() -> None:
    """The streamed lookup equals ``page_lookup`` of the whole page_data (nulls, NaN, short
    last pages, chunks of any size across page boundaries)."""
    import pyarrow as pa

    from lance_spark_ops.index.scalar.btree import PageCutter, page_lookup

    rng = np.random.default_rng(0)
    schema = pa.schema([("min", pa.float64()), ("max", pa.float64()), ("null_count", pa.uint32()),
                        ("page_idx", pa.uint32())])
    for _ in range(300):
        n, bs = int(rng.integers(0, 60)), int(rng.integers(1, 9))
        vals = rng.random(n)
        vals[rng.random(n) < 0.1] = np.nan
        arr = pa.array(vals, mask=rng.random(n) < 0.2)
        whole = pa.table({"values": arr, "ids": pa.array(np.arange(n, dtype=np.uint64))})
        want = page_lookup(whole, bs, schema)
        cutter, at = PageCutter(bs, schema), 0
        while at < n:
            k = int(rng.integers(1, 12))
            cutter.add(arr.slice(at, k))
            at += k
        got = cutter.finish()
        assert got.schema == want.schema and repr(got.to_pydict()) == repr(want.to_pydict()), (n, bs)


def test_tree_map_round_trip_and_typed_errors():
    """A serialized RowIdTreeMap decodes to its row addresses; damaged ones are refused typed."""
    import struct

    from lance_spark_ops.errors import CorruptFileError, UnsupportedError
    from lance_spark_ops.index.scalar.bitmap import encode_tree_map

    addrs = np.array([1, 5, (3 << 32) + 7, (3 << 32) + 9], np.uint64)
    blob = encode_tree_map(addrs)
    assert decode_tree_map(blob).tolist() == addrs.tolist()
    assert decode_tree_map(b"\0\0\0\0").size == 0
    for bad in (b"", b"\x01\0\0", blob[:-3]):
        with pytest.raises(CorruptFileError):
            decode_tree_map(bad)
    with pytest.raises(UnsupportedError, match="selects all of fragment 4"):
        decode_tree_map(struct.pack("<III", 1, 4, 0))
