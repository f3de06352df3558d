"""RTREE segments built by ``spark.indices.scalar_index`` against pylance 14's own: our index
on one copy of a dataset, pylance's ``create_scalar_index`` / ``optimize_indices`` on a twin.
pylance must answer spatial predicates and IS NULL through ours as through its own, and our
files must hold what its files hold (same rows in the same Hilbert order, same metadata)."""

from __future__ import annotations

import shutil
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops.errors import InvalidInputError, UnsupportedError
from lance_spark_ops.file.reader import LanceFileReader
from lance_spark_ops.index.kinds import uuid_str
from lance_spark_ops.index.scalar import rtree as rt
from lance_spark_ops.spark.indices.scalar_index import SCALAR_BUILDER
from lance_spark_ops.spark.runtime.tuning import Tuning
from lance_spark_ops.table.dataset import Dataset
from tests.index.segment_commit import build_and_commit, entries
from tests.support.pylance_indices import index_segments

lance = pytest.importorskip("lance")
from lance.indices import IndexConfig  # noqa: E402

PAGE = 64  # small pages: a few levels from a few thousand rows
POLYS = ("POLYGON((0 0, 3 0, 3 3, 0 3, 0 0))", "POLYGON((-10 -10, -9 -10, -9 -2, -10 -2, -10 -10))",
         "POLYGON((20 20, 21 20, 21 21, 20 20))", "POLYGON((-2 -2, 2 -2, 0 5, -2 -2))")
FILTERS = tuple(f"st_intersects(geom, st_geomfromtext('{p}'))" for p in POLYS) + (
    f"st_within(geom, st_geomfromtext('{POLYS[0]}'))", "geom IS NULL")
POINT = pa.struct([pa.field("x", pa.float64(), nullable=False), pa.field("y", pa.float64(), nullable=False)])


def points(n: int, seed: int, start: int = 0, nulls: bool = True) -> pa.Table:
    rng = np.random.default_rng(seed)
    xy = rng.uniform(-10, 10, (n, 2))
    i = np.arange(start, start + n)
    mask = pa.array((i % 9 == 0) & nulls)
    geom = pa.StructArray.from_arrays([pa.array(xy[:, 0]), pa.array(xy[:, 1])], fields=list(POINT), mask=mask)
    schema = pa.schema([pa.field("id", pa.int64()),
                        pa.field("geom", POINT, metadata={"ARROW:extension:name": "geoarrow.point"})])
    return pa.table([pa.array(i), geom], schema=schema)


def twins(tmp_path: Any, version: str, stable: bool, rows: int = 3000) -> tuple[str, str]:
    out = []
    for side in ("theirs", "ours"):
        uri = str(tmp_path / side)
        shutil.rmtree(uri, ignore_errors=True)
        ds = lance.write_dataset(points(rows, 1, nulls=version != "2.0"), uri, max_rows_per_file=1000,
                                 data_storage_version=version, enable_stable_row_ids=stable)
        ds.delete("id % 10 = 3")
        out.append(uri)
    return out[0], out[1]


def index_files(uri: str) -> dict[tuple[str, str], tuple]:
    ds = Dataset.open(uri)
    out = {}
    for i in ds.manifest_file.index_section.indices:
        for f in i.files:
            r = LanceFileReader(f"_indices/{uuid_str(i.uuid.uuid)}/{f.path}", store=ds.store)
            t = r.read()
            out[(i.name, f.path)] = (t.to_pydict(), t.schema, i.index_version, i.index_details.type_url,
                                     i.index_details.value, i.dataset_version, bytes(i.fragment_bitmap),
                                     r.version)
    return out


def assert_same(theirs: str, ours: str, name: str = "g") -> None:
    ft, fo = index_files(theirs), index_files(ours)
    assert sorted(ft) == sorted(fo)
    for key in ft:
        t, o = ft[key], fo[key]
        assert t[0] == o[0], key
        assert t[1].equals(o[1], check_metadata=True), (key, t[1].metadata, o[1].metadata)
        assert t[2:] == o[2:], key
    assert_answers(theirs, ours, name)


def assert_answers(theirs: str, ours: str, name: str = "g", indexed: bool = True) -> None:
    lt, lo = lance.dataset(theirs), lance.dataset(ours)
    for f in FILTERS:
        want = sorted(lt.to_table(filter=f, columns=[], with_row_id=True)["_rowid"].to_pylist())
        got = sorted(lo.to_table(filter=f, columns=[], with_row_id=True)["_rowid"].to_pylist())
        assert got == want, f
        uses = ["ScalarIndexQuery" in d.scanner(filter=f).explain_plan() for d in (lt, lo)]
        assert uses[0] == uses[1], f  # the index answers where pylance's own does
        assert uses[1] or not indexed or "IS NULL" in f or "st_within" in f, f
    st, so = lt.stats.index_stats(name), lo.stats.index_stats(name)
    for k in ("num_indexed_rows", "num_unindexed_rows", "num_segments"):
        assert so[k] == st[k], k
    assert so["indices"] == st["indices"]


def build_both(theirs: str, ours: str, spark: Any = None, tuning: Tuning | None = None) -> None:
    lance.dataset(theirs).create_scalar_index("geom", IndexConfig("rtree", {"page_size": PAGE}), name="g")
    build_and_commit(SCALAR_BUILDER, spark, ours, "geom", "RTREE", "g", params={"page_size": PAGE},
                     tuning=tuning)


def matrix(*default: tuple[str, bool]) -> list[Any]:
    every = [(v, s) for v in ("2.0", "2.1", "2.2") for s in (False, True)]
    return [c if c in default else pytest.param(*c, marks=pytest.mark.slow) for c in every]


@pytest.mark.parametrize("version,stable", matrix(("2.0", False), ("2.2", True)))
def test_build_and_merge_match_pylance(tmp_path: Any, version: str, stable: bool) -> None:
    """A build over fragments with deleted rows and nulls, then (after deletions, appends and a
    whole fragment deleted) pylance's default optimize: every old item kept, all re-sorted."""
    theirs, ours = twins(tmp_path, version, stable)
    build_both(theirs, ours)
    assert_same(theirs, ours)
    for uri in (theirs, ours):
        lance.dataset(uri).delete("id % 10 = 4")
        lance.write_dataset(points(1500, 2, 3000, nulls=version != "2.0"), uri, mode="append",
                            max_rows_per_file=1000)
        lance.dataset(uri).delete("id < 1000")
    lance.dataset(theirs).optimize.optimize_indices()
    build_and_commit(SCALAR_BUILDER, None, ours, "geom", "RTREE", "g", merge=True)
    assert_same(theirs, ours)
    assert len(entries(Dataset.open(ours), "g")) == 1


def _geom_table(ext: str, values: list, storage: pa.DataType) -> pa.Table:
    schema = pa.schema([pa.field("id", pa.int64()),
                        pa.field("geom", storage, metadata={"ARROW:extension:name": ext})])
    return pa.table([pa.array(np.arange(len(values))), pa.array(values, storage)], schema=schema)


def _shapes() -> dict[str, pa.Table]:
    rng = np.random.default_rng(5)

    def pt() -> dict:
        x, y = rng.uniform(-5, 5, 2)
        return {"x": float(x), "y": float(y)}

    def ring(k: int) -> list:
        return [pt() for _ in range(k)]

    n = 300
    ls = [None if i % 17 == 0 else [] if i % 23 == 0 else ring(1 + i % 4) for i in range(n)]
    poly = [None if i % 19 == 0 else [] if i % 29 == 0 else [ring(4), ring(3)][: 1 + i % 2] for i in range(n)]
    mpoly = [None if i % 13 == 0 else [[ring(4)], [ring(3), ring(5)]][: 1 + i % 2] for i in range(n)]
    def box() -> dict:
        lo, hi = rng.uniform(-5, 0, 2).tolist(), rng.uniform(0, 5, 2).tolist()
        return dict(zip(("xmin", "ymin", "xmax", "ymax"), [*lo, *hi], strict=True))

    boxes = [None if i % 11 == 0 else box() for i in range(n)]
    line = pa.list_(pa.field("vertices", POINT, nullable=False))
    ring_t = pa.list_(pa.field("rings", line, nullable=False))
    box_t = pa.struct([pa.field(k, pa.float64(), nullable=False) for k in ("xmin", "ymin", "xmax", "ymax")])
    return {
        "geoarrow.linestring": _geom_table("geoarrow.linestring", ls, line),
        "geoarrow.polygon": _geom_table("geoarrow.polygon", poly, ring_t),
        "geoarrow.multipolygon": _geom_table("geoarrow.multipolygon", mpoly,
                                             pa.list_(pa.field("polygons", ring_t, nullable=False))),
        "geoarrow.box": _geom_table("geoarrow.box", boxes, box_t),
    }


@pytest.mark.parametrize("shape", sorted(_shapes()))
def test_geometry_types_match_pylance(tmp_path: Any, shape: str) -> None:
    """Boxes of lines, polygons, multipolygons and boxes (nulls in
    ``nulls``, empty geometries in neither) as pylance computes them."""
    t = _shapes()[shape]
    theirs, ours = str(tmp_path / "theirs"), str(tmp_path / "ours")
    for uri in (theirs, ours):
        lance.write_dataset(t, uri, max_rows_per_file=120)
    build_both(theirs, ours)
    assert_same(theirs, ours)


def test_build_on_spark_in_parts(tmp_path: Any, spark: Any, monkeypatch: Any) -> None:
    """Part tasks on executors (row ranges of equal size, fragments cut between them), one merge
    task sorting all items."""
    tuning = Tuning(part_rows=700)
    theirs, ours = twins(tmp_path, "2.1", False)
    build_both(theirs, ours, spark, tuning)
    assert_same(theirs, ours)
    d = Dataset.open(ours)
    for i in d.manifest_file.index_section.indices:  # the parts are gone
        assert sorted(d.store.list(f"_indices/{uuid_str(i.uuid.uuid)}")) == sorted(f.path for f in i.files)
    # both written again at the same URIs (same version numbers, other rows and columns): the
    # reused workers must not serve the old dataset from their cache
    for uri in (theirs, ours):
        shutil.rmtree(uri)
        t = points(2000, 7).append_column("extra", pa.array(np.arange(2000)))
        lance.write_dataset(t, uri, max_rows_per_file=1000, data_storage_version="2.1").delete("id % 10 = 3")
    build_both(theirs, ours, spark, tuning)
    assert_same(theirs, ours)


def test_empty_and_all_null(tmp_path: Any) -> None:
    """No item: no page, the bbox ``null``s pylance writes."""
    theirs, ours = str(tmp_path / "theirs"), str(tmp_path / "ours")
    t = points(50, 3)
    geom = pa.array([None] * 50, t.schema.field("geom").type)
    t = t.set_column(1, t.schema.field("geom"), geom)
    for uri in (theirs, ours):
        lance.write_dataset(t, uri)
    build_both(theirs, ours)
    assert_same(theirs, ours)


def test_hilbert_order_pieces() -> None:
    # the curve's first cells, and Rust's saturating casts (NaN and negatives -> 0)
    assert rt.hilbert_curve(np.array([0, 0, 1, 1]), np.array([0, 1, 1, 0])).tolist() == [0, 3, 2, 1]
    assert rt._grid(np.array([np.nan, -3.0, 1e12, 7.9])).tolist() == [0, 0, 4294967295, 7]
    want = '{"minx":1.0,"miny":-0.5,"maxx":1e21,"maxy":3e-7}'
    assert rt.box_json(np.array([1.0, -0.5, 1e21, 3e-7])) == want
    assert rt.box_json(rt.total_box(np.zeros((0, 4)))) == '{"minx":null,"miny":null,"maxx":null,"maxy":null}'


def test_check_params() -> None:
    b = SCALAR_BUILDER
    geo = pa.field("g", POINT, metadata={"ARROW:extension:name": "geoarrow.point"})
    assert b.check_params("RTREE", geo, {}) == {"page_size": 4096}
    assert b.check_params("RTREE", geo, {"page_size": 16}) == {"page_size": 16}
    with pytest.raises(InvalidInputError, match="page_size"):
        b.check_params("RTREE", geo, {"page_size": 1})
    with pytest.raises(InvalidInputError, match="'x' must be a GeoArrow"):
        b.check_params("RTREE", pa.field("x", POINT), {})
    wkb = pa.field("w", pa.binary(), metadata={"ARROW:extension:name": "geoarrow.wkb"})
    with pytest.raises(UnsupportedError, match="geoarrow.wkb"):
        b.check_params("RTREE", wkb, {})
    item = pa.list_(pa.field("item", pa.float64()), 2)  # interleaved as Lance stores it: pylance refuses
    with pytest.raises(UnsupportedError, match="2-D"):
        b.check_params("RTREE", pa.field("p", item, metadata={"ARROW:extension:name": "geoarrow.point"}), {})
    xyz = pa.struct([pa.field(c, pa.float64()) for c in "xyz"])
    with pytest.raises(UnsupportedError, match="2-D"):
        b.check_params("RTREE", pa.field("p", xyz, metadata={"ARROW:extension:name": "geoarrow.point"}), {})


@pytest.mark.parametrize(("version", "stable", "defer"), [
    ("2.2", False, False), ("2.1", False, True), ("2.2", True, False),
    pytest.param("2.0", False, False, marks=pytest.mark.slow),
    pytest.param("2.1", True, False, marks=pytest.mark.slow)])
def test_lifecycle_matches_pylance(tmp_path: Any, version: str, stable: bool, defer: bool) -> None:
    """``create_index``, a compaction (pylance cannot remap an RTREE: left as it was, behind the
    FRI when deferred, its bitmap recalculated on stable row ids), then an append and
    ``optimize_indices``: the entries, files and answers of pylance's twin at every step."""
    from lance_spark_ops.spark import compact, create_index, optimize_indices

    theirs, ours = twins(tmp_path, version, stable)
    lance.dataset(theirs).create_scalar_index("geom", "RTREE", name="g")
    create_index(None, ours, "geom", "RTREE", name="g")
    assert_same(theirs, ours)
    lance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=2000, defer_index_remap=defer)
    m = compact(None, ours, target_rows_per_fragment=2000, defer_index_remap=defer)
    assert m.fragments_removed == 3
    assert m.indices_remapped == {} and m.indices_frag_reuse == ({"RTREE": 1} if defer else {})

    def shape(uri: str) -> list:
        return sorted((i["name"], sorted(i["fragment_ids"])) for i in index_segments(lance.dataset(uri)))

    assert shape(ours) == shape(theirs)
    assert_answers(theirs, ours, indexed=defer or stable)  # else the index covers no fragment left
    for uri in (theirs, ours):
        lance.write_dataset(points(700, 4, 3000, nulls=version != "2.0"), uri, mode="append")
    lance.dataset(theirs).optimize.optimize_indices()
    optimize_indices(None, ours)
    assert shape(ours) == shape(theirs)
    assert_same(theirs, ours)
