"""Compaction rewrites INVERTED (this library's FTS layout) and NGRAM indices through the
address map, as pylance 14's compaction does; pylance's answers (rows, BM25 scores) after our
compaction equal its answers after its own compaction of a twin. An INVERTED index pylance
wrote itself (FST token set, FTS format 2) stays behind the fragment reuse index."""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops.spark.files.compaction import compact
from lance_spark_ops.spark.indices.index_remap import remap_indices
from tests.index.fts_helpers import build_fts
from tests.index.test_build_fts import PHRASES, QUERIES, answers, texts
from tests.support.pylance_indices import index_segments

lance = pytest.importorskip("lance")

NGRAM_FILTERS = ["contains(text, 'fox')", "contains(text, 'quick bro')", "contains(text, 'repeat')",
                 "contains(text, 'zzz')", "text IS NULL"]


def make(uri: str, version: str, stable: bool, n: int = 2000, fragments: int = 8) -> None:
    shutil.rmtree(uri, ignore_errors=True)
    t = pa.table({"id": pa.array(np.arange(n), pa.int64()), "text": pa.array(texts(n), pa.string())})
    lance.write_dataset(t, uri, max_rows_per_file=n // fragments, data_storage_version=version,
                        enable_stable_row_ids=stable)


FULL_FRAGMENT = "id % 7 = 3 OR id >= 1750"   # the last fragment's rows all gone: it leaves the dataset


def indexed(tmp_path, version: str, stable: bool, ours: bool, with_position: bool,
            delete: str = FULL_FRAGMENT, **params) -> tuple[str, str]:
    """A dataset with an INVERTED index (ours or pylance's) and pylance's NGRAM index, rows
    deleted after indexing (the indices keep them); and its twin."""
    uri, twin = str(tmp_path / "ds"), str(tmp_path / "twin")
    make(uri, version, stable)
    if ours:
        build_fts(None, uri, name="text_idx", with_position=with_position, **params)
    else:
        lance.dataset(uri).create_scalar_index("text", "INVERTED", name="text_idx",
                                               with_position=with_position, **params)
    lance.dataset(uri).create_scalar_index("text", "NGRAM", name="text_ngram")
    lance.dataset(uri).delete(delete)
    shutil.copytree(uri, twin)
    return uri, twin


def ngram_answers(ds) -> dict[str, list[int]]:
    return {f: sorted(ds.to_table(filter=f, columns=["id"]).column("id").to_pylist()) for f in NGRAM_FILTERS}


def check_same(uri: str, twin: str, queries: list[str]) -> None:
    a, b = lance.dataset(uri), lance.dataset(twin)
    for name in ("text_idx", "text_ngram"):
        assert a.stats.index_stats(name)["num_unindexed_rows"] == 0, name
    sa, sb = a.stats.index_stats("text_idx")["indices"][0], b.stats.index_stats("text_idx")["indices"][0]
    assert (sa["num_docs"], sa["num_tokens"]) == (sb["num_docs"], sb["num_tokens"])
    ours, theirs = answers(a, queries), answers(b, queries)
    hits = 0
    for q in queries:
        assert ours[q][0] == theirs[q][0], q
        np.testing.assert_allclose(ours[q][1], theirs[q][1], rtol=1e-5, err_msg=q)
        hits += len(ours[q][0])
    assert hits > 100
    ng = ngram_answers(a)
    assert ng == ngram_answers(b) and sum(map(len, ng.values())) > 50


@pytest.mark.parametrize("version,with_position", [("2.1", True), ("2.2", False)])
def test_our_inverted_and_ngram_rewritten(tmp_path, version, with_position):
    uri, twin = indexed(tmp_path, version, False, True, with_position)
    m = compact(None, uri, target_rows_per_fragment=1000)
    lance.dataset(twin).optimize.compact_files(target_rows_per_fragment=1000)
    assert m.indices_remapped == {"INVERTED": 1, "NGRAM": 1} and m.indices_frag_reuse == {}
    ds = lance.dataset(uri)
    assert not [i for i in index_segments(ds) if i["name"].startswith("__lance_frag_reuse")]
    check_same(uri, twin, QUERIES + (PHRASES if with_position else []))
    # docs of deleted rows are gone: the index holds exactly the live rows with tokens
    assert ds.stats.index_stats("text_idx")["indices"][0]["num_docs"] == \
        lance.dataset(twin).stats.index_stats("text_idx")["indices"][0]["num_docs"]


def test_files_equal_pylance_remap(tmp_path):
    """NGRAM postings equal pylance's remap. pylance's compaction of a twin remaps our INVERTED
    index into the same layout: its docs, tokens
    and invert tables equal ours (posting blocks with BM25 block maxima recomputed from the
    remapped documents, max scores, lengths, positions; pylance adds an ``_impacts`` column)."""
    from lance.file import LanceFileReader

    from lance_spark_ops.index.fts.postings import decode_postings

    uri, twin = indexed(tmp_path, "2.1", False, True, True)
    compact(None, uri, target_rows_per_fragment=1000)
    lance.dataset(twin).optimize.compact_files(target_rows_per_fragment=1000)

    def read(root, kind, name="text_idx"):
        ds = lance.dataset(root)
        (idx,) = [i for i in index_segments(ds) if i["name"] == name]
        file = f"part_0_{kind}.lance" if name == "text_idx" else kind
        return LanceFileReader(f"{root}/_indices/{idx['uuid']}/{file}").read_all().to_table()

    # NGRAM: every posting list through the map, emptied ones kept (pylance's remap)
    ng = read(uri, "ngram_postings.lance", "text_ngram")
    assert ng.equals(read(twin, "ngram_postings.lance", "text_ngram")) and ng.num_rows > 50

    assert read(uri, "docs").equals(read(twin, "docs"))
    assert read(uri, "tokens").equals(read(twin, "tokens"))
    a, b = read(uri, "invert"), read(twin, "invert")
    assert a.equals(b.select(a.schema.names))
    pa_, pb = (decode_postings(t.column("_posting"), t.column("_length").to_numpy()) for t in (a, b))
    assert all(np.array_equal(x, y) for x, y in zip(pa_, pb, strict=True)) and len(pa_[0]) > 1000


@pytest.mark.parametrize("version,with_position,params", [
    ("2.1", True, {}), ("2.2", False, {}),
    ("2.2", True, {"base_tokenizer": "whitespace", "stem": False, "custom_stop_words": ["fox"]})])
def test_pylance_inverted_retokenized(tmp_path, version, with_position, params):
    """pylance's own FTS layout (FST token set, format 2) is rewritten in this library's layout
    from the rows its documents list (deleted rows of fragments not rewritten included, as
    pylance keeps them): the same answers and statistics as pylance's remap."""
    uri, twin = indexed(tmp_path, version, False, False, with_position, "id % 7 = 3 OR id < 100", **params)
    lance.dataset(uri).delete("id >= 1900")       # after indexing too
    lance.dataset(twin).delete("id >= 1900")
    m = compact(None, uri, target_rows_per_fragment=1000)
    lance.dataset(twin).optimize.compact_files(target_rows_per_fragment=1000)
    assert m.indices_remapped == {"INVERTED": 1, "NGRAM": 1} and m.indices_frag_reuse == {}
    check_same(uri, twin, QUERIES + (PHRASES if with_position else []))


def test_pylance_inverted_stays_behind_frag_reuse(tmp_path):
    """pylance's own FTS layout over a fragment whose rows were all deleted (gone from the
    dataset, its documents still in the index) is not rewritten here: the fragment reuse index
    covers it (pylance remaps it on load); NGRAM is rewritten all the same."""
    uri, twin = indexed(tmp_path, "2.2", False, False, True)
    m = compact(None, uri, target_rows_per_fragment=1000)
    # the oracle: pylance's deferred compaction (its BM25 statistics still count the deleted
    # documents until the index is remapped)
    lance.dataset(twin).optimize.compact_files(target_rows_per_fragment=1000, defer_index_remap=True)
    assert m.indices_remapped == {"NGRAM": 1} and m.indices_frag_reuse == {"INVERTED": 1}
    check_same(uri, twin, QUERIES + PHRASES)
    r = remap_indices(None, uri)
    assert r.indices_still_behind == {"INVERTED": 1} and "INVERTED" not in r.indices_remapped
    check_same(uri, twin, QUERIES + PHRASES)


@pytest.mark.parametrize("version,ours", [("2.1", True), ("2.2", False)])
def test_deferred_then_remap_indices(request, tmp_path, version, ours):
    """Deferred: both indices behind the fragment reuse index (pylance answers through it as
    after its own deferred compaction); ``remap_indices`` then rewrites them (our layout
    remapped, pylance's re-tokenized through the reuse index's map) and trims it."""
    spark = request.getfixturevalue("spark") if ours else None
    uri, twin = indexed(tmp_path, version, False, ours, True, delete="id % 7 = 3 OR id < 100")
    deferred = str(tmp_path / "deferred")
    shutil.copytree(twin, deferred)
    m = compact(spark, uri, target_rows_per_fragment=1000, defer_index_remap=True)
    assert m.indices_remapped == {} and m.indices_frag_reuse == {"INVERTED": 1, "NGRAM": 1}
    lance.dataset(twin).optimize.compact_files(target_rows_per_fragment=1000)
    lance.dataset(deferred).optimize.compact_files(target_rows_per_fragment=1000, defer_index_remap=True)
    check_same(uri, deferred, QUERIES + PHRASES)     # through the fragment reuse index
    r = remap_indices(spark, uri)
    assert r.indices_remapped == {"INVERTED": 1, "NGRAM": 1} and r.indices_still_behind == {}
    assert r.reuse_versions_trimmed == 1 and r.reuse_versions_kept == 0
    check_same(uri, twin, QUERIES + PHRASES)


def test_stable_row_ids_nothing_rewritten(tmp_path):
    """With stable row ids the indices name rows by id: a compaction only recalculates their
    fragment bitmaps (as pylance)."""
    uri, twin = indexed(tmp_path, "2.2", True, True, False)
    before = {i["name"]: i["uuid"] for i in index_segments(lance.dataset(uri))}
    m = compact(None, uri, target_rows_per_fragment=1000)
    lance.dataset(twin).optimize.compact_files(target_rows_per_fragment=1000)
    assert m.indices_remapped == {} and m.indices_recalculated == {"INVERTED": 1, "NGRAM": 1}
    assert {i["name"]: i["uuid"] for i in index_segments(lance.dataset(uri))} == before
    check_same(uri, twin, QUERIES)


def test_decode_postings_round_trip_and_corrupt():
    """Posting blocks decode to the (token, doc, frequency) pairs they were built from (full
    packed blocks, exact multiples of 128 and partial tails); a mismatch is refused typed."""
    from lance_spark_ops.errors import CorruptFileError
    from lance_spark_ops.index.fts.postings import build_partition, decode_postings

    rng = np.random.default_rng(3)
    n, occ = 3000, 60000
    doc = rng.integers(0, n, occ).astype(np.uint32)
    tok = (rng.zipf(1.3, occ) % 300).astype(np.uint32)
    tok[:256] = 299                                  # token 299: exactly 256 documents
    doc[:256] = np.arange(256)
    tok[256:] = np.where(tok[256:] == 299, 298, tok[256:])
    vocab = [f"t{i:03d}" for i in range(300)]
    nt = np.bincount(doc, minlength=n).astype(np.uint32)
    _, _, inv = build_partition(np.arange(n, dtype=np.uint64), nt, doc, tok, np.zeros(occ, np.uint32), vocab,
                                False)
    ptok, pdoc, freq = decode_postings(inv.column("_posting"), inv.column("_length").to_numpy())
    pairs = np.unique(np.stack([tok.astype(np.int64), doc.astype(np.int64)], axis=1), axis=0,
                      return_counts=True)
    assert np.array_equal(np.stack([ptok, pdoc], axis=1), pairs[0]) and np.array_equal(freq, pairs[1])
    assert int(inv.column("_length").to_numpy()[299]) == 256
    with pytest.raises(CorruptFileError):
        decode_postings(inv.column("_posting"), inv.column("_length").to_numpy() + 128)


def test_remap_partition_equals_build_of_the_rows_left():
    """A remap dropping every other document (a token ending with no document) equals a build
    of the documents left under their new addresses (the builder's files equal pylance 14's);
    dropping all leaves an empty partition."""
    from lance_spark_ops.index.address_map import RowAddressMap
    from lance_spark_ops.index.fts.postings import build_partition
    from lance_spark_ops.index.fts.remap import remap_partition

    n, rng = 300, np.random.default_rng(0)
    doc = rng.integers(0, n, 3000).astype(np.uint32)
    tok = rng.integers(0, 20, 3000).astype(np.uint32)
    tok[tok == 19] = 18
    tok[0], doc[0] = 19, 1                            # token 19: only in document 1, which goes
    pos = np.arange(3000, dtype=np.uint32)
    vocab = [f"w{k}" for k in range(20)]
    nt = np.bincount(doc, minlength=n).astype(np.uint32)
    tables = build_partition(np.arange(n, dtype=np.uint64), nt, doc, tok, pos, vocab, True)
    keep = np.arange(n) % 2 == 0
    new = (np.uint64(5) << np.uint64(32)) + np.arange(keep.sum(), dtype=np.uint64)
    amap = RowAddressMap.from_pairs(np.flatnonzero(keep).astype(np.uint64), new, [0])
    out = remap_partition(*tables, [amap])
    occ = keep[doc]
    expected = build_partition(new, nt[keep], (np.cumsum(keep) - 1)[doc[occ]].astype(np.uint32), tok[occ],
                               pos[occ], vocab[:19], True)
    assert all(a.equals(b) for a, b in zip(out, expected, strict=True)) and out[1].num_rows == 19
    empty = RowAddressMap.from_pairs(np.zeros(0, np.uint64), np.zeros(0, np.uint64), [0])
    assert [t.num_rows for t in remap_partition(*tables, [empty])] == [0, 0, 0]
