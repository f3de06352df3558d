"""Randomized index compatibility, pylance as the oracle:

- a scalar index pylance built (BTREE, BITMAP, LABEL_LIST, NGRAM, ZONEMAP, BLOOMFILTER,
  INVERTED) on a table of random appends and deletes (file versions 2.0 / 2.1 / 2.2, stable row
  ids or not), then one or two of our maintenance jobs (compaction, materialize_deletions,
  optimize_indices) - and pylance's queries through the index answer as a scan without it;
- random texts (ASCII, accented, Greek, Cyrillic, CJK, ligatures, combining marks, emoji,
  punctuation, stemmed and stop words, tokens near ``max_token_length``) under each tokenizer
  setting: our INVERTED build and pylance's answer every full-text query alike.

Each seed draws its own case. ``RANDOM_SEEDS`` (one per kind / setting by default) run by
default, ``RANDOM_SLOW_SEEDS`` more with ``-m slow``."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

SCALAR_KINDS = ["BTREE", "BITMAP", "LABEL_LIST", "NGRAM", "ZONEMAP", "BLOOMFILTER", "INVERTED"]
COLUMN = {"BTREE": "x", "BITMAP": "x", "ZONEMAP": "x", "BLOOMFILTER": "x", "LABEL_LIST": "tags", "NGRAM": "s",
          "INVERTED": "s"}
FTS_SETTINGS = [{}, {"with_position": True}, {"base_tokenizer": "whitespace"},
                {"stem": False, "remove_stop_words": False}, {"ascii_folding": False},
                {"lower_case": False, "stem": False}, {"max_token_length": 5}]
SEEDS = int(os.environ.get("RANDOM_SEEDS", "7"))
SLOW_SEEDS = int(os.environ.get("RANDOM_SLOW_SEEDS", "140"))
WORDS = np.array([f"t{i}" for i in range(60)])


def _table(rng: np.random.Generator, start: int, n: int) -> pa.Table:
    x = rng.integers(0, int(rng.choice([3, 50, 10_000])), n)
    texts = [" ".join(WORDS[rng.integers(0, 60, 3)]) for _ in range(n)]
    tags = [list(WORDS[rng.integers(0, 60, rng.integers(0, 3))]) for _ in range(n)]
    return pa.table({"id": pa.array(np.arange(start, start + n, dtype=np.int64)),
                     "x": pa.array(x, mask=rng.random(n) < 0.1),
                     "s": pa.array(texts, mask=rng.random(n) < 0.05),
                     "tags": pa.array(tags, pa.list_(pa.string()))})


def _filters(rng: np.random.Generator, kind: str) -> list[str]:
    v = int(rng.integers(0, 60))
    if kind == "BLOOMFILTER":
        return [f"x = {v}", f"x IN ({v}, {v + 1})", "x IS NULL"]
    if kind in ("BTREE", "BITMAP", "ZONEMAP"):
        return [f"x = {v}", f"x < {v}", f"x IN ({v}, {v + 1})", "x IS NULL", f"x >= {v} AND x < {v + 20}"]
    if kind == "LABEL_LIST":
        return ["array_has_any(tags, ['t1', 't7'])", "array_has_all(tags, ['t3'])"]
    if kind == "NGRAM":
        return ["contains(s, 't1')", "contains(s, '5 t')"]
    return []


def _ids(ds, **kw) -> np.ndarray:
    return np.sort(ds.to_table(columns=["id"], **kw).column("id").to_numpy())


def _scalar_case(tmp_path: Path, seed: int) -> None:
    import lance

    from lance_spark_ops.spark import compact, materialize_deletions, optimize_indices

    rng = np.random.default_rng(seed)
    kind = SCALAR_KINDS[seed % len(SCALAR_KINDS)]
    uri = str(tmp_path / "ds.lance")
    version, stable = str(rng.choice(["2.0", "2.1", "2.2"])), bool(rng.random() < 0.5)
    start = 0
    for i in range(int(rng.integers(2, 5))):  # the index covers the first write; the rest are unindexed
        n = int(rng.choice([50, 400, 3000]))
        lance.write_dataset(_table(rng, start, n), uri, mode="append" if i else "create",
                            data_storage_version=version, max_rows_per_file=int(rng.choice([100, 1000])),
                            enable_stable_row_ids=stable)
        if i == 0:
            lance.dataset(uri).create_scalar_index(COLUMN[kind], kind)
        start += n
    lance.dataset(uri).delete(f"id % {int(rng.integers(3, 7))} = 1")
    jobs = [int(rng.integers(0, 3)) for _ in range(int(rng.integers(1, 3)))]
    for job in jobs:
        if job == 0:
            compact(None, uri, target_rows_per_fragment=int(rng.choice([500, 1 << 20])))
        elif job == 1:
            materialize_deletions(None, uri)
        else:
            optimize_indices(None, uri)
    ds = lance.dataset(uri)
    case = f"seed {seed}: {kind}, {version}, stable row ids {stable}, jobs {jobs}"
    for f in _filters(rng, kind):
        assert np.array_equal(_ids(ds, filter=f), _ids(ds, filter=f, use_scalar_index=False)), f"{case}: {f}"
    if kind == "INVERTED":
        t = ds.to_table(columns=["id", "s"])
        for w in ("t1", "t13", "t59"):
            want = np.sort(np.array([i for i, s in zip(t.column("id").to_pylist(), t.column("s").to_pylist(),
                                                      strict=True) if s is not None and w in s.split()],
                                    dtype=np.int64))
            assert np.array_equal(_ids(ds, full_text_query=w), want), f"{case}: {w}"
    stats = ds.stats.index_stats(ds.describe_indices()[0].name)
    assert stats["num_indexed_rows"] + stats["num_unindexed_rows"] == ds.count_rows(), (case, stats)


@pytest.mark.parametrize("seed", range(SEEDS))
def test_jobs_keep_pylance_scalar_indices_answering(tmp_path: Path, seed: int) -> None:
    _scalar_case(tmp_path, seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(SEEDS, SEEDS + SLOW_SEEDS))
def test_jobs_keep_pylance_scalar_indices_answering_long(tmp_path: Path, seed: int) -> None:
    _scalar_case(tmp_path, seed)


# alphabets the random words draw from; "\u0301\u0308" are combining marks
ALPHABETS = ["abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789",
             "àáâãäåçèéêëìíîïñòóôõöùúûüýÿ", "ÀÁÂÃÄÅÇÈÉÊËÌÍÎÏÑÒÓÔÕÖÙÚÛÜÝ", "ßæøłđœþðıſ", "ΑΒΓΔαβγδεζηθΣσς",
             "АБВГДабвгдеёжз", "日本語中文字", "\u0301\u0308", "ﬁﬂ", "①②Ⅳ",
             "_-'.,;:!?()[]{}\"/@#$%&*+=<>|~`^", " \t\n", "😀👍", "İ", "ǅǆ", "ⅰⅱ", "ｆｕｌｌ"]
FIXED_WORDS = ["running", "runs", "ran", "cities", "city", "the", "and", "a", "is", "was", "connection",
               "connected", "généralement", "naïve", "résumé", "Straße", "STRASSE", "café", "über", "don't",
               "it's", "U.S.A."]


def _word(rng: np.random.Generator) -> str:
    if rng.random() < 0.35:
        return FIXED_WORDS[rng.integers(len(FIXED_WORDS))]
    chars = "".join(ALPHABETS[i] for i in rng.choice(len(ALPHABETS), int(rng.integers(1, 4)), replace=False))
    n = int(rng.integers(1, 9)) if rng.random() > 0.02 else int(rng.integers(38, 45))  # near max_token_length
    return "".join(chars[j] for j in rng.integers(0, len(chars), n))


def _fts_case(tmp_path: Path, seed: int) -> None:
    import lance

    from lance_spark_ops.spark import create_index

    rng = np.random.default_rng(seed)
    params = FTS_SETTINGS[seed % len(FTS_SETTINGS)]
    n = int(rng.choice([20, 200, 2000]))
    vocab = [_word(rng) for _ in range(int(rng.integers(5, 80)))]
    texts = [None if rng.random() < 0.05 else " ".join(vocab[i] for i in rng.integers(0, len(vocab),
                                                                                    rng.integers(0, 8)))
             for _ in range(n)]
    theirs, ours = str(tmp_path / "theirs.lance"), str(tmp_path / "ours.lance")
    table = pa.table({"id": pa.array(np.arange(n, dtype=np.int64)), "s": pa.array(texts, pa.string())})
    lance.write_dataset(table, theirs, data_storage_version=str(rng.choice(["2.0", "2.1"])),
                        max_rows_per_file=int(rng.choice([50, 1 << 20])))
    shutil.copytree(theirs, ours)
    lance.dataset(theirs).create_scalar_index("s", "INVERTED", **params)
    create_index(None, ours, "s", "INVERTED", **params)
    a, b = lance.dataset(theirs), lance.dataset(ours)
    queries = sorted({q for w in vocab for q in (w, *w.split())})[:60]
    for q in queries:
        try:
            want = _ids(a, full_text_query=q)
        except Exception:  # noqa: BLE001 - a query pylance refuses (e.g. an empty one) must fail on ours too
            with pytest.raises(Exception):  # noqa: B017
                _ids(b, full_text_query=q)
            continue
        assert np.array_equal(_ids(b, full_text_query=q), want), f"seed {seed} {params}: query {q!r}"
    name_a, name_b = a.describe_indices()[0].name, b.describe_indices()[0].name
    assert a.stats.index_stats(name_a)["num_indexed_rows"] == b.stats.index_stats(name_b)["num_indexed_rows"]


@pytest.mark.parametrize("seed", range(SEEDS))
def test_random_texts_answer_as_pylance_fts(tmp_path: Path, seed: int) -> None:
    _fts_case(tmp_path, seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(SEEDS, SEEDS + SLOW_SEEDS))
def test_random_texts_answer_as_pylance_fts_long(tmp_path: Path, seed: int) -> None:
    _fts_case(tmp_path, seed)
