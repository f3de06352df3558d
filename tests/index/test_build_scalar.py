"""Scalar index segments built by ``spark.indices.scalar_index`` (issue #27) against pylance's own:
our index on one copy of a dataset, pylance's ``create_scalar_index`` / ``optimize_indices``
on a twin. pylance must answer through ours as through its own, count no unindexed row, and
our files must hold what its files hold."""

from __future__ import annotations

import shutil
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops.errors import InvalidInputError
from lance_spark_ops.file.reader import LanceFileReader
from lance_spark_ops.index.kinds import uuid_str
from lance_spark_ops.index.scalar.btree import index_order, merge_runs, sort_run
from lance_spark_ops.spark.indices import scalar_index
from lance_spark_ops.spark.indices.scalar_index import SCALAR_BUILDER
from lance_spark_ops.spark.runtime.tuning import Tuning
from lance_spark_ops.table.dataset import Dataset
from tests.index.segment_commit import build_and_commit, entries

lance = pytest.importorskip("lance")

KINDS = (("id", "BTREE"), ("f", "BTREE"), ("s", "BTREE"), ("cat", "BITMAP"), ("f", "BITMAP"),
         ("labels", "LABEL_LIST"))
FILTERS = (
    "id = 5", "id >= 100 AND id < 160", "id IN (5, 13, 777)", "id IS NULL", "id > 990",
    "f = 7.0", "f > 45", "f IS NULL", "f IS NOT NULL AND f < 3", "f IN (1.0, 2.0)",
    "s = 's017'", "s < 's005'", "s IS NULL",
    "cat = 'c5'", "cat IN ('c1', 'c2')", "cat IS NULL", "cat >= 'c7'",
    "array_has_any(labels, ['l3'])", "array_has_all(labels, ['l3', 'l1'])", "array_has_any(labels, ['zz'])",
)


def table(n: int, start: int = 0) -> pa.Table:
    i = np.arange(start, start + n)
    return pa.table({
        "id": pa.array((i * 7919) % 1000, pa.int64()),  # many ties, spread over fragments
        "f": pa.array([None if k % 37 == 0 else (float("nan") if k % 41 == 0 else float(k % 50)) for k in i]),
        "s": pa.array([None if k % 29 == 0 else f"s{k % 113:03d}" for k in i]),
        "cat": pa.array([None if k % 31 == 0 else f"c{k % 17}" for k in i]),
        "labels": pa.array([None if k % 23 == 0 else [] if k % 19 == 0 else
                            [f"l{k % 5}", f"l{k % 7}", None if k % 11 == 0 else "x"] for k in i],
                           pa.list_(pa.string())),
    })


def twins(tmp_path: Any, version: str, stable: bool, rows: int = 3000) -> tuple[str, str]:
    """Two equal datasets: fragments of 1000 rows, 10% deleted."""
    out = []
    for side in ("theirs", "ours"):
        uri = str(tmp_path / side)
        shutil.rmtree(uri, ignore_errors=True)
        ds = lance.write_dataset(table(rows), uri, max_rows_per_file=1000, data_storage_version=version,
                                 enable_stable_row_ids=stable)
        ds.delete("id % 10 = 3")
        out.append(uri)
    return out[0], out[1]


def matrix(*default: tuple[str, bool]) -> list[Any]:
    """(version, stable) cases: ``default`` ones in the default suite, the rest marked slow."""
    every = [(v, s) for v in ("2.0", "2.1", "2.2") for s in (False, True)]
    return [c if c in default else pytest.param(*c, marks=pytest.mark.slow) for c in every]


def name_of(col: str, kind: str) -> str:
    return f"{col}_{kind.lower()}"


def index_files(uri: str) -> dict[tuple[str, str], tuple]:
    """Per (index name, file): its table in a canonical row order (page_data by value then id:
    pylance's tie order among equal values is its sort's, not a rule), schema, global buffers
    1.., and the entry's index_version, details type and dataset_version."""
    ds = Dataset.open(uri)
    out = {}
    for i in ds.manifest_file.index_section.indices:
        d = f"_indices/{uuid_str(i.uuid.uuid)}"
        for f in i.files:
            r = LanceFileReader(f"{d}/{f.path}", store=ds.store)
            t = r.read()
            if f.path == "page_data.lance":
                t = t.take(index_order(t))
            gb = r.metadata.global_buffers.tolist()[1:]
            extra = [bytes(b) for b in r.read_raw_ranges([(int(p), int(n)) for p, n in gb])] if gb else []
            rows = {c: [repr(v) for v in t.column(c).to_pylist()] for c in t.column_names}  # NaN == NaN
            out[(i.name, f.path)] = (rows, t.schema, extra, i.index_version, i.index_details.type_url,
                                     i.index_details.value, i.dataset_version, bytes(i.fragment_bitmap),
                                     r.version)
    return out


def assert_same(theirs: str, ours: str, kinds: tuple = KINDS) -> None:
    ft, fo = index_files(theirs), index_files(ours)
    assert sorted(ft) == sorted(fo)
    for key in ft:
        t, o = ft[key], fo[key]
        assert t[0] == o[0], key
        assert t[1].equals(o[1], check_metadata=True), (key, t[1], o[1])
        assert t[2:] == o[2:], key
    lt, lo = lance.dataset(theirs), lance.dataset(ours)
    for f in FILTERS:
        want = lt.to_table(filter=f, columns=[], with_row_id=True)["_rowid"].to_pylist()
        got = lo.to_table(filter=f, columns=[], with_row_id=True)["_rowid"].to_pylist()
        scan = lo.scanner(filter=f, columns=[], with_row_id=True, use_scalar_index=False).to_table()
        assert sorted(got) == sorted(want) == sorted(scan["_rowid"].to_pylist()), f
        plan = lo.scanner(filter=f).explain_plan()
        assert "ScalarIndexQuery" in plan or "MaterializeIndex" in plan, (f, plan)
    for col, kind in kinds:
        st, so = lt.stats.index_stats(name_of(col, kind)), lo.stats.index_stats(name_of(col, kind))
        assert so["num_unindexed_rows"] == 0
        assert (so["num_indexed_rows"], so["num_segments"]) == (st["num_indexed_rows"], st["num_segments"])


def build_both(theirs: str, ours: str, spark: Any = None, kinds: tuple = KINDS, on_spark: tuple = (),
               tuning: Tuning | None = None) -> None:
    """pylance's indices on ``theirs``, ours on ``ours`` (those of ``on_spark`` with ``spark``)."""
    for col, kind in kinds:
        lance.dataset(theirs).create_scalar_index(col, kind, name=name_of(col, kind))
        session = spark if (col, kind) in on_spark else None
        build_and_commit(SCALAR_BUILDER, session, ours, col, kind, name_of(col, kind), tuning=tuning)


@pytest.mark.parametrize("version,stable", matrix(("2.0", False), ("2.2", True)))
def test_build_matches_pylance(tmp_path: Any, version: str, stable: bool) -> None:
    theirs, ours = twins(tmp_path, version, stable)
    build_both(theirs, ours)
    assert_same(theirs, ours)


def test_build_on_spark_in_parts(tmp_path: Any, spark: Any, monkeypatch: Any) -> None:
    """Several part tasks on executors (a part per fragment), one merge task (BTREE's k-way
    merge, LABEL_LIST's bitmap union; the other kinds in this process)."""
    theirs, ours = twins(tmp_path, "2.1", False)
    build_both(theirs, ours, spark, on_spark=(("s", "BTREE"), ("labels", "LABEL_LIST")),
               tuning=Tuning(part_rows=1000))
    assert_same(theirs, ours)
    d = Dataset.open(ours)
    for i in d.manifest_file.index_section.indices:  # the parts are gone
        assert sorted(d.store.list(f"_indices/{uuid_str(i.uuid.uuid)}")) == sorted(f.path for f in i.files)


@pytest.mark.parametrize("stable", [False, True])
def test_btree_range_merge_matches_pylance(tmp_path: Any, monkeypatch: Any, stable: bool) -> None:
    """BTREE runs merged by value range (a task per range, pages cut across ranges, ties of
    ``id``, nulls and NaN of ``f``), then an append merged with the old segment by range too:
    the files equal pylance's."""
    from lance_spark_ops.spark.indices import btree_merge_tasks as btree_merge

    tuning = Tuning(part_rows=4000, range_rows=4000, range_merge_rows=1, btree_sample_rows=64)
    ranges: list[Any] = []
    run_range = btree_merge.run_range

    def counted(spec: Any, ctx: Any) -> Any:
        ranges.append(spec)
        return run_range(spec, ctx)

    monkeypatch.setattr(btree_merge, "run_range", counted)
    theirs, ours = twins(tmp_path, "2.1", stable, rows=20000)
    build_both(theirs, ours, tuning=tuning)
    assert len({s.new_uuid for s in ranges}) == 2  # id and f by range; s (strings) by one task
    assert len(ranges) >= 8
    assert_same(theirs, ours)
    for uri in (theirs, ours):
        lance.write_dataset(table(5000, 20000), uri, mode="append", max_rows_per_file=1000)
    lance.dataset(theirs).optimize.optimize_indices()
    before = len(ranges)
    for col, kind in KINDS:
        build_and_commit(SCALAR_BUILDER, None, ours, col, kind, name_of(col, kind), merge=True, tuning=tuning)
    assert len(ranges) > before
    assert_same(theirs, ours)


def test_btree_range_merge_spans_of_an_old_segment(tmp_path: Any, monkeypatch: Any) -> None:
    """Appended values above the old ones (and a few among them): ranges holding only old rows
    are copied from the old page_data as spans; the merged files equal pylance's."""
    from lance_spark_ops.spark.indices import btree_merge_tasks as btree_merge

    outs: list[Any] = []
    run_range = btree_merge.run_range

    def kept(spec: Any, ctx: Any) -> Any:
        outs.append(run_range(spec, ctx))
        return outs[-1]

    monkeypatch.setattr(btree_merge, "run_range", kept)
    rng = np.random.default_rng(5)
    uris = [str(tmp_path / side) for side in ("theirs", "ours")]
    first = pa.table({"v": pa.array(rng.permutation(20000), pa.int64())})
    more = pa.table({"v": pa.array(np.concatenate([np.arange(20000, 24000), [7, 7, 19999]]), pa.int64())})
    for uri in uris:
        lance.write_dataset(first, uri, max_rows_per_file=5000, data_storage_version="2.1")
        lance.dataset(uri).create_scalar_index("v", "BTREE", name="v_idx")
        lance.write_dataset(more, uri, mode="append")
    lance.dataset(uris[0]).optimize.optimize_indices()
    build_and_commit(SCALAR_BUILDER, None, uris[1], "v", "BTREE", "v_idx", merge=True,
                     tuning=Tuning(range_merge_rows=1, range_rows=3000, part_rows=3000))
    assert any(o.span is not None for o in outs) and any(o.file is not None for o in outs)
    ft, fo = index_files(uris[0]), index_files(uris[1])
    assert sorted(ft) == sorted(fo)
    for key in ft:
        assert ft[key][:3] == fo[key][:3], key
    lt, lo = (lance.dataset(u) for u in uris)
    for f in ("v = 7", "v > 19990 AND v < 20010", "v >= 23999"):
        assert (sorted(lo.to_table(filter=f, columns=[], with_row_id=True)["_rowid"].to_pylist())
                == sorted(lt.to_table(filter=f, columns=[], with_row_id=True)["_rowid"].to_pylist())), f
    assert lo.stats.index_stats("v_idx")["num_unindexed_rows"] == 0


def after_appends(uri: str, stable: bool) -> None:
    """Deletions in indexed fragments, two appended fragments, then a whole fragment deleted."""
    ds = lance.dataset(uri)
    ds.delete("id % 10 = 4")
    lance.write_dataset(table(1500, 3000), uri, mode="append", max_rows_per_file=1000)
    lance.dataset(uri).delete("id % 10 = 5")
    lance.dataset(uri).delete("_rowid < 1000" if stable else "_rowaddr < 4294967296")


@pytest.mark.parametrize("version,stable", matrix(("2.1", False), ("2.2", True)))
def test_merge_matches_optimize_indices(tmp_path: Any, version: str, stable: bool) -> None:
    theirs, ours = twins(tmp_path, version, stable)
    build_both(theirs, ours)
    after_appends(theirs, stable)
    after_appends(ours, stable)
    lance.dataset(theirs).optimize.optimize_indices()
    for col, kind in KINDS:
        build_and_commit(SCALAR_BUILDER, None, ours, col, kind, name_of(col, kind), merge=True)
    assert_same(theirs, ours)
    for col, kind in KINDS:  # the merged segment replaced the old one
        assert len(entries(Dataset.open(ours), name_of(col, kind))) == 1


def test_delta_segment_over_new_fragments(tmp_path: Any) -> None:
    """``num_indices_to_merge=0``: a second segment over the appended fragments only."""
    theirs, ours = twins(tmp_path, "2.1", False)
    kinds = (("id", "BTREE"), ("cat", "BITMAP"))
    build_both(theirs, ours, kinds=kinds)
    for uri in (theirs, ours):
        lance.write_dataset(table(1500, 3000), uri, mode="append", max_rows_per_file=1000)
    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=0)
    for col, kind in kinds:
        d = Dataset.open(ours)
        covered = {f for i in entries(d, name_of(col, kind)) for f in _bitmap(i)}
        new = [f.id for f in d.fragments if f.id not in covered]
        build_and_commit(SCALAR_BUILDER, None, ours, col, kind, name_of(col, kind), fragment_ids=new)
    lt, lo = lance.dataset(theirs), lance.dataset(ours)
    for f in ("id = 5", "id >= 100 AND id < 160", "cat = 'c5'", "cat IS NULL"):
        assert (sorted(lo.to_table(filter=f, columns=[], with_row_id=True)["_rowid"].to_pylist())
                == sorted(lt.to_table(filter=f, columns=[], with_row_id=True)["_rowid"].to_pylist())), f
    for col, kind in kinds:
        so, st = lo.stats.index_stats(name_of(col, kind)), lt.stats.index_stats(name_of(col, kind))
        assert so["num_unindexed_rows"] == 0
        assert so["num_segments"] == st["num_segments"] == 2


def _bitmap(index: Any) -> list[int]:
    from pyroaring import BitMap

    return list(BitMap.deserialize(bytes(index.fragment_bitmap)))


@pytest.mark.slow
@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
@pytest.mark.parametrize("stable", [False, True])
def test_matrix_slow(tmp_path: Any, version: str, stable: bool) -> None:
    theirs, ours = twins(tmp_path, version, stable, rows=12000)
    build_both(theirs, ours)
    assert_same(theirs, ours)
    after_appends(theirs, stable)
    after_appends(ours, stable)
    lance.dataset(theirs).optimize.optimize_indices()
    for col, kind in KINDS:
        build_and_commit(SCALAR_BUILDER, None, ours, col, kind, name_of(col, kind), merge=True)
    assert_same(theirs, ours)


def test_merge_runs_streams_a_total_order() -> None:
    """k runs cut into chunks of every size merge into the order one sort gives."""
    rng = np.random.default_rng(3)
    vals = rng.integers(0, 20, 5000).astype(float)
    vals[rng.random(5000) < 0.05] = np.nan
    values = pa.array(vals, mask=rng.random(5000) < 0.05)
    ids = rng.permutation(5000).astype(np.uint64)
    whole = sort_run(values, ids)
    cuts = np.sort(rng.choice(5000, 6, replace=False))
    bounds = zip([0, *cuts], [*cuts, 5000], strict=True)
    runs = [sort_run(values.slice(a, b - a), ids[a:b]) for a, b in bounds]

    def chunks(t: pa.Table, size: int) -> Any:
        for k in range(0, t.num_rows, size):
            yield t.slice(k, size)

    sizes = rng.integers(1, 300, 7)
    merged = pa.concat_tables(merge_runs([chunks(r, int(s)) for r, s in zip(runs, sizes, strict=True)]))
    assert merged.column("ids").to_pylist() == whole.column("ids").to_pylist()
    assert merged.num_rows == 5000
    # runs of disjoint ascending id ranges (parts of consecutive fragments): the fast path
    ids = np.arange(5000, dtype=np.uint64)
    whole = sort_run(values, ids)
    bounds = zip([0, *cuts], [*cuts, 5000], strict=True)
    runs = [sort_run(values.slice(a, b - a), ids[a:b]) for a, b in bounds]
    merged = pa.concat_tables(merge_runs([chunks(r, int(s)) for r, s in zip(runs[::-1], sizes, strict=True)]))
    assert merged.column("ids").to_pylist() == whole.column("ids").to_pylist()


def test_check_params() -> None:
    b = SCALAR_BUILDER
    assert b.check_params("BTREE", pa.field("x", pa.int32()), {}) == {"zone_size": 4096}
    assert b.check_params("BTREE", pa.field("x", pa.int32()), {"zone_size": 100}) == {"zone_size": 100}
    assert b.check_params("BITMAP", pa.field("x", pa.string()), {}) == {}
    with pytest.raises(InvalidInputError, match="bogus"):
        b.check_params("BITMAP", pa.field("x", pa.string()), {"bogus": 1})
    with pytest.raises(InvalidInputError, match="zone_size"):
        b.check_params("BTREE", pa.field("x", pa.int32()), {"zone_size": -1})
    with pytest.raises(InvalidInputError, match="'x'"):
        b.check_params("LABEL_LIST", pa.field("x", pa.int32()), {})
    with pytest.raises(InvalidInputError, match="'n'"):
        b.check_params("NGRAM", pa.field("n", pa.int64()), {})
    with pytest.raises(InvalidInputError, match="'v'"):
        b.check_params("BTREE", pa.field("v", pa.list_(pa.float32())), {})
    assert b.check_params("BLOOMFILTER", pa.field("x", pa.string()), {"probability": 0.01}) == {
        "number_of_items": 8192, "probability": 0.01}
    assert b.check_params("ZONEMAP", pa.field("x", pa.float32()), {}) == {"rows_per_zone": 8192}
    with pytest.raises(InvalidInputError, match="probability"):
        b.check_params("BLOOMFILTER", pa.field("x", pa.string()), {"probability": 2})
    with pytest.raises(InvalidInputError, match="'b'"):
        b.check_params("BLOOMFILTER", pa.field("b", pa.bool_()), {})
    with pytest.raises(InvalidInputError, match="'x' must be a string"):
        b.check_params("MINHASHLSH", pa.field("x", pa.int32()), {})


WORDS = ("Hello", "wörld", "Café", "straße", "abc", "xyz123", "ÆGIR", "naïve", "foo-bar", "a", "", "Ünïcode",
         "zzz", "other1", "other12")
NGRAM_QUERIES = ("Hello", "wörld", "Café", "afé", "traße", "ÆGI", "naïve", "other1", "w12", "bar", "xyz12",
                 "unïc", "nope")


def text_table(n: int, start: int = 0) -> pa.Table:
    i = np.arange(start, start + n)
    texts = [None if k % 31 == 0 else f"{WORDS[k % 15]} {WORDS[(k * 7) % 15]} w{k % 97}" for k in i]
    return pa.table({"t": pa.array(texts)})


def assert_same_ngram(theirs: str, ours: str) -> None:
    ft, fo = index_files(theirs), index_files(ours)
    assert sorted(ft) == sorted(fo) == [("ng", "ngram_postings.lance")]
    for key in ft:
        assert ft[key][0] == fo[key][0]
        assert ft[key][1].equals(fo[key][1], check_metadata=True)
        assert ft[key][2:] == fo[key][2:]
    lt, lo = lance.dataset(theirs), lance.dataset(ours)
    for q in NGRAM_QUERIES:
        f = f"contains(t, '{q}')"
        want = sorted(lt.to_table(filter=f, columns=[], with_row_id=True)["_rowid"].to_pylist())
        assert sorted(lo.to_table(filter=f, columns=[], with_row_id=True)["_rowid"].to_pylist()) == want, f
        assert "ScalarIndexQuery" in lo.scanner(filter=f).explain_plan()
    assert lo.stats.index_stats("ng")["num_unindexed_rows"] == 0


@pytest.mark.parametrize("version,stable", matrix(("2.1", False), ("2.2", True)))
def test_ngram_matches_pylance(tmp_path: Any, version: str, stable: bool) -> None:
    """Fresh build, then a merge with appended fragments after a whole fragment was deleted;
    non-ASCII text is lower-cased and folded as pylance's tokenizer does."""
    theirs, ours = str(tmp_path / "theirs"), str(tmp_path / "ours")
    for uri in (theirs, ours):
        lance.write_dataset(text_table(3000), uri, max_rows_per_file=1000, data_storage_version=version,
                            enable_stable_row_ids=stable).delete("_rowid % 10 = 3")
    lance.dataset(theirs).create_scalar_index("t", "NGRAM", name="ng")
    build_and_commit(SCALAR_BUILDER, None, ours, "t", "NGRAM", "ng")
    assert_same_ngram(theirs, ours)
    for uri in (theirs, ours):
        lance.dataset(uri).delete("_rowid % 10 = 4")
        lance.write_dataset(text_table(1500, 3000), uri, mode="append", max_rows_per_file=1000)
        lance.dataset(uri).delete("_rowid < 1000" if stable else "_rowaddr < 4294967296")
    lance.dataset(theirs).optimize.optimize_indices()
    build_and_commit(SCALAR_BUILDER, None, ours, "t", "NGRAM", "ng", merge=True)
    assert_same_ngram(theirs, ours)


ZONED_FILTERS = ("v = 7.0", "v > 450", "v IS NULL", "v < 3", "v IN (1.0, 2.5)", "s = 's17'", "s > 's50'",
                 "s IS NULL", "s IN ('s1', 's2')", "n = 77", "n >= 100 AND n < 130", "n IN (5, 999)",
                 "n = 5000")


def zoned_table(n: int, start: int = 0) -> pa.Table:
    i = np.arange(start, start + n)
    v = np.where(i % 37 == 0, np.nan, (i % 500).astype(float))
    return pa.table({"k": pa.array(i), "v": pa.array(v, mask=(i % 53 == 0)),
                     "s": pa.array([None if k % 41 == 0 else f"s{(k * 13) % 300}" for k in i]),
                     "n": pa.array((i * 7) % 1000, pa.int32())})


def assert_same_zoned(theirs: str, ours: str, names: tuple[str, ...], kind: str) -> None:
    ft, fo = index_files(theirs), index_files(ours)
    assert sorted(ft) == sorted(fo)
    for key in ft:
        assert ft[key][0] == fo[key][0], key
        assert ft[key][1].equals(fo[key][1], check_metadata=True), key
        assert ft[key][2:] == fo[key][2:], key
    lt, lo = lance.dataset(theirs), lance.dataset(ours)
    for f in ZONED_FILTERS:
        want = sorted(lt.to_table(filter=f, columns=[], with_row_id=True)["_rowid"].to_pylist())
        assert sorted(lo.to_table(filter=f, columns=[], with_row_id=True)["_rowid"].to_pylist()) == want, f
        if kind == "BLOOMFILTER" and any(op in f for op in ("<", ">")):
            continue  # a bloom filter answers equality, IN and IS NULL only
        plan = lo.scanner(filter=f).explain_plan()
        assert "ScalarIndexQuery" in plan or "MaterializeIndex" in plan, (f, plan)
    for name in names:
        assert lo.stats.index_stats(name)["num_unindexed_rows"] == 0


@pytest.mark.parametrize("kind", ["ZONEMAP", "BLOOMFILTER"])
@pytest.mark.parametrize("version,stable", matrix(("2.1", False), ("2.2", True)))
def test_zoned_matches_pylance(tmp_path: Any, kind: str, version: str, stable: bool) -> None:
    """Zones of 8192 live rows cut at fragment ends and deleted runs, then a merge after
    appends and a removed fragment (pylance keeps the old zones, also of removed fragments)."""
    theirs, ours = str(tmp_path / "theirs"), str(tmp_path / "ours")
    cols = ("v", "s", "n")
    for uri in (theirs, ours):
        lance.write_dataset(zoned_table(20000), uri, max_rows_per_file=17000, data_storage_version=version,
                            enable_stable_row_ids=stable).delete(
            "k < 50 OR (k >= 8200 AND k < 8300) OR (k >= 16990 AND k < 17010)")
    for c in cols:
        lance.dataset(theirs).create_scalar_index(c, kind, name=c)
        build_and_commit(SCALAR_BUILDER, None, ours, c, kind, c)
    assert_same_zoned(theirs, ours, cols, kind)
    for uri in (theirs, ours):
        lance.dataset(uri).delete("k % 10 = 4")
        lance.write_dataset(zoned_table(15000, 20000), uri, mode="append", max_rows_per_file=10000)
        lance.dataset(uri).delete("k >= 20000 AND k < 20100")
        lance.dataset(uri).delete("k >= 17000 AND k < 20000")  # all of fragment 1
    lance.dataset(theirs).optimize.optimize_indices()
    for c in cols:
        build_and_commit(SCALAR_BUILDER, None, ours, c, kind, c, merge=True)
    assert_same_zoned(theirs, ours, cols, kind)


def test_xxh64_and_filter_size() -> None:
    """XXH64 test vectors (the reference implementation's) and the filter size pylance picks."""
    from lance_spark_ops.index.scalar.bloomfilter import num_bytes, xxh64

    def h(b: bytes) -> int:
        return int(xxh64(np.frombuffer(b, np.uint8), np.array([0]), np.array([len(b)]))[0])

    assert h(b"") == 0xEF46DB3751D8E999
    assert h(b"a") == 0xD24EC4F1A98C6E5B
    assert h(b"abc") == 0x44BC2CF5AD770999
    assert num_bytes(8192, 0.00057) == 32768  # as pylance's default filters


def test_text_and_zoned_kinds_on_spark_in_parts(tmp_path: Any, spark: Any, monkeypatch: Any) -> None:
    """NGRAM, ZONEMAP and BLOOMFILTER from several part tasks on executors (a part per
    fragment) equal pylance's single-process build."""
    tuning = Tuning(part_rows=5000)
    theirs, ours = str(tmp_path / "theirs"), str(tmp_path / "ours")
    data = zoned_table(20000).append_column("t", text_table(20000).column("t"))
    for uri in (theirs, ours):
        ds = lance.write_dataset(data, uri, max_rows_per_file=5000, data_storage_version="2.1")
        ds.delete("k % 10 = 3")
    for col, kind, name in (("t", "NGRAM", "ng"), ("v", "ZONEMAP", "v"), ("n", "BLOOMFILTER", "n")):
        lance.dataset(theirs).create_scalar_index(col, kind, name=name)
        build_and_commit(SCALAR_BUILDER, spark, ours, col, kind, name, tuning=tuning)
    ft, fo = index_files(theirs), index_files(ours)
    assert sorted(ft) == sorted(fo)
    for key in ft:
        assert ft[key][0] == fo[key][0], key
        assert ft[key][2:] == fo[key][2:], key
    d = Dataset.open(ours)
    for i in d.manifest_file.index_section.indices:  # the parts are gone
        assert sorted(d.store.list(f"_indices/{uuid_str(i.uuid.uuid)}")) == sorted(f.path for f in i.files)


def test_merge_attempt_after_a_finished_one(tmp_path: Any, monkeypatch: Any) -> None:
    """A merge attempt that finds its parts deleted by an attempt that finished returns the
    files that attempt wrote (a retried task whose first result was lost)."""
    from lance_spark_ops.spark.indices.scalar_index_tasks import run_merge
    from lance_spark_ops.spark.runtime.runner import TaskContext

    first: list[Any] = []

    def twice(spec: Any, ctx: TaskContext) -> Any:
        first.append(run_merge(spec, ctx))
        return run_merge(spec, TaskContext(ctx.job_id, ctx.task_id, "retry"))

    monkeypatch.setattr(scalar_index, "run_merge", twice)
    theirs, ours = twins(tmp_path, "2.1", False)
    # parts to merge (one part is indexed in one task)
    _, built = build_and_commit(SCALAR_BUILDER, None, ours, "id", "BTREE", "id_btree",
                                tuning=Tuning(part_rows=1))
    assert built.files == first[0]
    lance.dataset(theirs).create_scalar_index("id", "BTREE", name="id_btree")
    want = lance.dataset(theirs).to_table(filter="id < 30", with_row_id=True)["_rowid"].to_pylist()
    got = lance.dataset(ours).to_table(filter="id < 30", with_row_id=True)["_rowid"].to_pylist()
    assert sorted(got) == sorted(want)


def test_scan_window_fills_the_request_budget_within_its_bytes() -> None:
    """A column scan on an object store reads ahead as many fragments as the budget has
    requests when their values fit its bytes (48 fragments of 20 000 rows: 32), and never
    fewer than ``SCAN_AHEAD``."""
    from lance_spark_ops.io.budget import MIB, IOBudget
    from lance_spark_ops.spark.indices.scalar_index_tasks import SCAN_AHEAD, scan_window
    from lance_spark_ops.table.format.fragment import DataFragment

    budget = IOBudget(max_requests=32, max_bytes=64 * MIB)
    small = [DataFragment(id=i, files=[], physical_rows=20_000) for i in range(48)]
    big = [DataFragment(id=i, files=[], physical_rows=4_000_000) for i in range(48)]
    assert scan_window(budget, small) == 32
    assert scan_window(budget, big) == SCAN_AHEAD
    assert scan_window(IOBudget(max_requests=8, max_bytes=64 * MIB), small) == SCAN_AHEAD
