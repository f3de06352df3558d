"""INVERTED index built by FTS_BUILDER on one copy, by pylance on a twin: pylance's full-text
answers (rows and BM25 scores) are the same through both; index_stats counts 0 unindexed."""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops.errors import InvalidInputError, UnsupportedError
from lance_spark_ops.spark.indices.fts_index import FTS_BUILDER, params_of_segment
from lance_spark_ops.spark.runtime.tuning import Tuning
from tests.index.fts_helpers import build_fts

lance = pytest.importorskip("lance")

WORDS = ("The quick brown fox jumps over the lazy dog running runs ran runner Café déjà vu naïve résumé "
         "straße Æsir Øre hello world foo_bar baz-qux 123abc 3.14 I've they're it's EXTRAORDINARILY "
         "generously dying lying ½ ² İstanbul ﬁsh").split()


def texts(n: int, seed: int = 0) -> list[str | None]:
    rng = np.random.default_rng(seed)
    out: list[str | None] = []
    for i in range(n):
        if i % 17 == 5:
            out.append(None)
        elif i % 19 == 7:
            out.append("" if i % 2 else "the a an")     # no tokens: pylance leaves the row out
        else:
            k = int(rng.integers(1, 12))
            words = [WORDS[j] for j in rng.integers(0, len(WORDS), k)]
            if i % 13 == 2:
                words += ["the", "lazy", "dog"]          # phrase hits, across a stop word gap
            if i % 97 == 3:
                words += ["repeat"] * 130                # a document with >= 128 positions of a token
            if i % 211 == 5:
                words += ["loop"] * 256                  # two full position blocks, no tail
            out.append(" ".join(words))
    return out


def make(uri: str, n: int, version: str, stable: bool, fragments: int = 4) -> None:
    shutil.rmtree(uri, ignore_errors=True)
    t = pa.table({"id": pa.array(np.arange(n), pa.int64()), "text": pa.array(texts(n), pa.string())})
    ds = lance.write_dataset(t, uri, max_rows_per_file=n // fragments, data_storage_version=version,
                             enable_stable_row_ids=stable)
    ds.delete("id % 11 = 4")


QUERIES = ["loop", "fox", "quick dog", "cafe", "Café", "run", "straße", "strasse", "123abc", "repeat",
           "hello world", "the", "ﬁsh", "fish", "nothing_here", "extraordinarili", "½"]
PHRASES = ['"loop loop"', '"quick brown"', '"brown quick"', '"lazy dog"', '"repeat repeat"', '"hello world"']


def answers(ds, queries) -> dict[str, tuple[list[int], np.ndarray]]:
    out = {}
    for q in queries:
        t = ds.to_table(full_text_query=q, columns=["id", "_score"]).sort_by("id")
        out[q] = (t.column("id").to_pylist(), t.column("_score").to_numpy())
    return out


def check_same(ours_uri: str, theirs_uri: str, queries, one_part: bool = True) -> None:
    a, b = lance.dataset(ours_uri), lance.dataset(theirs_uri)
    assert a.stats.index_stats("text_idx")["num_unindexed_rows"] == 0
    sa, sb = a.stats.index_stats("text_idx")["indices"][0], b.stats.index_stats("text_idx")["indices"][0]
    assert (sa["num_docs"], sa["params"]) == (sb["num_docs"], sb["params"])
    if one_part:   # index_stats sums num_tokens over partitions (a token counts once per partition)
        assert sa["num_tokens"] == sb["num_tokens"]
    ours, theirs = answers(a, queries), answers(b, queries)
    hits = 0
    for q in queries:
        assert ours[q][0] == theirs[q][0], q
        np.testing.assert_allclose(ours[q][1], theirs[q][1], rtol=1e-5, err_msg=q)
        hits += len(ours[q][0])
    assert hits > 0


def twins(tmp_path, n, version, stable, params, fragments=4):
    src = str(tmp_path / "src")
    make(src, n, version, stable, fragments)
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    shutil.copytree(src, ours)
    shutil.copytree(src, theirs)
    lance.dataset(theirs).create_scalar_index("text", "INVERTED", **params)
    return ours, theirs


@pytest.mark.parametrize("version,stable", [("2.1", False), ("2.2", True)])
def test_default_tokenizer_same_answers(spark, tmp_path, version, stable, monkeypatch):
    # several partitions (one per task): pylance sums BM25 statistics over them
    ours, theirs = twins(tmp_path, 2000, version, stable, {})
    built = build_fts(spark, ours, tuning=Tuning(fts_rows_per_part=700))
    assert sum(1 for f, _ in built.files if f.endswith("_docs.lance")) >= 3
    check_same(ours, theirs, QUERIES, one_part=False)


@pytest.mark.parametrize("params", [
    {"with_position": True},
    {"stem": False, "remove_stop_words": False},
    {"base_tokenizer": "whitespace", "with_position": True},
    {"ascii_folding": False, "lower_case": False},
    {"max_token_length": 6, "custom_stop_words": ["fox", "dog"], "remove_stop_words": True},
    {"base_tokenizer": "raw"},
])
def test_settings_same_answers(tmp_path, params):
    ours, theirs = twins(tmp_path, 1200, "2.1", False, params, fragments=3)
    build_fts(None, ours, **params)
    qs = QUERIES + (PHRASES if params.get("with_position") else [])
    if params.get("base_tokenizer") == "raw":
        qs = ["fox", "hello world", "Café"] + [t for t in texts(40) if t][:10]
    check_same(ours, theirs, qs)


def test_query_objects(tmp_path):
    from lance.query import FullTextOperator, MatchQuery, PhraseQuery

    ours, theirs = twins(tmp_path, 800, "2.2", False, {"with_position": True}, fragments=2)
    build_fts(None, ours, with_position=True)
    for q in (MatchQuery("quick fox", "text"), PhraseQuery("lazy dog", "text"),
              MatchQuery("quick fox", "text", operator=FullTextOperator.AND)):
        a = lance.dataset(ours).to_table(full_text_query=q, columns=["id", "_score"]).sort_by("id")
        b = lance.dataset(theirs).to_table(full_text_query=q, columns=["id", "_score"]).sort_by("id")
        assert a.num_rows > 0
        assert a.column("id").equals(b.column("id"))
        np.testing.assert_allclose(a.column("_score").to_numpy(), b.column("_score").to_numpy(), rtol=1e-5)


def test_params_of_reads_back(tmp_path):
    ours, _ = twins(tmp_path, 200, "2.1", False, {}, fragments=1)
    params = {"stem": False, "custom_stop_words": ["x"], "max_token_length": None}
    build_fts(None, ours, **params)
    from lance_spark_ops.spark.indices.index_remap import index_entries
    from lance_spark_ops.table.dataset import Dataset

    ds = Dataset.open(ours)
    (entry,) = index_entries(ds)
    got = params_of_segment(ds, entry)
    assert got == FTS_BUILDER.check_params("INVERTED", pa.field("text", pa.string()), params)
    # what pylance says the index was built with
    stats = lance.dataset(ours).stats.index_stats("text_idx")
    assert stats["indices"][0]["params"]["custom_stop_words"] == ["x"]


def test_check_params_errors():
    f = pa.field("text", pa.string())
    with pytest.raises(InvalidInputError, match="stemm"):
        FTS_BUILDER.check_params("INVERTED", f, {"stemm": True})
    with pytest.raises(InvalidInputError, match="'n'"):
        FTS_BUILDER.check_params("INVERTED", pa.field("n", pa.int64()), {})
    with pytest.raises(InvalidInputError, match="with_position"):
        FTS_BUILDER.check_params("INVERTED", f, {"with_position": "yes"})
    with pytest.raises(UnsupportedError, match="ngram"):
        FTS_BUILDER.check_params("INVERTED", f, {"base_tokenizer": "ngram"})
    with pytest.raises(UnsupportedError, match="jieba"):
        FTS_BUILDER.check_params("INVERTED", f, {"base_tokenizer": "jieba/default"})
    with pytest.raises(InvalidInputError, match="max_token_length"):
        FTS_BUILDER.check_params("INVERTED", f, {"max_token_length": 0})
    assert FTS_BUILDER.check_params("INVERTED", pa.field("t", pa.large_string()), {})["stem"] is True


def _append(uri: str, start: int, n: int) -> None:
    t = pa.table({"id": pa.array(np.arange(start, start + n), pa.int64()),
                  "text": pa.array(texts(n, seed=start), pa.string())})
    lance.dataset(uri).insert(t)


@pytest.mark.parametrize("stable", [False, True])
def test_merge_with_equals_pylance_optimize(spark, tmp_path, stable):
    """Our merge of our segment and of pylance's segment with new fragments vs pylance's
    optimize_indices on a twin holding pylance's own index: same answers, one segment each
    (rows deleted after indexing stay in the statistics without stable row ids, leave with
    them, as in pylance); and pylance's own optimize keeps working on what we wrote."""
    from lance_spark_ops.spark.indices.index_remap import index_entries
    from lance_spark_ops.table.dataset import Dataset

    params = {"with_position": True}
    ours, theirs = twins(tmp_path, 900, "2.2", stable, params, fragments=3)
    build_fts(spark, ours, **params)
    mirror = str(tmp_path / "mirror")            # our index, optimized by pylance
    shutil.copytree(ours, mirror)
    adopted = str(tmp_path / "adopted")          # pylance's index, merged by us
    shutil.copytree(theirs, adopted)
    for uri in (ours, theirs, mirror, adopted):
        lance.dataset(uri).delete("id % 7 = 1")     # deleted after indexing: the index keeps them
        _append(uri, 900, 300)
    ds = Dataset.open(ours)
    (old,) = index_entries(ds)
    new_frags = [f.id for f in ds.fragments if f.id not in {0, 1, 2}]
    build_fts(spark, ours, fragment_ids=new_frags, merge_with=[old], **params)
    (pylance_seg,) = index_entries(Dataset.open(adopted))
    build_fts(spark, adopted, fragment_ids=new_frags, merge_with=[pylance_seg], **params)
    lance.dataset(theirs).optimize.optimize_indices()
    lance.dataset(mirror).optimize.optimize_indices()
    for uri in (ours, mirror, adopted):
        assert lance.dataset(uri).stats.index_stats("text_idx")["num_segments"] == 1
        check_same(uri, theirs, QUERIES + PHRASES, one_part=False)


def test_params_of_details_and_model_from(tmp_path):
    """params_of reads pylance's and our entries' details alike; a delta built with
    model_from tokenizes as the model did (custom stop words come from its metadata.lance)."""
    from lance_spark_ops.spark.indices.index_remap import index_entries
    from lance_spark_ops.table.dataset import Dataset

    params = {"stem": False, "with_position": True, "max_token_length": None, "ascii_folding": False}
    ours, theirs = twins(tmp_path, 300, "2.1", False, params, fragments=3)
    build_fts(None, ours, **params)
    f = pa.field("text", pa.string())
    for uri in (ours, theirs):
        (entry,) = index_entries(Dataset.open(uri))
        assert FTS_BUILDER.params_of("INVERTED", entry) == FTS_BUILDER.check_params("INVERTED", f, params)
    custom = str(tmp_path / "custom")
    make(custom, 300, "2.1", False, 3)
    build_fts(None, custom, fragment_ids=[0, 1, 2], custom_stop_words=["fox"])
    _append(custom, 300, 100)
    ds = Dataset.open(custom)
    (model,) = index_entries(ds)
    from tests.index.fts_helpers import build_fts_delta

    built = build_fts_delta(custom, model, [3])
    ds = Dataset.open(custom)
    delta = next(i for i in index_entries(ds) if i.uuid.uuid != model.uuid.uuid)
    assert params_of_segment(ds, delta)["custom_stop_words"] == ["fox"]
    from lance_spark_ops.file.reader import LanceFileReader
    from lance_spark_ops.index.kinds import uuid_str

    (tok_file,) = [f for f, _ in built.files if f.endswith("_tokens.lance")]
    toks = LanceFileReader(f"{custom}/_indices/{uuid_str(delta.uuid.uuid)}/{tok_file}").read()
    assert "dog" in toks.column("_token").to_pylist() and "fox" not in toks.column("_token").to_pylist()
    assert lance.dataset(custom).stats.index_stats("text_idx")["num_unindexed_rows"] == 0


def test_delta_equals_pylance_num_indices_to_merge_0(tmp_path):
    from lance_spark_ops.spark.indices.index_remap import index_entries
    from lance_spark_ops.table.dataset import Dataset
    from tests.index.fts_helpers import build_fts_delta

    ours, theirs = twins(tmp_path, 600, "2.1", False, {}, fragments=3)
    build_fts(None, ours)
    for uri in (ours, theirs):
        _append(uri, 600, 200)
    (model,) = index_entries(Dataset.open(ours))
    build_fts_delta(ours, model, [3])
    lance.dataset(theirs).optimize.optimize_indices(num_indices_to_merge=0)
    for uri in (ours, theirs):
        assert lance.dataset(uri).stats.index_stats("text_idx")["num_segments"] == 2
    check_same(ours, theirs, QUERIES, one_part=False)


def test_list_and_other_columns_refused_typed():
    with pytest.raises(UnsupportedError, match="'tags'"):
        FTS_BUILDER.check_params("INVERTED", pa.field("tags", pa.list_(pa.string())), {})
    with pytest.raises(InvalidInputError, match="'b'"):
        FTS_BUILDER.check_params("INVERTED", pa.field("b", pa.binary()), {})


def test_file_version_2_0_with_positions(tmp_path):
    params = {"with_position": True}
    ours, theirs = twins(tmp_path, 700, "2.0", False, params, fragments=2)
    build_fts(None, ours, **params)
    check_same(ours, theirs, QUERIES + PHRASES)


@pytest.mark.slow
@pytest.mark.parametrize("stable", [False, True])
def test_bigger_multi_partition_spark(spark, tmp_path, monkeypatch, stable):
    """30 000 rows, 8 fragments, ~5 000-row partitions (one fragment split into row ranges)."""
    params = {"with_position": True}
    ours, theirs = twins(tmp_path, 30000, "2.2", stable, params, fragments=3)
    built = build_fts(spark, ours, tuning=Tuning(fts_rows_per_part=5000), **params)
    assert sum(1 for f, _ in built.files if f.endswith("_docs.lance")) >= 6
    check_same(ours, theirs, QUERIES + PHRASES, one_part=False)


def test_driver_create_and_optimize(spark, tmp_path):
    """Through the driver (spark.indices.indexing): create_index "FTS" then optimize_indices after an
    append, against pylance's create_scalar_index + optimize_indices on a twin."""
    from lance_spark_ops.spark.indices.indexing import create_index, optimize_indices

    params = {"with_position": True, "stem": False}
    ours, theirs = twins(tmp_path, 900, "2.2", False, params, fragments=3)
    create_index(spark, ours, "text", "FTS", **params)
    check_same(ours, theirs, QUERIES + PHRASES)
    for uri in (ours, theirs):
        lance.dataset(uri).delete("id % 5 = 2")
        _append(uri, 900, 300)
    optimize_indices(spark, ours)
    lance.dataset(theirs).optimize.optimize_indices()
    check_same(ours, theirs, QUERIES + PHRASES, one_part=False)


@pytest.mark.parametrize(("args", "words"), [
    (["--column", "id", "--type", "FTS"], "'id'"),
    (["--column", "text", "--type", "FTS", "--param", "stemm=true"], "stemm"),
    (["--column", "text", "--type", "INVERTED", "--param", "max_token_length=-3"], "max_token_length"),
])
def test_job_bad_fts_params_exit_2(tmp_path, monkeypatch, capsys, args, words):
    from lance_spark_ops.spark.runtime import cli
    from tests.jobs.test_jobs import last_json, load_job

    def refuse(job):
        raise AssertionError("a Spark session was started")

    monkeypatch.setattr(cli, "_session", refuse)
    uri = str(tmp_path / "ds")
    make(uri, 100, "2.1", False, 1)
    assert load_job("create_index").main([uri, *args]) == 2
    out = last_json(capsys.readouterr().out)
    assert out["error"]["type"] == "InvalidInputError" and words in out["error"]["message"]


def test_large_string_column(tmp_path):
    src = str(tmp_path / "src")
    t = pa.table({"id": pa.array(np.arange(400), pa.int64()),
                  "text": pa.array(texts(400), pa.large_string())})
    lance.write_dataset(t, src, max_rows_per_file=200, data_storage_version="2.1")
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    shutil.copytree(src, ours)
    shutil.copytree(src, theirs)
    lance.dataset(theirs).create_scalar_index("text", "INVERTED")
    build_fts(None, ours)
    check_same(ours, theirs, QUERIES)


def test_pylance_compaction_keeps_our_index_working(tmp_path):
    params = {"with_position": True}
    ours, theirs = twins(tmp_path, 600, "2.1", False, params, fragments=4)
    build_fts(None, ours, **params)
    for uri in (ours, theirs):
        lance.dataset(uri).delete("id % 3 = 0")
        lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=1000)
    assert len(lance.dataset(ours).get_fragments()) == 1
    check_same(ours, theirs, QUERIES + PHRASES)


@pytest.mark.parametrize("with_position", [pytest.param(False, marks=pytest.mark.slow), True])
def test_files_equal_pylance_v1_writer(tmp_path, monkeypatch, with_position):
    """pylance 14 still writes the layout we write when asked for FTS format 1: its docs file
    equals ours, and its posting rows (blocks with their BM25 block maxima, max score, length,
    positions) equal ours as a multiset (token ids differ: pylance numbers tokens as it meets
    them, we by their order)."""
    from lance.file import LanceFileReader

    src = str(tmp_path / "src")
    t = pa.table({"id": pa.array(np.arange(3000), pa.int64()), "text": pa.array(texts(3000), pa.string())})
    lance.write_dataset(t, src, max_rows_per_file=3000)
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    shutil.copytree(src, ours)
    shutil.copytree(src, theirs)
    monkeypatch.setenv("LANCE_FTS_FORMAT_VERSION", "1")
    lance.dataset(theirs).create_scalar_index("text", "INVERTED", with_position=with_position)
    build_fts(None, ours, with_position=with_position)

    def read(uri, kind):
        (f,) = (tmp_path / uri / "_indices").glob(f"*/part_*_{kind}.lance")
        return LanceFileReader(str(f)).read_all().to_table()

    assert LanceFileReader(str(next((tmp_path / "theirs" / "_indices").glob("*/metadata.lance")))) \
        .metadata().schema.metadata[b"posting_tail_codec"] == b"fixed32_v1"
    assert read("ours", "docs").equals(read("theirs", "docs").select(["_rowid", "_num_tokens"]))
    cols = ["_posting", "_max_score", "_length"] + (["_position"] if with_position else [])
    rows = [sorted(repr(r) for r in read(u, "invert").select(cols).to_pylist()) for u in ("ours", "theirs")]
    assert len(rows[0]) > 30 and rows[0] == rows[1]


def test_metadata_written_while_partitions_are_built(tmp_path, monkeypatch):
    """``metadata.lance`` names only the planned partitions and the params, so the driver writes
    it while the partition tasks run (on an object store a round trip off the job's end): the
    first partition task and the metadata write meet at a barrier (in turn, the barrier breaks),
    and pylance answers as from its own index on a twin."""
    import threading

    from lance_spark_ops.spark.indices import fts_index_tasks as ft

    met = threading.Barrier(2, timeout=30)
    write_metadata, build_partition = ft.write_metadata, ft.build_partition_task

    def metadata(*a, **kw):
        met.wait()
        return write_metadata(*a, **kw)

    def partition(spec, ctx):
        if spec.part_id == 0:  # tasks run in this process, in turn (no Spark)
            met.wait()
        return build_partition(spec, ctx)

    monkeypatch.setattr(ft, "write_metadata", metadata)
    monkeypatch.setattr(ft, "build_partition_task", partition)
    ours, theirs = twins(tmp_path, 1200, "2.1", False, {}, fragments=3)
    build_fts(None, ours)
    check_same(ours, theirs, QUERIES)


def test_failed_build_leaves_no_metadata(tmp_path, monkeypatch):
    """A partition task fails while the metadata write is still on its way: the build waits for
    the write before its cleanup, so no file of the segment is left and the version is as it was."""
    import os
    import threading

    from lance_spark_ops.errors import CorruptFileError
    from lance_spark_ops.spark.indices import fts_index_tasks as ft
    from lance_spark_ops.spark.indices.indexing import create_index

    failed = threading.Event()
    write_metadata = ft.write_metadata

    def metadata(*a, **kw):
        assert failed.wait(30)  # lands after the task failed
        return write_metadata(*a, **kw)

    def partition(spec, ctx):
        failed.set()
        raise CorruptFileError("injected", path=spec.uri)

    monkeypatch.setattr(ft, "write_metadata", metadata)
    monkeypatch.setattr(ft, "build_partition_task", partition)
    uri = str(tmp_path / "t")
    make(uri, 600, "2.1", False, fragments=2)
    before = lance.dataset(uri).version
    with pytest.raises(CorruptFileError, match="injected"):
        create_index(None, uri, "text", "INVERTED")
    assert lance.dataset(uri).version == before
    left = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(uri, "_indices")) for f in fs]
    assert not left, left
