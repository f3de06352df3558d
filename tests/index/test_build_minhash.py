"""MINHASHLSH segments built by ``spark.indices.scalar_index`` against pylance 14's own: our index
on one copy of a dataset, pylance's ``create_scalar_index`` / ``optimize_indices`` on a twin.
The signatures and bands are deterministic (SplitMix64 / XXH64 seeded with 42), so our files
must hold what pylance's hold, and pylance's ``MinHashQuery`` must answer alike."""

from __future__ import annotations

import shutil
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from lance_spark_ops.errors import InvalidInputError, UnsupportedError
from lance_spark_ops.file.reader import LanceFileReader
from lance_spark_ops.index.kinds import uuid_str
from lance_spark_ops.index.scalar import minhash as mh
from lance_spark_ops.spark.indices.scalar_index import SCALAR_BUILDER
from lance_spark_ops.table.dataset import Dataset
from tests.index.segment_commit import build_and_commit, entries
from tests.support.pylance_indices import index_segments

lance = pytest.importorskip("lance")
from lance.query import MinHashQuery  # noqa: E402

WORDS = np.array(["alpha", "beta", "gamma", "delta", "Epsilon", "zeta", "eta", "theta", "iota", "kappa",
                  "Café", "naïve", "STRASSE", "x" * 45, "a1b2"])


def docs(n: int, start: int, seed: int) -> pa.Table:
    r = np.random.default_rng(seed)
    text = [None if (start + i) % 37 == 0 else " ".join(WORDS[r.integers(0, len(WORDS), r.integers(0, 9))])
            for i in range(n)]
    return pa.table({"id": np.arange(start, start + n), "text": text})


def twins(tmp_path: Any, version: str, stable: bool) -> tuple[str, str]:
    out = []
    for side in ("theirs", "ours"):
        uri = str(tmp_path / side)
        shutil.rmtree(uri, ignore_errors=True)
        lance.write_dataset(docs(3000, 0, 1), uri, max_rows_per_file=1000, data_storage_version=version,
                            enable_stable_row_ids=stable).delete("id % 10 = 3")
        out.append(uri)
    return out[0], out[1]


def index_files(uri: str) -> dict[tuple[str, str], tuple]:
    ds = Dataset.open(uri)
    out = {}
    for i in ds.manifest_file.index_section.indices:
        if i.name.startswith("__"):
            continue
        for f in i.files:
            r = LanceFileReader(f"_indices/{uuid_str(i.uuid.uuid)}/{f.path}", store=ds.store)
            gb = r.metadata.global_buffers.tolist()[1:]
            extra = [bytes(b) for b in r.read_raw_ranges([(int(p), int(n)) for p, n in gb])] if gb else []
            out[(i.name, f.path)] = (r.read(), extra, i.index_version, i.index_details.type_url,
                                     i.index_details.value, i.dataset_version, bytes(i.fragment_bitmap),
                                     r.version)
    return out


def queries(uri: str) -> list[tuple]:
    ds = lance.dataset(uri)
    probe = docs(40, 0, 1)["text"].to_pylist() + ["alpha beta gamma delta", "nothing in common", ""]
    out = []
    for text in probe:
        if text is None:
            continue
        t = ds.to_table(nearest=MinHashQuery(text, "text"), limit=7, columns=["id"])
        out.append((text, t["id"].to_pylist(), [round(d, 6) for d in t["_distance"].to_pylist()]))
    return out


def assert_same(theirs: str, ours: str) -> None:
    ft, fo = index_files(theirs), index_files(ours)
    assert sorted(ft) == sorted(fo)
    for key in ft:
        t, o = ft[key], fo[key]
        assert t[0].equals(o[0], check_metadata=True), key
        assert t[1:] == o[1:], key
    assert queries(ours) == queries(theirs)
    st, so = lance.dataset(theirs).stats.index_stats("m"), lance.dataset(ours).stats.index_stats("m")
    for k in ("num_indexed_rows", "num_unindexed_rows", "num_segments", "indices"):
        assert so[k] == st[k], k


@pytest.mark.parametrize("version,stable", [("2.2", False), ("2.1", True),
                                            pytest.param("2.0", False, marks=pytest.mark.slow),
                                            pytest.param("2.2", True, marks=pytest.mark.slow)])
def test_build_and_merge_match_pylance(tmp_path: Any, version: str, stable: bool) -> None:
    """A build (nulls, empty and all-long-token documents have no signature), then deletions,
    an append and a removed fragment folded in by pylance's default optimize."""
    theirs, ours = twins(tmp_path, version, stable)
    lance.dataset(theirs).create_scalar_index("text", "MINHASHLSH", name="m")
    build_and_commit(SCALAR_BUILDER, None, ours, "text", "MINHASHLSH", "m")
    assert_same(theirs, ours)
    for uri in (theirs, ours):
        lance.dataset(uri).delete("id % 10 = 4")
        lance.write_dataset(docs(700, 3000, 2), uri, mode="append")
        lance.dataset(uri).delete("id < 1000")
    lance.dataset(theirs).optimize.optimize_indices()
    build_and_commit(SCALAR_BUILDER, None, ours, "text", "MINHASHLSH", "m", merge=True)
    assert_same(theirs, ours)
    assert len(entries(Dataset.open(ours), "m")) == 1


def test_parameters_match_pylance(tmp_path: Any) -> None:
    """Other widths, bands, shingles and tokenizer settings (in the details and the signatures)."""
    from lance.indices import IndexConfig

    params = {"num_hashes": 64, "num_bands": 8, "shingle_size": 2,
              "tokenizer": {"lower_case": False, "ascii_folding": False, "max_token_length": 6}}
    theirs, ours = twins(tmp_path, "2.2", False)
    lance.dataset(theirs).create_scalar_index("text", IndexConfig("minhashlsh", params), name="m")
    build_and_commit(SCALAR_BUILDER, None, ours, "text", "MINHASHLSH", "m", params=params)
    assert_same(theirs, ours)


def test_check_params() -> None:
    b = SCALAR_BUILDER
    f = pa.field("t", pa.string())
    assert b.check_params("MINHASHLSH", f, {})["num_hashes"] == 128
    with pytest.raises(InvalidInputError, match="multiple of num_bands"):
        b.check_params("MINHASHLSH", f, {"num_hashes": 100, "num_bands": 16})
    with pytest.raises(InvalidInputError, match="'n' must be a string"):
        b.check_params("MINHASHLSH", pa.field("n", pa.int64()), {})
    with pytest.raises(InvalidInputError, match="bogus"):
        b.check_params("MINHASHLSH", f, {"bogus": 1})
    with pytest.raises(UnsupportedError):
        b.check_params("MINHASHLSH", f, {"tokenizer": {"base_tokenizer": "jieba"}})
    assert mh.parse_details(mh.details(mh.check_params({}))) == mh.check_params({})


@pytest.mark.parametrize(("version", "stable", "defer"), [
    ("2.2", False, False), ("2.1", False, True), ("2.2", True, False),
    pytest.param("2.0", False, False, marks=pytest.mark.slow)])
def test_lifecycle_matches_pylance(tmp_path: Any, version: str, stable: bool, defer: bool) -> None:
    """``create_index``, a compaction (rewritten as pylance's remap: surviving rows' signatures
    under their new addresses, doc ids renumbered; behind the FRI when deferred; its bitmap
    recalculated on stable row ids), ``remap_indices``, an append and ``optimize_indices``."""
    from lance_spark_ops.spark import compact, create_index, optimize_indices
    from lance_spark_ops.spark.indices.index_remap import remap_indices

    theirs, ours = twins(tmp_path, version, stable)
    lance.dataset(theirs).create_scalar_index("text", "MINHASHLSH", name="m")
    create_index(None, ours, "text", "MINHASHLSH", name="m")
    assert_same(theirs, ours)
    for uri in (theirs, ours):
        lance.dataset(uri).delete("id % 10 = 5")
    lance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=5000, defer_index_remap=defer)
    m = compact(None, ours, target_rows_per_fragment=5000, defer_index_remap=defer)
    assert m.fragments_removed == 3
    if stable:
        assert m.indices_recalculated == {"MINHASHLSH": 1}
    else:
        assert (m.indices_frag_reuse if defer else m.indices_remapped) == {"MINHASHLSH": 1}

    def shape(uri: str) -> list:
        return sorted((i["name"], sorted(i["fragment_ids"])) for i in index_segments(lance.dataset(uri)))

    assert shape(ours) == shape(theirs)
    if defer:  # behind the FRI: pylance answers through it alike; then our remap rewrites it
        assert queries(ours) == queries(theirs)
        remap_indices(None, ours)
        assert queries(ours) == queries(theirs)
    else:
        assert_same(theirs, ours)
    for uri in (theirs, ours):
        lance.write_dataset(docs(500, 3000, 4), uri, mode="append")
    lance.dataset(theirs).optimize.optimize_indices()
    optimize_indices(None, ours)
    assert queries(ours) == queries(theirs)
    if not defer:
        assert_same(theirs, ours)


def test_build_on_spark_in_parts(tmp_path: Any, spark: Any, monkeypatch: Any) -> None:
    """Part tasks on executors (row ranges of equal size, fragments cut between them), one
    merge task numbering the docs in fragment order; then a merge over Spark after an append."""
    from lance_spark_ops.spark.runtime.tuning import Tuning

    tuning = Tuning(minhash_part_rows=700)
    theirs, ours = twins(tmp_path, "2.1", False)
    lance.dataset(theirs).create_scalar_index("text", "MINHASHLSH", name="m")
    build_and_commit(SCALAR_BUILDER, spark, ours, "text", "MINHASHLSH", "m", tuning=tuning)
    assert_same(theirs, ours)
    for uri in (theirs, ours):
        lance.write_dataset(docs(1500, 3000, 2), uri, mode="append", max_rows_per_file=1000)
    lance.dataset(theirs).optimize.optimize_indices()
    build_and_commit(SCALAR_BUILDER, spark, ours, "text", "MINHASHLSH", "m", merge=True, tuning=tuning)
    assert_same(theirs, ours)
    d = Dataset.open(ours)
    for i in d.manifest_file.index_section.indices:  # the parts are gone
        assert sorted(d.store.list(f"_indices/{uuid_str(i.uuid.uuid)}")) == sorted(f.path for f in i.files)
